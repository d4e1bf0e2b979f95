import PWCore
import PWPolicy
import Providers
import RedisClient
import RedisStores
import Registration

/// `pushwarden outbox list|replay|drop --redis URL [--policy FILE] [--app A] [--upstream U]`: what
/// the dead-letter streams hold, tokens as short hashes; put back into the outbox; or deleted.
///
/// With `store.encryption_key`, entries hold their push tokens and Web Push secrets sealed: the
/// command opens them with the keys of the policy it is given (`sealer`), the same policy the
/// sidecars serve. Without them a sealed entry is named by id as one that could not be opened, can
/// be dropped, and is not replayed. A replayed entry is sealed again under the current key (without
/// a policy, an entry that was not sealed is written back as it was).
///
/// Where `replay` puts an entry: the shard its push token hashes to among the shards the workers
/// read. With the policy, its layout (an upstream the policy has no outbox for is refused); without,
/// the layout each running sidecar records every 2 s (`OutboxStreams.record`): none recorded, or
/// records that disagree (a rollout that changes `delivery`), and the entry stays a dead letter.
/// The dead letter's own `shards` field is never trusted.
extension RedisClient {
    /// The client a command (`outbox`, `audit verify`) talks to Redis through; close it when done.
    static func forCommand(_ url: String) throws(ConfigurationError) -> RedisClient {
        do {
            return RedisClient(configuration: try RedisConfiguration(url: url))
        } catch {
            throw ConfigurationError("invalid Redis URL: \(error.detail)")
        }
    }
}

public enum OutboxCommand {
    public enum Action: String, Sendable { case list, replay, drop }

    /// What a run did: the entries handled as asked, and those that could not be (each named by id
    /// in the output); the command exits non-zero when `failed` is not 0.
    public struct Report: Sendable, Equatable {
        public var handled = 0
        public var failed = 0
    }

    /// One line per dead letter, a line per entry that could not be handled (starting with its
    /// id), then a count line.
    /// - Parameter policy: the policy the sidecars serve: where `replay` places entries. Without
    ///   it, the layout the running sidecars recorded.
    public static func run(_ action: Action, redisURL: String, app: String?, upstream: String?, policy: Policy? = nil,
                           sealer: StoreSealer = .none, digests: KeyDigest = .unkeyed, write: (String) -> Void) async throws(ConfigurationError) -> Report {
        let client = try RedisClient.forCommand(redisURL)
        defer { client.close() }
        let streams = OutboxStreams(client: client, sealer: sealer, digests: digests)
        let found = try await scan(client, app: app, upstream: upstream)
        var report = Report()
        for target in found.dead {
            let letters: [(OutboxStreams.Message, [String: String])]
            do {
                letters = try await streams.deadLetters(of: target, count: 10_000)
            } catch {
                throw ConfigurationError("cannot read \(target.dead): \(error.detail)")
            }
            // Placement is decided once per stream, and only for a replay.
            var placement: Placement?
            if action == .replay, !letters.isEmpty {
                placement = try await place(target, policy: policy, records: found.records[Pair(target)] ?? [], client: client)
            }
            for (message, fields) in letters {
                let decoded = streams.decode(message)
                write(describe(message, fields: fields, decoded: decoded, target: target))
                do {
                    switch action {
                    case .list:
                        report.handled += 1
                        if case .failure(.unreadable) = decoded {
                            report.failed += 1
                            write("\(message.id) could not be opened: sealed with a store key not given (--policy FILE, with its store keys)")
                        }
                    case .replay:
                        switch refusal(decoded, target: target, placement: placement) {
                        case .some(let why):
                            report.failed += 1
                            write("\(message.id) not replayed: \(why); left in the dead letters")
                        case .none:
                            guard case .success(let entry) = decoded, case .shards(let destination)? = placement else { continue }
                            try await streams.replay(message, entry: entry, of: destination)
                            report.handled += 1
                        }
                    case .drop:
                        try await streams.drop(message, of: target)
                        report.handled += 1
                    }
                } catch {
                    throw ConfigurationError("\(action.rawValue) \(message.id): \(error.detail)")
                }
            }
        }
        write(summary(action, report))
        return report
    }

