import Foundation
import Testing
@testable import PWPolicy

/// The top-level `store:` block: its shape at load, and its key values (32 bytes in base64) where
/// `serve` and `policy check` read them.
@Suite struct StorePolicyTests {
    /// `minimalPolicy` (12 lines) with `block` from line 13 on.
    static func policy(_ block: String) -> String { minimalPolicy + block }

    /// 32 bytes in standard base64, as `openssl rand -base64 32` prints them (with its newline).
    static func base64Key(_ byte: UInt8 = 7, count: Int = 32) -> [UInt8] {
        Array((Data(repeating: byte, count: count).base64EncodedString() + "\n").utf8)
    }

    @Test func aStoreBlockLoadsWithItsReferences() throws {
        let text = Self.policy("""
            store:
              encryption_key: {env: PW_STORE_KEY}
              previous_encryption_keys: [{file: /run/secrets/old-key}, {env: PW_OLDER_KEY}]

            """)
        let policy = try PolicyLoader.load(text: text, path: "t.yaml").get()
        #expect(policy.store == StorePolicy(encryptionKey: .env("PW_STORE_KEY"),
                                            previousEncryptionKeys: [.file("/run/secrets/old-key"), .env("PW_OLDER_KEY")]))
        let bare = try PolicyLoader.load(text: Self.policy("store: {encryption_key: {env: K}}\n"), path: "t.yaml").get()
        #expect(bare.store == StorePolicy(encryptionKey: .env("K")))
        #expect(try PolicyLoader.load(text: minimalPolicy, path: "t.yaml").get().store == nil)
    }

    @Test(arguments: [
        Fixture(name: "a literal key", yaml: policy("store:\n  encryption_key: c2VjcmV0\n"), expected: [
            "t.yaml:14:19: store.encryption_key: a secret must never be written into the policy file; use {env: NAME} or {file: /absolute/path}",
        ]),
        Fixture(name: "no encryption_key", yaml: policy("store:\n  previous_encryption_keys: [{env: OLD}]\n"), expected: [
            "t.yaml:14:3: store: missing required key 'encryption_key'",
        ]),
        Fixture(name: "an unknown key", yaml: policy("store:\n  encryption_key: {env: K}\n  cipher: aes\n"), expected: [
            "t.yaml:15:3: store: unknown key 'cipher'; allowed keys: encryption_key, previous_encryption_keys, require_sealed, digest_key",
        ]),
        Fixture(name: "the current key again", yaml: policy("store:\n  encryption_key: {env: K}\n  previous_encryption_keys: [{env: K}]\n"),
                expected: ["t.yaml:15:30: store.previous_encryption_keys[0]: env:K is the encryption_key itself; list only keys it replaced"]),
        Fixture(name: "a previous key twice",
                yaml: policy("store:\n  encryption_key: {env: K}\n  previous_encryption_keys: [{env: A}, {env: A}]\n"),
                expected: ["t.yaml:15:40: store.previous_encryption_keys[1]: env:A is listed twice"]),
        Fixture(name: "previous keys not a list", yaml: policy("store:\n  encryption_key: {env: K}\n  previous_encryption_keys: {env: A}\n"),
                expected: ["t.yaml:15:29: store.previous_encryption_keys: expected a list, found a mapping"]),
        Fixture(name: "store not a mapping", yaml: policy("store: on\n"), expected: [
            "t.yaml:13:8: store: expected a mapping, found a string",
        ]),
    ])
    func aBadStoreBlockIsRefusedAtLoad(_ fixture: Fixture) {
        #expect(loadDiagnostics(fixture.yaml) == fixture.expected, "\(fixture.name)")
    }

    static let twoKeys = policy("store:\n  encryption_key: {env: K}\n  previous_encryption_keys: [{file: /keys/old}]\n")

    @Test func keysOf32BytesInBase64Resolve() throws {
        let policy = try PolicyLoader.load(text: Self.twoKeys, path: "t.yaml").get()
        let store = try #require(policy.store)
        let secrets = StaticSecrets([.env("K"): Self.base64Key(7), .file("/keys/old"): Self.base64Key(9)])
        let keys = try StoreKeys.resolve(store, in: policy, secrets: secrets).get()
        #expect(keys.current == [UInt8](repeating: 7, count: 32))
        #expect(keys.previous == [[UInt8](repeating: 9, count: 32)])
        #expect(!keys.description.contains("7"))  // never the bytes
        #expect(StoreKeys.diagnostics(for: policy, secrets: secrets).map(\.message) == [StoreKeys.missingDigestKey])
    }

    /// Every value `openssl rand -base64 32` would not print is refused, at the reference's place,
    /// without the value.
    @Test(arguments: [
        ("16 bytes", Array(Data(repeating: 1, count: 16).base64EncodedString().utf8), "the value decodes to 16 bytes"),
        ("33 bytes", Array(Data(repeating: 1, count: 33).base64EncodedString().utf8), "the value decodes to 33 bytes"),
        ("hex", Array(String(repeating: "ab", count: 32).utf8), "the value decodes to 48 bytes"),
        ("not base64", Array("this is not base64 at all!!".utf8), "the value is not base64"),
        ("base64url", Array("-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_w=".utf8), "the value is not standard base64"),
        ("a raw 32-byte key", [UInt8](repeating: 0x41, count: 32), "the value decodes to 24 bytes"),
    ])
    func aKeyThatIsNot32BytesOfBase64IsRefused(_ name: String, _ value: [UInt8], _ reason: String) throws {
        let policy = try PolicyLoader.load(text: Self.twoKeys, path: "t.yaml").get()
        let secrets = StaticSecrets([.env("K"): value, .file("/keys/old"): Self.base64Key(9)])
        let expected = "t.yaml:14:19: store.encryption_key: secret env:K: must be 32 bytes in base64, as `openssl rand -base64 32` prints; "
            + reason
        switch StoreKeys.resolve(try #require(policy.store), in: policy, secrets: secrets) {
        case .success: Issue.record("\(name): resolved")
        case .failure(let diagnostics): #expect(diagnostics.diagnostics.map(\.description) == [expected], "\(name)")
        }
        // `policy check` reports it as the same error.
        #expect(StoreKeys.diagnostics(for: policy, secrets: secrets).map(\.description) == [expected], "\(name)")
    }

    @Test func everyProblemIsReportedAtOnce() throws {
        let policy = try PolicyLoader.load(text: Self.twoKeys, path: "t.yaml").get()
        let short = Array(Data(repeating: 1, count: 31).base64EncodedString().utf8)
        let diagnostics = StoreKeys.diagnostics(for: policy, secrets: StaticSecrets([.env("K"): short]))
        #expect(diagnostics.map(\.description) == [
            "t.yaml:14:19: store.encryption_key: secret env:K: must be 32 bytes in base64, as `openssl rand -base64 32` prints; the value decodes to 31 bytes",
            "t.yaml:15:30: store.previous_encryption_keys[0]: warning: secret file:/keys/old: not provided; it must hold the store key",
        ])
    }

    /// `serve` cannot start without the key; `policy check`, which seldom runs where the secrets
    /// are, warns.
    @Test func anUnreadableKeyIsAnErrorForServeAndAWarningForCheck() throws {
        let policy = try PolicyLoader.load(text: Self.twoKeys, path: "t.yaml").get()
        let secrets = StaticSecrets([.file("/keys/old"): Self.base64Key(9)])
        switch StoreKeys.resolve(try #require(policy.store), in: policy, secrets: secrets) {
        case .success: Issue.record("resolved without the key")
        case .failure(let diagnostics):
            #expect(diagnostics.diagnostics.map(\.description) == ["t.yaml:14:19: store.encryption_key: secret env:K: not provided; it must hold the store key"])
        }
        let check = StoreKeys.diagnostics(for: policy, secrets: secrets)
        #expect(check.map(\.severity) == [.warning, .warning])
    }

    @Test func oneKeyUnderTwoReferencesIsRefused() throws {
        let policy = try PolicyLoader.load(text: Self.twoKeys, path: "t.yaml").get()
        let secrets = StaticSecrets([.env("K"): Self.base64Key(7), .file("/keys/old"): Self.base64Key(7)])
        #expect(StoreKeys.diagnostics(for: policy, secrets: secrets).map(\.description) == [
            "t.yaml:15:30: store.previous_encryption_keys[0]: secret file:/keys/old holds the same key as store.encryption_key; list each key once",
        ])
    }

    @Test func explainSaysWhetherTokensAreEncryptedByReferenceOnly() throws {
        let with = PolicyExplainer.explain(try PolicyLoader.load(text: Self.twoKeys, path: "t.yaml").get())
        #expect(with.contains("Store (every app): push tokens and Web Push secrets stored as values (identities, outbox entries, inventory) "
                              + "are encrypted at rest (AES-256-GCM) with the key from env:K (store.encryption_key); "
                              + "1 previous key(s) still open values sealed before a rotation: file:/keys/old"), "\(with)")
        let without = PolicyExplainer.explain(try PolicyLoader.load(text: minimalPolicy, path: "t.yaml").get())
        #expect(without.contains("are NOT encrypted at rest: no store.encryption_key"), "\(without)")
        let html = PolicyExplainerHTML.render(try PolicyLoader.load(text: Self.twoKeys, path: "t.yaml").get())
        #expect(html.contains("sealed with AES-256-GCM, key from env:K"))
        #expect(html.contains("1 previous key(s) still open older values: file:/keys/old"))
        let plainHTML = PolicyExplainerHTML.render(try PolicyLoader.load(text: minimalPolicy, path: "t.yaml").get())
        #expect(plainHTML.contains("off: push tokens and Web Push secrets are stored as sent"))
    }

    // MARK: store.digest_key

    /// Encryption without a digest key is a warning, not a refusal: deployments that encrypted
    /// before the key existed keep working, and their names stay as they are.
    @Test func encryptionWithoutADigestKeyIsAWarning() throws {
        let policy = try PolicyLoader.load(text: Self.twoKeys, path: "t.yaml").get()
        let secrets = StaticSecrets([.env("K"): Self.base64Key(7), .file("/keys/old"): Self.base64Key(9)])
        #expect(StoreKeys.diagnostics(for: policy, secrets: secrets).map(\.description)
                == ["t.yaml:14:19: store.encryption_key: warning: " + StoreKeys.missingDigestKey])
        #expect(StoreKeys.diagnostics(for: try PolicyLoader.load(text: minimalPolicy, path: "t.yaml").get()).isEmpty)
    }

    static let withDigestKey = policy("store:\n  encryption_key: {env: K}\n  digest_key: {file: /keys/digest}\n")

    /// 32 random bytes in base64: what `openssl rand -base64 32` prints.
    static func randomKey() -> [UInt8] {
        Array(Data((0..<32).map { _ in UInt8.random(in: 0...255) }).base64EncodedString().utf8)
    }

    @Test func aDigestKeyLoadsResolvesAndSilencesTheWarning() throws {
        let policy = try PolicyLoader.load(text: Self.withDigestKey, path: "t.yaml").get()
        #expect(policy.store == StorePolicy(encryptionKey: .env("K"), digestKey: .file("/keys/digest")))
        let digest = Self.randomKey()
        let secrets = StaticSecrets([.env("K"): Self.base64Key(7), .file("/keys/digest"): digest])
        let keys = try StoreKeys.resolve(try #require(policy.store), in: policy, secrets: secrets).get()
        #expect(keys.digest.map { Data($0).base64EncodedString() } == String(decoding: digest, as: UTF8.self))
        #expect(keys.previous.isEmpty && keys.current == [UInt8](repeating: 7, count: 32))
        #expect(StoreKeys.diagnostics(for: policy, secrets: secrets).isEmpty)
    }

    @Test(arguments: [
        ("a short key", Array(Data(repeating: 1, count: 16).base64EncodedString().utf8),
         "t.yaml:15:15: store.digest_key: secret file:/keys/digest: must be 32 bytes in base64, as `openssl rand -base64 32` prints; the value decodes to 16 bytes"),
        ("a patterned key", Array(Data((0..<32).map { UInt8($0 % 4) }).base64EncodedString().utf8),
         "t.yaml:15:15: store.digest_key: secret file:/keys/digest does not look random (4 distinct bytes); make it with `openssl rand -base64 32`"),
        ("the encryption key's value", base64Key(7),
         "t.yaml:15:15: store.digest_key: secret file:/keys/digest holds the same key as store.encryption_key; the digest key must be a key of its own (it is never rotated)"),
    ])
    func aWeakOrSharedDigestKeyIsRefused(_ name: String, _ value: [UInt8], _ expected: String) throws {
        let policy = try PolicyLoader.load(text: Self.withDigestKey, path: "t.yaml").get()
        let secrets = StaticSecrets([.env("K"): Self.base64Key(7), .file("/keys/digest"): value])
        switch StoreKeys.resolve(try #require(policy.store), in: policy, secrets: secrets) {
        case .success: Issue.record("\(name): resolved")
        case .failure(let diagnostics): #expect(diagnostics.diagnostics.map(\.description) == [expected], "\(name)")
        }
        #expect(StoreKeys.diagnostics(for: policy, secrets: secrets).map(\.description) == [expected], "\(name)")
    }

    @Test func theDigestKeyCannotBeAnEncryptionKeyReference() {
        #expect(loadDiagnostics(Self.policy("store:\n  encryption_key: {env: K}\n  digest_key: {env: K}\n")) == [
            "t.yaml:15:15: store.digest_key: env:K is also an encryption key; the digest key must be a key of its own (it is never rotated)",
        ])
        #expect(loadDiagnostics(Self.policy("store:\n  encryption_key: {env: K}\n  previous_encryption_keys: [{env: A}]\n  digest_key: {env: A}\n")) == [
            "t.yaml:16:15: store.digest_key: env:A is also an encryption key; the digest key must be a key of its own (it is never rotated)",
        ])
        #expect(loadDiagnostics(Self.policy("store:\n  encryption_key: {env: K}\n  digest_key: c2VjcmV0\n")) == [
            "t.yaml:15:15: store.digest_key: a secret must never be written into the policy file; use {env: NAME} or {file: /absolute/path}",
        ])
    }

    @Test func explainSaysKeyNamesAreKeyedDigestsByReferenceOnly() throws {
        let with = PolicyExplainer.explain(try PolicyLoader.load(text: Self.withDigestKey, path: "t.yaml").get())
        #expect(with.contains("Key names (every app): contact ids and push tokens appear in key names (and in the evidence trail) only as "
                              + "keyed digests (HMAC-SHA-256) under the key from file:/keys/digest (store.digest_key), never rotated"), "\(with)")
        let without = PolicyExplainer.explain(try PolicyLoader.load(text: Self.twoKeys, path: "t.yaml").get())
        #expect(without.contains("Key names (every app): contact ids and push tokens appear in key names (and in the evidence trail) as "
                                 + "unkeyed SHA-256 digests"), "\(without)")
        let html = PolicyExplainerHTML.render(try PolicyLoader.load(text: Self.withDigestKey, path: "t.yaml").get())
        #expect(html.contains("contacts and push tokens as HMAC-SHA-256 digests, key from file:/keys/digest"))
    }
}
