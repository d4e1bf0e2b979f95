import ClientAPI
import Foundation
import PWCore
import PWCrypto
import PWPolicy
@testable import Providers
@testable import PushWarden
import PushWardenTestSupport
import RedisClient
@testable import RedisStores
@testable import Registration
import Testing

/// `store.encryption_key` (docs/architecture.md, the inventory): with a key set, no push token and no Web Push
/// secret is anywhere in Redis, and what is sealed opens again: identities for unregistering,
/// outbox entries for delivery and for `pushwarden outbox`, across a key rotation. Real
/// redis-server (one per test, so a scan sees only the test's own keys), real mock providers.
@Suite(.serialized) struct EncryptionAtRestTests {
    static let storeKey = Data(SecureRandom.bytes(32)).base64EncodedString()
    static let otherKey = Data(SecureRandom.bytes(32)).base64EncodedString()

    static func storeBlock(current: String = "PW_STORE_KEY", previous: [String] = []) -> String {
        var block = "store:\n  encryption_key: {env: \(current)}\n"
        if !previous.isEmpty { block += "  previous_encryption_keys: [\(previous.map { "{env: \($0)}" }.joined(separator: ", "))]\n" }
        return block
    }

    static func sealer(_ current: String, previous: [String] = []) throws -> StoreSealer {
        func bytes(_ text: String) -> [UInt8] { [UInt8](Data(base64Encoded: text)!) }
        return try StoreSealer(keys: StoreKeys(current: bytes(current), previous: previous.map(bytes)))
    }

    static let fluxerHeaders: HTTPHeaders = ["X-Fluxer-Session": FluxerTests.session]

    /// Every value in `contents` sealed as this build seals, as stored.
    static func sealedValues(_ contents: RedisContents) -> [String] {
        var found: [String] = []
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_:")
        for text in contents.allTexts {
            var rest = Substring(text)
            while let start = rest.range(of: StoreSealer.version) {
                let run = rest[start.lowerBound...].prefix { allowed.contains($0) }
                found.append(String(run))
                rest = rest[run.endIndex...]
            }
        }
        return found
    }

    /// What a fresh server holds after `body`, for the scans.
    /// Every sealed value in `contents`, opened where it sits (nil for one that does not open):
    /// an identity by its key, an inventory record by its key and field, an outbox entry's field
    /// by its app, upstream and field name.
    static func openedInPlace(_ contents: RedisContents, _ sealer: StoreSealer) -> [String?] {
        var opened: [String?] = []
        func isSealed(_ text: String) -> Bool { text.hasPrefix(StoreSealer.version) }
        for item in contents.items {
            switch item.type {
            case "string":
                for text in item.texts where isSealed(text) { opened.append(sealer.open(text, boundTo: item.key)) }
            case "hash":
                var index = 0
                while index + 1 < item.texts.count {
                    let field = item.texts[index], value = item.texts[index + 1]
                    if let sealed = (try? JSONValue.parse(Array(value.utf8)))?.objectValue?["x"]?.stringValue, isSealed(sealed) {
                        opened.append(sealer.open(sealed, boundTo: item.key + "\u{0}" + field))
                    }
                    index += 2
                }
            case "stream":
                for text in item.texts {
                    guard let entry = (try? JSONValue.parse(Array(text.utf8)))?.objectValue, let app = entry["app"]?.stringValue,
                          let upstream = entry["upstream"]?.stringValue else { continue }
                    func open(_ value: String?, _ field: String) {
                        guard let value, isSealed(value) else { return }
                        opened.append(sealer.open(value, boundTo: OutboxEntry.place(field, app: app, upstream: upstream)))
                    }
                    let installation = entry["installation"]?.objectValue
                    open(entry["token"]?.stringValue, "token")
                    open(entry["contact"]?.stringValue, "contact")
                    open(installation?["previous_push_token"]?.stringValue, "previous_push_token")
                    open(installation?["web_push_keys"]?.objectValue?["p256dh"]?.stringValue, "p256dh")
                    open(installation?["web_push_keys"]?.objectValue?["auth"]?.stringValue, "auth")
                }
            default:
                break
            }
        }
        return opened
    }

    static func withRedis(_ body: (RedisServer, RedisStore) async throws -> Void) async throws {
        let server = try RedisServer.start()
        defer { server.stop() }
        let store = RedisStore(client: RedisClient(configuration: server.configuration()))
        try await body(server, store)
    }

    // MARK: No raw token anywhere

