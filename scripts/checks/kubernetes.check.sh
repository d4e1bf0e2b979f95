#!/usr/bin/env bash
# The Kubernetes manifests (deploy/kubernetes, plain files: common/ plus one of redis/ or
# redis-cluster/; kustomize is not in Debian, so nothing is rendered and each file is checked
# alone):
# 1. kubernetes-validate, strict (an unknown field fails), against the offline schemas it ships
#    for Kubernetes $K8S_VERSION: every file must validate, with no warning (an unknown kind only
#    warns there) and at least one resource.
# 2. The policy in the ConfigMap passes `pushwarden policy check`, and `serve` starts on it with
#    the ConfigMap's and the example Secrets' keys laid out as files and variables the way the pod
#    mounts them (paths mapped into a temporary directory; the in-memory store, on loopback).
# 3. What the validator cannot see: every container is locked down (runAsNonRoot,
#    readOnlyRootFilesystem, no privilege escalation, capabilities drop ALL, seccomp
#    RuntimeDefault, requests and limits); PushWarden's readiness probe is /readyz and its
#    liveness /healthz on the admin port PUSHWARDEN_ADMIN names; the policy is a ConfigMap
#    mounted as a directory; each {env: NAME} the policy names comes from a Secret by
#    secretKeyRef and each {file: PATH} from a mounted Secret that has that key; the Redis URL is
#    redis:// in redis/ and redis+cluster:// in redis-cluster/, and the two Deployments differ in
#    nothing else; `--watch` is given exactly when `serve` has it; Services select pods and name
#    their ports.
# K8S_DIR=... checks another copy (the failure trials do).
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

K8S_DIR=${K8S_DIR:-deploy/kubernetes}
K8S_VERSION=1.33.0
ensure_apt curl python3 python3-venv
# What `swift build --product pushwarden` links (the C libraries' -dev packages).
ensure_apt pkg-config libmicrohttpd-dev libcurl4-openssl-dev libhiredis-dev libssl-dev libyaml-dev
ensure_venv kubernetes-validate==1.37.0
failed=0

