import Foundation
import PWCore
import PWCrypto
@testable import SessionAuth
import Testing

@Suite("PWCrypto primitives")
struct CryptoPrimitiveTests {
    @Test func sha256KnownAnswers() {
        #expect(SHA256.hexHash(Array("abc".utf8)) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(SHA256.hexHash([UInt8]()) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        // A non-contiguous collection takes the copying path.
        #expect(SHA256.hash("abc".utf8.lazy.map { $0 }) == SHA256.hash(Array("abc".utf8)))
    }

    /// RFC 4231 test cases 1, 2 and 6 (a key longer than the block size).
    @Test func hmacRFC4231() {
        #expect(Hex.encode(HMACSHA256.mac(key: [UInt8](repeating: 0x0B, count: 20), message: Array("Hi There".utf8)))
            == "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7")
        #expect(Hex.encode(HMACSHA256.mac(key: Array("Jefe".utf8), message: "what do ya want for nothing?".utf8))
            == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        #expect(Hex.encode(HMACSHA256.mac(key: [UInt8](repeating: 0xAA, count: 131),
                                   message: Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8)))
            == "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54")
    }

    @Test func hmacMatchesOpenSSLCommandLine() throws {
        let tool = try Fixture.get().tool
        for key in [[UInt8](repeating: 7, count: 32), [UInt8](repeating: 9, count: 64), [UInt8](repeating: 1, count: 100)] {
            #expect(HMACSHA256.mac(key: key, message: "header.payload".utf8) == (try tool.hmac("header.payload", key: key)))
        }
    }

    @Test func hexEncoding() {
        #expect(Hex.encode([0x00, 0x0F, 0xA5, 0xFF]) == "000fa5ff")
        #expect(Hex.encode([UInt8]()) == "")
    }

    @Test func constantTimeComparison() {
        #expect(constantTimeEquals([1, 2, 3], [1, 2, 3]))
        #expect(!constantTimeEquals([1, 2, 3], [1, 2, 4]))
        #expect(!constantTimeEquals([1, 2, 3], [1, 2]))
        #expect(constantTimeEquals([], []))
    }

    @Test func secureRandom() {
        let a = SecureRandom.bytes(32)
        let b = SecureRandom.bytes(32)
        #expect(a.count == 32)
        #expect(a != b)
        #expect(SecureRandom.bytes(0).isEmpty)
    }
}

@Suite("PWCrypto keys")
struct KeyTests {
    @Test func publicKeysFromOpenSSLOutput() throws {
        let f = try Fixture.get()
        let rsaFromPEM = try PublicKey(pem: String(decoding: f.rsaPublicPEM, as: UTF8.self))
        #expect(rsaFromPEM.kind == .rsa)
        #expect(rsaFromPEM.bits == 2048)
        #expect(rsaFromPEM.components == .rsa(modulus: f.rsaModulus, exponent: f.rsaExponent))
        #expect(rsaFromPEM.subjectPublicKeyInfo == f.rsaPublicDER)

        let rsaFromParts = try PublicKey(rsaModulus: f.rsaModulus, exponent: f.rsaExponent)
        #expect(rsaFromParts.subjectPublicKeyInfo == f.rsaPublicDER)

        let ec = try PublicKey(p256X: f.ecX, y: f.ecY)
        #expect(ec.kind == .ecP256)
        #expect(ec.subjectPublicKeyInfo == f.ecPublicDER)
        #expect(ec.components == .ecP256(x: f.ecX, y: f.ecY))
        #expect(try PublicKey(pem: String(decoding: f.ecPublicPEM, as: UTF8.self)).components == ec.components)
        #expect(try PublicKey(subjectPublicKeyInfo: f.ecPublicDER).kind == .ecP256)
    }

