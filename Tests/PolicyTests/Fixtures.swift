import PWPolicy
import Foundation

/// Bad policy fixtures and the exact diagnostics each must produce. Line and column are 1-based
/// and point at the offending key or value.
struct Fixture: CustomStringConvertible, Sendable {
    var name: String
    var yaml: String
    var expected: [String]
    var description: String { name }
}

/// The diagnostics a policy text produces, as `file:line:col: path: message` lines; empty when it loads.
func loadDiagnostics(_ text: String) -> [String] {
    switch PolicyLoader.load(text: text, path: "t.yaml") {
    case .success: return []
    case .failure(let failure): return failure.diagnostics.map(\.description)
    }
}

/// A valid policy to start from; fixtures below are variations of it.
let minimalPolicy = """
version: 1
apps:
  shop:
    session:
      type: jwt
      algorithms: [HS256]
      hmac_secret: {env: SHOP_SESSION_SECRET}
    client:
      platforms: [ios]
    upstreams:
      - name: up
        provider: dry_run

"""

/// `minimalPolicy` with its one upstream turned into `provider` (named `name`, the app on
/// `platforms`); `block` holds the upstream's keys, already indented (8 spaces), and starts on
/// line 13, so diagnostics keep fixed positions across the provider test suites.
func policyWithUpstream(_ provider: String, name: String = "up", platforms: String = "[ios]", block: String) -> String {
    minimalPolicy
        .replacingFirst("platforms: [ios]", with: "platforms: \(platforms)")
        .replacingFirst("- name: up", with: "- name: \(name)")
        .replacingFirst("provider: dry_run", with: "provider: \(provider)\n" + block)
}