mapfile -t manifests < <(find "$K8S_DIR" -name '*.yaml' -o -name '*.yml' | sort)
((${#manifests[@]})) || { echo "FAIL: no manifests under $K8S_DIR" >&2; exit 1; }

echo "-- kubernetes-validate --strict, Kubernetes $K8S_VERSION: ${#manifests[@]} files"
for f in "${manifests[@]}"; do
  if ! out=$(timeout 120 "$VENV/bin/kubernetes-validate" --strict -k "$K8S_VERSION" "$f" 2>&1); then
    echo "$out" >&2
    echo "FAIL: $f does not validate" >&2
    failed=1
  elif grep -qE '^(WARN|ERROR)' <<<"$out" || ! grep -q ' passed for resource ' <<<"$out"; then
    echo "$out" >&2
    echo "FAIL: $f: a warning, or no resource validated" >&2
    failed=1
  fi
done

timeout 900 swift build -q --product pushwarden
work=$(mktemp -d)
pid=""
cleanup() {
  [[ -n "$pid" ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

echo "-- the manifests' structure, the policy and its secrets"
serve_watch=false
grep -rq '"watch"' Sources/pushwarden/ && serve_watch=true
# Writes $work/policy.yaml (as mapped into $work/pod) and $work/env (NAME=VALUE lines) for the start below.
"$VENV/bin/python" - "$K8S_DIR" "$work" "$serve_watch" <<'PY' || failed=1
import os, re, sys, yaml

root, work, serve_watch = sys.argv[1], sys.argv[2], sys.argv[3] == "true"
problems = []
def fail(msg): problems.append(msg)

docs = []
for dirpath, _, files in os.walk(root):
    for f in sorted(files):
        if f.endswith((".yaml", ".yml")):
            path = os.path.join(dirpath, f)
            for d in yaml.safe_load_all(open(path)):
                if d:
                    docs.append((os.path.relpath(path, root), d))
def named(kind):
    return {d["metadata"]["name"]: d for _, d in docs if d.get("kind") == kind}
configmaps, secrets = named("ConfigMap"), named("Secret")
def secret_keys(s): return set((s.get("stringData") or {})) | set((s.get("data") or {}))
workloads = [(p, d) for p, d in docs if d.get("kind") in ("Deployment", "StatefulSet", "DaemonSet")]
if not workloads:
    fail("no workloads")

def port_of(hostport): return int(hostport.rsplit(":", 1)[1])

sidecars = []
for path, w in workloads:
    where = f'{path}: {w["kind"]} {w["metadata"]["name"]}'
    spec = w["spec"]["template"]["spec"]
    pod_sc = spec.get("securityContext") or {}
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    volumes.update({t["metadata"]["name"]: {"persistentVolumeClaim": {}} for t in w["spec"].get("volumeClaimTemplates", [])})
    if spec.get("automountServiceAccountToken") is not False:
        fail(f"{where}: automountServiceAccountToken is not false")
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        at = f'{where}: container {c["name"]}'
        sc = c.get("securityContext") or {}
        if not (sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True): fail(f"{at}: runAsNonRoot is not true")
        if sc.get("readOnlyRootFilesystem") is not True: fail(f"{at}: readOnlyRootFilesystem is not true")
        if sc.get("allowPrivilegeEscalation") is not False: fail(f"{at}: allowPrivilegeEscalation is not false")
        if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []): fail(f"{at}: capabilities do not drop ALL")
        if (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
            fail(f"{at}: seccompProfile is not RuntimeDefault")
        res = c.get("resources") or {}
        for part in ("requests", "limits"):
            for r in ("cpu", "memory"):
                if r not in (res.get(part) or {}): fail(f"{at}: no resources.{part}.{r}")
        for m in c.get("volumeMounts", []):
            v = volumes.get(m["name"])
            if v is None: fail(f'{at}: mounts volume {m["name"]}, which the pod does not have'); continue
            if "configMap" in v and v["configMap"]["name"] not in configmaps: fail(f'{at}: ConfigMap {v["configMap"]["name"]} is not in the manifests')
            if "secret" in v and v["secret"]["secretName"] not in secrets: fail(f'{at}: Secret {v["secret"]["secretName"]} is not in the manifests')
        if c["name"] == "pushwarden":
            sidecars.append((path, w, c, volumes))

if not sidecars:
    fail("no container named pushwarden")

def files_of(c, volumes):
    """mounted path -> (kind, object name, key, object) for every key of a ConfigMap or Secret volume mounted as a directory"""
    out = {}
    for m in c.get("volumeMounts", []):
        v = volumes.get(m["name"], {})
        if "subPath" in m:
            continue
        if "configMap" in v and v["configMap"]["name"] in configmaps:
            obj = configmaps[v["configMap"]["name"]]; keys = set(obj.get("data") or {}); kind = "ConfigMap"
        elif "secret" in v and v["secret"]["secretName"] in secrets:
            obj = secrets[v["secret"]["secretName"]]; keys = secret_keys(obj); kind = "Secret"
        else:
            continue
        for k in keys:
            out[os.path.join(m["mountPath"], k)] = (kind, obj["metadata"]["name"], k, obj)
    return out

def secret_refs(node, out):
    if isinstance(node, dict):
        if set(node) == {"env"} or set(node) == {"file"}:
            out.append(next(iter(node.items())))
        for v in node.values(): secret_refs(v, out)
    elif isinstance(node, list):
        for v in node: secret_refs(v, out)
def paths_named(node, key, out):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == key: out.append(v)
            paths_named(v, key, out)
    elif isinstance(node, list):
        for v in node: paths_named(v, key, out)

normalized = {}
for path, w, c, volumes in sidecars:
    at = f"{path}: container pushwarden"
    env = {e["name"]: e for e in c.get("env", [])}
    order = [e["name"] for e in c.get("env", [])]
    def value(name): return (env.get(name) or {}).get("value")
    for i, e in enumerate(c.get("env", [])):
        for ref in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", e.get("value", "")):
            if ref not in order[:i]: fail(f'{at}: {e["name"]} uses $({ref}), which is not set before it')
    ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    admin, listen = value("PUSHWARDEN_ADMIN"), value("PUSHWARDEN_LISTEN")
    if not admin or not listen:
        fail(f"{at}: PUSHWARDEN_ADMIN and PUSHWARDEN_LISTEN must be set"); continue
    if admin.rsplit(":", 1)[0] not in ("0.0.0.0", "[::]", ""):
        fail(f"{at}: PUSHWARDEN_ADMIN {admin} is not reachable by the kubelet's probes")
    if port_of(listen) not in ports.values(): fail(f"{at}: no containerPort for PUSHWARDEN_LISTEN {listen}")
    for probe, route in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = (c.get(probe) or {}).get("httpGet") or {}
        port = get.get("port")
        port = ports.get(port, port)
        if get.get("path") != route or port != port_of(admin):
            fail(f"{at}: {probe} is not GET {route} on the admin port {port_of(admin)}")
    args = c.get("args") or []
    if args[:1] != ["serve"]: fail(f"{at}: args do not start with serve")
    if serve_watch != ("--watch" in args):
        fail(f"{at}: serve {'has' if serve_watch else 'has no'} --watch, and the args {'lack' if serve_watch else 'give'} it")
    mounted = files_of(c, volumes)
    for m in c.get("volumeMounts", []):
        if "subPath" in m and "configMap" in volumes.get(m["name"], {}):
            fail(f'{at}: ConfigMap volume {m["name"]} is mounted with subPath: updates would never arrive')
    policy_path = value("PUSHWARDEN_POLICY")
    where = mounted.get(policy_path or "")
    if not where or where[0] != "ConfigMap":
        fail(f"{at}: PUSHWARDEN_POLICY {policy_path} is no key of a ConfigMap mounted as a directory"); continue
    policy_text = where[3]["data"][where[2]]
    try:
        policy = yaml.safe_load(policy_text)
    except yaml.YAMLError as e:
        fail(f"{at}: the policy in ConfigMap {where[1]} is no YAML: {e}"); continue
    refs = []
    secret_refs(policy, refs)
    if not refs: fail(f"{at}: the policy names no secret (expected at least one env and one file reference)")
    pod_env, pod_files = {}, {}
    for kind, name in refs:
        if kind == "env":
            ref = ((env.get(name) or {}).get("valueFrom") or {}).get("secretKeyRef")
            if not ref:
                fail(f"{at}: the policy's {{env: {name}}} is not set from a Secret (env valueFrom secretKeyRef)")
            elif ref["name"] not in secrets or ref["key"] not in secret_keys(secrets[ref["name"]]):
                fail(f'{at}: {name} refers to Secret {ref["name"]} key {ref["key"]}, which the manifests do not have')
            else:
                pod_env[name] = (secrets[ref["name"]].get("stringData") or {}).get(ref["key"], "x")
        else:
            hit = mounted.get(name)
            if not hit or hit[0] != "Secret":
                fail(f"{at}: the policy's {{file: {name}}} is no key of a Secret mounted as a directory")
            else:
                pod_files[name] = (hit[3].get("stringData") or {}).get(hit[2], "x")
    jwks = []
    paths_named(policy, "jwks_file", jwks)
    for j in jwks:
        hit = mounted.get(j)
        if not hit: fail(f"{at}: jwks_file {j} is not mounted"); continue
        pod_files[j] = hit[3].get("data", {}).get(hit[2]) or hit[3].get("stringData", {}).get(hit[2], "")
    variant = path.split(os.sep)[0]
    url = value("PUSHWARDEN_REDIS_URL") or ""
    scheme = {"redis": "redis://", "redis-cluster": "redis+cluster://"}.get(variant)
    if scheme is None: fail(f"{at}: a sidecar outside redis/ and redis-cluster/")
    elif not url.startswith(scheme): fail(f"{at}: PUSHWARDEN_REDIS_URL {url!r} does not start with {scheme}")
    # Each variant's Deployment, less its Redis URL, must be the same.
    copy = yaml.safe_load(yaml.safe_dump(w))
    for cc in copy["spec"]["template"]["spec"]["containers"]:
        for e in cc.get("env", []):
            if e["name"] == "PUSHWARDEN_REDIS_URL": e["value"] = "<redis url>"
    normalized[path] = copy
    # For the start below: the pod's files under $work/pod, its variables in $work/env.
    if variant == "redis":
        pod = os.path.join(work, "pod")
        mapped = policy_text
        for p, content in pod_files.items():
            os.makedirs(os.path.dirname(pod + p), exist_ok=True)
            open(pod + p, "w").write(content)
            mapped = mapped.replace(p, pod + p)
        open(os.path.join(work, "policy.yaml"), "w").write(mapped)
        open(os.path.join(work, "env"), "w").write("".join(f"{k}={v}\n" for k, v in pod_env.items()))

variants = sorted({p.split(os.sep)[0] for p in normalized})
if variants != ["redis", "redis-cluster"]:
    fail(f"expected one PushWarden Deployment in redis/ and one in redis-cluster/, found {sorted(normalized)}")
elif len({yaml.safe_dump(v, sort_keys=True) for v in normalized.values()}) != 1:
    fail(f"the Deployments {', '.join(sorted(normalized))} differ in more than PUSHWARDEN_REDIS_URL")

for path, svc in ((p, d) for p, d in docs if d.get("kind") == "Service"):
    sel = svc["spec"].get("selector") or {}
    targets = [w for _, w in workloads if sel and sel.items() <= w["spec"]["template"]["metadata"]["labels"].items()]
    if not targets: fail(f'{path}: Service {svc["metadata"]["name"]} selects no pods'); continue
    names = {p.get("name") for w in targets for c in w["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
    for p in svc["spec"]["ports"]:
        if isinstance(p.get("targetPort"), str) and p["targetPort"] not in names:
            fail(f'{path}: Service {svc["metadata"]["name"]} port {p["name"]} targets {p["targetPort"]}, which no selected container names')

for p in problems: print("FAIL:", p, file=sys.stderr)
print(f"{len(docs)} resources, {len(sidecars)} PushWarden sidecars checked")
sys.exit(1 if problems else 0)
PY

if [[ -f "$work/policy.yaml" ]]; then
  echo "-- pushwarden policy check and serve on the ConfigMap's policy"
  if ! .build/debug/pushwarden policy check "$work/policy.yaml"; then
    echo "FAIL: the ConfigMap's policy does not pass policy check" >&2
    failed=1
  else
    port=$(free_port)
    admin=$(free_port)
    (
      while IFS='=' read -r name value; do export "$name=$value"; done <"$work/env"
      unset PUSHWARDEN_REDIS_URL
      exec .build/debug/pushwarden serve --policy "$work/policy.yaml" --listen "127.0.0.1:$port" --admin "127.0.0.1:$admin"
    ) 2>"$work/sidecar.log" &
    pid=$!
    if wait_http "http://127.0.0.1:$admin/healthz" 20 && kill -0 "$pid" 2>/dev/null &&
       .build/debug/pushwarden healthcheck --admin "127.0.0.1:$admin"; then
      echo "serve starts on it with the pod's secrets and JWKS"
    else
      cat "$work/sidecar.log" >&2
      echo "FAIL: serve does not start on the ConfigMap's policy with the pod's files and variables" >&2
      failed=1
    fi
  fi
fi

if ((failed)); then
  echo "kubernetes: FAILED" >&2
  exit 1
fi
echo "kubernetes: ${#manifests[@]} files valid for Kubernetes $K8S_VERSION (strict); structure, policy and secrets consistent"