    @Test func jwkRoundTrip() throws {
        let f = try Fixture.get()
        let jwk = JSONObject([JSONMember("kty", "RSA"), JSONMember("n", .string(b64url(f.rsaModulus))),
                              JSONMember("e", .string(b64url(f.rsaExponent)))])
        let key = try PublicKey(jwk: jwk)
        #expect(key.subjectPublicKeyInfo == f.rsaPublicDER)
        let again = try PublicKey(jwk: key.jwk(kid: "k"))
        #expect(again.components == key.components)
        #expect(key.jwk(kid: "k")["kid"] == .string("k"))

        let ecJWK = JSONObject([JSONMember("kty", "EC"), JSONMember("crv", "P-256"),
                                JSONMember("x", .string(b64url(f.ecX))), JSONMember("y", .string(b64url(f.ecY)))])
        #expect(try PublicKey(jwk: ecJWK).subjectPublicKeyInfo == f.ecPublicDER)
    }

    @Test func weakAndMalformedKeysAreRefused() throws {
        let f = try Fixture.get()
        try f.tool.run(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024", "-out", f.tool.path("weak.pem")])
        try f.tool.run(["pkey", "-in", f.tool.path("weak.pem"), "-pubout", "-out", f.tool.path("weak.pub.pem")])
        let weakPEM = String(decoding: try f.tool.read("weak.pub.pem"), as: UTF8.self)
        let error = #expect(throws: CryptoError.self) { try PublicKey(pem: weakPEM) }
        #expect(error?.message.contains("1024 bits is too small") == true)
        #expect(throws: CryptoError.self) { try PrivateKey(pem: String(decoding: try f.tool.read("weak.pem"), as: UTF8.self)) }

        // A point off the curve: flip one bit of y.
        var y = f.ecY
        y[31] ^= 1
        #expect(throws: CryptoError.self) { try PublicKey(p256X: f.ecX, y: y) }
        #expect(throws: CryptoError.self) { try PublicKey(p256X: Array(f.ecX.dropFirst()), y: f.ecY) }
        // P-384 is not P-256.
        try f.tool.run(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384", "-out", f.tool.path("p384.pem")])
        try f.tool.run(["pkey", "-in", f.tool.path("p384.pem"), "-pubout", "-out", f.tool.path("p384.pub.pem")])
        #expect(throws: CryptoError.self) { try PublicKey(pem: String(decoding: try f.tool.read("p384.pub.pem"), as: UTF8.self)) }

        #expect(throws: CryptoError.self) { try PublicKey(pem: "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n") }
        #expect(throws: CryptoError.self) { try PublicKey(subjectPublicKeyInfo: f.rsaPublicDER + [0]) }
        #expect(throws: CryptoError.self) {
            try PublicKey(jwk: JSONObject([JSONMember("kty", "RSA"), JSONMember("n", "AQAB=="), JSONMember("e", "AQAB")]))
        }
        #expect(throws: CryptoError.self) {
            try PublicKey(jwk: JSONObject([JSONMember("kty", "EC"), JSONMember("crv", "P-384"),
                                           JSONMember("x", .string(b64url(f.ecX))), JSONMember("y", .string(b64url(f.ecY)))]))
        }
    }

