#if canImport(Glibc)
import Glibc
#endif
import PWCore
import PWCrypto
import PWPolicy
import Synchronization

/// Verifies app session JWTs (RFC 7519, compact JWS) as one app's policy says.
///
/// Keys are loaded at `init`: a JWKS file (RS256/ES256), a JWKS fetched from `jwks_url` (handed
/// in by the caller, which also refreshes them with `replaceKeys`), or an HMAC secret (HS256). The
/// token's `alg` must be in the policy's allow-list and decides the key family, and a key is only
/// ever used with its own family, so an RSA or EC public key can never become an HMAC secret.
///
/// - Important: thread-safe; the key set is swapped whole under a lock, everything else is
///   immutable after `init`.
public final class SessionVerifier: Sendable {
    /// Longest token accepted, in bytes.
    public static let maxTokenBytes = 8 * 1024
    /// Shortest HMAC secret accepted, in bytes (RFC 7518, section 3.2: at least the hash size).
    public static let minimumHMACSecretBytes = 32
    /// Longest contact id accepted, in Unicode scalars.
    public static let maxContactIDLength = 256

    private struct KeyEntry: Sendable {
        let kid: String?
        let key: PublicKey
    }

    let policy: SessionPolicy
    private let allowed: Set<JWTAlgorithm>
    private let hmacSecret: [UInt8]?
    /// The JWKS keys in force, replaced whole by `replaceKeys`.
    private let keys: Mutex<KeyRing>
    /// Told the kid of a token whose kid no key has (`jwks_url` refetches on it).
    private let unknownKid = Mutex<(@Sendable (String) -> Void)?>(nil)
    let clock: any WallClock
    private let headers = HeaderCache()
    /// Logout tokens' headers, which may be typed `logout+jwt` (a session token may not).
    let logoutHeaders = HeaderCache(logout: true)
    /// Sessions accepted before, by the hash of their whole token (`VerifiedSessions`).
    let verified: VerifiedSessions
    /// JWKS entries that were skipped at `init` and why (for a start-up log line).
    public let skippedKeys: [String]
    /// The same entries, each with its position, kid and reason.
    public let skippedJWKs: [JWKSet.Skipped]

    private final class KeyRing: Sendable {
        let rsa: [KeyEntry]
        let ec: [KeyEntry]

        init(rsa: [KeyEntry] = [], ec: [KeyEntry] = []) {
            self.rsa = rsa
            self.ec = ec
        }

        convenience init(_ set: JWKSet) {
            self.init(rsa: set.rsa.map { KeyEntry(kid: $0.kid, key: $0.key) }, ec: set.ec.map { KeyEntry(kid: $0.kid, key: $0.key) })
        }
    }

    /// - Parameters:
    ///   - policy: the app's `session` policy.
    ///   - secrets: resolves `hmac_secret`.
    ///   - clock: the time `exp`, `nbf` and `iat` are judged against.
    ///   - jwksLoader: reads the JWKS file named by the policy (a seam for tests).
    ///   - fetchedKeys: with `jwks_url`, the keys its first fetch gave; nil when it failed (then
    ///     the policy's `jwks_file` fallback is read, and without one this throws).
    /// - Throws: `SessionConfigError` when the JWKS breaks a `JWKSet` rule (unreadable, not a JWKS,
    ///   a usable key malformed or too weak, two usable keys sharing a `kid`, no key for an allowed
    ///   algorithm), or the HMAC secret cannot be resolved or is shorter than 32 bytes.
    public init(policy: SessionPolicy, secrets: some SecretResolving, clock: some WallClock = SystemClock(),
                jwksLoader: (String) throws -> [UInt8] = SessionVerifier.readJWKSFile,
                fetchedKeys: JWKSet? = nil) throws(SessionConfigError) {
        self.policy = policy
        self.verified = VerifiedSessions(capacity: policy.verifiedCache)
        self.allowed = Set(policy.algorithms)
        self.clock = clock
        guard !allowed.isEmpty else { throw SessionConfigError("session: no algorithms allowed") }

        switch policy.keys {
        case .hmacSecret(let ref):
            let others = policy.algorithms.filter { $0 != .hs256 }.map(\.rawValue)
            guard others.isEmpty else {
                throw SessionConfigError("session: \(others.joined(separator: ", ")) needs jwks_file, not hmac_secret")
            }
            let secret: [UInt8]
            do { secret = try secrets.resolve(ref) } catch {
                throw SessionConfigError("session hmac_secret: \(error.description)")
            }
            guard secret.count >= Self.minimumHMACSecretBytes else {
                throw SessionConfigError("session hmac_secret \(ref) is \(secret.count) bytes; HS256 needs at least \(Self.minimumHMACSecretBytes)")
            }
            hmacSecret = secret
            self.keys = Mutex(KeyRing())
            skippedJWKs = []
            skippedKeys = []
        case .jwksFile, .jwksURL:
            guard !allowed.contains(.hs256) else {
                throw SessionConfigError("session: HS256 needs hmac_secret; JWKS keys are never used as HMAC secrets")
            }
            var file: String?
            var fetched: (keys: JWKSet, url: String)?
            switch policy.keys {
            case .jwksFile(let path):
                file = path
            case .jwksURL(let jwks):
                if let fetchedKeys {
                    fetched = (fetchedKeys, jwks.url)
                } else if let fallback = jwks.fallbackFile {
                    file = fallback
                } else {
                    throw SessionConfigError("session jwks_url \(jwks.url): no keys (the first fetch failed and no jwks_file fallback is given)")
                }
            case .hmacSecret:
                break
            }
            let keys: JWKSet
            let source: String
            if let fetched {
                keys = fetched.keys
                source = "jwks_url \(fetched.url)"
            } else if let file {
                do { keys = try JWKSet.load(path: file, algorithms: policy.algorithms, reader: jwksLoader) } catch {
                    throw SessionConfigError("session jwks_file \(file): \(error.message)")
                }
                source = "jwks_file \(file)"
            } else {
                throw SessionConfigError("session: no JWKS")
            }
            hmacSecret = nil
            self.keys = Mutex(KeyRing(keys))
            skippedJWKs = keys.skipped
            skippedKeys = keys.skipped.map { "session \(source): \($0)" }
        }
    }