    /// Registrations on all five providers (a rotation, Web Push with its keys), deliveries queued
    /// for a provider that is down, one dead-lettered, unregisters queued: nowhere in Redis (key
    /// names, strings, hashes, sets, sorted sets, lists, streams) is a token or a Web Push secret,
    /// yet every sealed value opens to them. The registrations then unregister through their
    /// identities.
    @Test func withAKeyNoTokenOrWebPushSecretIsAnywhereInRedis() async throws {
        try await Self.withRedis { server, store in
            let voyado = try MockVoyado(apiKey: "vk")
            let voidhash = try MockVoidhash(publishableKey: VoidhashTests.key)
            let fluxer = try MockFluxer()
            let nn = try MockNativeNotify(appID: 123, appToken: NativeNotifyTests.appToken)
            let down = try MockNativeNotify(appID: 123, appToken: NativeNotifyTests.appToken)
            let pn = try MockPushNotice(apiKey: PushNoticeTests.key)
            // The queued Native Notify refuses the first delivery for good, then is down.
            down.enqueue(.init(status: 400, headers: ["Content-Type": "application/json"], body: #"{"error":"bad_request"}"#))
            for _ in 0..<2000 { down.enqueue(.init(status: 503)) }
            let upstreams = [
                OutboxTests.voyado(voyado, name: "voyado", role: "primary", delivery: "sync"),
                VoidhashTests.block(voidhash, name: "vh", role: "shadow"),
                FluxerTests.upstream(fluxer, name: "fluxer", role: "shadow"),
                NativeNotifyTests.upstream(nn, name: "nn", role: "shadow"),
                NativeNotifyTests.upstream(down, name: "nnq", role: "shadow", extra: """

                            delivery: queued
                            queue: {max_age: 1h, claim_after: 5s}
                            circuit: {failures: 3, within: 10s, open_for: 300ms}
                    """),
                PushNoticeTests.upstream(pn, name: "pn", role: "shadow", groups: "[Test]"),
            ].joined(separator: "\n")
            let h = try await SidecarHarness(upstreams: upstreams, secrets: [
                .env("VOYADO_KEY"): "vk", .env("VH_KEY"): VoidhashTests.key, .env("NN_TOKEN"): NativeNotifyTests.appToken,
                .env("PN_KEY"): PushNoticeTests.key, .env("PW_STORE_KEY"): Self.storeKey,
            ], store: store, topLevel: Self.storeBlock())

            let first = PushNoticeTests.fcmToken(), rotated = PushNoticeTests.fcmToken(), apns = Harness.apnsToken()
            let endpoint = "https://fcm.googleapis.com/fcm/send/" + UUID().uuidString
            let p256dh = Base64URL.encode([4] + SecureRandom.bytes(64)), auth = Base64URL.encode(SecureRandom.bytes(16))
            // The APNs token as sent and as validated (lowercase hex, the form that is forwarded and kept).
            let needles = [first, rotated, apns, apns.lowercased(), endpoint, String(endpoint.suffix(36)), p256dh, auth]

            let one = try await h.post("/installations", #"{"platform":"android","push_token":"\#(first)"}"#, headers: Self.fluxerHeaders)
            #expect(one.status == 202)
            for upstream in ["voyado", "vh", "fluxer", "nn", "pn"] { #expect(one.outcome(upstream) == "forwarded", "\(upstream): \(one.text)") }
            #expect(one.outcome("nnq") == "queued")
            // The first queued delivery is refused for good: dead-lettered, still sealed.
            #expect(await OutboxTests.eventually { ((try? await Self.deadLetters(server, app: h.app, upstream: "nnq")) ?? []).count == 1 })

            let two = try await h.post("/installations", #"{"platform":"android","push_token":"\#(rotated)","previous_push_token":"\#(first)"}"#,
                                       headers: Self.fluxerHeaders)
            for upstream in ["voyado", "vh", "fluxer", "nn", "pn"] { #expect(two.outcome(upstream) == "forwarded", "\(upstream): \(two.text)") }
            let three = try await h.post("/installations", #"{"platform":"ios","push_token":"\#(apns)","environment":"production"}"#,
                                         headers: Self.fluxerHeaders)
            for upstream in ["voyado", "vh", "fluxer", "nn"] { #expect(three.outcome(upstream) == "forwarded", "\(upstream): \(three.text)") }
            let four = try await h.post("/installations", """
                {"platform":"web","push_service":"web_push","push_token":"\(endpoint)","web_push_keys":{"p256dh":"\(p256dh)","auth":"\(auth)"}}
                """)
            #expect(four.outcome("nn") == "forwarded", "\(four.text)")
            #expect(four.outcome("nnq") == "queued")
            // The providers did receive the raw values: only the store must not hold them.
            #expect(nn.registrations.contains { String(decoding: $0.body, as: UTF8.self).contains(p256dh) })

            var contents = try await RedisContents.read(server.configuration())
            for needle in needles { #expect(contents.occurrences(of: needle).isEmpty, "\(contents.occurrences(of: needle))") }
            // Not vacuous: identities and outbox entries are there, sealed, and open to those very values.
            #expect(contents.items.filter { $0.key.hasSuffix("}:id") }.count >= 6, "\(contents.items.map(\.key))")
            #expect(contents.items.contains { $0.type == "stream" && $0.key.hasSuffix(":dead}:s") && $0.texts.contains { $0.contains("pwe2:") } })
            let sealer = try Self.sealer(Self.storeKey)
            let inPlace = Self.openedInPlace(contents, sealer)
            #expect(inPlace.count == Self.sealedValues(contents).count, "every sealed value is found where it sits")
            var opened = inPlace.compactMap { $0 }
            for needle in [rotated, apns.lowercased(), endpoint, p256dh, auth, first] {
                #expect(opened.contains { $0.contains(needle) }, "nothing sealed opens to \(Redact.token(needle))")
            }
            #expect(inPlace.allSatisfy { $0 != nil }, "every sealed value opens where it sits")

            // The identities open: each provider that needs one removes the registration by it.
            for token in [rotated, apns] {
                let gone = try await h.post("/installations/unregister", #"{"push_token":"\#(token)"}"#, headers: Self.fluxerHeaders)
                for upstream in ["vh", "fluxer", "nn"] { #expect(gone.outcome(upstream) == "forwarded", "\(upstream): \(gone.text)") }
                #expect(gone.outcome("nnq") == "queued")
            }
            #expect(voidhash.received(path: "/unregister").count == 2)
            #expect(nn.deregistrations.count == 2)
            let webGone = try await h.post("/installations/unregister", #"{"push_token":"\#(endpoint)"}"#)
            #expect(webGone.outcome("nn") == "forwarded")

            // The queued unregisters are sealed too.
            contents = try await RedisContents.read(server.configuration())
            for needle in needles { #expect(contents.occurrences(of: needle).isEmpty, "\(contents.occurrences(of: needle))") }
            opened = Self.openedInPlace(contents, sealer).compactMap { $0 }
            #expect(opened.contains(endpoint) && opened.contains(apns.lowercased()))
            #expect(!h.logs.text.contains(Self.storeKey))
            #expect(h.logs.text.contains("aes-256-gcm key \(try #require(sealer.keyID)), 0 previous"), "\(h.logs.text.prefix(2000))")
            await h.stop()
            for mock in [voyado, voidhash, fluxer, nn, down, pn] as [any ProviderMock] { await mock.stop() }
        }
    }

    static func deadLetters(_ server: RedisServer, app: String, upstream: String) async throws -> [[String: String]] {
        let client = RedisClient(configuration: server.configuration())
        defer { client.close() }
        return try await OutboxStreams(client: client).deadLetters(of: OutboxStreams.Upstream(app: app, upstream: upstream, shards: 1), count: 100)
            .map(\.1)
    }

    // MARK: Rotation, plaintext from before, tampering

    static func voidhashHarness(_ mock: MockVoidhash, store: RedisStore, app: String?, current: String?, previous: [String] = [],
                                keys: [String: String]) async throws -> SidecarHarness {
        var secrets: [SecretRef: String] = [.env("VH_KEY"): VoidhashTests.key]
        for (name, value) in keys { secrets[.env(name)] = value }
        return try await SidecarHarness(upstreams: VoidhashTests.block(mock), secrets: secrets, store: store, sameApp: app,
                                        topLevel: current.map { storeBlock(current: $0, previous: previous) } ?? "")
    }

    static func register(_ h: SidecarHarness, _ token: String) async throws -> String? {
        try await h.post("/installations", #"{"platform":"android","push_token":"\#(token)"}"#).outcome("vh")
    }

    static func unregister(_ h: SidecarHarness, _ token: String) async throws -> String? {
        try await h.post("/installations/unregister", #"{"push_token":"\#(token)"}"#).outcome("vh")
    }

    // MARK: A Redis writer without the key

    /// Swapping the sealed identities of two users' registrations (a Redis writer without the
    /// key): neither opens where it now sits, so alice's logout cannot unregister bob's device.
    @Test func swappedIdentitiesDoNotOpenSoALogoutNeverRemovesAnothersDevice() async throws {
        try await Self.withRedis { server, store in
            let mock = try MockVoidhash(publishableKey: VoidhashTests.key)
            let h = try await Self.voidhashHarness(mock, store: store, app: nil, current: "PW_STORE_KEY", keys: ["PW_STORE_KEY": Self.storeKey])
            let alice = VoidhashTests.fcm(), bob = VoidhashTests.fcm()
            #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(alice)"}"#, contact: "alice").outcome("vh") == "forwarded")
            #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(bob)"}"#, contact: "bob").outcome("vh") == "forwarded")
            let bobDevice = try #require(mock.device(token: bob)?.id)
            let aliceKey = RegistrationKeys(app: h.app, upstream: "vh", pushToken: alice).identity
            let bobKey = RegistrationKeys(app: h.app, upstream: "vh", pushToken: bob).identity
            let client = RedisClient(configuration: server.configuration())
            defer { client.close() }
            let aliceValue = try #require(try await client.send(["GET", aliceKey]).string)
            let bobValue = try #require(try await client.send(["GET", bobKey]).string)
            _ = try await client.send(["SET", aliceKey, bobValue])
            _ = try await client.send(["SET", bobKey, aliceValue])

            _ = try await h.post("/installations/unregister", #"{"push_token":"\#(alice)"}"#, contact: "alice")
            let removed = mock.received(path: "/api/v1/sdk/push-devices/unregister").map { String(decoding: $0.body, as: UTF8.self) }
            #expect(!removed.contains { $0.contains(bobDevice) }, "\(removed)")
            #expect(mock.device(token: bob) != nil, "bob's device is still registered")
            #expect(h.logs.text.contains("identity cannot be opened"))
            await h.stop()
            await mock.stop()
        }
    }

    /// A sealed inventory record copied into another contact's inventory opens as unreadable
    /// there: an erasure of that contact removes the copy and calls no upstream for it.
    @Test(arguments: [true, false]) func aRecordCopiedIntoAnotherContactNeverUnregistersItsDevice(encrypted: Bool) async throws {
        try await Self.withRedis { server, store in
            let voyado = try MockVoyado(apiKey: "voyado-key")
            let h = try await SidecarHarness(upstreams: InventoryTests.voyado(voyado),
                                             secrets: InventoryTests.secrets.merging([.env("PW_STORE_KEY"): Self.storeKey]) { $1 }, store: store,
                                             topLevel: encrypted ? Self.storeBlock() : "")
            let alice = InventoryTests.android(), bob = InventoryTests.android()
            #expect(try await h.post("/installations", InventoryTests.android(alice), contact: "alice").status == 202)
            #expect(try await h.post("/installations", InventoryTests.android(bob), contact: "bob").status == 202)
            let client = RedisClient(configuration: server.configuration())
            defer { client.close() }
            let bobField = TokenKeys(app: h.app, pushToken: bob).digest
            let bobRecord = try #require(try await client.send(["HGET", ContactKeys(app: h.app, contactID: "bob").inventory, bobField]).string)
            _ = try await client.send(["HSET", ContactKeys(app: h.app, contactID: "alice").inventory, bobField, bobRecord])
            // The holder too, which is not sealed: the inventory now says alice holds bob's token.
            let bobToken = TokenKeys(app: h.app, pushToken: bob)
            _ = try await client.send(["SET", AppInventoryKeys(app: h.app).shard(of: bobToken).holder(of: bobToken),
                                       ContactKeys(app: h.app, contactID: "alice").digest])

            let report = try await InventoryTests.registrar(h).erase("alice", in: try InventoryTests.app(h), requestID: "erase-copy")
            #expect(report.installations == 2)
            let removed = voyado.received(path: "/installations/unregister").compactMap { $0.object?["push_token"]?.stringValue }
            #expect(removed == [alice], "\(removed)")
            #expect(try await InventoryTests.list(h, "bob").count == 1)
            #expect(try await InventoryTests.list(h, "alice").isEmpty)
            // Sealed, the copy does not even open at alice's place; in plaintext its content gives it away.
            if !encrypted { #expect(h.logs.text.contains("does not belong where it is stored")) }
            await h.stop()
            await voyado.stop()
        }
    }

    /// With `store.require_sealed`, a plaintext value a Redis writer planted is not read: a planted
    /// identity naming another device is treated as none.
    @Test func requireSealedRefusesAPlantedPlaintextIdentity() async throws {
        try await Self.withRedis { server, store in
            let mock = try MockVoidhash(publishableKey: VoidhashTests.key)
            let secrets: [SecretRef: String] = [.env("VH_KEY"): VoidhashTests.key, .env("PW_STORE_KEY"): Self.storeKey]
            let h = try await SidecarHarness(upstreams: VoidhashTests.block(mock), secrets: secrets, store: store,
                                             topLevel: "store:\n  encryption_key: {env: PW_STORE_KEY}\n  require_sealed: true\n")
            let alice = VoidhashTests.fcm(), bob = VoidhashTests.fcm()
            #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(bob)"}"#, contact: "bob").outcome("vh") == "forwarded")
            let bobDevice = try #require(mock.device(token: bob)?.id)
            let client = RedisClient(configuration: server.configuration())
            defer { client.close() }
            _ = try await client.send(["SET", RegistrationKeys(app: h.app, upstream: "vh", pushToken: alice).identity,
                                       #"{"pushDeviceTokenId":"\#(bobDevice)"}"#])
            _ = try await h.post("/installations/unregister", #"{"push_token":"\#(alice)"}"#, contact: "alice")
            let removed = mock.received(path: "/api/v1/sdk/push-devices/unregister").map { String(decoding: $0.body, as: UTF8.self) }
            #expect(!removed.contains { $0.contains(bobDevice) }, "\(removed)")
            #expect(mock.device(token: bob) != nil)
            await h.stop()
            await mock.stop()
        }
    }

    /// Values sealed under the old key open once it moves to `previous_encryption_keys`; what is
    /// written then is sealed under the new one; without the old key they no longer open (the
    /// identity is treated as unknown, nothing crashes).
    @Test func aRotatedKeyStillOpensWhatItSealedFromPreviousKeys() async throws {
        try await Self.withRedis { server, store in
            let mock = try MockVoidhash(publishableKey: VoidhashTests.key)
            let keys = ["OLD_KEY": Self.storeKey, "NEW_KEY": Self.otherKey]
            let old = try Self.sealer(Self.storeKey), new = try Self.sealer(Self.otherKey)
            let before = try await Self.voidhashHarness(mock, store: store, app: nil, current: "OLD_KEY", keys: keys)
            let app = before.app
            let kept = VoidhashTests.fcm(), lost = VoidhashTests.fcm()
            #expect(try await Self.register(before, kept) == "forwarded")
            #expect(try await Self.register(before, lost) == "forwarded")
            await before.stop()
            let identity = { (token: String) async throws -> String? in
                try await store.get(RegistrationKeys(app: app, upstream: "vh", pushToken: token).identity, on: nil)
            }
            #expect(try await identity(kept)?.hasPrefix("pwe2:\(try #require(old.keyID)):") == true)

            let rotated = try await Self.voidhashHarness(mock, store: store, app: app, current: "NEW_KEY", previous: ["OLD_KEY"], keys: keys)
            #expect(try await Self.unregister(rotated, kept) == "forwarded")
            #expect(mock.received(path: "/unregister").count == 1)
            let fresh = VoidhashTests.fcm()
            #expect(try await Self.register(rotated, fresh) == "forwarded")
            let sealedNew = try #require(try await identity(fresh))
            #expect(sealedNew.hasPrefix("pwe2:\(try #require(new.keyID)):"))
            #expect(old.open(sealedNew, boundTo: RegistrationKeys(app: app, upstream: "vh", pushToken: fresh).identity) == nil)
            await rotated.stop()

            // The old key dropped too early: its values no longer open.
            let dropped = try await Self.voidhashHarness(mock, store: store, app: app, current: "NEW_KEY", keys: keys)
            #expect(try await Self.unregister(dropped, lost) == "skipped")
            #expect(mock.received(path: "/unregister").count == 1)
            #expect(dropped.logs.text.contains("identity cannot be opened"))
            #expect(try await Self.unregister(dropped, fresh) == "forwarded")
            await dropped.stop()
            await mock.stop()
        }
    }

    /// Values written before the key was set are read as they are: turning encryption on loses
    /// no registration, and what is written afterwards is sealed.
    @Test func plaintextWrittenBeforeTheKeyIsStillRead() async throws {
        try await Self.withRedis { server, store in
            let mock = try MockVoidhash(publishableKey: VoidhashTests.key)
            let plain = try await Self.voidhashHarness(mock, store: store, app: nil, current: nil, keys: [:])
            let token = VoidhashTests.fcm()
            #expect(try await Self.register(plain, token) == "forwarded")
            let app = plain.app
            await plain.stop()
            let keys = RegistrationKeys(app: app, upstream: "vh", pushToken: token)
            #expect(try await store.get(keys.identity, on: nil)?.hasPrefix("{") == true)

            let sealed = try await Self.voidhashHarness(mock, store: store, app: app, current: "PW_STORE_KEY",
                                                        keys: ["PW_STORE_KEY": Self.storeKey])
            #expect(try await Self.unregister(sealed, token) == "forwarded")
            let next = VoidhashTests.fcm()
            #expect(try await Self.register(sealed, next) == "forwarded")
            #expect(try await store.get(RegistrationKeys(app: app, upstream: "vh", pushToken: next).identity, on: nil)?.hasPrefix("pwe2:") == true)
            await sealed.stop()
            await mock.stop()
        }
    }

    /// A sealed identity altered in Redis does not open: treated as no identity (the unregister
    /// is skipped there, and logged), never a crash.
    @Test func aTamperedIdentityIsTreatedAsNone() async throws {
        try await Self.withRedis { server, store in
            let mock = try MockVoidhash(publishableKey: VoidhashTests.key)
            let h = try await Self.voidhashHarness(mock, store: store, app: nil, current: "PW_STORE_KEY", keys: ["PW_STORE_KEY": Self.storeKey])
            let token = VoidhashTests.fcm(), control = VoidhashTests.fcm()
            #expect(try await Self.register(h, token) == "forwarded")
            #expect(try await Self.register(h, control) == "forwarded")
            let key = RegistrationKeys(app: h.app, upstream: "vh", pushToken: token).identity
            var sealed = Array(try #require(try await store.get(key, on: nil)).utf8)
            let index = sealed.count - 10
            sealed[index] = sealed[index] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
            try await store.set(key, String(decoding: sealed, as: UTF8.self), ttlSeconds: 600, on: nil)
            #expect(try await Self.unregister(h, token) == "skipped")
            #expect(h.logs.text.contains("identity cannot be opened"))
            #expect(try await Self.unregister(h, control) == "forwarded")
            #expect(mock.received(path: "/unregister").count == 1)
            await h.stop()
            await mock.stop()
        }
    }

    // MARK: The outbox

    /// A queued entry sealed under a key the worker does not hold, or altered, is dead-lettered
    /// as `unreadable` and kept sealed; the worker goes on. `pushwarden outbox` lists the dead
    /// letters with tokens as short hashes when given the keys, and replays them sealed again; without the
    /// keys it lists them as sealed, does not replay them, and can drop them.
    @Test func unreadableEntriesAreDeadLetteredAndTheCommandNeedsTheKeys() async throws {
        try await Self.withRedis { server, store in
            let mock = try MockVoyado(apiKey: "vk")
            let h = try await SidecarHarness(upstreams: OutboxTests.voyado(mock), secrets: [.env("VOYADO_KEY"): "vk", .env("PW_STORE_KEY"): Self.storeKey],
                                             store: store, topLevel: Self.storeBlock())
            let sealer = try Self.sealer(Self.storeKey)
            let target = OutboxStreams.Upstream(app: h.app, upstream: "voyado", shards: Outbox.queuedShards)
            let foreign = OutboxFixture.entry(app: h.app, token: OutboxTests.fcm())
            let altered = OutboxFixture.entry(app: h.app, token: OutboxTests.fcm())
            let client = RedisClient(configuration: server.configuration())
            defer { client.close() }
            var alteredText = altered.encoded(sealer: sealer)
            alteredText = alteredText.replacingOccurrences(of: "pwe2:\(try #require(sealer.keyID)):", with: "pwe2:\(try #require(sealer.keyID)):A")
            for (entry, text) in [(foreign, foreign.encoded(sealer: try Self.sealer(Self.otherKey))), (altered, alteredText)] {
                _ = try await client.send(["XADD", target.stream(target.shard(of: entry.pushToken)), "*", "e", text])
            }
            let good = OutboxTests.fcm()
            #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(good)"}"#).outcome("voyado") == "queued")
            #expect(await OutboxTests.eventually { mock.received(path: "/installations").count == 1 })
            #expect(await OutboxTests.eventually { ((try? await Self.deadLetters(server, app: h.app, upstream: "voyado")) ?? []).count == 2 })
            let dead = try await Self.deadLetters(server, app: h.app, upstream: "voyado")
            #expect(dead.map { $0["reason"] } == ["unreadable", "unreadable"])
            #expect(dead.allSatisfy { $0["e"]?.contains("pwe2:") == true })
            #expect(h.logs.text.contains("outbox entry cannot be opened"))
            await h.stop()

            // The command, with the key that sealed one of them.
            let url = "redis://127.0.0.1:\(server.port)"
            var listed: [String] = []
            let other = try Self.sealer(Self.storeKey, previous: [Self.otherKey])
            #expect(try await OutboxCommand.run(.list, redisURL: url, app: h.app, upstream: nil, sealer: other) { listed.append($0) }.handled == 2)
            #expect(listed.contains { $0.contains(Redact.token(foreign.pushToken)) }, "\(listed)")
            #expect(listed.contains { $0.contains("sealed entry") }, "\(listed)")
            #expect(!listed.joined().contains(foreign.pushToken))
            listed = []
            #expect(try await OutboxCommand.run(.list, redisURL: url, app: h.app, upstream: nil) { listed.append($0) }.handled == 2)
            #expect(listed.filter { $0.contains("sealed entry") }.count == 2, "\(listed)")
            // (Without a policy, replay places by the layout the sidecar recorded; it outlives `stop` by up to 30 s.)
            // Replay without the keys puts nothing back; with them, the one that opens goes back, sealed under the current key.
            listed = []
            _ = try await OutboxCommand.run(.replay, redisURL: url, app: h.app, upstream: nil) { listed.append($0) }
            #expect(listed.filter { $0.contains("not replayed: sealed") }.count == 2, "\(listed)")
            listed = []
            _ = try await OutboxCommand.run(.replay, redisURL: url, app: h.app, upstream: nil, sealer: other) { listed.append($0) }
            #expect(listed.filter { $0.contains("not replayed: ") }.count == 1, "\(listed)")
            #expect(listed.last == "1 replayed, 1 not replayed", "\(listed)")
            let after = try await RedisContents.read(server.configuration())
            #expect(after.occurrences(of: foreign.pushToken).isEmpty)
            let replayed = try #require(after.items.first { $0.key == target.stream(target.shard(of: foreign.pushToken)) })
            #expect(Self.openedInPlace(RedisContents(items: [replayed]), sealer).contains(foreign.pushToken))
            #expect(try await OutboxCommand.run(.drop, redisURL: url, app: h.app, upstream: nil) { _ in }.handled == 1)
            #expect(try await Self.deadLetters(server, app: h.app, upstream: "voyado").isEmpty)
            await mock.stop()
        }
    }

    // MARK: Start and reload

    @Test func serveRefusesAKeyThatIsNot32BytesOfBase64() async throws {
        let mock = try MockVoyado(apiKey: "vk")
        for bad in [Data(SecureRandom.bytes(16)).base64EncodedString(), "not a key"] {
            do {
                let h = try await SidecarHarness(upstreams: OutboxTests.voyado(mock, delivery: "sync"),
                                                 secrets: [.env("VOYADO_KEY"): "vk", .env("PW_STORE_KEY"): bad], topLevel: Self.storeBlock())
                await h.stop()
                Issue.record("started with a bad store key")
            } catch let error as ConfigurationError {
                #expect(error.description.contains("store.encryption_key: secret env:PW_STORE_KEY: must be 32 bytes in base64"), "\(error)")
                #expect(!error.description.contains(bad))
            }
        }
        await mock.stop()
    }

    /// The keys are read at start: a reload that changes the store block is refused, the running
    /// policy stays; one that keeps it goes through.
    @Test func aReloadThatChangesTheStoreBlockIsRefused() async throws {
        let mock = try MockVoyado(apiKey: "vk")
        let upstream = OutboxTests.voyado(mock, delivery: "sync")
        let h = try await SidecarHarness(upstreams: upstream, secrets: [.env("VOYADO_KEY"): "vk", .env("PW_STORE_KEY"): Self.storeKey],
                                         topLevel: Self.storeBlock())
        func policy(_ store: String) throws -> Policy {
            let yaml = """
                version: 1
                apps:
                  \(h.app):
                    session: {type: jwt, algorithms: [HS256], hmac_secret: {env: TEST_SESSION_SECRET}}
                    client: {platforms: [android]}
                    upstreams:
                \(upstream)
                \(store)
                """
            return try PolicyLoader.load(text: yaml, path: "reload.yaml").get()
        }
        switch await h.sidecar.reload(try policy(Self.storeBlock(current: "PW_STORE_KEY", previous: ["OLD"])), sha256: "b") {
        case .success: Issue.record("reloaded with another store block")
        case .failure(let error): #expect(error.description.contains("restart to change them"), "\(error)")
        }
        switch await h.sidecar.reload(try policy(""), sha256: "c") {
        case .success: Issue.record("reloaded without the store block")
        case .failure: break
        }
        switch await h.sidecar.reload(try policy(Self.storeBlock()), sha256: "d") {
        case .success: break
        case .failure(let error): Issue.record("the same store block refused: \(error)")
        }
        await h.stop()
        await mock.stop()
    }
}

/// Outbox entries made by hand.
enum OutboxFixture {
    static func entry(app: String, token: String) -> OutboxEntry {
        OutboxEntry(operation: .unregister, app: app, upstream: "voyado", contactID: "alice", requestID: "req-1",
                    acceptedAtMillis: Int64(SystemClock.epochMillis()), pushToken: token, installation: nil)
    }
}

/// The sealed form itself, without a store.
@Suite struct StoreSealerTests {
    static let key = [UInt8](repeating: 0x42, count: 32)
    static let older = [UInt8](repeating: 0x17, count: 32)
    static let place = "pw:v2:{t:abc}:id"

    /// What an earlier build wrote: `pwe1:<id>:…`, authenticated with `pwe1:<id>` alone.
    static func legacySealed(_ plaintext: String, key: [UInt8]) throws -> String {
        let id = Hex.encode(HMACSHA256.mac(key: key, message: Array("pushwarden store key id".utf8)).prefix(8))
        let sealed = AES256GCM.seal(plaintext.utf8, key: try AES256GCMKey(key), authenticating: Array(("pwe1:" + id).utf8))
        return "pwe1:" + id + ":" + Base64URL.encode(sealed.combined)
    }

    @Test func aSealedValueOpensAndSaysWhichKeySealedIt() throws {
        let sealer = try StoreSealer(keys: StoreKeys(current: Self.key))
        #expect(sealer.isEnabled)
        let id = try #require(sealer.keyID)
        #expect(id.count == 16 && id.allSatisfy(\.isHexDigit))
        let sealed = sealer.seal("fcm-token-value", boundTo: Self.place)
        let parts = sealed.split(separator: ":", omittingEmptySubsequences: false)
        #expect(parts.count == 3 && parts[0] == "pwe2" && parts[1] == id)
        // nonce (12) + ciphertext (15) + tag (16) = 43 bytes: 58 base64url characters.
        #expect(Base64URL.decode(parts[2])?.count == 12 + 15 + 16)
        #expect(!sealed.contains("fcm-token-value"))
        #expect(sealer.open(sealed, boundTo: Self.place) == "fcm-token-value")
        #expect(sealer.seal("fcm-token-value", boundTo: Self.place) != sealed)  // a fresh nonce each time
        #expect(sealer.open(sealer.seal("", boundTo: Self.place), boundTo: Self.place) == "")
        #expect(sealer.open(sealer.seal("ünïcødé ✓", boundTo: Self.place), boundTo: Self.place) == "ünïcødé ✓")
        // The id names the key and nothing else: the same key, the same id; another key, another.
        #expect(try StoreSealer(keys: StoreKeys(current: Self.key)).keyID == id)
        #expect(try StoreSealer(keys: StoreKeys(current: Self.older)).keyID != id)
        #expect(!id.contains(Hex.encode(Self.key).prefix(8)))
    }

    /// A value is bound to where it is stored: copied to another key or field it does not open.
    @Test func aSealedValueOpensOnlyWhereItWasStored() throws {
        let sealer = try StoreSealer(keys: StoreKeys(current: Self.key))
        let sealed = sealer.seal("device-id-of-alice", boundTo: "pw:v2:{t:alice}:id")
        #expect(sealer.open(sealed, boundTo: "pw:v2:{t:alice}:id") == "device-id-of-alice")
        #expect(sealer.open(sealed, boundTo: "pw:v2:{t:bob}:id") == nil)
        #expect(sealer.open(sealed, boundTo: "pw:v2:{t:alice}:id\u{0}x") == nil)
        #expect(sealer.open(sealed, boundTo: "") == nil)
    }

    /// Values an earlier build sealed (bound to no place) still open after the upgrade; what is
    /// written again is bound.
    @Test func valuesOfEarlierBuildsStillOpen() throws {
        let sealer = try StoreSealer(keys: StoreKeys(current: Self.key, previous: [Self.older]))
        #expect(sealer.open(try Self.legacySealed("token", key: Self.key), boundTo: Self.place) == "token")
        #expect(sealer.open(try Self.legacySealed("token", key: Self.older), boundTo: "anywhere") == "token")
        #expect(sealer.seal("token", boundTo: Self.place).hasPrefix("pwe2:"))
        // A legacy value whose bytes were altered does not open either.
        let legacy = try Self.legacySealed("token", key: Self.key)
        #expect(sealer.open(String(legacy.dropLast(2)) + "AA", boundTo: Self.place) == nil)
        // Nor does a pwe2 value relabelled as pwe1 (its tag covers the place).
        #expect(sealer.open("pwe1:" + sealer.seal("token", boundTo: Self.place).dropFirst(5), boundTo: Self.place) == nil)
    }

    @Test func previousKeysOpenButNeverSeal() throws {
        let old = try StoreSealer(keys: StoreKeys(current: Self.older))
        let rotated = try StoreSealer(keys: StoreKeys(current: Self.key, previous: [Self.older]))
        #expect(rotated.previousKeyCount == 1)
        let before = old.seal("token", boundTo: Self.place)
        #expect(rotated.open(before, boundTo: Self.place) == "token")
        #expect(rotated.seal("token", boundTo: Self.place).hasPrefix("pwe2:\(try #require(rotated.keyID)):"))
        #expect(try StoreSealer(keys: StoreKeys(current: Self.key)).open(before, boundTo: Self.place) == nil)
        #expect(old.open(rotated.seal("token", boundTo: Self.place), boundTo: Self.place) == nil)
    }

    @Test func whatDoesNotOpenIsNil() throws {
        let sealer = try StoreSealer(keys: StoreKeys(current: Self.key))
        let sealed = sealer.seal("token", boundTo: Self.place)
        let id = try #require(sealer.keyID)
        let payload = String(sealed.dropFirst("pwe2:\(id):".count))
        var flipped = Array(payload.utf8)
        flipped[5] = flipped[5] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        for bad in [
            "pwe2:\(id):" + String(decoding: flipped, as: UTF8.self),  // altered ciphertext
            "pwe2:\(id):" + payload.dropLast(2),  // cut short
            "pwe2:\(id):",  // nothing
            "pwe2:\(id):" + payload + "!",  // not base64url
            "pwe2:0000000000000000:" + payload,  // a key id nobody holds
            "pwe2:\(id.prefix(15)):" + payload,  // a short id
            "pwe2:" + payload,  // no id
        ] {
            #expect(sealer.open(bad, boundTo: Self.place) == nil, "\(bad)")
        }
        // The key id is authenticated: the same bytes under another key's id do not open there.
        let other = try StoreSealer(keys: StoreKeys(current: Self.older, previous: [Self.key]))
        #expect(other.open("pwe2:\(try #require(other.keyID)):" + payload, boundTo: Self.place) == nil)
        #expect(other.open(sealed, boundTo: Self.place) == "token")
    }

    /// Plaintext from before the key passes through (unless `require_sealed` refuses it); without
    /// a key nothing is sealed and a sealed value does not open.
    @Test func plaintextPassesAndNoneSealsNothing() throws {
        let sealer = try StoreSealer(keys: StoreKeys(current: Self.key))
        #expect(sealer.open(#"{"pushDeviceTokenId":"x"}"#, boundTo: Self.place) == #"{"pushDeviceTokenId":"x"}"#)
        #expect(sealer.open("fcm-token", boundTo: Self.place) == "fcm-token")
        #expect(!StoreSealer.none.isEnabled)
        #expect(StoreSealer.none.seal("fcm-token", boundTo: Self.place) == "fcm-token")
        #expect(StoreSealer.none.open("fcm-token", boundTo: Self.place) == "fcm-token")
        #expect(StoreSealer.none.open(sealer.seal("fcm-token", boundTo: Self.place), boundTo: Self.place) == nil)
        #expect(throws: CryptoError.self) { try StoreSealer(keys: StoreKeys(current: [1, 2, 3])) }
        #expect(throws: CryptoError.self) { try StoreSealer(keys: StoreKeys(current: Self.key, previous: [[]])) }
        let strict = try StoreSealer(keys: StoreKeys(current: Self.key), requireSealed: true)
        #expect(strict.open("fcm-token", boundTo: Self.place) == nil)
        #expect(strict.open(strict.seal("fcm-token", boundTo: Self.place), boundTo: Self.place) == "fcm-token")
        #expect(strict.open(try Self.legacySealed("fcm-token", key: Self.key), boundTo: Self.place) == "fcm-token")
    }

    @Test func anOutboxEntrySealsItsTokensAndWebPushSecrets() throws {
        let sealer = try StoreSealer(keys: StoreKeys(current: Self.key))
        let endpoint = "https://fcm.googleapis.com/fcm/send/" + UUID().uuidString
        let previous = "https://fcm.googleapis.com/fcm/send/" + UUID().uuidString
        let p256dh = Base64URL.encode([4] + SecureRandom.bytes(64)), auth = Base64URL.encode(SecureRandom.bytes(16))
        let installation = Installation(platform: .web, pushService: .webPush, pushToken: endpoint, webPushKeys: WebPushKeys(p256dh: p256dh, auth: auth),
                                        environment: .production, previousPushToken: previous, installationID: "inst-1",
                                        metadata: InstallationMetadata(appVersion: "1.2", osVersion: nil, deviceModel: nil, locale: "sv-SE", timezone: nil))
        let entry = OutboxEntry(operation: .register, app: "shop", upstream: "nn", contactID: "alice", requestID: "r1", acceptedAtMillis: 1_700_000_000_000,
                                pushToken: endpoint, installation: installation)
        let text = entry.encoded(sealer: sealer)
        for secret in [endpoint, previous, p256dh, auth, "alice"] { #expect(!text.contains(secret)) }
        #expect(text.contains(#""app":"shop""#) && text.contains(#""installation_id":"inst-1""#))
        #expect(try OutboxEntry.decode(text, sealer: sealer).get() == entry)
        #expect(OutboxEntry.decode(text) == .failure(.unreadable("token")))
        #expect(OutboxEntry.decode(text, sealer: try StoreSealer(keys: StoreKeys(current: Self.older))) == .failure(.unreadable("token")))
        // An entry queued before the key was set is read as it is.
        #expect(try OutboxEntry.decode(entry.encoded(), sealer: sealer).get() == entry)
    }
}
