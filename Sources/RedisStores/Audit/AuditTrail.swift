import PWCore
import PWCrypto
import RedisClient
import Registration

/// An app's evidence trail in Redis (policy `audit.signing_key`): an append-only stream of signed,
/// chained receipts, and a head (`<seq> <hash of the last body>`) that every append moves forward
/// in the same script, so replicas appending at once never fork the chain.
///
/// Keys share the app's `{audit:<digest>}` tag: `…:receipts` (the stream: `body`, `sig`) and
/// `…:head`.
package final class AuditTrail: Sendable {
    private let key: Ed25519PrivateKey
    private let store: RedisStore
    private let clock: @Sendable () -> Int64

    package init(key: Ed25519PrivateKey, store: RedisStore, clock: @escaping @Sendable () -> Int64 = { Int64(SystemClock.epochMillis()) }) {
        self.key = key
        self.store = store
        self.clock = clock
    }

    package struct Keys: Sendable {
        package let receipts: String
        package let head: String

        package init(app: String) {
            let tag = "pw:v2:{audit:" + Hex.encode(SHA256.hash(Array(app.utf8))) + "}:"
            receipts = tag + "receipts"
            head = tag + "head"
        }
    }

    /// KEYS: receipts, head; ARGV: the head the receipt was built on, body, signature, new head.
    /// Appends only onto that head: {1, id}, or {0, current head} for the caller to build again.
    private static let appendScript = LuaScript("""
        local head = redis.call('GET', KEYS[2]) or ''
        if head ~= ARGV[1] then return {0, head} end
        local id = redis.call('XADD', KEYS[1], '*', 'body', ARGV[2], 'sig', ARGV[3])
        redis.call('SET', KEYS[2], ARGV[4])
        return {1, id}
        """)

    /// A receipt appended: what the erasure's answer carries.
    package struct Appended: Sendable {
        package let receipt: AuditReceipt
        let body: String
        let signature: String
        let id: String

        package var json: JSONValue {
            .object(JSONObject([
                JSONMember("id", .string(id)),
                JSONMember("body", .string(body)),
                JSONMember("signature", .string(signature)),
                JSONMember("hash", .string(AuditReceipt.hash(ofBody: body))),
            ]))
        }
    }

    /// Appends one receipt onto the app's chain; retried on the head another replica moved.
    package func append(kind: String, app: String, contact: ContactKeys, requestID: String, installations: Int,
                upstreams: [(String, String)]) async throws(StoreError) -> Appended {
        let keys = Keys(app: app)
        var head = try await store.get(keys.head, on: nil) ?? ""
        for _ in 0..<16 {
            let (seq, prev) = Self.parse(head: head)
            let receipt = AuditReceipt(seq: seq + 1, kind: kind, app: app, contact: contact.digest, atMillis: clock(), requestID: requestID,
                                       installations: installations, upstreams: upstreams, prev: prev)
            let body = receipt.body
            let signature: [UInt8]
            do {
                signature = try key.sign(Array(body.utf8))
            } catch {
                throw StoreError(.refused, "audit receipt not signed: \(error.message)")
            }
            let encoded = Base64URL.encode(signature)
            let next = String(seq + 1) + " " + AuditReceipt.hash(ofBody: body)
            let reply = try await store.evaluate(Self.appendScript, keys: [keys.receipts, keys.head], arguments: [head, body, encoded, next], on: nil)
            guard case .array(let parts) = reply, parts.count == 2, case .integer(let appended) = parts[0], let value = parts[1].string else {
                throw StoreError(.unexpectedReply, "unexpected audit append reply")
            }
            if appended == 1 { return Appended(receipt: receipt, body: body, signature: encoded, id: value) }
            head = value
        }
        throw StoreError(.unavailable, "audit trail contended: the receipt was not appended")
    }

    /// `<seq> <hash>`; the empty head is the chain's start.
    package static func parse(head: String) -> (seq: Int, hash: String) {
        let parts = head.split(separator: " ")
        guard parts.count == 2, let seq = Int(parts[0]), seq >= 0 else { return (0, AuditReceipt.genesis) }
        return (seq, String(parts[1]))
    }
}
