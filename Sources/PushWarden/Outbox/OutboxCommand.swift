import PWCore
import RedisClient

/// `pushwarden outbox list|replay|drop --redis URL [--policy FILE] [--app A] [--upstream U]`: what
/// the dead-letter streams hold, tokens as short hashes; put back into the outbox; or deleted.
///
/// With `store.encryption_key`, entries hold their push tokens and Web Push secrets sealed: the
/// command opens them with the keys of the policy it is given (`sealer`), the same policy the
/// sidecars serve. Without them a sealed entry is listed as such, can be dropped, and is not
/// replayed. A replayed entry is sealed again under the current key.
public enum OutboxCommand {
    public enum Action: String, Sendable { case list, replay, drop }

    /// One line per dead letter (or per one replayed or dropped), then a count line.
    public static func run(_ action: Action, redisURL: String, app: String?, upstream: String?, sealer: StoreSealer = .none,
                           write: (String) -> Void) async throws(StartupError) -> Int {
        let configuration: RedisConfiguration
        do {
            configuration = try RedisConfiguration(url: redisURL)
        } catch {
            throw StartupError("invalid Redis URL: \(error.detail)")
        }
        let client = RedisClient(configuration: configuration)
        defer { client.close() }
        let streams = OutboxStreams(client: client, sealer: sealer)
        var handled = 0
        for target in try await deadStreams(client, app: app, upstream: upstream) {
            let letters: [(OutboxStreams.Message, [String: String])]
            do {
                letters = try await streams.deadLetters(of: target, count: 10_000)
            } catch {
                throw StartupError("cannot read \(target.dead): \(error.detail)")
            }
            for (message, fields) in letters {
                let decoded = streams.decode(message)
                let entry = try? decoded.get()
                write(describe(message, fields: fields, decoded: decoded, target: target))
                do {
                    switch action {
                    case .list:
                        break
                    case .replay:
                        guard let entry else {
                            if case .failure(.unreadable) = decoded {
                                write("  not replayed: the entry is sealed with a store key not given (--policy FILE with its store keys)")
                            } else {
                                write("  not replayed: the entry is malformed (drop it)")
                            }
                            continue
                        }
                        let shards = fields["shards"].flatMap { Int($0) } ?? target.shards
                        try await streams.replay(message, entry: entry,
                                                 of: OutboxStreams.Upstream(app: target.app, upstream: target.upstream, shards: shards))
                    case .drop:
                        try await streams.drop(message, of: target)
                    }
                } catch {
                    throw StartupError("\(action.rawValue) \(message.id): \(error.detail)")
                }
                handled += 1
            }
        }
        let verb = action == .list ? "dead-lettered" : action == .replay ? "replayed" : "dropped"
        write("\(handled) \(verb)")
        return handled
    }

    private static func describe(_ message: OutboxStreams.Message, fields: [String: String],
                                 decoded: Result<OutboxEntry, OutboxEntry.DecodingFailure>, target: OutboxStreams.Upstream) -> String {
        var parts = [shown(message.id), "\(shown(target.app))/\(shown(target.upstream))"]
        switch decoded {
        case .success(let entry):
            parts += [entry.operation.rawValue, Redact.token(entry.pushToken), "contact \(Redact.contact(entry.contactID))",
                      "request \(entry.requestID)"]
        case .failure(.unreadable):
            parts.append("sealed entry (cannot be opened with the store keys given)")
        case .failure:
            parts.append("malformed entry")
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

    /// Every dead-letter stream on this Redis (SCAN), narrowed to `app` and `upstream`.
    private static func deadStreams(_ client: RedisClient, app: String?, upstream: String?) async throws(StartupError) -> [OutboxStreams.Upstream] {
        var cursor = "0"
        var found: [OutboxStreams.Upstream] = []
        repeat {
            let reply: RedisReply
            do {
                reply = try await client.send(["SCAN", cursor, "MATCH", "pw:v2:{outbox:*:dead}:s", "COUNT", "1000"])
            } catch {
                throw StartupError("cannot reach Redis: \(error.detail)")
            }
            guard case .array(let parts) = reply, parts.count == 2, let next = parts[0].string, case .array(let keys) = parts[1] else {
                throw StartupError("unexpected SCAN reply")
            }
            cursor = next
            for key in keys.compactMap(\.string) {
                // pw:v2:{outbox:<app>:<upstream>:dead}:s — app ids and upstream names hold no ':'.
                let inner = key.dropFirst("pw:v2:{outbox:".count).dropLast(":dead}:s".count).split(separator: ":")
                guard inner.count == 2 else { continue }
                let target = OutboxStreams.Upstream(app: String(inner[0]), upstream: String(inner[1]), shards: 1)
                if let app, target.app != app { continue }
                if let upstream, target.upstream != upstream { continue }
                found.append(target)
            }
        } while cursor != "0"
        return found.sorted { ($0.app, $0.upstream) < ($1.app, $1.upstream) }
    }
}