let badFixtures: [Fixture] = [
    Fixture(name: "unknown key", yaml: """
    version: 1
    apps:
      shop:
        session:
          type: jwt
          algorithms: [HS256]
          hmac_secret: {env: SHOP_SESSION_SECRET}
          audiense: shop-app
        client:
          platforms: [ios]
        upstreams:
          - name: up
            provider: dry_run
    """, expected: [
        "t.yaml:8:7: apps.shop.session: unknown key 'audiense'; allowed keys: type, header, cookie, algorithms, jwks_file, jwks_url, jwks_refresh, hmac_secret, issuer, audience, contact_claim, leeway, verified_cache, backchannel_logout",
    ]),
    Fixture(name: "wrong type", yaml: """
    version: 1
    apps:
      shop:
        session:
          type: jwt
          algorithms: HS256
          hmac_secret: {env: SHOP_SESSION_SECRET}
        client:
          platforms: [ios]
        upstreams:
          - name: up
            provider: dry_run
    """, expected: [
        "t.yaml:6:19: apps.shop.session.algorithms: expected a list, found a string",
    ]),
    Fixture(name: "quoted integer", yaml: """
    version: "1"
    apps:
      shop:
        session:
          type: jwt
          algorithms: [HS256]
          hmac_secret: {env: SHOP_SESSION_SECRET}
        client:
          platforms: [ios]
          max_events: 0
        upstreams:
          - name: up
            provider: dry_run
    """, expected: [
        "t.yaml:1:10: version: expected an integer, found a quoted string; write numbers without quotes",
        "t.yaml:10:19: apps.shop.client.max_events: must be between 1 and 1000, found 0",
    ]),
    Fixture(name: "duplicate key", yaml: """
    version: 1
    apps:
      shop:
        session:
          type: jwt
          algorithms: [HS256]
          hmac_secret: {env: SHOP_SESSION_SECRET}
        client:
          platforms: [ios]
          platforms: [android]
        upstreams:
          - name: up
            provider: dry_run
    """, expected: [
        "t.yaml:10:7: apps.shop.client.platforms: duplicate key 'platforms' (first at line 9, column 7)",
    ]),
    Fixture(name: "missing required key", yaml: """
    version: 1
    apps:
      shop:
        session:
          type: jwt
          hmac_secret: {env: SHOP_SESSION_SECRET}
        client:
          platforms: [ios]
        upstreams:
          - provider: dry_run
    """, expected: [
        "t.yaml:5:7: apps.shop.session: missing required key 'algorithms'",
        "t.yaml:10:9: apps.shop.upstreams[0]: missing required key 'name'",
    ]),
    Fixture(name: "bad enum value", yaml: """
    version: 1
    apps:
      shop:
        session:
          type: jwt
          algorithms: [HS256]
          hmac_secret: {env: SHOP_SESSION_SECRET}
        client:
          platforms: [ios, windows]
          unknown_fields: ignore
        upstreams:
          - name: up
            provider: dry_run
            role: main
    """, expected: [
        "t.yaml:9:24: apps.shop.client.platforms[1]: invalid value 'windows'; expected one of: ios, android, web",
        "t.yaml:10:23: apps.shop.client.unknown_fields: invalid value 'ignore'; expected one of: reject, drop",
        "t.yaml:14:15: apps.shop.upstreams[0].role: invalid value 'main'; expected one of: primary, shadow",
    ]),
    Fixture(name: "literal secret", yaml: """
    version: 1
    apps:
      shop:
        session:
          type: jwt
          algorithms: [HS256]
          hmac_secret: {env: SHOP_SESSION_SECRET}
        client:
          platforms: [ios]
        upstreams:
          - name: voyado
            provider: voyado
            base_path: https://app-push-prod.voyado.com/api/v1/acme/abc123/default
            api_key: 3f9a0c1e-live-key-5b7d
    """, expected: [
        "t.yaml:14:18: apps.shop.upstreams[0].api_key: a secret must never be written into the policy file; use {env: NAME} or {file: /absolute/path}",
    ]),
    Fixture(name: "http to a non-loopback host", yaml: """
    version: 1
    apps:
      shop:
        session:
          type: jwt
          algorithms: [HS256]
          hmac_secret: {env: SHOP_SESSION_SECRET}
        client:
          platforms: [ios]
        upstreams:
          - name: voyado
            provider: voyado
            base_path: http://app-push-prod.voyado.com/api/v1/acme
            api_key: {env: VOYADO_API_KEY}
    """, expected: [
        "t.yaml:13:20: apps.shop.upstreams[0].base_path: plain http is allowed only to a loopback host (127.0.0.0/8, ::1, localhost); use https",
    ]),
    Fixture(name: "none algorithm", yaml: """
    version: 1
    apps:
      shop:
        session:
          type: jwt
          algorithms: [none]
          hmac_secret: {env: SHOP_SESSION_SECRET}
        client:
          platforms: [ios]
        upstreams:
          - name: up
            provider: dry_run
    """, expected: [
        "t.yaml:6:20: apps.shop.session.algorithms[0]: algorithm 'none' is refused: unsigned tokens would let any caller choose whose contact they act as",
    ]),
    Fixture(name: "hmac secret with RS256", yaml: """
    version: 1
    apps:
      shop:
        session:
          type: jwt
          algorithms: [HS256, RS256]
          hmac_secret: {env: SHOP_SESSION_SECRET}
        client:
          platforms: [ios]
        upstreams:
          - name: up
            provider: dry_run
    """, expected: [
        "t.yaml:7:20: apps.shop.session.hmac_secret: hmac_secret works only with algorithms [HS256]; RS256 and ES256 need jwks_file or jwks_url",
    ]),
    Fixture(name: "jwks file with HS256", yaml: """
    version: 1
    apps:
      shop:
        session:
          type: jwt
          algorithms: [HS256]
          jwks_file: /etc/pushwarden/jwks.json
        client:
          platforms: [ios]
        upstreams:
          - name: up
            provider: dry_run
    """, expected: [
        "t.yaml:7:18: apps.shop.session.jwks_file: jwks_file cannot be used with HS256: public keys must never be usable as HMAC secrets; use hmac_secret with algorithms [HS256]",
    ]),
    Fixture(name: "two primaries", yaml: """
    version: 1
    apps:
      shop:
        session:
          type: jwt
          algorithms: [HS256]
          hmac_secret: {env: SHOP_SESSION_SECRET}
        client:
          platforms: [ios]
        upstreams:
          - name: a
            provider: dry_run
            role: primary
          - name: b
            provider: dry_run
            role: primary
    """, expected: [
        "t.yaml:16:15: apps.shop.upstreams[1].role: exactly one upstream may have role primary; apps.shop.upstreams[0] ('a') already has it",
    ]),
    Fixture(name: "alias", yaml: """
    version: 1
    apps:
      shop:
        session:
          type: jwt
          algorithms: &algs [HS256]
          hmac_secret: {env: SHOP_SESSION_SECRET}
        client:
          platforms: *algs
        upstreams:
          - name: up
            provider: dry_run
    """, expected: [
        "t.yaml:6:19: anchor '&algs' is not allowed in policy files: anchors and aliases hide what a reviewer reads",
        "t.yaml:9:18: alias '*algs' is not allowed in policy files: aliases hide what a reviewer reads",
    ]),
    Fixture(name: "malformed YAML", yaml: """
    version: 1
    apps:
      shop:
        session:
          type: jwt
          algorithms: [HS256
          hmac_secret: {env: SHOP_SESSION_SECRET}
    """, expected: [
        "t.yaml:7:18: did not find expected ',' or ']' (while parsing a flow sequence at line 6, column 19)",
    ]),
    Fixture(name: "several errors at once", yaml: """
    version: 2
    apps:
      Shop!:
        session:
          type: jwt
          algorithms: [RS256]
          hmac_secret: s3cr3t-value
          leeway: 10m
        client:
          platforms: []
          max_body: 4MiB
          colour: blue
        dedupe:
          refresh_after: 10s
        upstreams:
          - name: voyado
            provider: voyado
            base_path: https://example.com/api?tenant=1
            api_key: {env: VOYADO_API_KEY}
            delivery: later
            timeout: 1m
          - name: voyado
            provider: pushnotice
            role: shadow
    """, expected: [
        "t.yaml:1:10: version: unsupported version 2; this PushWarden reads version 1",
        "t.yaml:3:3: apps.Shop!: app id must be 1 to 64 characters of a-z, 0-9, _ and - (it is part of the URL path)",
        "t.yaml:7:20: apps.Shop!.session.hmac_secret: a secret must never be written into the policy file; use {env: NAME} or {file: /absolute/path}",
        "t.yaml:8:15: apps.Shop!.session.leeway: must be between 0s and 5m, found 10m",
        "t.yaml:10:18: apps.Shop!.client.platforms: list at least one platform (ios, android, web)",
        "t.yaml:11:17: apps.Shop!.client.max_body: must be between 1KiB and 1MiB, found 4MiB",
        "t.yaml:12:7: apps.Shop!.client: unknown key 'colour'; allowed keys: platforms, contact_id, unknown_fields, max_body, max_events, rate_limits, max_installations",
        "t.yaml:14:22: apps.Shop!.dedupe.refresh_after: must be at least 1m, found 10s",
        "t.yaml:16:9: apps.Shop!.upstreams[0]: missing required key 'role' (required when an app has more than one upstream)",
        "t.yaml:18:20: apps.Shop!.upstreams[0].base_path: a base path must not have a query (?) or fragment (#)",
        "t.yaml:20:19: apps.Shop!.upstreams[0].delivery: invalid value 'later'; expected one of: sync, queued",
        "t.yaml:21:18: apps.Shop!.upstreams[0].timeout: must be between 100ms and 30s, found 1m",
        "t.yaml:22:9: apps.Shop!.upstreams[1]: missing required key 'slug'",
        "t.yaml:22:9: apps.Shop!.upstreams[1]: missing required key 'api_key'",
        "t.yaml:22:15: apps.Shop!.upstreams[1].name: upstream name 'voyado' is already used by apps.Shop!.upstreams[0]",
    ]),
]

