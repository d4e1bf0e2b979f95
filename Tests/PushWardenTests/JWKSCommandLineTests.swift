import Foundation
import PWCore
import PWCrypto
@testable import RedisStores
@testable import Registration
import SessionAuth
import Testing

/// `policy check` and `serve` judge a policy's `jwks_file` by the same rules: what one refuses the
/// other refuses, and keys that are skipped are named by both (a warning, not an error).
@Suite(.serialized) struct JWKSCommandLineTests {
    /// A scratch directory with keys made by the `openssl` command line and by PWCrypto.
    final class Keys: Sendable {
        let directory: URL
        let rsa: JSONObject       // RS256, 2048 bits (PWCrypto)
        let ec: JSONObject        // ES256, P-256 (PWCrypto)
        let rsa512Modulus: String // base64url, from `openssl genpkey` 512 bits
        let p384: (x: String, y: String)
        let secp256k1: (x: String, y: String)
        let ed25519: String

        init() throws {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pw-jwks-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            self.directory = directory
            func path(_ name: String) -> String { directory.appendingPathComponent(name).path }
            rsa = try PrivateKey.generateRSA().publicKeyJWK()
            ec = try PrivateKey.generateP256().publicKeyJWK()

            try Self.openssl(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:512", "-out", path("rsa512.pem")])
            let modulusLine = String(decoding: try Self.openssl(["rsa", "-in", path("rsa512.pem"), "-noout", "-modulus"]), as: UTF8.self)
            let hex = modulusLine.split(separator: "=").last.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) } ?? ""
            rsa512Modulus = Base64URL.encode(Self.bytes(hex: hex))

            func publicPoint(_ name: String, _ generate: [String], coordinate: Int) throws -> [UInt8] {
                try Self.openssl(["genpkey"] + generate + ["-out", path("\(name).pem")])
                try Self.openssl(["pkey", "-in", path("\(name).pem"), "-pubout", "-outform", "DER", "-out", path("\(name).der")])
                return Array(try Data(contentsOf: URL(fileURLWithPath: path("\(name).der"))).suffix(coordinate))
            }
            let p384Point = try publicPoint("p384", ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384"], coordinate: 96)
            p384 = (Base64URL.encode(p384Point.prefix(48)), Base64URL.encode(p384Point.suffix(48)))
            let k1Point = try publicPoint("k1", ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:secp256k1"], coordinate: 64)
            secp256k1 = (Base64URL.encode(k1Point.prefix(32)), Base64URL.encode(k1Point.suffix(32)))
            ed25519 = Base64URL.encode(try publicPoint("ed", ["-algorithm", "ED25519"], coordinate: 32))
        }

        func path(_ name: String) -> String { directory.appendingPathComponent(name).path }

        @discardableResult
        static func openssl(_ arguments: [String]) throws -> Data {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = ["openssl"] + arguments
            let out = Pipe()
            process.standardOutput = out
            process.standardError = FileHandle.nullDevice
            try process.run()
            let data = out.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            guard process.terminationStatus == 0 else { throw CocoaError(.executableLoad) }
            return data
        }

        static func bytes(hex: String) -> [UInt8] {
            var out: [UInt8] = []
            var chars = Array(hex.utf8)
            if chars.count % 2 == 1 { chars.insert(UInt8(ascii: "0"), at: 0) }
            for i in stride(from: 0, to: chars.count, by: 2) {
                out.append(UInt8(String(decoding: chars[i..<i + 2], as: UTF8.self), radix: 16)!)
            }
            return out
        }

        /// A policy (line 7, column 18 is the jwks_file value) for a JWKS file holding `keys`.
        func policy(_ name: String, keys: [JSONObject]?, raw: String? = nil, algorithms: String = "[RS256, ES256]") throws -> String {
            let jwks = path("\(name).json")
            if let raw {
                try raw.write(toFile: jwks, atomically: true, encoding: .utf8)
            } else if let keys {
                let document = JSONValue.object(JSONObject([JSONMember("keys", .array(keys.map(JSONValue.object)))]))
                try document.encodedString().write(toFile: jwks, atomically: true, encoding: .utf8)
            }
            let yaml = path("\(name).yaml")
            try """
            version: 1
            apps:
              shop:
                session:
                  type: jwt
                  algorithms: \(algorithms)
                  jwks_file: \(jwks)
                client:
                  platforms: [ios]
                upstreams:
                  - name: up
                    provider: dry_run

            """.write(toFile: yaml, atomically: true, encoding: .utf8)
            return yaml
        }

        func with(_ key: JSONObject, _ changes: [(String, JSONValue?)]) -> JSONObject {
            var key = key
            for (name, value) in changes { key[name] = value }
            return key
        }
    }

