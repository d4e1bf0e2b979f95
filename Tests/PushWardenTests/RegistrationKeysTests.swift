import PWCrypto
@testable import PushWarden
@testable import RedisStores
@testable import Registration
import Testing

/// The names a registration's state is kept under (docs/architecture.md, Key layout): pinned against a digest
/// computed here the plain way, so a faster spelling of them cannot move a key to another name or
/// another cluster slot unseen.
@Suite struct RegistrationKeysTests {
    static func digest(_ parts: [String]) -> String {
        SHA256.hexHash(Array(parts.joined(separator: "\u{0}").utf8))
    }

    @Test(arguments: [("shop", "voyado", "tok-1"), ("", "", ""), ("app\u{e9}", "vh", String(repeating: "x", count: 4000))])
    func entryLockAndIdentityShareOneTag(app: String, upstream: String, token: String) {
        let keys = RegistrationKeys(app: app, upstream: upstream, pushToken: token)
        let tag = "pw:v2:{" + Self.digest([app, upstream, token]) + "}:"
        #expect(keys.entry == tag + "reg")
        #expect(keys.lock == tag + "lock")
        #expect(keys.identity == tag + "id")
    }

    @Test func contactAndTokenKeysAreNamedByTheirDigest() {
        #expect(ContactKeys(app: "shop", contactID: "alice").digest == Self.digest(["shop", "alice"]))
        #expect(TokenKeys(app: "shop", pushToken: "tok").digest == Self.digest(["shop", "tok"]))
        #expect(ContactKeys(app: "shop", contactID: "alice").inventory == "pw:v2:{c:" + Self.digest(["shop", "alice"]) + "}:inv")
    }

    @Test func aShortHexHashIsThePrefixOfTheWholeOne() {
        let material = Array("fingerprint material".utf8)
        #expect(SHA256.hexHash(material, hexDigits: 32) == String(SHA256.hexHash(material).prefix(32)))
        #expect(SHA256.hexHash(material, hexDigits: 0) == "")
    }
}
