import Foundation
import PWCore
@testable import PushWarden
import PushWardenTestSupport
@testable import RedisClient
@testable import RedisStores
@testable import Registration
import Testing

/// The inventory's index in Redis (docs/architecture.md, Key layout): each token's holder and last-seen entry in
/// one of 256 shards of its app, what is left from builds before the shards, and the sweeper's
/// care with records that outlived what the index says of them. Real redis-server, real HTTP.
@Suite struct InventoryLayoutTests {
    static func expiring(_ mock: MockVoyado) -> String { InventoryTests.voyado(mock) + "\n    inventory:\n      expire_after: 1500ms" }

    static func unregistered(_ mock: MockVoyado, _ token: String) -> Bool {
        mock.received(path: "/installations/unregister").contains { $0.object?["push_token"]?.stringValue == token }
    }

    /// A sidecar on the shared redis-server (`expire_after: 1500ms` when `expiring`) where alice
    /// has registered one iOS token, with a client of that Redis.
    static func registered(expiring: Bool, _ body: (SidecarHarness, MockVoyado, RedisClient, String) async throws -> Void) async throws {
        try await withSidecar(try MockVoyado(apiKey: "voyado-key"), { mock in
            try await SidecarHarness(upstreams: expiring ? Self.expiring(mock) : InventoryTests.voyado(mock), secrets: InventoryTests.secrets)
        }) { h, mock in
            let redis = RedisClient(configuration: try RedisConfiguration(url: RedisServer.shared.url))
            defer { redis.close() }
            let token = InventoryTests.apns()
            #expect(try await h.post("/installations", InventoryTests.ios(token)).status == 202)
            try await body(h, mock, redis, token)
        }
    }

    @Test func aTokensHolderAndLastSeenSitInItsShard() async throws {
        try await Self.registered(expiring: false) { h, mock, redis, token in
            let app = AppInventoryKeys(app: h.app), keys = TokenKeys(app: h.app, pushToken: token)
            let alice = ContactKeys(app: h.app, contactID: "alice")
            let shard = app.shard(of: keys)
            #expect(shard == app.shards[Int(keys.digest.prefix(2), radix: 16)!])
            #expect(ClusterSlot.of(Array(shard.holder(of: keys).utf8)) == ClusterSlot.of(Array(shard.seen.utf8)))
            #expect(try await redis.send(["GET", shard.holder(of: keys)]).string == alice.digest)
            #expect(try await redis.send(["ZSCORE", shard.seen, RedisInventoryStore.seenMember(alice, keys)]).string != nil)
            // Nothing under the keys of builds before the shards, and no key names the token.
            #expect(try await redis.send(["EXISTS", keys.legacyOwner, app.legacySeen]) == .integer(0))
            guard case .array(let names) = try await redis.send(["KEYS", "pw:*"]) else { Issue.record("no KEYS reply"); return }
            #expect(!names.compactMap(\.string).contains { $0.contains(token) })
            // The unregister releases both.
            #expect(try await h.post("/installations/unregister", InventoryTests.unregister(token)).outcome("voyado") == "forwarded")
            #expect(try await redis.send(["EXISTS", shard.holder(of: keys)]) == .integer(0))
            #expect(try await redis.send(["ZSCORE", shard.seen, RedisInventoryStore.seenMember(alice, keys)]).string == nil)
        }
    }

