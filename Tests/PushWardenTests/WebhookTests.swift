import Foundation
import HTTPClient
import HTTPServer
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

/// Lifecycle events to the backend: a real loopback receiver, a real sidecar over a real
/// redis-server, each POST's Standard Webhooks signature checked by Python's own `hmac`.
@Suite struct WebhookTests {
    static let secret = "whsec_" + Data(SecureRandom.bytes(32)).base64EncodedString()

    static var secrets: [SecretRef: String] {
        var secrets = DeadTokenTests.secrets
        secrets[.env("TEST_WEBHOOK_SECRET")] = secret
        return secrets
    }

    static func webhooks(_ receiver: MockServer, events: String = "[registered, moved, unregistered, evicted, expired, erased, dead_token, logged_out, dead_lettered]",
                         maxAge: String? = nil) -> String {
        """
        webhooks:
          - url: http://127.0.0.1:\(receiver.port)/hooks/pushwarden
            secret: {env: TEST_WEBHOOK_SECRET}
            events: \(events)
        """ + (maxAge.map { "\n    max_age: " + $0 } ?? "")
    }

    /// A receiver answering 204 unless a scripted answer waits.
    static func receiver() throws -> MockServer {
        let server = try MockServer()
        server.respond { _ in HTTPResponse(status: 204) }
        return server
    }

    /// Waits until `count` deliveries arrived (or 10 s passed) and returns them.
    static func deliveries(_ receiver: MockServer, atLeast count: Int, seconds: Int = 10) async throws -> [MockRequest] {
        let deadline = Date().addingTimeInterval(Double(seconds))
        while receiver.received.count < count, Date() < deadline { try await Task.sleep(for: .milliseconds(20)) }
        return receiver.received
    }

    static func types(_ requests: [MockRequest]) -> [String] { requests.compactMap { $0.object?["type"]?.stringValue } }

