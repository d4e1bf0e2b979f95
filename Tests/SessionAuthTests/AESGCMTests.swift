import PWCore
@testable import PWCrypto
import Testing

/// AES-256-GCM against the GCM specification's AES-256 test cases (McGrew and Viega, "The
/// Galois/Counter Mode of Operation", test cases 13 to 16, as NIST's GCM validation uses them),
/// and the failures that must be failures.
@Suite("PWCrypto AES-256-GCM")
struct AESGCMTests {
    static func bytes(_ hex: String) -> [UInt8] {
        var out: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            out.append(UInt8(hex[index..<next], radix: 16)!)
            index = next
        }
        return out
    }

    struct Vector: Sendable, CustomStringConvertible {
        var name: String
        var key: String
        var nonce: String
        var plaintext: String
        var aad: String
        var ciphertext: String
        var tag: String
        var description: String { name }
    }

    static let k15 = "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308"
    static let p15 = "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255"
    static let c15 = "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662898015ad"

    static let vectors: [Vector] = [
        Vector(name: "TC13 empty", key: String(repeating: "00", count: 32), nonce: String(repeating: "00", count: 12), plaintext: "",
               aad: "", ciphertext: "", tag: "530f8afbc74536b9a963b4f1c4cb738b"),
        Vector(name: "TC14 one block", key: String(repeating: "00", count: 32), nonce: String(repeating: "00", count: 12),
               plaintext: String(repeating: "00", count: 16), aad: "", ciphertext: "cea7403d4d606b6e074ec5d3baf39d18",
               tag: "d0d1c8a799996bf0265b98b5d48ab919"),
        Vector(name: "TC15 four blocks", key: k15, nonce: "cafebabefacedbaddecaf888", plaintext: p15, aad: "", ciphertext: c15,
               tag: "b094dac5d93471bdec1a502270e3cc6c"),
        // A partial last block and associated data that is not a whole block either.
        Vector(name: "TC16 partial block with AAD", key: k15, nonce: "cafebabefacedbaddecaf888", plaintext: String(p15.dropLast(8)),
               aad: "feedfacedeadbeeffeedfacedeadbeefabaddad2", ciphertext: String(c15.dropLast(8)),
               tag: "76fc6ece0f4e1768cddf8853bb2d551b"),
    ]

    @Test(arguments: vectors)
    func knownAnswers(_ v: Vector) throws {
        let key = try AES256GCMKey(Self.bytes(v.key))
        let sealed = AES256GCM.seal(Self.bytes(v.plaintext), key: key, nonce: Self.bytes(v.nonce), authenticating: Self.bytes(v.aad))
        #expect(Hex.encode(sealed.ciphertext) == v.ciphertext)
        #expect(Hex.encode(sealed.tag) == v.tag)
        #expect(AES256GCM.open(sealed, key: key, authenticating: Self.bytes(v.aad)) == Self.bytes(v.plaintext))
        #expect(AES256GCM.Sealed(combined: sealed.combined) == sealed)
    }

    @Test func anyChangeFailsToOpen() throws {
        let key = try AES256GCMKey(SecureRandom.bytes(32))
        let aad = Array("pwe1:0011223344556677".utf8)
        let sealed = AES256GCM.seal(Array("a push token".utf8), key: key, authenticating: aad)
        #expect(AES256GCM.open(sealed, key: key, authenticating: aad) == Array("a push token".utf8))
        let combined = sealed.combined
        // Every single bit of nonce, ciphertext and tag matters.
        for index in combined.indices {
            for bit in 0..<8 {
                var altered = combined
                altered[index] ^= UInt8(1 << bit)
                #expect(AES256GCM.open(try #require(AES256GCM.Sealed(combined: altered)), key: key, authenticating: aad) == nil)
            }
        }
        #expect(AES256GCM.open(sealed, key: key, authenticating: Array("pwe1:0011223344556678".utf8)) == nil)
        #expect(AES256GCM.open(sealed, key: try AES256GCMKey(SecureRandom.bytes(32)), authenticating: aad) == nil)
        var truncated = sealed
        truncated.tag.removeLast()
        #expect(AES256GCM.open(truncated, key: key, authenticating: aad) == nil)
        #expect(AES256GCM.Sealed(combined: Array(combined.prefix(27))) == nil)
    }

    @Test func everySealTakesAFreshNonce() throws {
        let key = try AES256GCMKey(SecureRandom.bytes(32))
        let plaintext = Array("same plaintext".utf8)
        let sealed = (0..<64).map { _ in AES256GCM.seal(plaintext, key: key, authenticating: [UInt8]()) }
        #expect(Set(sealed.map(\.nonce)).count == sealed.count)
        #expect(sealed.allSatisfy { $0.nonce.count == 12 && $0.tag.count == 16 && $0.ciphertext.count == plaintext.count })
        #expect(Set(sealed.map(\.ciphertext)).count == sealed.count)
    }

    @Test func keysAreExactly32Bytes() {
        #expect(throws: CryptoError.self) { try AES256GCMKey(SecureRandom.bytes(16)) }
        #expect(throws: CryptoError.self) { try AES256GCMKey(SecureRandom.bytes(33)) }
        #expect(throws: CryptoError.self) { try AES256GCMKey([]) }
    }
}
