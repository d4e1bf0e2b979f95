import Foundation
import ClientAPI
import PWCore
import PWCrypto
import PWPolicy
import SessionAuth

/// `bench-tool profile [--iterations N] [--pool N] [--stage all|auth|validate|hash|encode|es256]`
///
/// A CPU profiling driver for the pure-Swift work of one dedupe-hit registration, without any
/// server or Redis: session check (HS256), body validation, the dedupe-key and fingerprint
/// digests, and the 202 body. Prints nanoseconds per iteration. `--stage` times one piece alone
/// (its inputs prepared outside the timed loop); `es256` times one ES256 signature verification
/// through `PublicKey` alone, beside what `openssl speed ecdsap256` reports. Benchmark tooling only.
func runProfile() throws {
    let iterations = value("--iterations").flatMap(Int.init) ?? 1_000_000
    let pool = value("--pool").flatMap(Int.init) ?? 10_000
    let stage = value("--stage") ?? "all"
    if stage == "es256" { return try profileES256(iterations: iterations) }
    let yaml = BenchPolicy.yaml(mockPort: 9)
    let policy: Policy
    switch PolicyLoader.load(text: yaml, path: "profile.yaml") {
    case .success(let p): policy = p
    case .failure(let diagnostics): throw SessionConfigError("profile policy: \(diagnostics)")
    }
    guard let app = policy.app("bench"), let session = app.session.jwt, case .hmacSecret(let ref) = session.keys else {
        throw SessionConfigError("profile policy: no HS256 app")
    }
    let secret = Array(Hex.encode(SecureRandom.bytes(32)).utf8)
    let verifier = try SessionVerifier(policy: session, secrets: StaticSecrets([ref: secret]))

    let now = Int(Date().timeIntervalSince1970)
    var requests: [(headers: HTTPHeaders, body: [UInt8])] = []
    requests.reserveCapacity(pool)
    for i in 0..<pool {
        let token = JWTMinter.mintHS256(claims: BenchPolicy.claims(i, now: now), secret: secret)
        let headers: HTTPHeaders = [
            "Host": "127.0.0.1:8080", "Content-Type": "application/json", "Authorization": "Bearer " + token,
            "Content-Length": "112",
        ]
        let pushToken = "bench-hit-token-" + String(repeating: "0", count: max(0, 8 - String(i).count)) + String(i)
            + "-aaaaaaaaaaaaaaaaaaaa"
        let body = #"{"platform":"android","push_token":"\#(pushToken)","contact_id":"contact-\#(i)"}"#
        requests.append((headers, Array(body.utf8)))
    }

    var checksum = 0
    func hashes(_ installation: Installation, _ session: Session) {
        var material = Array("bench".utf8)
        material.append(0)
        material.append(contentsOf: "voyado".utf8)
        material.append(0)
        material.append(contentsOf: installation.pushToken.utf8)
        let dedupe = "pw:v2:{" + SHA256.hexHash(material) + "}:reg"
        let m = installation.metadata
        let parts: [String?] = [
            installation.platform.rawValue, installation.pushService.rawValue, installation.pushToken,
            installation.webPushKeys?.p256dh, installation.webPushKeys?.auth, installation.environment.rawValue,
            installation.installationID, m.appVersion, m.osVersion, m.deviceModel, m.locale, m.timezone,
            session.contactID, "settings-digest",
        ]
        var fingerprintMaterial: [UInt8] = []
        fingerprintMaterial.reserveCapacity(256)
        for part in parts {
            if let part { fingerprintMaterial.append(contentsOf: part.utf8) } else { fingerprintMaterial.append(1) }
            fingerprintMaterial.append(0)
        }
        let fingerprint = String(SHA256.hexHash(fingerprintMaterial).prefix(32))
        checksum &+= dedupe.utf8.count &+ fingerprint.utf8.count
    }
    func encode() {
        let response = JSONValue.object(JSONObject([
            JSONMember("request_id", "0123456789abcdef0123456789abcdef"), JSONMember("status", "accepted"),
            JSONMember("upstreams", .object(JSONObject([JSONMember("voyado", "unchanged")]))),
        ])).encoded()
        checksum &+= response.count
    }
    func once(_ request: (headers: HTTPHeaders, body: [UInt8])) throws {
        let session = try verifier.authenticate(request.headers).get()
        let installation = try RequestValidator.installation(body: request.body, policy: app.client, contactID: session.contactID)
        hashes(installation, session)
        encode()
    }

    // Warm-up: every request once (also proves the whole pool is accepted).
    var sessions: [Session] = []
    var installations: [Installation] = []
    for request in requests {
        let session = try verifier.authenticate(request.headers).get()
        sessions.append(session)
        installations.append(try RequestValidator.installation(body: request.body, policy: app.client, contactID: session.contactID))
    }
    let start = DispatchTime.now().uptimeNanoseconds
    switch stage {
    case "all": for i in 0..<iterations { try once(requests[i % pool]) }
    case "auth": for i in 0..<iterations { checksum &+= try verifier.authenticate(requests[i % pool].headers).get().contactID.utf8.count }
    case "validate":
        for i in 0..<iterations {
            let installation = try RequestValidator.installation(body: requests[i % pool].body, policy: app.client,
                                                                 contactID: sessions[i % pool].contactID)
            checksum &+= installation.pushToken.utf8.count
        }
    case "hash": for i in 0..<iterations { hashes(installations[i % pool], sessions[i % pool]) }
    case "encode": for _ in 0..<iterations { encode() }
    default: throw SessionConfigError("--stage must be all, auth, validate, hash or encode")
    }
    let elapsed = DispatchTime.now().uptimeNanoseconds - start
    print("profile \(stage): \(iterations) iterations, pool \(pool): \(Double(elapsed) / Double(iterations)) ns/iteration (checksum \(checksum))")
}

/// ES256 verifications through `PublicKey`, round-robin over 256 signed JWS signing inputs.
private func profileES256(iterations: Int) throws {
    let key = try PrivateKey.generateP256()
    let publicKey = key.publicKey
    var signed: [(message: [UInt8], signature: [UInt8])] = []
    for i in 0..<256 {
        let message = Array("eyJhbGciOiJFUzI1NiJ9.payload-\(i)".utf8)
        signed.append((message, try key.signES256(message: message)))
    }
    var accepted = 0
    let start = DispatchTime.now().uptimeNanoseconds
    for i in 0..<iterations {
        let (message, signature) = signed[i & 255]
        if publicKey.verifyES256(signature: signature, message: message) { accepted += 1 }
    }
    let elapsed = DispatchTime.now().uptimeNanoseconds - start
    guard accepted == iterations else { throw SessionConfigError("profile es256: \(iterations - accepted) signatures refused") }
    print("profile es256: \(iterations) verifications: \(Double(elapsed) / Double(iterations)) ns/verification")
}
