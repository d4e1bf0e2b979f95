#if canImport(Glibc)
import Glibc
#endif
import PWCore
import PWPolicy
import Synchronization

/// A JOSE header that passed every check: its algorithm (allowed by the policy) and its `kid`.
struct CheckedHeader: Sendable {
    let alg: JWTAlgorithm
    let kid: String?

    /// Decodes and checks one header segment: base64url, a JSON object, `alg` allowed (never
    /// `none`), `typ` JWT when present, no `crit`, `kid` a string when present.
    /// A logout token (`logout: true`) may also be typed `logout+jwt` (OpenID Connect Back-Channel
    /// Logout 1.0, section 2.4); a session token typed so is refused, so one never passes for the other.
    static func check(_ text: Substring, allowed: Set<JWTAlgorithm>, logout: Bool = false) -> Result<CheckedHeader, AuthFailure> {
        func fail(_ reason: String) -> Result<CheckedHeader, AuthFailure> { .failure(AuthFailure(reason)) }
        guard let bytes = Base64URL.decode(text) else { return fail("header is not base64url") }
        guard let header = (try? JSONValue.parse(bytes))?.objectValue else { return fail("header is not a JSON object") }
        guard let algName = header["alg"]?.stringValue else { return fail("header has no alg string") }
        if HTTPHeaders.equalsIgnoringCase(algName, "none") { return fail("alg none not allowed") }
        guard let alg = JWTAlgorithm(rawValue: algName), allowed.contains(alg) else {
            // A registered name is shown as it is (by bytes: a Set<String> matches canonically); anything else only hashed.
            let known = SessionVerifier.joseAlgorithms.contains(algName) && algName.utf8.allSatisfy { $0 < 0x80 }
            return .failure(AuthFailure("alg \(known ? algName : SessionVerifier.echo(algName)) not allowed", kind: "alg not allowed"))
        }
        if let typ = header["typ"] {
            guard let text = typ.stringValue else { return fail("typ is not JWT") }
            let logoutType = HTTPHeaders.equalsIgnoringCase(text, "logout+jwt") || HTTPHeaders.equalsIgnoringCase(text, "application/logout+jwt")
            guard HTTPHeaders.equalsIgnoringCase(text, "JWT") || (logout && logoutType) else {
                return fail(logout ? "typ is not logout+jwt or JWT" : "typ is not JWT")
            }
        }
        if header["crit"] != nil { return fail("crit header not supported") }
        switch header["kid"] {
        case nil: return .success(CheckedHeader(alg: alg, kid: nil))
        case .string(let s)?: return .success(CheckedHeader(alg: alg, kid: s))
        case let other?: return fail("kid is \(other.typeName), not a string")
        }
    }
}

/// Remembers the few header segments that passed `CheckedHeader.check`. The result is a pure
/// function of the segment's text and the verifier's fixed allow-list, so a cached answer is the
/// answer; only accepted headers are kept, and at most `capacity` of them (a JWKS holds few keys),
/// so tokens cannot grow it.
final class HeaderCache: Sendable {
    private let entries = Mutex<[(text: String, header: CheckedHeader)]>([])
    private let capacity = 8
    private let logout: Bool

    init(logout: Bool = false) { self.logout = logout }

    func checked(_ text: UnsafeBufferPointer<UInt8>, allowed: Set<JWTAlgorithm>) -> Result<CheckedHeader, AuthFailure> {
        let hit = entries.withLock { list in
            list.first { entry in
                var stored = entry.text
                return stored.withUTF8 { known in
                    known.count == text.count && (known.isEmpty || memcmp(known.baseAddress!, text.baseAddress!, known.count) == 0)
                }
            }?.header
        }
        if let hit { return .success(hit) }
        let string = String(decoding: text, as: UTF8.self)
        let result = CheckedHeader.check(Substring(string), allowed: allowed, logout: logout)
        if case .success(let header) = result {
            entries.withLock { list in
                if list.count >= capacity { list.removeFirst() }
                list.append((string, header))
            }
        }
        return result
    }
}