    private static func summary(_ action: Action, _ report: Report) -> String {
        switch action {
        case .list:
            return "\(report.handled) dead-lettered" + (report.failed > 0 ? ", \(report.failed) could not be opened without the store key" : "")
        case .replay:
            return "\(report.handled) replayed" + (report.failed > 0 ? ", \(report.failed) not replayed" : "")
        case .drop:
            return "\(report.handled) dropped" + (report.failed > 0 ? ", \(report.failed) not dropped" : "")
        }
    }

    // MARK: Where a replay goes

    /// Where one dead-letter stream's entries are replayed to, or why they are not.
    enum Placement: Equatable {
        case shards(OutboxStreams.Upstream)
        case refused(String)
    }

    /// Why an entry is not replayed, or nil when it goes to `placement`'s shards.
    static func refusal(_ decoded: Result<OutboxEntry, OutboxEntry.DecodingFailure>, target: OutboxStreams.Upstream,
                        placement: Placement?) -> String? {
        let entry: OutboxEntry
        switch decoded {
        case .success(let value): entry = value
        case .failure(.unreadable): return "sealed with a store key not given (--policy FILE, with its store keys)"
        case .failure(let failure): return "malformed (\(failure.field)); drop it"
        }
        // A body that names another outbox than its stream's was written by hand: which one is meant?
        guard TextRules.bytesEqual(entry.app, target.app), TextRules.bytesEqual(entry.upstream, target.upstream) else {
            return "its entry names \(entry.app)/\(entry.upstream), not \(target.app)/\(target.upstream) whose dead letters hold it"
        }
        switch placement {
        case .shards?: return nil
        case .refused(let why)?: return why
        case nil: return "no placement"
        }
    }

    /// The shards workers read for `target`: the policy's layout when given, else the one every
    /// running sidecar recorded.
    static func place(_ target: OutboxStreams.Upstream, policy: Policy?, records: [String],
                      client: RedisClient) async throws(ConfigurationError) -> Placement {
        let name = "\(target.app)/\(target.upstream)"
        if let policy {
            guard let layout = Outbox.targets(of: policy).first(where: { Pair($0) == Pair(target) }) else {
                return .refused("the policy has no outbox for \(name), so no worker reads one")
            }
            return .shards(layout)
        }
        var counts: Set<Int> = []
        for key in records {
            let reply: RedisReply
            do {
                reply = try await client.send(["GET", key])
            } catch {
                throw ConfigurationError("cannot reach Redis: \(error.detail)")
            }
            // A record is a number from Redis: anything but a plausible shard count is no layout.
            guard let text = reply.string else { continue }  // expired since the scan
            counts.insert(Int(text).flatMap { (1...maxShards).contains($0) ? $0 : nil } ?? 0)
        }
        guard let shards = counts.first, counts.count == 1, shards > 0 else {
            if counts.isEmpty {
                return .refused("no running sidecar has recorded where it reads \(name) (within \(Outbox.layoutRecordSeconds) s); start one, or give --policy FILE")
            }
            let seen = counts.sorted().map { $0 == 0 ? "an invalid record" : "\($0)" }.joined(separator: ", ")
            return .refused("the running sidecars disagree on the shards of \(name) (\(seen)); give --policy FILE, or replay once they agree")
        }
        return .shards(OutboxStreams.Upstream(app: target.app, upstream: target.upstream, shards: shards))
    }

    /// The most shards a layout record may name; more is not a record PushWarden wrote.
    static let maxShards = 1024

    /// An app and upstream compared by their bytes, as Redis compares the keys they name.
    struct Pair: Hashable {
        let app: [UInt8]
        let upstream: [UInt8]
        init(_ target: OutboxStreams.Upstream) {
            app = Array(target.app.utf8)
            upstream = Array(target.upstream.utf8)
        }
    }

