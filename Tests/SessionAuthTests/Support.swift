import Foundation
import PWCore
import PWPolicy
@testable import SessionAuth

/// A clock that says what the test tells it to.
struct FixedClock: WallClock {
    var time: Double
    func now() -> Double { time }
}

struct OpenSSLFailure: Error, CustomStringConvertible {
    var description: String
}

/// Base64url without padding, done with Foundation so it is independent of PWCore's encoder.
func b64url(_ data: some Sequence<UInt8>) -> String {
    Data(data).base64EncodedString()
        .replacingOccurrences(of: "+", with: "-")
        .replacingOccurrences(of: "/", with: "_")
        .replacingOccurrences(of: "=", with: "")
}

func b64url(_ text: String) -> String { b64url(Array(text.utf8)) }

func bytes(hex: String) -> [UInt8] {
    var out: [UInt8] = []
    var chars = Array(hex.utf8)
    if chars.count % 2 == 1 { chars.insert(UInt8(ascii: "0"), at: 0) }
    for i in stride(from: 0, to: chars.count, by: 2) {
        out.append(UInt8(String(decoding: chars[i..<i + 2], as: UTF8.self), radix: 16)!)
    }
    return out
}

func hexString(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

/// Runs the `openssl` command line in a scratch directory: the independent implementation the
/// verifier is checked against.
final class OpenSSLTool: Sendable {
    let directory: URL

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("pw-sessionauth-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    func path(_ name: String) -> String { directory.appendingPathComponent(name).path }

    @discardableResult
    func run(_ arguments: [String]) throws -> Data {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["openssl"] + arguments
        process.currentDirectoryURL = directory
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let output = out.fileHandleForReading.readDataToEndOfFile()
        let errors = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw OpenSSLFailure(description: "openssl \(arguments.joined(separator: " ")): \(String(decoding: errors, as: UTF8.self))")
        }
        return output
    }

    func read(_ name: String) throws -> [UInt8] { Array(try Data(contentsOf: URL(fileURLWithPath: path(name)))) }
    func write(_ name: String, _ bytes: [UInt8]) throws { try Data(bytes).write(to: URL(fileURLWithPath: path(name))) }

    /// `openssl dgst -sha256 -sign`: PKCS#1 v1.5 for RSA, DER ECDSA-Sig-Value for EC.
    func sign(_ message: String, keyFile: String) throws -> [UInt8] {
        let id = UUID().uuidString
        try write("\(id).in", Array(message.utf8))
        try run(["dgst", "-sha256", "-sign", path(keyFile), "-out", path("\(id).sig"), path("\(id).in")])
        return try read("\(id).sig")
    }

    /// `openssl dgst -sha256 -verify`.
    func verifies(_ message: String, signature: [UInt8], publicKeyFile: String) throws -> Bool {
        let id = UUID().uuidString
        try write("\(id).in", Array(message.utf8))
        try write("\(id).sig", signature)
        do {
            try run(["dgst", "-sha256", "-verify", path(publicKeyFile), "-signature", path("\(id).sig"), path("\(id).in")])
            return true
        } catch {
            return false
        }
    }

    /// `openssl dgst -sha256 -mac HMAC`.
    func hmac(_ message: String, key: [UInt8]) throws -> [UInt8] {
        let id = UUID().uuidString
        try write("\(id).in", Array(message.utf8))
        try run(["dgst", "-sha256", "-mac", "HMAC", "-macopt", "hexkey:\(hexString(key))", "-binary",
                 "-out", path("\(id).mac"), path("\(id).in")])
        return try read("\(id).mac")
    }
}

/// Minimal DER reading for the test: ECDSA-Sig-Value to JOSE r||s, and back.
enum TestDER {
    static func rawSignature(fromDER der: [UInt8]) throws -> [UInt8] {
        var i = 0
        func byte() throws -> UInt8 {
            guard i < der.count else { throw OpenSSLFailure(description: "short DER") }
            defer { i += 1 }
            return der[i]
        }
        func length() throws -> Int {
            let first = try byte()
            if first < 0x80 { return Int(first) }
            var n = 0
            for _ in 0..<(first & 0x7F) { n = n << 8 | Int(try byte()) }
            return n
        }
        func integer() throws -> [UInt8] {
            guard try byte() == 0x02 else { throw OpenSSLFailure(description: "expected INTEGER") }
            let n = try length()
            guard i + n <= der.count else { throw OpenSSLFailure(description: "short INTEGER") }
            var value = Array(der[i..<i + n])
            i += n
            while value.count > 32, value.first == 0 { value.removeFirst() }
            guard value.count <= 32 else { throw OpenSSLFailure(description: "INTEGER too long") }
            return [UInt8](repeating: 0, count: 32 - value.count) + value
        }
        guard try byte() == 0x30 else { throw OpenSSLFailure(description: "expected SEQUENCE") }
        _ = try length()
        return try integer() + integer()
    }

    static func derSignature(fromRaw raw: [UInt8]) -> [UInt8] {
        func integer(_ half: ArraySlice<UInt8>) -> [UInt8] {
            var v = Array(half.drop { $0 == 0 })
            if v.isEmpty { v = [0] } else if v[0] & 0x80 != 0 { v.insert(0, at: 0) }
            return [0x02, UInt8(v.count)] + v
        }
        let body = integer(raw[0..<32]) + integer(raw[32..<64])
        return [0x30, UInt8(body.count)] + body
    }
}

/// Keys made by `openssl genpkey`, their JWKS built from `openssl` output, and signing with the
/// `openssl` command line. Generated once per test process.
struct Fixture: Sendable {
    let tool: OpenSSLTool
    let rsaModulus: [UInt8]
    let rsaExponent: [UInt8]
    let rsaPublicPEM: [UInt8]
    let rsaPublicDER: [UInt8]
    let ecX: [UInt8]
    let ecY: [UInt8]
    let ecPublicPEM: [UInt8]
    let ecPublicDER: [UInt8]
    let jwks: String

    static let shared: Result<Fixture, OpenSSLFailure> = {
        do {
            let fixture = try Fixture()
            return .success(fixture)
        } catch let error as OpenSSLFailure {
            return .failure(error)
        } catch {
            return .failure(OpenSSLFailure(description: "\(error)"))
        }
    }()

    static func get() throws -> Fixture { try shared.get() }

    private init() throws {
        tool = try OpenSSLTool()
        try tool.run(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", tool.path("rsa.pem")])
        try tool.run(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", tool.path("rsa2.pem")])
        try tool.run(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", tool.path("ec.pem")])

        let modulusLine = String(decoding: try tool.run(["rsa", "-in", tool.path("rsa.pem"), "-noout", "-modulus"]), as: UTF8.self)
        guard let eq = modulusLine.firstIndex(of: "=") else { throw OpenSSLFailure(description: "no modulus") }
        rsaModulus = bytes(hex: modulusLine[modulusLine.index(after: eq)...].trimmingCharacters(in: .whitespacesAndNewlines))
        let text = String(decoding: try tool.run(["rsa", "-in", tool.path("rsa.pem"), "-noout", "-text"]), as: UTF8.self)
        // "publicExponent: 65537 (0x10001)"
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("publicExponent:") }),
              let open = line.range(of: "(0x"), let close = line.lastIndex(of: ")") else {
            throw OpenSSLFailure(description: "no public exponent in openssl rsa -text")
        }
        rsaExponent = bytes(hex: String(line[open.upperBound..<close]))

        try tool.run(["pkey", "-in", tool.path("rsa.pem"), "-pubout", "-out", tool.path("rsa.pub.pem")])
        try tool.run(["pkey", "-in", tool.path("rsa.pem"), "-pubout", "-outform", "DER", "-out", tool.path("rsa.pub.der")])
        try tool.run(["pkey", "-in", tool.path("ec.pem"), "-pubout", "-out", tool.path("ec.pub.pem")])
        try tool.run(["pkey", "-in", tool.path("ec.pem"), "-pubout", "-outform", "DER", "-out", tool.path("ec.pub.der")])
        rsaPublicPEM = try tool.read("rsa.pub.pem")
        rsaPublicDER = try tool.read("rsa.pub.der")
        ecPublicPEM = try tool.read("ec.pub.pem")
        ecPublicDER = try tool.read("ec.pub.der")
        // A P-256 SubjectPublicKeyInfo ends with the uncompressed point 04 || x || y.
        let point = Array(ecPublicDER.suffix(65))
        guard point.first == 0x04 else { throw OpenSSLFailure(description: "EC public key is not uncompressed") }
        ecX = Array(point[1..<33])
        ecY = Array(point[33..<65])

        jwks = """
        {"keys": [
          {"kty": "RSA", "kid": "rsa-1", "use": "sig", "alg": "RS256", "n": "\(b64url(rsaModulus))", "e": "\(b64url(rsaExponent))"},
          {"kty": "EC", "kid": "ec-1", "crv": "P-256", "x": "\(b64url(ecX))", "y": "\(b64url(ecY))"},
          {"kty": "oct", "kid": "hmac-1", "k": "c2VjcmV0"}
        ]}
        """
    }

    /// A compact JWS whose header and payload are the given JSON text, signed by `openssl`.
    func token(header: String, payload: String, keyFile: String) throws -> String {
        let input = b64url(header) + "." + b64url(payload)
        var signature = try tool.sign(input, keyFile: keyFile)
        if keyFile.hasPrefix("ec") { signature = try TestDER.rawSignature(fromDER: signature) }
        return input + "." + b64url(signature)
    }

    func hs256Token(header: String = #"{"alg":"HS256","typ":"JWT"}"#, payload: String, secret: [UInt8]) throws -> String {
        let input = b64url(header) + "." + b64url(payload)
        return input + "." + b64url(try tool.hmac(input, key: secret))
    }
}

let testNow = 1_800_000_000.0
let issuer = "https://auth.example.com"
let audience = "shop-app"

/// Claims valid at `testNow`, with `overrides` replacing or (when nil) removing members.
func payload(_ overrides: [String: String?] = [:]) -> String {
    var members: [(String, String)] = [
        ("iss", "\"\(issuer)\""),
        ("aud", "\"\(audience)\""),
        ("sub", "\"user-1\""),
        ("contact_id", "\"contact-42\""),
        ("iat", "\(Int(testNow) - 60)"),
        ("exp", "\(Int(testNow) + 600)"),
    ]
    for (key, value) in overrides {
        members.removeAll { $0.0 == key }
        if let value { members.append((key, value)) }
    }
    return "{" + members.map { "\"\($0.0)\":\($0.1)" }.joined(separator: ",") + "}"
}

func jwtPolicy(_ algorithms: [JWTAlgorithm], keys: SessionPolicy.Keys = .jwksFile("/etc/pushwarden/jwks.json"),
               header: String? = "Authorization", cookie: String? = nil, leeway: Int = 30) -> SessionPolicy {
    SessionPolicy(header: header, cookie: cookie, algorithms: algorithms, keys: keys, issuer: issuer,
                  audience: audience, contactClaim: "contact_id", leewaySeconds: leeway)
}

let hmacRef = SecretRef.env("SESSION_SECRET")
let hmacSecret: [UInt8] = Array("0123456789abcdef0123456789abcdef-session".utf8)

func verifier(_ policy: SessionPolicy, jwks: String? = nil, now: Double = testNow) throws -> SessionVerifier {
    try SessionVerifier(policy: policy, secrets: StaticSecrets([hmacRef: hmacSecret]), clock: FixedClock(time: now),
                        jwksLoader: { _ in Array((jwks ?? "").utf8) })
}

func failureReason(_ result: Result<Session, AuthFailure>) -> String? {
    if case .failure(let failure) = result { return failure.reason }
    return nil
}

func bearer(_ token: String) -> HTTPHeaders { ["Authorization": "Bearer \(token)"] }
