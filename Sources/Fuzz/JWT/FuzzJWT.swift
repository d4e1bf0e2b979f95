import FuzzSupport
import PWCore
import PWCrypto
import PWPolicy
@testable import SessionAuth

/// The session token front: splitting, base64url, the JOSE header and the claims, through the
/// public verifier with an HS256 policy, plus the header check, the Bearer/cookie extraction and
/// Base64URL directly. The first byte picks the mode; the rest is the mode's input:
///
/// - 0: a raw token (`verify(token:)`, and the same token as `Authorization: Bearer ...`);
/// - 1: `header.payload` text, signed here with the policy's key, so the claims are reached;
/// - 2: header JSON, a NUL byte, claims JSON: both base64url-encoded and signed here;
/// - 3: one header segment through `CheckedHeader.check` (as text, and base64url-encoded);
/// - 4: request header lines (`Name: value`) through `authenticate`, `bearerToken`, `cookie`;
/// - 5: Base64URL: decode/encode round trips.
///
/// A fresh verifier per input keeps runs deterministic (its header cache is per verifier); each
/// token is verified twice, and the second (cached header) answer must equal the first.
@_cdecl("fuzz_jwt_main")
func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv, fuzzOne)
}

struct FixedClock: WallClock {
    func now() -> Double { 1_700_000_000 }
}

/// A fuzzing-only key, not a secret of any deployment.
let key = Array("pushwarden-fuzz-hs256-key-0123456789".utf8)
let secretRef = SecretRef.env("PUSHWARDEN_FUZZ_SESSION_KEY")
let policy = SessionPolicy(header: "Authorization", cookie: "pw_session", algorithms: [.hs256], keys: .hmacSecret(secretRef),
                           issuer: "fuzz-issuer", audience: "fuzz-app", contactClaim: "sub", leewaySeconds: 30)

func makeVerifier() -> SessionVerifier {
    do {
        return try SessionVerifier(policy: policy, secrets: StaticSecrets([secretRef: key]), clock: FixedClock())
    } catch {
        violated("the fuzz policy is refused: \(error)")
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = fuzzBytes(data, size)
    guard let mode = input.first else { return 0 }
    let rest = Array(input.dropFirst())
    switch mode % 6 {
    case 0:
        let token = String(decoding: rest, as: UTF8.self)
        verifyTwice(token)
        _ = makeVerifier().authenticate(["Authorization": "Bearer " + token])
    case 1:
        verifyTwice(signed(String(decoding: rest, as: UTF8.self)))
    case 2:
        let (header, claims) = split(rest, at: 0)
        verifyTwice(signed(Base64URL.encode(header) + "." + Base64URL.encode(claims)))
    case 3:
        let text = String(decoding: rest, as: UTF8.self)
        let allowed = Set(JWTAlgorithm.allCases)
        for segment in [text, Base64URL.encode(rest)] {
            if case .success(let header) = CheckedHeader.check(Substring(segment), allowed: allowed) {
                guard allowed.contains(header.alg) else { violated("header with alg \(header.alg) outside the allow-list") }
            }
        }
    case 4:
        var headers = HTTPHeaders()
        for line in rest.split(separator: 0x0A, omittingEmptySubsequences: false) {
            let (name, value) = split(Array(line), at: UInt8(ascii: ":"))
            headers.add(String(decoding: name, as: UTF8.self), String(decoding: value.drop { $0 == 0x20 }, as: UTF8.self))
        }
        let verifier = makeVerifier()
        _ = verifier.authenticate(headers)
        for field in headers {
            var value = field.value
            value.withUTF8 { bytes in
                guard let range = SessionVerifier.bearerToken(in: bytes) else { return }
                guard range.lowerBound >= 0, range.upperBound <= bytes.count, !range.isEmpty else {
                    violated("bearer range \(range) outside 0..<\(bytes.count)")
                }
                guard !bytes[range].contains(0x20), !bytes[range].contains(0x09) else { violated("bearer credentials hold a space") }
            }
        }
        if let cookie = SessionVerifier.cookie(named: "pw_session", in: headers.values("Cookie")), cookie.isEmpty {
            violated("empty cookie value returned")
        }
    default:
        let text = String(decoding: rest, as: UTF8.self)
        if let decoded = Base64URL.decode(text) {
            var unpadded = Substring(text)
            while unpadded.last == "=" { unpadded = unpadded.dropLast() }
            guard Base64URL.encode(decoded) == unpadded else { violated("decode accepted a non-canonical encoding") }
        }
        guard Base64URL.decode(Base64URL.encode(rest)) == rest else { violated("encode/decode round trip changed the bytes") }
    }
    return 0
}

/// `text` plus `.` and its HS256 signature under the policy's key.
func signed(_ text: String) -> String {
    text + "." + Base64URL.encode(HMACSHA256.mac(key: key, message: Array(text.utf8)))
}

func verifyTwice(_ token: String) {
    let verifier = makeVerifier()
    let first = verifier.verify(token: token)
    let second = verifier.verify(token: token)
    guard first == second else { violated("a cached header changed the verdict: \(first) then \(second)") }
    guard case .success(let session) = first else { return }
    // What an accepted session must hold, whatever the token's path to it.
    guard !session.contactID.isEmpty, session.contactID.unicodeScalars.count <= SessionVerifier.maxContactIDLength else {
        violated("accepted a contact id of \(session.contactID.unicodeScalars.count) scalars")
    }
    guard !session.contactID.unicodeScalars.contains(where: { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }) else {
        violated("accepted a contact id with a control character")
    }
    guard let exp = session.expiresAt, FixedClock().now() < exp + Double(policy.leewaySeconds) else {
        violated("accepted an expired session (exp \(String(describing: session.expiresAt)))")
    }
}
