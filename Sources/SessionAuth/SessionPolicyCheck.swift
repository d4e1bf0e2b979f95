import PWPolicy

/// What `pushwarden policy check` adds to the loader's checks for sessions: each `jwks_file` (also a
/// `jwks_url`'s fallback) is
/// read and judged by `JWKSet`, the rules `serve` applies at start-up, so `policy check` refuses
/// every JWKS that `serve` refuses and names every key that `serve` skips.
public enum SessionPolicyCheck {
    /// One diagnostic per problem, at the `jwks_file` value of each app that names one: an error
    /// for a file `serve` refuses, a warning per skipped key. Empty when every file is fine.
    public static func diagnostics(for policy: Policy,
                                   reader: (String) throws -> [UInt8] = SessionVerifier.readJWKSFile) -> [Diagnostic] {
        var diagnostics: [Diagnostic] = []
        for app in policy.apps {
            // An introspected session names no key file.
            guard let session = app.session.jwt else { continue }
            if session.backchannelLogout != nil, session.contactClaim != "sub" {
                diagnostics.append(policy.diagnostic(
                    at: "apps.\(app.id).session.backchannel_logout",
                    "contact_claim is '\(session.contactClaim)', not sub: a logout token names the contact only when it carries that claim; "
                        + "one with only sub removes nothing, one with sid finds its session", severity: .warning))
            }
            let file: String
            switch session.keys {
            case .jwksFile(let path): file = path
            case .jwksURL(let jwks):
                // The URL's keys are the identity provider's, fetched by `serve`; its fallback file is the operator's.
                guard let fallback = jwks.fallbackFile else { continue }
                file = fallback
            case .hmacSecret: continue
            }
            let path = "apps.\(app.id).session.jwks_file"
            do {
                let keys = try JWKSet.load(path: file, algorithms: session.algorithms, reader: reader)
                for skipped in keys.skipped {
                    diagnostics.append(policy.diagnostic(at: path, "\(file): \(skipped.name) skipped: \(skipped.reason)", severity: .warning))
                }
            } catch {
                diagnostics.append(policy.diagnostic(at: path, "\(file): \(error.message)"))
            }
        }
        return diagnostics
    }
}
