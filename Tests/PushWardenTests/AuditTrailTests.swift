import Foundation
import HTTPClient
import PWCore
import PWCrypto
import PWPolicy
@testable import PushWarden
import PushWardenTestSupport
import RedisClient
@testable import RedisStores
@testable import Registration
import Testing

/// The evidence trail of erasures: each erasure's answer carries a signed receipt chained to the
/// one before, and `pushwarden audit verify` (the binary, with only the public key) says the trail
/// is intact, or names the gap or the edit a Redis writer made.
@Suite(.serialized) struct AuditTrailTests {
    static func sidecar(_ voyado: MockVoyado, key: Ed25519PrivateKey) async throws -> SidecarHarness {
        var secrets = InventoryTests.secrets
        secrets[.env("TEST_ADMIN_TOKEN")] = ServerToServerTests.adminToken
        secrets[.env("TEST_AUDIT_KEY")] = String(decoding: try key.pem(), as: UTF8.self)
        return try await SidecarHarness(upstreams: InventoryTests.voyado(voyado), secrets: secrets,
                                        topLevel: "admin: {token: {env: TEST_ADMIN_TOKEN}}\naudit: {signing_key: {env: TEST_AUDIT_KEY}}")
    }

    static func erase(_ h: SidecarHarness, _ contact: String) async throws -> Harness.Reply {
        try await h.installations("DELETE", contact: contact)
    }

    static func verify(_ h: SidecarHarness, key: Ed25519PrivateKey) throws -> CommandLineTests.Run {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("audit-\(UUID().uuidString).pem").path
        try Data(try key.publicKeyPEM()).write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        return try CommandLineTests.run(["audit", "verify", "--redis", RedisServer.shared.url, "--key", path, "--app", h.app])
    }

    @Test func anErasureAnswersWithASignedChainedReceiptThatVerifies() async throws {
        let key = try Ed25519PrivateKey.generate()
        let voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await Self.sidecar(voyado, key: key)
        for token in [InventoryTests.android(), InventoryTests.android()] {
            #expect(try await h.post("/installations", InventoryTests.android(token), contact: "alice").status == 202)
        }
        let first = try await Self.erase(h, "alice")
        #expect(first.status == 202, "\(first.text)")
        let receipt = try #require(first.json?["receipt"]?.objectValue)
        let body = try #require(receipt["body"]?.stringValue)
        let signature = try #require(receipt["signature"]?.stringValue.flatMap { Base64URL.decode($0) })
        #expect(key.publicKey.verify(signature: signature, message: Array(body.utf8)))
        let parsed = try #require(AuditReceipt(body: body))
        #expect(parsed.seq == 1)
        #expect(parsed.prev == AuditReceipt.genesis)
        #expect(parsed.kind == "erasure")
        #expect(parsed.installations == 2)
        #expect(parsed.contact == ContactKeys(app: h.app, contactID: "alice").digest)
        #expect(parsed.upstreams.map(\.0) == ["voyado"] && parsed.upstreams.map(\.1) == ["forwarded"])
        #expect(parsed.requestID == first.headers["X-Request-Id"])
        #expect(!body.contains("alice"), "the receipt names the contact by its digest only")

        let second = try await Self.erase(h, "bob")
        let secondBody = try #require(second.json?["receipt"]?.objectValue?["body"]?.stringValue)
        let next = try #require(AuditReceipt(body: secondBody))
        #expect(next.seq == 2)
        #expect(next.prev == AuditReceipt.hash(ofBody: body))
        #expect(next.installations == 0)

        let run = try Self.verify(h, key: key)
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        #expect(run.stdout.contains("\(h.app): 2 receipts, intact"))
        await h.stop()
        await voyado.stop()
    }

    @Test func verifyNamesAnEditAGapAndATruncatedEnd() async throws {
        let key = try Ed25519PrivateKey.generate()
        let voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await Self.sidecar(voyado, key: key)
        var ids: [String] = []
        for contact in ["c1", "c2", "c3", "c4"] {
            let reply = try await Self.erase(h, contact)
            ids.append(try #require(reply.json?["receipt"]?.objectValue?["id"]?.stringValue))
        }
        let client = RedisClient(configuration: try RedisConfiguration(url: RedisServer.shared.url))
        defer { client.close() }
        let keys = AuditTrail.Keys(app: h.app)
        #expect(try Self.verify(h, key: key).status == 0)

        // An edit: the last receipt's body rewritten (installations 0 -> 5) and appended again
        // with its signature (a stream only appends, so an edit shows as a new entry).
        let entry = try await client.send(["XRANGE", keys.receipts, ids[3], ids[3]])
        guard case .array(let items) = entry, case .array(let parts)? = items.first, case .array(let fields) = parts[1],
              let body = fields[1].string, let signature = fields[3].string else { Issue.record("no entry \(ids[3])"); return }
        let edited = body.replacingOccurrences(of: #""installations":0"#, with: #""installations":5"#)
        #expect(edited != body)
        _ = try await client.send(["XDEL", keys.receipts, ids[3]])
        let editedID = try #require(try await client.send(["XADD", keys.receipts, "*", "body", edited, "sig", signature]).string)
        var run = try Self.verify(h, key: key)
        #expect(run.status == 1)
        #expect(run.stdout.contains("(seq 4): the signature does not verify"), "\(run.stdout)")

        // A gap: the second receipt removed.
        _ = try await client.send(["XDEL", keys.receipts, ids[1]])
        run = try Self.verify(h, key: key)
        #expect(run.stdout.contains("seq 3 follows seq 1: receipts are missing"), "\(run.stdout)")

        // A truncated end: the last receipt removed; the head still names seq 4.
        _ = try await client.send(["XDEL", keys.receipts, editedID])
        run = try Self.verify(h, key: key)
        #expect(run.stdout.contains("the trail ends at seq 3 but its head names seq 4"), "\(run.stdout)")
        #expect(run.status == 1)
        await h.stop()
        await voyado.stop()
    }

    @Test func theTrailNeedsRedisAndAnEd25519Key() async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key")
        var secrets = InventoryTests.secrets
        secrets[.env("TEST_AUDIT_KEY")] = "not a key"
        await #expect(throws: (any Error).self) {
            _ = try await SidecarHarness(upstreams: InventoryTests.voyado(voyado), secrets: secrets, topLevel: "audit: {signing_key: {env: TEST_AUDIT_KEY}}")
        }
        secrets[.env("TEST_AUDIT_KEY")] = String(decoding: try Ed25519PrivateKey.generate().pem(), as: UTF8.self)
        await #expect(throws: (any Error).self) {
            _ = try await SidecarHarness(upstreams: InventoryTests.voyado(voyado), secrets: secrets, memoryStore: true,
                                         topLevel: "audit: {signing_key: {env: TEST_AUDIT_KEY}}")
        }
        await voyado.stop()
    }
}
