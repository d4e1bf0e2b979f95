import RedisClient

/// Everything one Redis database holds, read back for a test that must prove a value is nowhere
/// in it (no raw push token, no Web Push secret): every key name and, by type, every string
/// value, every hash field and value, every set and sorted-set member (with its score), every
/// list element, and every field and value of every stream entry (consumer groups and their
/// pending lists hold only entry ids and consumer names, which are read too).
///
/// ```swift
/// let contents = try await RedisContents.read(RedisServer.shared.configuration())
/// #expect(contents.occurrences(of: token).isEmpty, "\(contents.occurrences(of: token))")
/// ```
///
/// It walks the keys with `SCAN` and reads each by its `TYPE`, so it sees keys of every layout,
/// ours or not; keys that expire or are deleted meanwhile are skipped. For a test server only:
/// it reads everything, with no bound.
public struct RedisContents: Sendable {
    /// One key and every text it holds (its name is in `key`, not repeated in `texts`).
    public struct Item: Sendable, Equatable {
        public var key: String
        /// `string`, `hash`, `set`, `zset`, `list` or `stream` (another type's texts are empty).
        public var type: String
        /// Values, fields, members, elements, stream entry ids, fields and values, consumer group
        /// and consumer names: each as its bytes decoded as UTF-8 (invalid bytes replaced).
        public var texts: [String]
    }

    public var items: [Item]

    public init(items: [Item]) { self.items = items }

    public struct ReadError: Error, CustomStringConvertible {
        public let description: String
    }

    /// Reads every key of the configuration's database.
    public static func read(_ configuration: RedisConfiguration) async throws -> RedisContents {
        let client = RedisClient(configuration: configuration)
        defer { client.close() }
        var keys: [String] = []
        var cursor = "0"
        repeat {
            let reply = try await client.send(["SCAN", cursor, "COUNT", "1000"])
            guard case .array(let parts) = reply, parts.count == 2, let next = parts[0].string, case .array(let found) = parts[1] else {
                throw ReadError(description: "unexpected SCAN reply \(reply)")
            }
            cursor = next
            keys += found.map(text)
        } while cursor != "0"
        var items: [Item] = []
        for key in Set(keys).sorted() {
            guard let type = try await client.send(["TYPE", key]).string, type != "none" else { continue }
            var texts: [String] = []
            switch type {
            case "string":
                texts = flatten(try await client.send(["GET", key]))
            case "hash":
                texts = flatten(try await client.send(["HGETALL", key]))
            case "set":
                texts = flatten(try await client.send(["SMEMBERS", key]))
            case "zset":
                texts = flatten(try await client.send(["ZRANGE", key, "0", "-1", "WITHSCORES"]))
            case "list":
                texts = flatten(try await client.send(["LRANGE", key, "0", "-1"]))
            case "stream":
                texts = flatten(try await client.send(["XRANGE", key, "-", "+"]))
                let groups = try await client.send(["XINFO", "GROUPS", key])
                texts += flatten(groups)
                if case .array(let list) = groups {
                    for group in list {
                        guard let name = field("name", in: group) else { continue }
                        texts += flatten(try await client.send(["XINFO", "CONSUMERS", key, name]))
                        texts += flatten(try await client.send(["XPENDING", key, name, "-", "+", "1000000"]))
                    }
                }
            default:
                break
            }
            items.append(Item(key: key, type: type, texts: texts))
        }
        return RedisContents(items: items)
    }

    /// Where `needle` appears: `key <name>` for a key name holding it, `<type> <key>` for a value.
    /// Empty when it is nowhere.
    public func occurrences(of needle: String) -> [String] {
        var found: [String] = []
        for item in items {
            if item.key.contains(needle) { found.append("key \(item.key)") }
            if item.texts.contains(where: { $0.contains(needle) }) { found.append("\(item.type) \(item.key)") }
        }
        return found
    }

    /// Every key name and every text, for a look by eye when a test fails.
    public var allTexts: [String] { items.flatMap { [$0.key] + $0.texts } }

    private static func text(_ reply: RedisReply) -> String {
        switch reply {
        case .bulk(let bytes): return String(decoding: bytes, as: UTF8.self)
        case .status(let text), .error(let text): return text
        case .integer(let n): return String(n)
        case .null: return ""
        case .array(let items): return items.map(text).joined(separator: " ")
        }
    }

    private static func flatten(_ reply: RedisReply) -> [String] {
        switch reply {
        case .array(let items): return items.flatMap(flatten)
        case .null: return []
        default: return [text(reply)]
        }
    }

    /// `name`'s value in an `XINFO` reply's flat `[field, value, ...]` list.
    private static func field(_ name: String, in reply: RedisReply) -> String? {
        guard case .array(let parts) = reply else { return nil }
        var index = 0
        while index + 1 < parts.count {
            if parts[index].string == name { return parts[index + 1].string }
            index += 2
        }
        return nil
    }
}