    /// How many of `requests` carry a signature Python's `hmac` computes the same from the secret.
    static func verifiedByPython(_ requests: [MockRequest]) throws -> Int {
        let script = """
            import base64, hashlib, hmac, json, sys
            secret = sys.argv[1]
            key = base64.b64decode(secret[len("whsec_"):])
            ok = 0
            for d in json.load(sys.stdin):
                signed = (d["id"] + "." + d["timestamp"] + "." + d["body"]).encode()
                expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
                given = [s.split(",", 1)[1] for s in d["signature"].split(" ") if s.startswith("v1,")]
                if any(hmac.compare_digest(expected, s) for s in given):
                    ok += 1
            print(ok)
            """
        let input = JSONValue.array(requests.map { request in
            .object(JSONObject([
                JSONMember("id", .string(request.headers["webhook-id"] ?? "")),
                JSONMember("timestamp", .string(request.headers["webhook-timestamp"] ?? "")),
                JSONMember("signature", .string(request.headers["webhook-signature"] ?? "")),
                JSONMember("body", .string(request.bodyText)),
            ]))
        }).encodedString()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", script, secret]
        let stdin = Pipe(), stdout = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        try process.run()
        stdin.fileHandleForWriting.write(Data(input.utf8))
        try stdin.fileHandleForWriting.close()
        let output = stdout.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Int(String(decoding: output, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }

    static func metric(_ h: SidecarHarness, _ event: String, _ result: String) -> String? {
        let prefix = "pushwarden_webhooks_total{event=\"\(event)\",result=\"\(result)\"} "
        return h.sidecar.metrics.render().split(separator: "\n").first { $0.hasPrefix(prefix) }.map { String($0.dropFirst(prefix.count)) }
    }

    // MARK: Events

    @Test func eachLifecycleEventIsDeliveredSignedAndVerifiableByPythonWithoutAnyRawToken() async throws {
        let receiver = try Self.receiver(), voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await SidecarHarness(upstreams: InventoryTests.voyado(voyado), secrets: Self.secrets,
                                         clientYAML: "      platforms: [ios, android]\n      max_installations: 2",
                                         topLevel: DeadTokenTests.admin + "\n" + Self.webhooks(receiver))
        let alice = "alice-" + UUID().uuidString, bob = "bob-" + UUID().uuidString
        let moving = InventoryTests.android(), first = InventoryTests.android(), second = InventoryTests.android()
        let third = InventoryTests.android()
        #expect(try await h.post("/installations", InventoryTests.android(moving), contact: alice).status == 202)
        // A dedupe hit says nothing new: no second `registered`.
        #expect(try await h.post("/installations", InventoryTests.android(moving), contact: alice).outcome("voyado") == "unchanged")
        _ = try await Self.deliveries(receiver, atLeast: 1)
        #expect(try await h.post("/installations", InventoryTests.android(moving), contact: bob).status == 202)
        _ = try await Self.deliveries(receiver, atLeast: 2)
        #expect(try await h.post("/installations/unregister", InventoryTests.unregister(moving), contact: bob).outcome("voyado") == "forwarded")
        _ = try await Self.deliveries(receiver, atLeast: 3)
        for token in [first, second, third] {
            #expect(try await h.post("/installations", InventoryTests.android(token), contact: alice).status == 202)
            // Eviction goes by last-seen time in milliseconds: two registrations in one millisecond
            // would tie (broken by digest), and `second` could be the one evicted.
            try await Task.sleep(for: .milliseconds(5))
        }
        _ = try await Self.deliveries(receiver, atLeast: 7)  // three registered, one evicted
        #expect(try await DeadTokenTests.report(h, DeadTokenTests.reports([DeadTokenTests.dead(second)])).status == 202)
        _ = try await Self.deliveries(receiver, atLeast: 8)
        #expect(try await h.installations("DELETE", contact: alice).status == 202)
        let received = try await Self.deliveries(receiver, atLeast: 9)

        // Each event is queued in a task of its own: within one request's events the order may vary.
        #expect(Self.types(received).sorted() == ["dead_token", "erased", "evicted", "moved", "registered", "registered", "registered",
                                                  "registered", "unregistered"], "\(Self.types(received))")
        #expect(Array(Self.types(received).prefix(3)) == ["registered", "moved", "unregistered"])
        #expect(received.count == 9, "\(Self.types(received))")
        #expect(try Self.verifiedByPython(received) == received.count)
        // The check is a real one: one byte changed in the body and the signature no longer holds.
        var altered = received[0]
        altered.body = Array(altered.bodyText.replacingOccurrences(of: "android", with: "androiD").utf8)
        #expect(try Self.verifiedByPython([altered]) == 0)
        #expect(Set(received.compactMap { $0.headers["webhook-id"] }).count == received.count)
        for request in received {
            #expect(request.method == "POST")
            #expect(request.path == "/hooks/pushwarden")
            let stamp = Int(request.headers["webhook-timestamp"] ?? "") ?? 0
            #expect(abs(stamp - Int(Date().timeIntervalSince1970)) < 60)
            for token in [moving, first, second, third] { #expect(!request.bodyText.contains(token)) }
        }
        let moved = received.first { $0.object?["type"]?.stringValue == "moved" }?.object?["data"]?.objectValue
        #expect(moved?["contact_id"]?.stringValue == bob)
        #expect(moved?["token"]?.stringValue == Redact.token(moving))
        #expect(moved?["platform"]?.stringValue == "android")
        #expect(moved?["app"]?.stringValue == h.app)
        let erased = received.first { $0.object?["type"]?.stringValue == "erased" }?.object?["data"]?.objectValue
        #expect(erased?["contact_id"]?.stringValue == alice)
        #expect(erased?["upstreams"]?.objectValue?["voyado"]?.stringValue == "forwarded")
        #expect(erased?["reason"]?.stringValue == "erased")
        #expect(await OutboxTests.eventually { Self.metric(h, "registered", "delivered") == "4" })  // counted once the answer is read
        #expect(await OutboxTests.eventually { Self.metric(h, "erased", "delivered") == "1" })  // counted once the answer is read
        await h.stop()
        await voyado.stop()
        await receiver.stop()
    }

    @Test func aBackChannelLogoutIsAnEvent() async throws {
        let receiver = try Self.receiver(), voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await BackchannelLogoutTests.harness(voyado, topLevel: Self.webhooks(receiver, events: "[logged_out]"),
                                                         secrets: [.env("TEST_WEBHOOK_SECRET"): Self.secret])
        let contact = "alice-" + UUID().uuidString, phone = InventoryTests.apns()
        #expect(try await BackchannelLogoutTests.register(h, phone, contact: contact, sid: "sid-1").status == 202)
        BackchannelLogoutTests.expectLoggedOut(try await BackchannelLogoutTests.logOut(h, try BackchannelLogoutTests.logoutToken(sub: contact, sid: "sid-1")))
        let received = try await Self.deliveries(receiver, atLeast: 1)
        #expect(Self.types(received) == ["logged_out"])  // `registered` is not one this receiver takes
        #expect(received.first?.object?["data"]?.objectValue?["contact_id"]?.stringValue == contact)
        #expect(try Self.verifiedByPython(received) == 1)
        await h.stop()
        await voyado.stop()
        await receiver.stop()
    }

    @Test func anExpiredInstallationIsAnEvent() async throws {
        let receiver = try Self.receiver(), voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await SidecarHarness(upstreams: InventoryTests.voyado(voyado) + "\n    inventory:\n      expire_after: 1500ms",
                                         secrets: Self.secrets, topLevel: Self.webhooks(receiver, events: "[expired]"))
        let contact = "idle-" + UUID().uuidString, idle = InventoryTests.apns()
        #expect(try await h.post("/installations", InventoryTests.ios(idle), contact: contact).status == 202)
        let received = try await Self.deliveries(receiver, atLeast: 1, seconds: 15)
        #expect(Self.types(received) == ["expired"])
        let data = received.first?.object?["data"]?.objectValue
        #expect(data?["contact_id"]?.stringValue == contact)
        #expect(data?["token"]?.stringValue == Redact.token(idle))
        #expect(data?["platform"]?.stringValue == "ios")
        #expect(data?["reason"]?.stringValue == "expired")
        #expect(try Self.verifiedByPython(received) == 1)
        await h.stop()
        await voyado.stop()
        await receiver.stop()
    }

    @Test func aQuarantinedReportReleasedByTheCommandIsADeadTokenEvent() async throws {
        let receiver = try Self.receiver(), voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await SidecarHarness(upstreams: InventoryTests.voyado(voyado) + "\n    dead_tokens: {min_count: 0, max_share: 0.01%}",
                                         secrets: Self.secrets, topLevel: DeadTokenTests.admin + "\n" + Self.webhooks(receiver, events: "[dead_token]"))
        let fcm = InventoryTests.android()
        #expect(try await h.post("/installations", InventoryTests.android(fcm)).status == 202)
        #expect(try await DeadTokenTests.report(h, DeadTokenTests.reports([DeadTokenTests.dead(fcm)])).json?["quarantined"] == .number("1"))
        #expect(receiver.received.isEmpty)  // held, not removed: nothing to tell
        let run = try await QuarantineCommand.run(.release, policy: h.policy, redisURL: RedisServer.shared.url, app: h.app, secrets: h.secrets,
                                                  logger: Logger(label: "test", level: .warning, sink: h.logs)) { _ in }
        #expect(run.handled == 1)
        // Queued by the command before it returned; the sidecar's worker delivers it.
        let received = try await Self.deliveries(receiver, atLeast: 1)
        #expect(Self.types(received) == ["dead_token"])
        #expect(received.first?.object?["data"]?.objectValue?["token"]?.stringValue == Redact.token(fcm))
        await h.stop()
        await voyado.stop()
        await receiver.stop()
    }

    // MARK: Delivery

    @Test func aReceiverThatAnswers500GetsTheSameIdAgainSignedForItsAttempt() async throws {
        let receiver = try Self.receiver(), voyado = try MockVoyado(apiKey: "voyado-key")
        receiver.enqueue([MockAnswer(status: 500)])
        let h = try await SidecarHarness(upstreams: InventoryTests.voyado(voyado), secrets: Self.secrets, topLevel: Self.webhooks(receiver))
        #expect(try await h.post("/installations", InventoryTests.android(InventoryTests.android())).status == 202)
        let received = try await Self.deliveries(receiver, atLeast: 2)
        #expect(received.count == 2)
        #expect(received.map(\.bodyText).allSatisfy { $0 == received.first?.bodyText })
        #expect(received[0].headers["webhook-id"] != nil)
        #expect(received[0].headers["webhook-id"] == received.last?.headers["webhook-id"])
        #expect(try Self.verifiedByPython(received) == 2)
        #expect(await OutboxTests.eventually { Self.metric(h, "registered", "retried") == "1" })  // counted once the answer is read
        #expect(await OutboxTests.eventually { Self.metric(h, "registered", "delivered") == "1" })  // counted once the answer is read
        await h.stop()
        await voyado.stop()
        await receiver.stop()
    }

    @Test func anEventOlderThanMaxAgeIsDeadLetteredListedByOutboxAndReplayedWithItsId() async throws {
        let receiver = try MockServer(), voyado = try MockVoyado(apiKey: "voyado-key")
        receiver.respond { _ in HTTPResponse(status: 503) }
        let h = try await SidecarHarness(upstreams: InventoryTests.voyado(voyado), secrets: Self.secrets,
                                         topLevel: Self.webhooks(receiver, events: "[registered]", maxAge: "1s"))
        #expect(try await h.post("/installations", InventoryTests.android(InventoryTests.android())).status == 202)
        let deadline = Date().addingTimeInterval(10)
        while Self.metric(h, "registered", "dead_lettered") != "1", Date() < deadline { try await Task.sleep(for: .milliseconds(50)) }
        #expect(Self.metric(h, "registered", "dead_lettered") == "1")
        let tried = receiver.received
        #expect(!tried.isEmpty)
        var listed: [String] = []
        let url = RedisServer.shared.url
        #expect(try await OutboxCommand.run(.list, redisURL: url, app: h.app, upstream: "webhook.0") { listed.append($0) }.handled == 1)
        #expect(listed.first?.contains("\(h.app)/webhook.0  webhook") == true, "\(listed)")
        #expect(listed.first?.contains("reason max_age") == true, "\(listed)")
        #expect(listed.first?.contains("webhook  id \(tried.first?.headers["webhook-id"] ?? "?")  contact") == true, "\(listed)")

        // Back in the outbox once the receiver is up: delivered with the id it always had.
        receiver.respond { _ in HTTPResponse(status: 204) }
        receiver.reset()
        _ = try await OutboxCommand.run(.replay, redisURL: url, app: h.app, upstream: "webhook.0", policy: h.policy) { listed.append($0) }
        let replayed = try await Self.deliveries(receiver, atLeast: 1)
        #expect(replayed.first?.headers["webhook-id"] == tried.first?.headers["webhook-id"])
        #expect(try Self.verifiedByPython(replayed) == replayed.count)
        await h.stop()
        await voyado.stop()
        await receiver.stop()
    }

    @Test func withAStoreKeyAQueuedEventHoldsTheContactIdSealed() async throws {
        let receiver = try MockServer(), voyado = try MockVoyado(apiKey: "voyado-key")
        receiver.respond { _ in HTTPResponse(status: 503) }
        var secrets = Self.secrets
        secrets[.env("PW_STORE_KEY")] = EncryptionAtRestTests.storeKey
        let h = try await SidecarHarness(upstreams: InventoryTests.voyado(voyado), secrets: secrets,
                                         topLevel: EncryptionAtRestTests.storeBlock() + Self.webhooks(receiver, events: "[registered]", maxAge: "1s"))
        let contact = "contact-" + UUID().uuidString
        #expect(try await h.post("/installations", InventoryTests.android(InventoryTests.android()), contact: contact).status == 202)
        #expect(await OutboxTests.eventually { Self.metric(h, "registered", "dead_lettered") == "1" })
        // The receiver did get the contact id; Redis never held it in clear, queued or dead-lettered.
        #expect(receiver.received.first?.bodyText.contains(contact) == true)
        let contents = try await RedisContents.read(RedisServer.shared.configuration())
        #expect(contents.occurrences(of: contact).isEmpty)
        let dead = contents.items.filter { $0.key == "pw:v2:{outbox:\(h.app):webhook.0:dead}:s" }
        #expect(dead.count == 1 && dead.allSatisfy { $0.texts.contains { $0.contains("pwe2:") } }, "\(contents.items.map(\.key))")
        await h.stop()
        await voyado.stop()
        await receiver.stop()
    }

    @Test func aProviderDeliveryGivenUpIsADeadLetteredEvent() async throws {
        let receiver = try Self.receiver(), voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await SidecarHarness(upstreams: OutboxTests.voyado(voyado), secrets: Self.secrets,
                                         topLevel: Self.webhooks(receiver, events: "[dead_lettered]"))
        voyado.enqueue(.init(status: 400, headers: ["Content-Type": "application/json"], body: #"{"error":{"code":"invalid_platform","message":"x"}}"#))
        let token = InventoryTests.android()
        #expect(try await h.post("/installations", InventoryTests.android(token)).outcome("voyado") == "queued")
        let received = try await Self.deliveries(receiver, atLeast: 1)
        #expect(Self.types(received) == ["dead_lettered"])
        let data = received.first?.object?["data"]?.objectValue
        #expect(data?["token"]?.stringValue == Redact.token(token))
        #expect(data?["upstreams"]?.objectValue?["voyado"]?.stringValue == "dead_lettered")
        #expect(data?["reason"]?.stringValue == "register upstream_rejected", "\(received.first?.bodyText ?? "")")
        #expect(received.first?.bodyText.contains(token) == false)
        await h.stop()
        await voyado.stop()
        await receiver.stop()
    }

    @Test func aReloadThatChangesTheWebhooksIsRefused() async throws {
        let receiver = try Self.receiver(), voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await SidecarHarness(upstreams: InventoryTests.voyado(voyado), secrets: Self.secrets, topLevel: Self.webhooks(receiver))
        var changed = h.policy
        changed.webhooks[0].events = [.erased]
        guard case .failure(let error) = await h.sidecar.reload(changed, sha256: "x") else {
            Issue.record("reloaded")
            return
        }
        #expect(error.description.contains("the webhooks block changed"))
        guard case .success = await h.sidecar.reload(h.policy, sha256: "y") else {
            Issue.record("the unchanged policy was refused")
            return
        }
        await h.stop()
        await voyado.stop()
        await receiver.stop()
    }

    @Test func webhooksWithoutRedisAreRefusedAtStart() async throws {
        let receiver = try Self.receiver(), voyado = try MockVoyado(apiKey: "voyado-key")
        do {
            let h = try await SidecarHarness(upstreams: InventoryTests.voyado(voyado), secrets: Self.secrets, memoryStore: true,
                                             topLevel: Self.webhooks(receiver))
            Issue.record("started without Redis")
            await h.stop()
        } catch let error as ConfigurationError {
            #expect(error.description.contains("webhooks are delivered through the outbox and need the Redis store"), "\(error)")
        }
        await voyado.stop()
        await receiver.stop()
    }

    @Test func aSecretThatIsNotWhsecIsRefusedWithoutItsValue() async throws {
        let receiver = try Self.receiver(), voyado = try MockVoyado(apiKey: "voyado-key")
        var secrets = Self.secrets
        secrets[.env("TEST_WEBHOOK_SECRET")] = "plain-secret-value"
        do {
            let h = try await SidecarHarness(upstreams: InventoryTests.voyado(voyado), secrets: secrets, topLevel: Self.webhooks(receiver))
            Issue.record("started with a bad secret")
            await h.stop()
        } catch let error as ConfigurationError {
            #expect(error.description.contains("must be whsec_ followed by base64"), "\(error)")
            #expect(!error.description.contains("plain-secret-value"))
        }
        await voyado.stop()
        await receiver.stop()
    }

    /// A policy's one app, for the tests that read only its `webhooks` block.
    static let oneApp = """
            version: 1
            apps:
              shop:
                session: {type: jwt, algorithms: [HS256], hmac_secret: {env: S}, issuer: https://a, audience: b, contact_claim: c}
                client: {platforms: [ios]}
                dedupe: {refresh_after: 1h}
                upstreams:
                  - {name: voyado, provider: voyado, base_path: https://v.example/api, api_key: {env: K}}

            """

    @Test func thePolicyRefusesPlainHTTPToAnotherHostAndUnknownEvents() {
        let yaml = Self.oneApp + """
            webhooks:
              - url: http://hooks.example.com/pw
                secret: {env: W}
                events: [registered, born]
            """
        guard case .failure(let diagnostics) = PolicyLoader.load(text: yaml, path: "p.yaml") else {
            Issue.record("accepted")
            return
        }
        let messages = diagnostics.diagnostics.map(\.description)
        #expect(messages.contains { $0.contains("webhooks[0].url") && $0.contains("plain http is allowed only to a loopback host") }, "\(messages)")
        #expect(messages.contains { $0.contains("webhooks[0].events[1]") && $0.contains("unknown event born") }, "\(messages)")
    }

    @Test func explainNamesTheReceivingHostsAndTheSecretByNameOnly() throws {
        let yaml = Self.oneApp + """
            webhooks:
              - url: https://crm.example.com/hooks/pushwarden
                secret: {env: CRM_WEBHOOK_SECRET}
                events: [erased, dead_token]
                max_age: 2h
            """
        let policy = try PolicyLoader.load(text: yaml, path: "p.yaml").get()
        #expect(policy.webhooks == [WebhookPolicy(url: "https://crm.example.com/hooks/pushwarden", host: "crm.example.com",
                                                  secret: .env("CRM_WEBHOOK_SECRET"), events: [.erased, .deadToken], maxAgeMillis: 7_200_000)])
        let text = PolicyExplainer.explain(policy)
        #expect(text.contains("  - webhooks[0] to host crm.example.com (https://crm.example.com/hooks/pushwarden): erased, dead_token; max_age 2h; "
                              + "secret referenced (name only): env:CRM_WEBHOOK_SECRET"), "\(text)")
        let html = PolicyExplainerHTML.render(policy)
        #expect(html.contains("host <strong>crm.example.com</strong>"))
        let without = try PolicyLoader.load(text: yaml.components(separatedBy: "webhooks:")[0], path: "p.yaml").get()
        #expect(PolicyExplainer.explain(without).contains("Webhooks: none"))
    }
}