    /// Signatures made here verify with the `openssl` command line, and vice versa.
    @Test func signaturesInteroperateWithOpenSSL() throws {
        let f = try Fixture.get()
        let message = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0"

        let ec = try PrivateKey(pem: String(decoding: try f.tool.read("ec.pem"), as: UTF8.self))
        #expect(ec.publicKey.components == .ecP256(x: f.ecX, y: f.ecY))
        let raw = try ec.signES256(message: message.utf8)
        #expect(raw.count == 64)
        #expect(try f.tool.verifies(message, signature: TestDER.derSignature(fromRaw: raw), publicKeyFile: "ec.pub.pem"))
        let theirs = try f.tool.sign(message, keyFile: "ec.pem")
        let pub = ec.publicKey
        #expect(pub.verifyES256(signature: try TestDER.rawSignature(fromDER: theirs), message: message.utf8))
        // ES256 takes only the raw 64-byte form: DER is refused.
        #expect(!pub.verifyES256(signature: theirs, message: message.utf8))
        #expect(!pub.verifyES256(signature: raw, message: (message + "x").utf8))
        #expect(!pub.verifyRS256(signature: raw, message: message.utf8))
        #expect(!pub.verifyES256(signature: [UInt8](repeating: 0, count: 64), message: message.utf8))

        let rsa = try PrivateKey(pem: String(decoding: try f.tool.read("rsa.pem"), as: UTF8.self))
        let rsaSig = try rsa.signRS256(message: message.utf8)
        #expect(rsaSig == (try f.tool.sign(message, keyFile: "rsa.pem")))  // PKCS#1 v1.5 is deterministic
        #expect(rsa.publicKey.verifyRS256(signature: rsaSig, message: message.utf8))
        #expect(try f.tool.verifies(message, signature: rsaSig, publicKeyFile: "rsa.pub.pem"))
        #expect(!rsa.publicKey.verifyRS256(signature: rsaSig, message: (message + "x").utf8))
        #expect(!rsa.publicKey.verifyES256(signature: Array(rsaSig.prefix(64)), message: message.utf8))
        #expect(throws: CryptoError.self) { try rsa.signES256(message: message.utf8) }
        #expect(rsa.publicKeyPEM == String(decoding: f.rsaPublicPEM, as: UTF8.self))
    }

    @Test func generatedKeysWork() throws {
        let ec = try PrivateKey.generateP256()
        #expect(ec.kind == .ecP256)
        let sig = try ec.signES256(message: "m".utf8)
        #expect(ec.publicKey.verifyES256(signature: sig, message: "m".utf8))
        #expect(try PrivateKey(pem: ec.pem).publicKey.components == ec.publicKey.components)
        #expect(try PublicKey(pem: ec.publicKeyPEM).components == ec.publicKey.components)

        let rsa = try PrivateKey.generateRSA(bits: 2048)
        #expect(rsa.publicKey.bits == 2048)
        #expect(rsa.publicKey.verifyRS256(signature: try rsa.signRS256(message: "m".utf8), message: "m".utf8))
        #expect(throws: CryptoError.self) { try PrivateKey.generateRSA(bits: 1024) }
    }

    /// A key keeps its verify contexts between calls: a refusal must not spoil the next answer,
    /// and threads verifying at once must not share one (each answer is still the right one).
    @Test func aKeyAnswersRightAfterRefusalsAndFromManyThreadsAtOnce() async throws {
        let ec = try PrivateKey.generateP256()
        let rsa = try PrivateKey.generateRSA(bits: 2048)
        let messages = (0..<16).map { Array("signing input \($0)".utf8) }
        let ecSignatures = try messages.map { try ec.signES256(message: $0) }
        let rsaSignatures = try messages.map { try rsa.signRS256(message: $0) }
        let wrong = await withTaskGroup(of: Int.self) { group in
            for worker in 0..<8 {
                group.addTask {
                    var wrong = 0
                    for round in 0..<200 {
                        let i = (worker + round) % messages.count
                        let j = (i + 1) % messages.count
                        // The right message, then another one under the same signature, in turn.
                        if !ec.publicKey.verifyES256(signature: ecSignatures[i], message: messages[i]) { wrong += 1 }
                        if ec.publicKey.verifyES256(signature: ecSignatures[i], message: messages[j]) { wrong += 1 }
                        if round % 10 == 0 {
                            if !rsa.publicKey.verifyRS256(signature: rsaSignatures[i], message: messages[i]) { wrong += 1 }
                            if rsa.publicKey.verifyRS256(signature: rsaSignatures[j], message: messages[i]) { wrong += 1 }
                        }
                    }
                    return wrong
                }
            }
            return await group.reduce(0, +)
        }
        #expect(wrong == 0)
    }
}