    // MARK: Reading

    private static func describe(_ message: OutboxStreams.Message, fields: [String: String],
                                 decoded: Result<OutboxEntry, OutboxEntry.DecodingFailure>, target: OutboxStreams.Upstream) -> String {
        var parts = [shown(message.id), "\(shown(target.app))/\(shown(target.upstream))"]
        switch decoded {
        case .success(let entry):
            // A webhook event's `pushToken` is its `webhook-id`: shown as the receiver saw it.
            parts += [entry.operation.rawValue, entry.operation == .webhook ? "id " + shown(entry.pushToken) : Redact.token(entry.pushToken),
                      "contact \(Redact.contact(entry.contactID))",
                      "request \(entry.requestID)"]
        case .failure(.unreadable):
            parts.append("sealed entry (cannot be opened with the store keys given)")
        case .failure(let failure):
            parts.append("malformed entry (\(failure.field))")
        }
        parts.append("reason \(fields["reason"].map(shown) ?? "-")")
        if let status = fields["status"] { parts.append("status \(shown(status))") }
        if let code = fields["code"] { parts.append("code \(shown(code))") }
        return parts.joined(separator: "  ")
    }

    /// A value read from the stream (or a key's name) as a terminal shows it: as it is when it is
    /// what PushWarden writes there (`[A-Za-z0-9._:-]`, ids, codes, names), else `unknown:` and a
    /// short hash, so that escape sequences or bidirectional controls another writer planted never
    /// reach an operator's terminal.
    static func shown(_ value: String) -> String {
        RequestID.isSane(value) ? value : "unknown:" + Redact.shortHash(value)
    }

    /// Every dead-letter stream on this Redis, narrowed to `app` and `upstream`, and the layout
    /// records beside them (one SCAN: they share the `…:dead}` tag).
    private static func scan(_ client: RedisClient, app: String?,
                             upstream: String?) async throws(ConfigurationError) -> (dead: [OutboxStreams.Upstream], records: [Pair: [String]]) {
        let prefix = "pw:v2:{outbox:"
        var cursor = "0"
        var dead: [OutboxStreams.Upstream] = []
        var records: [Pair: [String]] = [:]
        repeat {
            let reply: RedisReply
            do {
                reply = try await client.send(["SCAN", cursor, "MATCH", prefix + "*:dead}:*", "COUNT", "1000"])
            } catch {
                throw ConfigurationError("cannot reach Redis: \(error.detail)")
            }
            guard case .array(let parts) = reply, parts.count == 2, let next = parts[0].string, case .array(let keys) = parts[1] else {
                throw ConfigurationError("unexpected SCAN reply")
            }
            cursor = next
            for key in keys.compactMap(\.string) where key.hasPrefix(prefix) {
                // pw:v2:{outbox:<app>:<upstream>:dead}<rest>: app ids and upstream names hold no ':' or '}'.
                guard let close = key.firstIndex(of: "}") else { continue }
                let inner = key[key.index(key.startIndex, offsetBy: prefix.count)..<close].split(separator: ":", omittingEmptySubsequences: false)
                guard inner.count == 3, inner[2] == "dead" else { continue }
                let target = OutboxStreams.Upstream(app: String(inner[0]), upstream: String(inner[1]), shards: 1)
                if let app, !TextRules.bytesEqual(target.app, app) { continue }
                if let upstream, !TextRules.bytesEqual(target.upstream, upstream) { continue }
                let rest = key[key.index(after: close)...]
                if rest == ":s" {
                    dead.append(target)
                } else if rest.hasPrefix(":layout:") {
                    records[Pair(target), default: []].append(key)
                }
            }
        } while cursor != "0"
        return (dead.sorted { ($0.app, $0.upstream) < ($1.app, $1.upstream) }, records)
    }
}