    /// An installation an earlier build indexed (the token's own holder key, the app's whole
    /// last-seen set) is still bound to its contact, and still expires.
    @Test func anInstallationIndexedByAnEarlierBuildIsBoundAndExpires() async throws {
        try await Self.registered(expiring: true) { h, mock, redis, token in
            // Written as an earlier build kept it: no shard entries, the legacy keys instead.
            let app = AppInventoryKeys(app: h.app), keys = TokenKeys(app: h.app, pushToken: token)
            let alice = ContactKeys(app: h.app, contactID: "alice"), member = RedisInventoryStore.seenMember(alice, keys)
            let shard = app.shard(of: keys)
            _ = try await redis.send(["DEL", shard.holder(of: keys)])
            _ = try await redis.send(["ZREM", shard.seen, member])
            _ = try await redis.send(["SET", keys.legacyOwner, alice.digest])
            _ = try await redis.send(["ZADD", app.legacySeen, "1", member])
            // Bound to alice by the legacy holder: bob's stale logout removes nothing.
            #expect(try await h.post("/installations/unregister", InventoryTests.unregister(token), contact: "bob").outcome("voyado") == "skipped")
            // The upstream is called before the record goes: wait for both.
            let deadline = Date().addingTimeInterval(10)
            while Date() < deadline {
                if Self.unregistered(mock, token), try await InventoryTests.list(h, "alice").isEmpty { break }
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(Self.unregistered(mock, token), "the installation indexed only by the earlier build was not expired")
            #expect(try await InventoryTests.list(h, "alice").isEmpty)
            #expect(try await redis.send(["EXISTS", keys.legacyOwner]) == .integer(0))
            #expect(try await redis.send(["ZSCORE", app.legacySeen, member]).string == nil)
        }
    }

    /// A record left in a contact's inventory after its token moved to another contact (a move
    /// the inventory did not see) expires from that contact alone: the new holder's device is
    /// never unregistered by it.
    @Test func aRecordThatOutlivedAMoveNeverUnregistersTheNewHolder() async throws {
        try await Self.registered(expiring: true) { h, mock, redis, token in
            let alice = ContactKeys(app: h.app, contactID: "alice"), keys = TokenKeys(app: h.app, pushToken: token)
            let record = try #require(try await redis.send(["HGET", alice.inventory, keys.digest]).string)
            #expect(try await h.post("/installations", InventoryTests.ios(token), contact: "bob").status == 202)
            #expect(try await InventoryTests.list(h, "alice").isEmpty)  // the move was seen
            // Put alice's record back, last seen long ago, as if the move had not been seen.
            let shard = AppInventoryKeys(app: h.app).shard(of: keys)
            _ = try await redis.send(["HSET", alice.inventory, keys.digest, record])
            _ = try await redis.send(["ZADD", shard.seen, "1", RedisInventoryStore.seenMember(alice, keys)])
            #expect(try await InventoryTests.list(h, "alice").count == 1)
            // Bob's device stays in use; alice's stale record expires.
            let deadline = Date().addingTimeInterval(10)
            while Date() < deadline, try await !InventoryTests.list(h, "alice").isEmpty {
                #expect(try await h.post("/installations", InventoryTests.ios(token), contact: "bob").status == 202)
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(try await InventoryTests.list(h, "alice").isEmpty, "the stale record was not expired")
            #expect(!Self.unregistered(mock, token), "a stale record unregistered the new holder's device")
            #expect(try await InventoryTests.list(h, "bob").count == 1)
        }
    }

    /// An index entry older than its record (a write that reached the record and not the index)
    /// is moved up by the sweeper instead of staying due, and the installation is kept.
    @Test func anIndexEntryOlderThanItsRecordIsRepaired() async throws {
        try await Self.registered(expiring: true) { h, mock, redis, token in
            let alice = ContactKeys(app: h.app, contactID: "alice"), keys = TokenKeys(app: h.app, pushToken: token)
            let shard = AppInventoryKeys(app: h.app).shard(of: keys), member = RedisInventoryStore.seenMember(alice, keys)
            _ = try await redis.send(["ZADD", shard.seen, "1", member])
            let deadline = Date().addingTimeInterval(5)
            var score = 1.0
            while Date() < deadline, score == 1 {
                try await Task.sleep(for: .milliseconds(50))
                score = try await redis.send(["ZSCORE", shard.seen, member]).string.flatMap(Double.init) ?? 0
            }
            let lastSeen = try #require(try await InventoryTests.list(h, "alice").first?.lastSeenMillis)
            #expect(score == Double(lastSeen))
            #expect(!Self.unregistered(mock, token))
        }
    }
}

/// How a record is written: a registration most likely new is inserted whole (no script), and
/// when the guess was wrong the record is merged as before: its upstreams joined, its first-seen
/// time kept. What the store answers (new or not, how many the contact has) is the same either way.
extension InventoryLayoutTests {
    @Test func aRecordInsertedOrMergedHoldsTheSameAnswers() async throws {
        let client = RedisClient(configuration: try RedisConfiguration(url: RedisServer.shared.url))
        defer { client.close() }
        let store = RedisInventoryStore(store: RedisStore(client: client))
        let app = "rec-" + UUID().uuidString.prefix(8).lowercased()
        let contact = ContactKeys(app: app, contactID: "alice"), token = TokenKeys(app: app, pushToken: "fcm-" + UUID().uuidString)
        func write(_ upstreams: [String], at millis: Int64, likelyNew: Bool) async throws -> InventoryWriteResult {
            var write = InventoryWrite(contact: contact, token: token, app: AppInventoryKeys(app: app), sealed: "sealed-\(millis)",
                                       platform: "android", pushService: "fcm", upstreams: upstreams, nowMillis: millis)
            write.likelyNew = likelyNew
            return try await store.record(write, on: nil)
        }
        func stored() async throws -> StoredInstallation? { try await store.installation(token, of: contact, on: nil) }

        #expect(try await write(["voyado", "voyado"], at: 1_000, likelyNew: true) == InventoryWriteResult(previousOwner: nil, isNew: true, count: 1))
        #expect(try await stored().map { [$0.upstreams.joined(separator: ","), "\($0.firstSeenMillis)", "\($0.lastSeenMillis)", $0.sealed] }
                == ["voyado", "1000", "1000", "sealed-1000"])
        // Guessed new, but there: merged, not replaced.
        #expect(try await write(["pushnotice"], at: 2_000, likelyNew: true) == InventoryWriteResult(previousOwner: nil, isNew: false, count: 1))
        #expect(try await stored().map { [$0.upstreams.joined(separator: ","), "\($0.firstSeenMillis)", "\($0.lastSeenMillis)", $0.sealed] }
                == ["voyado,pushnotice", "1000", "2000", "sealed-2000"])
        // A touch goes straight to the merge.
        #expect(try await write(["voyado"], at: 3_000, likelyNew: false) == InventoryWriteResult(previousOwner: nil, isNew: false, count: 1))
        #expect(try await stored()?.lastSeenMillis == 3_000)
        // Another token of the same contact, inserted: counted with the first.
        let second = TokenKeys(app: app, pushToken: "fcm-" + UUID().uuidString)
        var other = InventoryWrite(contact: contact, token: second, app: AppInventoryKeys(app: app), sealed: "s", platform: "android",
                                   pushService: "fcm", upstreams: ["voyado"], nowMillis: 4_000)
        other.likelyNew = true
        #expect(try await store.record(other, on: nil) == InventoryWriteResult(previousOwner: nil, isNew: true, count: 2))
    }
}