/// Smaller refusals, one rule each.
let moreBadFixtures: [Fixture] = [
    Fixture(name: "empty file", yaml: "# nothing here\n", expected: [
        "t.yaml:1:1: the policy file is empty; expected a mapping with keys version and apps",
    ]),
    Fixture(name: "root is a list", yaml: "- version: 1\n", expected: [
        "t.yaml:1:1: expected a mapping, found a list",
    ]),
    Fixture(name: "two documents", yaml: "version: 1\n---\nversion: 1\n", expected: [
        "t.yaml:2:1: a policy file holds exactly one YAML document; found a second one",
    ]),
    Fixture(name: "tag", yaml: "version: !!int 1\napps: {}\n", expected: [
        "t.yaml:1:10: tag 'tag:yaml.org,2002:int' is not allowed in policy files: each key's type is fixed by the policy format",
    ]),
    Fixture(name: "no apps", yaml: "version: 1\napps: {}\n", expected: [
        "t.yaml:2:7: apps: declare at least one app",
    ]),
    Fixture(name: "unknown provider", yaml: minimalPolicy.replacingFirst("provider: dry_run", with: "provider: apns"), expected: [
        "t.yaml:12:19: apps.shop.upstreams[0].provider: invalid value 'apns'; expected one of: voyado, voidhash, fluxer, nativenotify, pushnotice, dry_run",
    ]),
    Fixture(name: "dry run emulating an unknown provider",
            yaml: minimalPolicy + "        emulates: apns\n", expected: [
        "t.yaml:13:19: apps.shop.upstreams[0].emulates: invalid value 'apns'; expected one of: voyado, voidhash, fluxer, nativenotify, pushnotice",
    ]),
    Fixture(name: "dry run with another provider's key",
            yaml: minimalPolicy + "        emulates: fluxer\n        slug: shop\n", expected: [
        "t.yaml:14:15: apps.shop.upstreams[0].slug: 'slug' applies only to a dry run emulating pushnotice",
    ]),
    Fixture(name: "dry run emulating Fluxer reading the session from Authorization",
            yaml: minimalPolicy + "        emulates: fluxer\n        session_header: Authorization\n", expected: [
        "t.yaml:14:25: apps.shop.upstreams[0].session_header: the Fluxer session cannot be read from Authorization: it carries the app's own session or request framing; name a header of its own, such as X-Fluxer-Session",
    ]),
    Fixture(name: "secret with env and file",
            yaml: minimalPolicy.replacingFirst("{env: SHOP_SESSION_SECRET}", with: "{env: A, file: /run/secrets/a}"), expected: [
        "t.yaml:7:35: apps.shop.session.hmac_secret: give exactly one of env or file",
    ]),
    Fixture(name: "secret file not absolute",
            yaml: minimalPolicy.replacingFirst("{env: SHOP_SESSION_SECRET}", with: "{file: secrets/a}"), expected: [
        "t.yaml:7:27: apps.shop.session.hmac_secret.file: expected an absolute path (starting with /)",
    ]),
    Fixture(name: "jwks_url over http to a public host",
            yaml: minimalPolicy.replacingFirst("[HS256]", with: "[ES256]")
                .replacingFirst("      hmac_secret: {env: SHOP_SESSION_SECRET}", with: "      jwks_url: http://auth.example.com/jwks.json"), expected: [
        "t.yaml:7:17: apps.shop.session.jwks_url: plain http is allowed only to a loopback host (127.0.0.0/8, ::1, localhost); use https",
    ]),
    Fixture(name: "jwks_url with a fragment, jwks_refresh out of range",
            yaml: minimalPolicy.replacingFirst("[HS256]", with: "[ES256]")
                .replacingFirst("      hmac_secret: {env: SHOP_SESSION_SECRET}",
                                with: "      jwks_url: https://auth.example.com/jwks.json#keys\n      jwks_refresh: 30s"), expected: [
        "t.yaml:7:17: apps.shop.session.jwks_url: a URL must not have a fragment (#)",
    ]),
    Fixture(name: "jwks_refresh under a minute",
            yaml: minimalPolicy.replacingFirst("[HS256]", with: "[ES256]")
                .replacingFirst("      hmac_secret: {env: SHOP_SESSION_SECRET}",
                                with: "      jwks_url: https://auth.example.com/jwks.json\n      jwks_refresh: 30s"), expected: [
        "t.yaml:8:21: apps.shop.session.jwks_refresh: must be between 1m and 1d, found 30s",
    ]),
    Fixture(name: "jwks_refresh without jwks_url",
            yaml: minimalPolicy.replacingFirst("[HS256]", with: "[ES256]")
                .replacingFirst("      hmac_secret: {env: SHOP_SESSION_SECRET}",
                                with: "      jwks_file: /etc/jwks.json\n      jwks_refresh: 5m"), expected: [
        "t.yaml:8:21: apps.shop.session.jwks_refresh: jwks_refresh needs jwks_url",
    ]),
    Fixture(name: "jwks_url with HS256",
            yaml: minimalPolicy.replacingFirst("      hmac_secret: {env: SHOP_SESSION_SECRET}", with: "      jwks_url: https://auth.example.com/jwks.json"), expected: [
        "t.yaml:7:17: apps.shop.session.jwks_url: jwks_url cannot be used with HS256: public keys must never be usable as HMAC secrets; use hmac_secret with algorithms [HS256]",
    ]),
    Fixture(name: "both key sources",
            yaml: minimalPolicy.replacingFirst("      hmac_secret:", with: "      jwks_file: /etc/jwks.json\n      hmac_secret:"), expected: [
        "t.yaml:8:20: apps.shop.session.hmac_secret: give exactly one of jwks_file, jwks_url or hmac_secret",
    ]),
    Fixture(name: "no primary among several upstreams",
            yaml: minimalPolicy + "        role: shadow\n      - name: up2\n        provider: dry_run\n        role: shadow\n", expected: [
        "t.yaml:11:7: apps.shop.upstreams: exactly one upstream must have role primary; none has",
    ]),
    Fixture(name: "credentials in a URL", yaml: minimalPolicy.replacingFirst("provider: dry_run", with: """
    provider: voyado
            base_path: https://user:pw@example.com/api
            api_key: {env: K}
    """), expected: [
        "t.yaml:13:20: apps.shop.upstreams[0].base_path: a URL must not carry credentials (user:password@); use api_key",
    ]),
    Fixture(name: "bad durations, sizes and rates", yaml: minimalPolicy.replacingFirst("      platforms: [ios]", with: """
          platforms: [ios]
          max_body: 16KB
          rate_limits: {register: 20/day, events: fast}
    """).replacingFirst("provider: dry_run", with: "provider: dry_run\n        timeout: 2"), expected: [
        "t.yaml:10:17: apps.shop.client.max_body: expected a size like 512, 16KiB or 1MiB, found '16KB'",
        "t.yaml:11:31: apps.shop.client.rate_limits.register: expected a rate like 40/s, 20/min or 1000/h, found '20/day'",
        "t.yaml:11:47: apps.shop.client.rate_limits.events: expected a rate like 40/s, 20/min or 1000/h, found 'fast'",
        "t.yaml:15:18: apps.shop.upstreams[0].timeout: expected a duration like 200ms, 30s, 5m, 1h or 7d, found '2'",
    ]),
    Fixture(name: "retry bounds", yaml: minimalPolicy + "        retry: {attempts: 11, backoff: 5s, max_backoff: 1s}\n", expected: [
        "t.yaml:13:27: apps.shop.upstreams[0].retry.attempts: must be between 1 and 10, found 11",
    ]),
    Fixture(name: "backoff above max_backoff", yaml: minimalPolicy + "        retry: {backoff: 5s, max_backoff: 1s}\n", expected: [
        "t.yaml:13:26: apps.shop.upstreams[0].retry.backoff: must not exceed max_backoff (1s)",
    ]),
]

extension String {
    func replacingFirst(_ target: String, with replacement: String) -> String {
        guard let range = range(of: target) else { fatalError("fixture text '\(target)' not found") }
        return replacingCharacters(in: range, with: replacement)
    }
}
