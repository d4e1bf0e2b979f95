#!/usr/bin/env bash
# openapi.yaml is a valid OpenAPI 3.1 document, and the running sidecar conforms to it.
#
# 1. openapi-spec-validator (pinned, in .build/venv) validates the document.
# 2. schemathesis (pinned) fuzzes the three client routes of a debug sidecar on loopback
#    (policies/example.yaml, dry_run upstream) with a fixed seed and a bounded number of examples:
#    no server error (any 5xx fails: the dry_run upstream never needs 502/503), and every answer
#    conforms to the document (status code, content type, headers, body schema); data the schema
#    refuses must be refused (negative_data_rejection); other methods must get 405 with Allow;
#    a request without a session must get 401. /healthz, /readyz and /metrics are checked on the
#    admin listener in a second, small run; the server-to-server routes (tag server-to-server,
#    list and erase a contact) in a third, with the admin token from the policy's `admin` block
#    (a copy of the example policy with one) and the same checks: without the token 401.
#
# The example policy limits each contact to 20 registrations a minute, far below what a fuzzer
# sends: the session of each request is taken in turn from a pool of freshly minted dev tokens
# (one contact each), so that the fuzzer tests validation rather than the rate limit (429 is
# documented, and allowed where the fuzzer still meets it).
#
# Environment: OPENAPI_MAX_EXAMPLES (default 500 per operation), OPENAPI_SEED (default 20260701),
# OPENAPI_SPEC (default openapi.yaml at the root; a broken copy shows the check can fail).
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

SPEC=${OPENAPI_SPEC:-$ROOT/openapi.yaml}
MAX_EXAMPLES=${OPENAPI_MAX_EXAMPLES:-500}
SEED=${OPENAPI_SEED:-20260701}
POOL=${OPENAPI_TOKEN_POOL:-128}

ensure_apt curl openssl
ensure_venv openapi-spec-validator==0.9.0 schemathesis==4.32.5

