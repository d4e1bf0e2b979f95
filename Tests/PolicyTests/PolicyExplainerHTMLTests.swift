import Foundation
import Testing
@testable import PWPolicy

/// `policy explain --format html`: one self-contained page naming every host and secret
/// reference, loading nothing, with every policy-derived string escaped.
@Suite struct PolicyExplainerHTMLTests {
    /// Three upstreams (primary sync, shadow queued, shadow sync), secrets by env and by file, and
    /// free-text fields (audience, PushNotice group names) holding markup.
    static let fixture = """
    version: 1
    apps:
      shop:
        session:
          type: jwt
          algorithms: [HS256]
          hmac_secret: {env: SHOP_SESSION_SECRET}
          issuer: https://auth.example.com
          audience: "shop\\"><script>alert('aud')</script>"
          contact_claim: contact_id
        client:
          platforms: [ios, android]
          rate_limits: {register: 20/min}
        dedupe:
          refresh_after: 3d
        upstreams:
          - name: voyado
            provider: voyado
            base_path: https://app-push-prod.voyado.com/api/v1/acme/abc123/default
            api_key: {env: VOYADO_API_KEY}
            role: primary
          - name: pn
            provider: pushnotice
            base_url: https://push.example.net:8443
            slug: radio
            api_key: {file: /run/secrets/pushnotice-api-key}
            groups: ["<script>alert(1)</script>", "a & b", "<img src=https://evil.example/x.png onerror=alert(2)>"]
            role: shadow
            delivery: queued
            queue: {max_age: 2d, claim_after: 30s}
          - name: vh
            provider: voidhash
            base_url: https://api.voidhash.com
            publishable_key: {env: VOIDHASH_PUBLISHABLE_KEY}
            ios_bundle_id: com.example.notes
            sdk_version: 1.0.0
            role: shadow
      idle:
        session:
          type: jwt
          algorithms: [ES256]
          jwks_file: /etc/pushwarden/idle-jwks.json
        client:
          platforms: [web]
        upstreams:
          - name: dry
            provider: dry_run

    """

    static func page() throws -> (Policy, String) {
        let policy = try PolicyLoader.load(text: fixture, path: "fixture<1>.yaml").get()
        return (policy, PolicyExplainerHTML.render(policy))
    }

    @Test func namesEveryHostAndSecretReference() throws {
        let (_, html) = try Self.page()
        for host in ["app-push-prod.voyado.com", "push.example.net:8443", "api.voidhash.com"] {
            #expect(html.contains("host \(host)"), "diagram names \(host)")
        }
        for ref in ["env:SHOP_SESSION_SECRET", "env:VOYADO_API_KEY", "file:/run/secrets/pushnotice-api-key", "env:VOIDHASH_PUBLISHABLE_KEY"] {
            #expect(html.components(separatedBy: ref).count >= 3, "\(ref) in the diagram and in the text")
        }
        let svg = String(html[html.range(of: "<svg")!.lowerBound..<html.range(of: "</svg>")!.upperBound])
        for name in ["env:SHOP_SESSION_SECRET", "env:VOYADO_API_KEY", "file:/run/secrets/pushnotice-api-key", "env:VOIDHASH_PUBLISHABLE_KEY",
                     "host app-push-prod.voyado.com", "host push.example.net:8443", "host api.voidhash.com"] {
            #expect(svg.contains(name), "the diagram names \(name) on one line")
        }
        #expect(svg.contains("contact_id ← session claim"))
        #expect(html.contains("kept 3d (dedupe.refresh_after)"))
        #expect(html.contains("&#39;vh&#39;: kept 400 days"))
        #expect(!html.contains("&#39;voyado&#39;: kept 400 days"), "Voyado keeps no identity")
        #expect(html.contains("&#39;pn&#39;: every queued delivery, up to 2d (queue.max_age)"))
        #expect(html.contains("&#39;voyado&#39;: failed unregisters only"))
        #expect(html.contains("nothing leaves this host"))
    }

    @Test func carriesTheTextExplanationVerbatim() throws {
        let (policy, html) = try Self.page()
        #expect(html.contains("<pre>" + PolicyExplainerHTML.escape(PolicyExplainer.explain(policy)) + "</pre>"))
    }

    @Test func loadsNothingAndRunsNothing() throws {
        let (_, html) = try Self.page()
        let lower = html.lowercased()
        #expect(!lower.contains("<script"))
        #expect(!lower.contains("<img"))
        #expect(!lower.contains("<link"))
        #expect(!lower.contains("<iframe"))
        #expect(!lower.contains("@import"))
        #expect(!lower.contains("url(http"))
        #expect(lower.contains("content-security-policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\""))
        // Inside tags (text is escaped, so every `<` starts one): no attribute that could fetch
        // or run anything, and no URL at all.
        let tags = lower.matches(of: try Regex(#"<[^<>]*>"#)).map { String(lower[$0.range]) }
        #expect(tags.count > 50)
        let fetching = try Regex(#"\s(src|href|xlink:href|srcset|action|poster|data|on[a-z]+)\s*="#)
        for tag in tags {
            #expect(tag.firstMatch(of: fetching) == nil, "\(tag)")
            #expect(!tag.contains("http://") && !tag.contains("https://"), "\(tag)")
        }
    }

    @Test func escapesFreeTextFromThePolicy() throws {
        let (_, html) = try Self.page()
        #expect(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"))
        #expect(html.contains("a &amp; b"))
        #expect(html.contains("&lt;img src=https://evil.example/x.png onerror=alert(2)&gt;"))
        #expect(html.contains("shop&quot;&gt;&lt;script&gt;alert(&#39;aud&#39;)&lt;/script&gt;"))
        #expect(html.contains("<code>fixture&lt;1&gt;.yaml</code>"))
        #expect(!html.contains("alert(1)</script>"))
        #expect(!html.contains("\"><script"))
    }

    @Test func escaper() {
        #expect(PolicyExplainerHTML.escape(#"<a href="x" title='y'>&amp;</a>"#)
                == "&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;amp;&lt;/a&gt;")
        #expect(PolicyExplainerHTML.escape("tab\tline\nnul\u{0}esc\u{1B}c1\u{85}ok é ←") == "tab\tline\nnul\u{FFFD}esc\u{FFFD}c1\u{FFFD}ok é ←")
        #expect(PolicyExplainerHTML.escape("") == "")
    }

    @Test func everyExamplePolicyRenders() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let dir = root.appendingPathComponent("policies")
        let names = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasSuffix(".yaml") }.sorted()
        #expect(names.count >= 5)
        for name in names {
            let policy = try PolicyLoader.load(path: dir.appendingPathComponent(name).path).get()
            let html = PolicyExplainerHTML.render(policy)
            #expect(html.hasPrefix("<!DOCTYPE html>"), "\(name)")
            #expect(html.contains("</svg>"), "\(name)")
            #expect(!html.lowercased().contains("<script"), "\(name)")
            for app in policy.apps {
                for upstream in app.upstreams {
                    if let endpoint = upstream.provider.settings.endpoint {
                        #expect(html.contains("host " + PolicyExplainerHTML.escape(PolicyExplainer.hostOf(endpoint))), "\(name)")
                    }
                    for use in upstream.provider.settings.secrets {
                        #expect(html.contains(PolicyExplainerHTML.escape(use.reference.description)), "\(name)")
                    }
                }
            }
        }
    }
}