    /// Puts `keys` in force for every verification that starts from now on (a `jwks_url`
    /// refresh). Verifications under way finish with the keys they began with.
    public func replaceKeys(_ keys: JWKSet) {
        let ring = KeyRing(keys)
        self.keys.withLock { $0 = ring }
        // A session accepted under the old keys is verified again under the new ones.
        verified.removeAll()
    }

    /// Sets what is told the kid of a token refused because no key has it. Called on the
    /// verifying thread (an event loop): it must return at once.
    public func onUnknownKid(_ handler: @escaping @Sendable (String) -> Void) {
        unknownKid.withLock { $0 = handler }
    }

    /// The default `jwksLoader`: the whole file.
    public static func readJWKSFile(_ path: String) throws -> [UInt8] {
        guard let bytes = readWholeFile(path) else { throw SessionConfigError("cannot open or read the file") }
        return bytes
    }

    // MARK: - Requests

    /// Finds the session token in `headers` (the policy's header as `Bearer <jwt>`, else the
    /// policy's cookie) and verifies it.
    public func authenticate(_ headers: HTTPHeaders) -> Result<Session, AuthFailure> {
        var headerProblem: String?
        if let name = policy.header {
            var found: String?
            for field in headers where HTTPHeaders.equalsIgnoringCase(field.name, name) {
                if found != nil { return .failure(AuthFailure("several \(name) headers")) }
                found = field.value
            }
            if var value = found {
                // The token is verified where it lies in the header value, without a copy.
                let verified = value.withUTF8 { bytes -> Result<Session, AuthFailure>? in
                    guard let token = Self.bearerToken(in: bytes) else { return nil }
                    return verify(bytes: UnsafeBufferPointer(rebasing: bytes[token]))
                }
                if let verified { return verified }
                headerProblem = "\(name) header is not a Bearer token"
            }
        }
        if let cookie = policy.cookie, let token = Self.cookie(named: cookie, in: headers.values("Cookie")) {
            return verify(token: token)
        }
        return .failure(AuthFailure(headerProblem ?? "no session token"))
    }

    // MARK: - Tokens

    /// Verifies one compact JWS token: structure, header, signature, then claims.
    public func verify(token: String) -> Result<Session, AuthFailure> {
        var token = token
        return token.withUTF8 { verify(bytes: $0) }
    }

    /// `verify(token:)` over the token's UTF-8, so segments are sliced and decoded in place; the
    /// very token accepted before (and not yet expired) is not verified again.
    private func verify(bytes: UnsafeBufferPointer<UInt8>) -> Result<Session, AuthFailure> {
        guard bytes.count <= Self.maxTokenBytes else { return .failure(AuthFailure("token longer than \(Self.maxTokenBytes) bytes")) }
        let key = SHA256.words(bytes)
        if let session = verified.session(for: key, now: clock.now()) { return .success(session) }
        let result = verifyWhole(bytes)
        if case .success(let session) = result { verified.keep(session, for: key, now: clock.now()) }
        return result
    }

