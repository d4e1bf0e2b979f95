import HTTPClient
import PWCore
import PWCrypto
import PWPolicy
import Providers

/// One webhook receiver as the running process knows it: the policy's entry with its signing key
/// read. Its events wait in an outbox of their own per app, named `webhook.<index>` (a name no
/// upstream can take, so `pushwarden outbox` lists, replays and drops them beside the providers').
package struct WebhookEndpoint: Sendable {
    package let index: Int
    package let url: String
    package let host: String
    let key: [UInt8]
    let events: Set<WebhookPolicy.Event>
    let maxAgeMillis: Int

    package init(index: Int, policy: WebhookPolicy, key: [UInt8]) {
        self.index = index
        url = policy.url
        host = policy.host
        self.key = key
        events = Set(policy.events)
        maxAgeMillis = policy.maxAgeMillis
    }

    /// The outbox name of the `index`th receiver.
    package static func upstreamName(_ index: Int) -> String { "webhook.\(index)" }

    package func target(app: String) -> OutboxTarget {
        OutboxTarget(app: app, upstream: Self.upstreamName(index), shards: 1)
    }
}

/// Standard Webhooks signing: `v1,` and the standard base64 of HMAC-SHA256 over `id.timestamp.body`.
package enum WebhookSignature {
    package static func sign(id: String, timestamp: Int, body: [UInt8], key: [UInt8]) -> String {
        "v1," + base64(HMACSHA256.mac(key: key, message: Array("\(id).\(timestamp).".utf8) + body))
    }

    /// Standard base64 with padding (RFC 4648 section 4), from the base64url the project has.
    static func base64(_ bytes: [UInt8]) -> String {
        var text = Base64URL.encode(bytes).map { $0 == "-" ? "+" : $0 == "_" ? "/" : $0 }
        while text.count % 4 != 0 { text.append("=") }
        return String(text)
    }
}

/// What happened to one installation, as a receiver reads it: never the push token, only its
/// short hash.
package struct WebhookEvent: Sendable {
    package var type: WebhookPolicy.Event
    package var app: String
    package var contactID: String
    /// `tok:` and a short hash (`Redact.token`).
    package var token: String
    package var platform: String?
    package var upstreams: [(String, String)]
    package var reason: String?
    package var requestID: String

    /// The body, with the time the event happened.
    func body(atMillis millis: Int) -> String {
        var data: [JSONMember] = [
            JSONMember("app", .string(app)),
            JSONMember("contact_id", .string(contactID)),
            JSONMember("token", .string(token)),
        ]
        if let platform { data.append(JSONMember("platform", .string(platform))) }
        data.append(JSONMember("upstreams", .object(JSONObject(upstreams.map { JSONMember($0.0, .string($0.1)) }))))
        if let reason { data.append(JSONMember("reason", .string(reason))) }
        return JSONValue.object(JSONObject([
            JSONMember("type", .string(type.rawValue)),
            JSONMember("timestamp", .string(RFC3339.utc(epochMillis: Int64(millis)))),
            JSONMember("data", .object(JSONObject(data))),
        ])).encodedString()
    }
}

extension Outbox {
    /// Whether any receiver takes `type`: checked before an event is built, so an app without
    /// webhooks pays nothing.
    package func wantsWebhook(_ type: WebhookPolicy.Event) -> Bool { webhooks.contains { $0.events.contains(type) } }