WORK=$(mktemp -d)
PID=
cleanup() {
  if [[ -n $PID ]]; then kill "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; fi
  if [[ -n ${OPENAPI_KEEP:-} ]]; then echo "openapi: kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

echo "openapi: validating $SPEC"
# The validator prints the whole document with an error: keep the lines short.
if ! timeout 60 "$VENV/bin/openapi-spec-validator" "$SPEC" >"$WORK/validate.out" 2>&1; then
  cut -c1-300 "$WORK/validate.out" >&2
  echo "openapi: $SPEC is not a valid OpenAPI document" >&2
  exit 1
fi
cat "$WORK/validate.out"

swift build -q --product pushwarden

export PUSHWARDEN_DEMO_SESSION_SECRET
PUSHWARDEN_DEMO_SESSION_SECRET=$(openssl rand -hex 32)
PORT=$(free_port)
ADMIN=$(free_port)
# The example policy with the server-to-server API turned on.
export PUSHWARDEN_ADMIN_TOKEN
PUSHWARDEN_ADMIN_TOKEN=$(openssl rand -hex 32)
{ cat policies/example.yaml; printf '\nadmin:\n  token: {env: PUSHWARDEN_ADMIN_TOKEN}\n'; } >"$WORK/policy.yaml"
.build/debug/pushwarden serve --policy "$WORK/policy.yaml" --listen "127.0.0.1:$PORT" --admin "127.0.0.1:$ADMIN" \
  --log-level error 2>"$WORK/sidecar.log" &
PID=$!
wait_http "http://127.0.0.1:$ADMIN/healthz" 30

# Fresh session tokens (they expire), one contact each.
for i in $(seq 1 "$POOL"); do
  .build/debug/pushwarden dev-token --policy policies/example.yaml --app demo --contact "fuzz-$i" --ttl 1800
done >"$WORK/tokens"

cat >"$WORK/hooks.py" <<'EOF'
# Each request's session from the pool, in turn per operation (one contact per token); the
# server-to-server routes (a contact's, and every GET on /v1) take the admin token instead.
import itertools, os
import schemathesis

TOKENS = [line.strip() for line in open(os.environ["PW_TOKENS"]) if line.strip()]
ADMIN = os.environ["PUSHWARDEN_ADMIN_TOKEN"]
_turns = {}

@schemathesis.auth()
class SessionPool:
    def get(self, case, ctx):
        return TOKENS

    def set(self, case, tokens, ctx):
        case.headers = dict(case.headers or {})
        if "/contacts/" in ctx.operation.path or ctx.operation.method.upper() == "GET" \
                or ctx.operation.path.endswith("/tokens/dead"):
            case.headers["Authorization"] = "Bearer " + ADMIN
            return
        turn = _turns.setdefault(ctx.operation.path, itertools.cycle(tokens))
        case.headers["Authorization"] = "Bearer " + next(turn)
EOF

cat >"$WORK/schemathesis.toml" <<'EOF'
[parameters]
"path.app" = "demo"

[checks.negative_data_rejection]
# 415: a request without a body has no Content-Type; 413: a generated body over max_body;
# 429: the rate limit is checked before the body; 405: the server-to-server routes' methods.
expected-statuses = ["400", "401", "403", "404", "405", "413", "415", "429"]

# One path on two listeners: POST /v1/apps/{app}/installations (register) on the client listener,
# GET (the export) on the admin listener. Each listener's 405 names the method it takes there, not
# both, so the document's methods of the path are not either listener's Allow: no undocumented
# methods are sent to it (the Swift tests check each listener's 405 and Allow there).
[[operations]]
include-path = "/v1/apps/{app}/installations"
phases.coverage.unexpected-methods = []
EOF

# One worker: with two, schemathesis's generator compiled Python in two threads at once and CPython
# 3.11 failed inside it ("SystemError: AST constructor recursion depth mismatch", a runtime error
# of the tool, not a finding) in one of three runs.
CHECKS=not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance,negative_data_rejection,unsupported_method,allow_header_conformance,ignored_auth
run_schemathesis() {
  local name=$1 url=$2
  shift 2
  local rc=0
  (cd "$WORK" && PW_TOKENS="$WORK/tokens" SCHEMATHESIS_HOOKS="$WORK/hooks.py" timeout 300 \
    "$VENV/bin/schemathesis" --config-file "$WORK/schemathesis.toml" run "$SPEC" \
      --url "$url" --seed "$SEED" --max-examples "$MAX_EXAMPLES" --checks "$CHECKS" \
      --generation-database none --request-timeout 10 --workers 1 --no-color \
      --report ndjson --report-ndjson-path "$WORK/$name.ndjson" "$@") >"$WORK/$name.out" 2>&1 || rc=$?
  sed -n '/SUMMARY/,$p' "$WORK/$name.out"
  if ((rc != 0)); then
    cat "$WORK/$name.out"
    echo "openapi: schemathesis ($name) failed with exit code $rc" >&2
    echo "--- sidecar log (last 20 lines)" >&2
    tail -n 20 "$WORK/sidecar.log" >&2
  fi
  return $rc
}

echo "openapi: schemathesis against the client API on 127.0.0.1:$PORT (seed $SEED, $MAX_EXAMPLES examples per operation)"
client_rc=0
run_schemathesis client "http://127.0.0.1:$PORT" --include-tag client || client_rc=$?

echo "openapi: schemathesis against the operational endpoints on 127.0.0.1:$ADMIN"
admin_rc=0
run_schemathesis admin "http://127.0.0.1:$ADMIN" --include-tag operations || admin_rc=$?

echo "openapi: schemathesis against the server-to-server API on 127.0.0.1:$ADMIN"
contacts_rc=0
run_schemathesis contacts "http://127.0.0.1:$ADMIN" --include-tag server-to-server || contacts_rc=$?

kill -0 "$PID" 2>/dev/null || { echo "openapi: the sidecar died during the run" >&2; exit 1; }
((client_rc == 0 && admin_rc == 0 && contacts_rc == 0))
