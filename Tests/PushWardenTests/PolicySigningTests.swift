import Foundation
import PWCrypto
@testable import RedisStores
@testable import Registration
import Testing

/// `pushwarden policy sign|verify` and `serve --policy-key` (docs/operations.md), with keys
/// and signatures from the `openssl` command line as the independent implementation.
@Suite(.serialized) struct PolicySigningTests {
    @Test func signVerifyAndServe() throws {
        let s = try PolicyReloadTests.Scratch()
        let openssl = JWKSCommandLineTests.Keys.openssl
        for name in ["a", "b"] {
            _ = try openssl(["genpkey", "-algorithm", "ed25519", "-out", s.path("\(name).key")])
            _ = try openssl(["pkey", "-in", s.path("\(name).key"), "-pubout", "-out", s.path("\(name).pub")])
        }
        try s.write("secret", PolicyReloadTests.secret1)
        let file = s.path("p.yaml")
        try s.write("p.yaml", PolicyReloadTests.policy(apps: ["one"], secretFile: s.path("secret"), serial: 1))
        func verify(_ key: String) throws -> CommandLineTests.Run {
            try CommandLineTests.run(["policy", "verify", "--key", s.path(key), file])
        }

        // Missing.
        var result = try verify("a.pub")
        #expect(result.status == 1)
        #expect(result.stderr.contains("signature \(file).sig is missing"), "\(result.stderr)")

        // Ours, checked by ours and by openssl.
        result = try CommandLineTests.run(["policy", "sign", "--key", s.path("a.key"), file])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: file + ".sig")).count == 64)
        #expect(try verify("a.pub").status == 0)
        _ = try openssl(["pkeyutl", "-verify", "-pubin", "-inkey", s.path("a.pub"), "-rawin", "-in", file, "-sigfile", file + ".sig"])

        // Another key.
        result = try verify("b.pub")
        #expect(result.status == 1)
        #expect(result.stderr.contains("does not match"), "\(result.stderr)")

        // One byte changed.
        var bytes = Array(try Data(contentsOf: URL(fileURLWithPath: file)))
        let original = bytes
        bytes[bytes.count / 2] ^= 0x01
        try Data(bytes).write(to: URL(fileURLWithPath: file))
        #expect(try verify("a.pub").status == 1)
        try Data(original).write(to: URL(fileURLWithPath: file))
        #expect(try verify("a.pub").status == 0)

        // Made by `openssl pkeyutl -sign -rawin`, verified by ours.
        _ = try openssl(["pkeyutl", "-sign", "-inkey", s.path("b.key"), "-rawin", "-in", file, "-out", file + ".sig"])
        #expect(try verify("b.pub").status == 0)
        #expect(try verify("a.pub").status == 1)

        // serve --policy-key: wrong key, missing signature refused at start; the right one starts.
        let start = ["serve", "--policy", file, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"]
        result = try CommandLineTests.run(start + ["--policy-key", s.path("a.pub")])
        #expect(result.status == 1)
        #expect(result.stderr.contains("\(file):1:1: signature \(file).sig does not match"), "\(result.stderr)")
        try FileManager.default.removeItem(atPath: file + ".sig")
        result = try CommandLineTests.run(start, environment: ["PUSHWARDEN_POLICY_KEY": s.path("b.pub")])
        #expect(result.status == 1)
        #expect(result.stderr.contains("is missing"), "\(result.stderr)")
        result = try CommandLineTests.run(start + ["--policy-key", s.path("b.key.missing")])
        #expect(result.status == 1)
        #expect(result.stderr.contains("cannot read the policy key"), "\(result.stderr)")

        #expect(try CommandLineTests.run(["policy", "sign", "--key", s.path("b.key"), file]).status == 0)
        let served = try PolicyReloadTests.Served(["--policy", file], environment: ["PUSHWARDEN_POLICY_KEY": s.path("b.pub")])
        served.stop()
        #expect(served.process.terminationStatus == 0)
    }

    /// `policy sign` signs only what `serve --policy-key` would take: a valid policy with a serial.
    @Test func signRefusesAPolicyWithoutASerial() throws {
        let s = try PolicyReloadTests.Scratch()
        _ = try JWKSCommandLineTests.Keys.openssl(["genpkey", "-algorithm", "ed25519", "-out", s.path("a.key")])
        try s.write("secret", PolicyReloadTests.secret1)
        let file = s.path("p.yaml")
        try s.write("p.yaml", PolicyReloadTests.policy(apps: ["one"], secretFile: s.path("secret")))
        var result = try CommandLineTests.run(["policy", "sign", "--key", s.path("a.key"), file])
        #expect(result.status == 1)
        #expect(result.stderr.contains("\(file):1:1: serial: a signed policy needs a top-level serial"), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: file + ".sig"))

        try s.write("p.yaml", PolicyReloadTests.policy(apps: ["one"], secretFile: s.path("secret"), serial: 7))
        result = try CommandLineTests.run(["policy", "sign", "--key", s.path("a.key"), file])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains(", serial 7)"), "\(result.stdout)")
    }

    @Test func ed25519RoundTrip() throws {
        let key = try Ed25519PrivateKey.generate()
        let message = Array("policy bytes".utf8)
        let signature = try key.sign(message)
        #expect(signature.count == 64)
        #expect(key.publicKey.verify(signature: signature, message: message))
        #expect(!key.publicKey.verify(signature: signature, message: message + [0]))
        let reloaded = try Ed25519PublicKey(pem: key.publicKeyPEM())
        #expect(reloaded.verify(signature: signature, message: message))
        #expect(throws: CryptoError.self) { try Ed25519PublicKey(pem: Array(try PrivateKey.generateP256().publicKey.pem.utf8)) }
    }
}
