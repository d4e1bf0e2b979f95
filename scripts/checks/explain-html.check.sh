#!/usr/bin/env bash
# `pushwarden policy explain --format html` renders a page a browser shows, naming every upstream
# host and every secret reference of the policy, and never a secret's value.
#
# 1. Builds the debug binary and renders policies/voyado.yaml and a policy written here with three
#    upstreams (Voyado primary, PushNotice shadow queued with a file secret, Voidhash shadow) and
#    an HMAC session secret; a secret env var with a known value is set while rendering.
# 2. Greps each page: every host and `env:`/`file:` reference appears, the value does not, and the
#    page holds no <script and no src/href attribute.
# 3. Debian's chromium (installed when missing; large) renders each page headless: a screenshot
#    (a PNG of a sensible size) and the DOM after parsing, grepped the same way.
#
# Environment: EXPLAIN_HTML_OUT (default .build/explain-html): where the pages and PNGs stay.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

OUT=${EXPLAIN_HTML_OUT:-$ROOT/.build/explain-html}
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

swift build --product pushwarden >/dev/null
BIN=$(swift build --show-bin-path)/pushwarden

cat >"$WORK/three.yaml" <<'YAML'
version: 1
apps:
  shop:
    session:
      type: jwt
      header: Authorization
      cookie: session
      algorithms: [HS256]
      hmac_secret: {env: SHOP_SESSION_SECRET}
      issuer: https://auth.example.com
      audience: shop-app
      contact_claim: contact_id
    client:
      platforms: [ios, android]
      contact_id: reject
      rate_limits: {register: 20/min, unregister: 40/min, events: 120/min}
    dedupe:
      refresh_after: 7d
    upstreams:
      - name: voyado
        provider: voyado
        base_path: https://app-push-prod.voyado.com/api/v1/acme/abc123/default
        api_key: {env: VOYADO_API_KEY}
        role: primary
      - name: pushnotice
        provider: pushnotice
        base_url: https://app.rspush.com
        slug: shop
        api_key: {file: /run/secrets/pushnotice-api-key}
        groups: ["<script>alert(1)</script>", "Music & News"]
        role: shadow
        delivery: queued
        queue: {max_age: 2d, claim_after: 30s}
      - name: voidhash
        provider: voidhash
        base_url: https://api.voidhash.com
        publishable_key: {env: VOIDHASH_PUBLISHABLE_KEY}
        ios_bundle_id: com.example.shop
        android_package_name: com.example.shop.android
        sdk_version: 1.0.0
        role: shadow
YAML

# Secret values that must never reach a page (the policy holds references only; these prove the
# renderer does not resolve them).
export VOYADO_API_KEY=pw-check-secret-voyado-7f3a9c
export SHOP_SESSION_SECRET=pw-check-secret-session-91d2e4
export VOIDHASH_PUBLISHABLE_KEY=vh_pk_live_pwchecksecret55b1
VALUES=("$VOYADO_API_KEY" "$SHOP_SESSION_SECRET" "$VOIDHASH_PUBLISHABLE_KEY")

fail() { echo "explain-html: $*" >&2; exit 1; }

# expect_names FILE NAME...: every NAME appears in FILE (fixed string).
expect_names() {
  local file=$1 wanted; shift
  for wanted in "$@"; do grep -qF -- "$wanted" "$file" || fail "$(basename "$file") does not name $wanted"; done
}

# expect_clean FILE: no secret value, no script, no fetching attribute.
expect_clean() {
  local file=$1 value
  for value in "${VALUES[@]}"; do ! grep -qF -- "$value" "$file" || fail "$(basename "$file") holds a secret value"; done
  ! grep -qi '<script' "$file" || fail "$(basename "$file") holds a <script"
  ! grep -qiE '<[^>]*[[:space:]](src|href|xlink:href|srcset)[[:space:]]*=' "$file" || fail "$(basename "$file") has a src/href attribute"
}

ensure_apt chromium
CHROMIUM=$(command -v chromium || true)
[[ -n "$CHROMIUM" ]] || fail "chromium not found after install"

# check NAME POLICY HOST... -- REF...
check() {
  local name=$1 policy=$2; shift 2
  local hosts=() refs=()
  while [[ $1 != -- ]]; do hosts+=("$1"); shift; done
  shift
  refs=("$@")
  local html="$OUT/$name.html" png="$OUT/$name.png" dom="$OUT/$name.dom.html"
  "$BIN" policy explain --format html "$policy" >"$html"
  [[ -s "$html" ]] || fail "$name: empty page"
  head -c 15 "$html" | grep -qF '<!DOCTYPE html>' || fail "$name: not an HTML page"
  expect_names "$html" "${hosts[@]/#/host }" "${refs[@]}"
  expect_clean "$html"

  rm -f "$png"
  HOME="$WORK/home" timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --no-first-run --no-default-browser-check --user-data-dir="$WORK/profile" \
    --screenshot="$png" --window-size=1400,1800 "file://$html" >"$WORK/$name.shot.log" 2>&1 \
    || { cat "$WORK/$name.shot.log" >&2; fail "$name: chromium screenshot failed"; }
  [[ -f "$png" ]] || fail "$name: no screenshot"
  local size; size=$(stat -c %s "$png")
  ((size > 30000)) || fail "$name: screenshot of only $size bytes"
  head -c 8 "$png" | od -An -tx1 | tr -d ' \n' | grep -q '^89504e470d0a1a0a$' || fail "$name: screenshot is not a PNG"

  HOME="$WORK/home" timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu \
    --no-first-run --no-default-browser-check --user-data-dir="$WORK/profile" \
    --dump-dom "file://$html" >"$dom" 2>"$WORK/$name.dom.log" \
    || { cat "$WORK/$name.dom.log" >&2; fail "$name: chromium --dump-dom failed"; }
  grep -q '<svg' "$dom" || fail "$name: the parsed page has no svg"
  expect_names "$dom" "${hosts[@]/#/host }" "${refs[@]}"
  expect_clean "$dom"
  echo "explain-html: $name ok (${#hosts[@]} host(s), ${#refs[@]} secret reference(s), screenshot $size bytes: $png)"
}

check voyado policies/voyado.yaml app-push-prod.voyado.com -- env:VOYADO_API_KEY
check three "$WORK/three.yaml" app-push-prod.voyado.com app.rspush.com api.voidhash.com -- \
  env:SHOP_SESSION_SECRET env:VOYADO_API_KEY file:/run/secrets/pushnotice-api-key env:VOIDHASH_PUBLISHABLE_KEY