    /// Structure, header, signature, then claims.
    private func verifyWhole(_ bytes: UnsafeBufferPointer<UInt8>) -> Result<Session, AuthFailure> {
        signedClaims(bytes, headers: headers).flatMap(check)
    }

    /// The claims of a compact JWS whose structure, header (by `headers`' rules) and signature
    /// under this verifier's keys hold; the claims themselves are not judged here.
    func signedClaims(_ bytes: UnsafeBufferPointer<UInt8>, headers: HeaderCache) -> Result<JSONObject, AuthFailure> {
        func fail(_ reason: String) -> Result<JSONObject, AuthFailure> { .failure(AuthFailure(reason)) }

        // Three segments split at '.' (memchr scans a token's few hundred bytes fastest).
        let firstDot = Self.find(UInt8(ascii: "."), in: bytes, from: 0)
        let secondDot = Self.find(UInt8(ascii: "."), in: bytes, from: firstDot + 1)
        guard firstDot < bytes.count else { return fail("token has 1 parts, not 3") }
        guard secondDot < bytes.count else { return fail("token has 2 parts, not 3") }
        var dots = 2
        var next = Self.find(UInt8(ascii: "."), in: bytes, from: secondDot + 1)
        while next < bytes.count {
            dots += 1
            next = Self.find(UInt8(ascii: "."), in: bytes, from: next + 1)
        }
        guard dots == 2 else { return fail("token has \(dots + 1) parts, not 3") }
        guard Self.find(UInt8(ascii: "="), in: bytes, from: 0) == bytes.count else { return fail("base64url padding in token") }
        let headerBytes = UnsafeBufferPointer(rebasing: bytes[0..<firstDot])
        let payloadBytes = UnsafeBufferPointer(rebasing: bytes[(firstDot + 1)..<secondDot])
        let signatureBytes = UnsafeBufferPointer(rebasing: bytes[(secondDot + 1)...])

        // Header: every token from one issuer carries the same one, so its checked form is cached.
        let header: CheckedHeader
        switch headers.checked(headerBytes, allowed: allowed) {
        case .success(let checked): header = checked
        case .failure(let failure): return .failure(failure)
        }
        let alg = header.alg
        let kid = header.kid

        // Signature over the ASCII of "header.payload".
        guard let signature = Base64URL.decode(bytes: signatureBytes) else { return fail("signature is not base64url") }
        guard !signature.isEmpty else { return fail("missing signature") }
        let signingInput = UnsafeBufferPointer(rebasing: bytes[0..<secondDot])
        switch alg {
        case .hs256:
            guard let secret = hmacSecret else { return fail("no HMAC secret for HS256") }
            let expected = HMACSHA256.mac(key: secret, message: signingInput)
            guard constantTimeEquals(expected, signature) else { return fail("signature mismatch") }
        case .rs256:
            let ring = keys.withLock { $0 }
            switch selectKey(ring.rsa, in: ring, kid: kid, alg: alg) {
            case .failure(let failure): return .failure(failure)
            case .success(let key):
                guard key.verifyRS256(signature: signature, message: signingInput) else { return fail("signature mismatch") }
            }
        case .es256:
            let ring = keys.withLock { $0 }
            switch selectKey(ring.ec, in: ring, kid: kid, alg: alg) {
            case .failure(let failure): return .failure(failure)
            case .success(let key):
                guard key.verifyES256(signature: signature, message: signingInput) else { return fail("signature mismatch") }
            }
        }

        // Claims, only once the signature holds.
        guard let payload = Base64URL.decode(bytes: payloadBytes) else { return fail("payload is not base64url") }
        guard let claims = (try? JSONValue.parse(payload))?.objectValue else { return fail("payload is not a JSON object") }
        return .success(claims)
    }

    private func selectKey(_ family: [KeyEntry], in ring: KeyRing, kid: String?, alg: JWTAlgorithm) -> Result<PublicKey, AuthFailure> {
        if let kid {
            // By bytes (RFC 7515, section 5.3): a kid that is only canonically equivalent is unknown.
            if let entry = family.first(where: { $0.kid.map { TextRules.bytesEqual($0, kid) } ?? false }) { return .success(entry.key) }
            if (ring.rsa + ring.ec).contains(where: { $0.kid.map { TextRules.bytesEqual($0, kid) } ?? false }) {
                // Bytes-equal to a kid of our own key set: nothing the client chose is echoed.
                return .failure(AuthFailure("kid \(Self.clip(kid)) is not a key for \(alg.rawValue)", kind: "kid is not a key for \(alg.rawValue)"))
            }
            unknownKid.withLock { $0 }?(kid)
            return .failure(AuthFailure("unknown kid \(Self.echo(kid))", kind: "unknown kid"))
        }
        switch family.count {
        case 0: return .failure(AuthFailure("no key for \(alg.rawValue)"))
        case 1: return .success(family[0].key)
        default: return .failure(AuthFailure("no kid, and several keys for \(alg.rawValue)"))
        }
    }

