/// The few DER (X.690) shapes PWCrypto builds and reads: SubjectPublicKeyInfo for JWK keys and
/// the ECDSA-Sig-Value that OpenSSL expects for ES256. Pure Swift, so no variadic or
/// macro-only C API is needed.
enum DER {
    static func length(_ n: Int, into out: inout [UInt8]) {
        if n < 0x80 {
            out.append(UInt8(n))
            return
        }
        var bytes: [UInt8] = []
        var v = n
        while v > 0 {
            bytes.insert(UInt8(v & 0xFF), at: 0)
            v >>= 8
        }
        out.append(0x80 | UInt8(bytes.count))
        out.append(contentsOf: bytes)
    }

    static func tlv(_ tag: UInt8, _ content: [UInt8]) -> [UInt8] {
        var out: [UInt8] = [tag]
        length(content.count, into: &out)
        out.append(contentsOf: content)
        return out
    }

    static func sequence(_ parts: [UInt8]...) -> [UInt8] { tlv(0x30, parts.flatMap { $0 }) }

    /// A non-negative INTEGER from unsigned big-endian magnitude bytes (leading zeros dropped,
    /// a zero byte prepended when the high bit is set).
    static func unsignedInteger(_ magnitude: some Collection<UInt8>) -> [UInt8] {
        var bytes = Array(magnitude.drop { $0 == 0 })
        if bytes.isEmpty { bytes = [0] } else if bytes[0] & 0x80 != 0 { bytes.insert(0, at: 0) }
        return tlv(0x02, bytes)
    }

    static func bitString(_ content: [UInt8]) -> [UInt8] { tlv(0x03, [0] + content) }

    static let null: [UInt8] = [0x05, 0x00]
    /// 1.2.840.113549.1.1.1 rsaEncryption
    static let rsaEncryption: [UInt8] = [0x06, 0x09, 0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x01]
    /// 1.2.840.10045.2.1 id-ecPublicKey
    static let ecPublicKey: [UInt8] = [0x06, 0x07, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01]
    /// 1.2.840.10045.3.1.7 prime256v1 (P-256)
    static let prime256v1: [UInt8] = [0x06, 0x08, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01, 0x07]

    static func rsaSubjectPublicKeyInfo(modulus: [UInt8], exponent: [UInt8]) -> [UInt8] {
        sequence(
            sequence(rsaEncryption, null),
            bitString(sequence(unsignedInteger(modulus), unsignedInteger(exponent)))
        )
    }

    static func p256SubjectPublicKeyInfo(x: [UInt8], y: [UInt8]) -> [UInt8] {
        sequence(sequence(ecPublicKey, prime256v1), bitString([0x04] + x + y))
    }

    /// ECDSA-Sig-Value ::= SEQUENCE { r INTEGER, s INTEGER } from JOSE's raw r||s halves.
    static func ecdsaSignature(r: some Collection<UInt8>, s: some Collection<UInt8>) -> [UInt8] {
        sequence(unsignedInteger(r), unsignedInteger(s))
    }
}