    /// `serve` on `policy`: its exit status and stderr once it exits, or once it has logged that
    /// it listens (then it is stopped with SIGINT). Never waits more than 20 seconds.
    static func serve(_ policy: String) throws -> CommandLineTests.Run {
        let process = Process()
        process.executableURL = CommandLineTests.binary
        process.arguments = ["serve", "--policy", policy, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"]
        let err = Pipe()
        process.standardError = err
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        var text = ""
        let deadline = Date().addingTimeInterval(20)
        while !text.contains("pushwarden listening"), Date() < deadline {
            let chunk = err.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            text += String(decoding: chunk, as: UTF8.self)
        }
        CommandLineTests.stop(process)
        text += String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        return CommandLineTests.Run(status: process.terminationStatus, stdout: "", stderr: text)
    }

    @Test func whatServeRefusesPolicyCheckRefuses() throws {
        let k = try Keys()
        defer { try? FileManager.default.removeItem(at: k.directory) }
        let y = try #require(k.ec["y"]?.stringValue)
        var offCurveY = try #require(Base64URL.decode(y))
        offCurveY[0] ^= 0x40
        let cases: [(name: String, policy: String, message: String)] = [
            ("512-bit RSA", try k.policy("rsa512", keys: [k.ec, k.with(k.rsa, [("kid", "weak"), ("n", .string(k.rsa512Modulus))])]),
             #"keys[1] (kid "weak"): RSA modulus of 512 bits is too small (minimum 2048)"#),
            ("off-curve EC point", try k.policy("offcurve", keys: [k.with(k.ec, [("kid", "bent"), ("y", .string(Base64URL.encode(offCurveY)))])]),
             #"keys[0] (kid "bent"): EC point is not a valid P-256 public key"#),
            ("duplicate kid", try k.policy("dupkid", keys: [k.with(k.rsa, [("kid", "a")]), k.with(k.ec, [("kid", "a")])]),
             #"keys[1] (kid "a"): duplicate kid"#),
            ("RSA exponent 1", try k.policy("e1", keys: [k.ec, k.with(k.rsa, [("kid", "one"), ("e", "AQ")])]),
             #"keys[1] (kid "one"): RSA public exponent is not a small odd number above 1"#),
            ("RSA exponent 1 with leading zeros", try k.policy("e001", keys: [k.ec, k.with(k.rsa, [("kid", "one"), ("e", "AAAB")])]),
             #"keys[1] (kid "one"): RSA public exponent is not a small odd number above 1"#),
            ("even RSA exponent", try k.policy("e2", keys: [k.ec, k.with(k.rsa, [("kid", "two"), ("e", "Ag")])]),
             #"keys[1] (kid "two"): RSA public exponent is not a small odd number above 1"#),
            ("padded member", try k.policy("padded", keys: [k.with(k.ec, [("kid", "p"), ("x", .string((k.ec["x"]?.stringValue ?? "") + "="))])]),
             #"keys[0] (kid "p"): JWK member x is not unpadded base64url"#),
            ("only skipped keys", try k.policy("skipped", keys: [k.with(k.ec, [("kid", "enc"), ("use", "enc")])]),
             "no key usable with RS256, ES256"),
            ("only RSA keys for ES256", try k.policy("family", keys: [k.rsa], algorithms: "[ES256]"), "no key usable with ES256"),
            ("kid not a string", try k.policy("kidtype", keys: [k.with(k.ec, [("kid", 7)])]), "keys[0]: kid is a number, not a string"),
            ("not JSON", try k.policy("notjson", keys: nil, raw: "{\"keys\": ["), "not JSON"),
            ("no keys array", try k.policy("nokeys", keys: nil, raw: #"{"key": []}"#), #"expected an object with a "keys" array"#),
            ("missing file", try k.policy("missing", keys: nil), "cannot be read"),
        ]
        for c in cases {
            let check = try CommandLineTests.run(["policy", "check", c.policy])
            #expect(check.status == 1, "\(c.name): \(check.stdout)")
            let expected = "\(c.policy):7:18: apps.shop.session.jwks_file: "
            let line = check.stdout.split(separator: "\n").first { $0.hasPrefix(expected) }
            #expect(line?.contains(c.message) == true, "\(c.name): \(check.stdout)")
            #expect(!check.stdout.contains("\(c.policy): ok"), "\(c.name): \(check.stdout)")

            let served = try Self.serve(c.policy)
            #expect(served.status == 1, "\(c.name): serve exited \(served.status): \(served.stderr)")
            #expect(served.stderr.contains(c.message), "\(c.name): \(served.stderr)")
            #expect(!served.stderr.contains("pushwarden listening"), "\(c.name)")
        }
    }

    @Test func skippedKeysAreNamedByBothAsWarnings() throws {
        let k = try Keys()
        defer { try? FileManager.default.removeItem(at: k.directory) }
        let skipped: [(kid: String, key: JSONObject, reason: String)] = [
            ("p384", JSONObject([JSONMember("kty", "EC"), JSONMember("crv", "P-384"), JSONMember("x", .string(k.p384.x)),
                                 JSONMember("y", .string(k.p384.y))]), "EC curve P-384 is not P-256"),
            ("k1", JSONObject([JSONMember("kty", "EC"), JSONMember("crv", "secp256k1"), JSONMember("x", .string(k.secp256k1.x)),
                               JSONMember("y", .string(k.secp256k1.y))]), "EC curve secp256k1 is not P-256"),
            ("ed", JSONObject([JSONMember("kty", "OKP"), JSONMember("crv", "Ed25519"), JSONMember("x", .string(k.ed25519))]),
             "kty OKP is not used"),
            ("hmac", JSONObject([JSONMember("kty", "oct"), JSONMember("k", "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0")]), "kty oct is not used"),
            ("private", k.with(k.ec, [("d", "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0MTI")]), "holds private key material (d)"),
        ]
        let keys = [k.with(k.rsa, [("kid", "good")])] + skipped.map { k.with($0.key, [("kid", .string($0.kid))]) }
        let policy = try k.policy("mixed", keys: keys)

        let check = try CommandLineTests.run(["policy", "check", policy])
        #expect(check.status == 0, "\(check.stdout)\(check.stderr)")
        #expect(check.stdout.contains("\(policy): ok"), "\(check.stdout)")
        let warnings = check.stdout.split(separator: "\n").filter { $0.hasPrefix("\(policy):7:18: apps.shop.session.jwks_file: warning: ") }
        #expect(warnings.count == skipped.count, "\(check.stdout)")
        for (index, s) in skipped.enumerated() {
            let name = #"keys[\#(index + 1)] (kid "\#(s.kid)")"#
            #expect(warnings.contains { $0.contains(name) && $0.contains("skipped: \(s.reason)") }, "\(s.kid): \(check.stdout)")
        }

        let served = try Self.serve(policy)
        #expect(served.status == 0, "\(served.stderr)")
        let lines = served.stderr.split(separator: "\n").compactMap { (try? JSONValue.parse(String($0)))?.objectValue }
            .filter { $0["msg"]?.stringValue == "session key skipped" || $0["message"]?.stringValue == "session key skipped" }
        #expect(lines.count == skipped.count, "\(served.stderr)")
        for s in skipped {
            #expect(lines.contains { $0["kid"]?.stringValue == s.kid && $0["reason"]?.stringValue?.hasPrefix(s.reason) == true && $0["app"]?.stringValue == "shop" },
                    "\(s.kid): \(served.stderr)")
        }
    }
}