    enum NumericDate {
        case absent, invalid, value(Double)

        /// Plain integers of up to 15 digits (every real timestamp), converted without `strtod`:
        /// they are exact in a Double, so the result is the one `Double(text)` gives.
        static func integer(_ text: String) -> Double? {
            var text = text
            return text.withUTF8 { bytes -> Double? in
                var magnitude = 0
                var digits = 0
                var negative = false
                for byte in bytes {
                    if byte == UInt8(ascii: "-"), digits == 0, !negative {
                        negative = true
                        continue
                    }
                    guard byte >= 0x30, byte <= 0x39, digits < 15 else { return nil }
                    magnitude = magnitude * 10 + Int(byte - 0x30)
                    digits += 1
                }
                guard digits > 0 else { return nil }
                return negative ? -Double(magnitude) : Double(magnitude)
            }
        }

        init(_ value: JSONValue?) {
            switch value {
            case nil: self = .absent
            case .number(let text)?:
                if let v = Self.integer(text) {
                    self = .value(v)
                } else if let v = Double(text), v.isFinite {
                    self = .value(v)
                } else {
                    self = .invalid
                }
            default: self = .invalid
            }
        }
    }

    /// `iss` and `aud` as the policy names them (each checked only when named), or the refusal.
    func issuerAndAudience(_ claims: JSONObject) -> AuthFailure? {
        if let issuer = policy.issuer {
            guard let iss = claims["iss"] else { return AuthFailure("missing iss") }
            guard let iss = iss.stringValue, TextRules.bytesEqual(iss, issuer) else { return AuthFailure("issuer mismatch") }
        }
        if let audience = policy.audience {
            switch claims["aud"] {
            case nil: return AuthFailure("missing aud")
            case .string(let aud)?: guard TextRules.bytesEqual(aud, audience) else { return AuthFailure("audience mismatch") }
            case .array(let auds)?:
                guard auds.allSatisfy({ $0.stringValue != nil }) else { return AuthFailure("aud array holds a non-string") }
                guard auds.contains(where: { TextRules.bytesEqual($0.stringValue ?? "", audience) }) else { return AuthFailure("audience mismatch") }
            default: return AuthFailure("aud is not a string or an array")
            }
        }
        return nil
    }

    private func check(_ claims: JSONObject) -> Result<Session, AuthFailure> {
        func fail(_ reason: String) -> Result<Session, AuthFailure> { .failure(AuthFailure(reason)) }

        let now = clock.now()
        let leeway = Double(policy.leewaySeconds)
        let expiresAt: Double
        switch NumericDate(claims["exp"]) {
        case .absent: return fail("missing exp")
        case .invalid: return fail("exp is not a number")
        case .value(let exp):
            // RFC 7519, 4.1.4: valid only while the current time is before exp.
            guard now < exp + leeway else { return fail("expired") }
            expiresAt = exp
        }
        switch NumericDate(claims["nbf"]) {
        case .absent: break
        case .invalid: return fail("nbf is not a number")
        case .value(let nbf): guard now + leeway >= nbf else { return fail("not yet valid (nbf)") }
        }
        switch NumericDate(claims["iat"]) {
        case .absent: break
        case .invalid: return fail("iat is not a number")
        case .value(let iat): guard iat <= now + leeway else { return fail("issued in the future (iat)") }
        }
        if let failure = issuerAndAudience(claims) { return .failure(failure) }
        let claimName = policy.contactClaim
        guard let contactValue = claims[claimName] else { return fail("missing contact claim \(claimName)") }
        let contact: String
        switch Self.contactID(contactValue, named: "contact claim \(claimName)") {
        case .success(let text): contact = text
        case .failure(let failure): return .failure(failure)
        }
        let sessionID = policy.backchannelLogout.flatMap { claims[$0.sidClaim].flatMap(Self.sessionID) }
        return .success(Session(contactID: contact, subject: claims["sub"]?.stringValue, expiresAt: expiresAt, sessionID: sessionID))
    }

}