    /// Waits until every event handed to `emit` was queued (or refused), for at most `millis`;
    /// false if some still wait: what a process does before it exits.
    package func webhooksSettled(withinMillis millis: UInt64) async -> Bool {
        let deadline = MonotonicClock.nowMillis() + millis
        while emitting.load(ordering: .acquiring) > 0 {
            guard MonotonicClock.nowMillis() < deadline else { return false }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return true
    }

    /// Counts an event from the moment it is handed over, before its task runs, so that
    /// `webhooksSettled` cannot miss one.
    func emitting(_ event: WebhookEvent, metrics: Metrics, logger: Logger) {
        emitting.wrappingAdd(1, ordering: .relaxed)
        Task {
            await emit(event, metrics: metrics, logger: logger)
            emitting.wrappingSubtract(1, ordering: .releasing)
        }
    }

    /// Queues the event for every receiver that takes it, each with a `webhook-id` of its own that
    /// stays with it through every retry and a replay. A store failure is logged and counted.
    package func emit(_ event: WebhookEvent, metrics: Metrics, logger: Logger) async {
        let now = SystemClock.epochMillis()
        let body = event.body(atMillis: now)
        for endpoint in webhooks where endpoint.events.contains(event.type) {
            var entry = OutboxEntry(operation: .webhook, app: event.app, upstream: WebhookEndpoint.upstreamName(endpoint.index),
                                    contactID: event.contactID, requestID: event.requestID, acceptedAtMillis: Int64(now),
                                    pushToken: "msg_" + ProcessUnique.next(), installation: nil)
            entry.event = body
            do {
                try await enqueue(entry, mark: .cleared, on: nil)
                metrics.webhook(event: event.type.rawValue, result: "queued")
            } catch {
                metrics.webhook(event: event.type.rawValue, result: "unqueued")
                logger.bounded(.warning, "webhook event not queued", key: "webhook" + event.app, [
                    ("app", event.app), ("event", event.type.rawValue), ("webhook", endpoint.host), ("error", error.detail)])
            }
        }
    }
}

/// Delivers one receiver's events of one app: reads its outbox like an upstream's worker, POSTs
/// each event signed for this attempt (a fresh `webhook-timestamp`, the same `webhook-id`),
/// retries any answer but 2xx with backoff, and dead-letters an event older than `max_age`.
/// Events are independent: one waiting for its retry holds back no other.
package final class WebhookWorker: Sendable {
    let streams: any OutboxQueue
    let endpoint: WebhookEndpoint
    let target: OutboxTarget
    let transport: any UpstreamTransport
    let consumer: String
    let metrics: Metrics
    let logger: Logger
    let signal: OutboxSignal
    let retry: RetryPolicy
    static let claimAfterMillis = 30_000
    /// How many events one pass reads.
    static let batch = 64

    package init(streams: any OutboxQueue, endpoint: WebhookEndpoint, app: String, transport: any UpstreamTransport, consumer: String,
                 metrics: Metrics, logger: Logger, signal: OutboxSignal,
                 retry: RetryPolicy = RetryPolicy(backoffMillis: 500, maxBackoffMillis: 300_000)) {
        self.streams = streams
        self.endpoint = endpoint
        target = endpoint.target(app: app)
        self.transport = transport
        self.consumer = consumer
        self.metrics = metrics
        self.logger = logger
        self.signal = signal
        self.retry = retry
    }

    /// Until cancelled; what was read and not delivered stays pending for the next holder.
    package func run() async {
        while !Task.isCancelled {
            do {
                try await streams.prepare(target)
                break
            } catch {
                logger.bounded(.warning, "webhook outbox unavailable", key: target.app + target.upstream, [
                    ("app", target.app), ("webhook", endpoint.host), ("error", error.detail)])
                await signal.wait(upTo: 1000)
            }
        }
        var retries = RetrySchedule()
        var reader = ShardReader(shard: 0)
        var idle: UInt64 = 25
        while !Task.isCancelled {
            var left = 0
            do {
                if let messages = try await reader.read(streams, of: target, consumer: consumer, count: Self.batch,
                                                        claimAfterMillis: Self.claimAfterMillis, on: nil) {
                    let now = MonotonicClock.nowMillis()
                    let due = messages.filter { retries.isDue($0.id, now: now) }
                    let results = await mapConcurrently(due) { [self] message in
                        let outcome = await deliver(message)
                        return (message.id, outcome)
                    }
                    for (id, outcome) in results {
                        switch outcome {
                        case .left:
                            left += 1
                            retries.succeeded(id)
                        case .retry(let after):
                            retries.failed(id, now: MonotonicClock.nowMillis(), policy: retry, retryAfterSeconds: .some(after))
                        }
                    }
                    reader.finished(read: messages.count, left: left, count: Self.batch)
                }
            } catch {
                reader.forget()
                logger.bounded(.warning, "webhook outbox unavailable", key: target.app + target.upstream, [
                    ("app", target.app), ("webhook", endpoint.host), ("error", error.detail)])
            }
            if left > 0 {
                idle = 25
            } else {
                await signal.wait(upTo: min(idle, retries.nextDueIn().map { max(1, $0) } ?? idle))
                idle = min(idle * 2, 1000)
            }
        }
        await streams.release(0, of: target, owner: consumer)
    }

    enum Outcome: Sendable {
        /// Delivered or dead-lettered: it left the stream.
        case left
        /// Try again later (the receiver's `Retry-After` in seconds, if it sent one).
        case retry(Int?)
    }

    private func deliver(_ message: OutboxMessage) async -> Outcome {
        do {
            let entry: OutboxEntry
            switch streams.decode(message) {
            case .success(let value) where value.operation == .webhook && value.app == target.app && value.upstream == target.upstream:
                entry = value
            case .failure(.unreadable):
                try await streams.deadLetter(message, shard: 0, of: target, reason: "unreadable", status: nil, code: nil, clearing: nil, on: nil)
                return .left
            default:
                try await streams.deadLetter(message, shard: 0, of: target, reason: "malformed", status: nil, code: nil, clearing: nil, on: nil)
                return .left
            }
            let body = Array((entry.event ?? "").utf8)
            let type = Self.type(of: body)
            if OutboxWorker.age(now: SystemClock.epochMillis(), accepted: entry.acceptedAtMillis) > endpoint.maxAgeMillis {
                logger.bounded(.warning, "webhook event outlived max_age: dead-lettered", key: target.app + target.upstream, [
                    ("app", target.app), ("webhook", endpoint.host), ("event", type), ("id", entry.pushToken)])
                try await streams.deadLetter(message, shard: 0, of: target, reason: "max_age", status: nil, code: nil, clearing: nil, on: nil)
                metrics.webhook(event: type, result: "dead_lettered")
                return .left
            }
            let timestamp = SystemClock.epochMillis() / 1000
            let headers: HTTPHeaders = [
                "Content-Type": "application/json",
                "webhook-id": entry.pushToken,
                "webhook-timestamp": String(timestamp),
                "webhook-signature": WebhookSignature.sign(id: entry.pushToken, timestamp: timestamp, body: body, key: endpoint.key),
            ]
            let request = HTTPClientRequest(method: "POST", url: endpoint.url, headers: headers, body: body, timeoutMillis: 10_000,
                                            connectTimeoutMillis: 3000)
            let response: HTTPClientResponse
            do {
                response = try await transport.send(request, on: nil)
            } catch {
                metrics.webhook(event: type, result: "retried")
                logger.bounded(.warning, "webhook delivery failed: retried", key: target.app + target.upstream, [
                    ("app", target.app), ("webhook", endpoint.host), ("event", type), ("error", error.detail)])
                return .retry(nil)
            }
            guard (200...299).contains(response.status) else {
                metrics.webhook(event: type, result: "retried")
                logger.bounded(.warning, "webhook receiver refused: retried", key: target.app + target.upstream, [
                    ("app", target.app), ("webhook", endpoint.host), ("event", type), ("status", String(response.status))])
                return .retry(response.headers["Retry-After"].flatMap { Int($0) })
            }
            try await streams.done(message.id, shard: 0, of: target, clearing: nil, on: nil)
            metrics.webhook(event: type, result: "delivered")
            return .left
        } catch {
            return .retry(nil)  // the store failed: the entry stays pending and is read again
        }
    }

    /// The event's type from its body (for metrics and logs): only a name PushWarden writes.
    static func type(of body: [UInt8]) -> String {
        guard let name = (try? JSONValue.parse(body))?.objectValue?["type"]?.stringValue,
              let type = WebhookPolicy.Event(rawValue: name) else { return "unknown" }
        return type.rawValue
    }
}
