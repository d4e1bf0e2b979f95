import PWCore
import PWCrypto
import Registration

/// One entry of an app's evidence trail: what an erasure did (and, as they come, each dead-token
/// removal and back-channel logout), signed and chained to the receipt before it, so that an
/// auditor holding only the public key can tell a complete, unedited trail from one with a gap or
/// an edit.
///
/// The signed bytes are the receipt's JSON text exactly as stored (`body`): no re-encoding is ever
/// needed to check it. `prev` is the SHA-256 of the previous receipt's body (64 zeros for the
/// first), `seq` counts from 1 without holes.
package struct AuditReceipt: Sendable, Equatable {
    static let version = 1
    package static let genesis = String(repeating: "0", count: 64)

    package var seq: Int
    var kind: String
    package var app: String
    /// The contact as the store names it (`ContactKeys.digest`): an auditor computes it from the
    /// contact id; the receipt itself names nobody.
    var contact: String
    var atMillis: Int64
    var requestID: String
    var installations: Int
    /// Each upstream of the app and what happened there (`forwarded`, `queued`, `skipped`,
    /// `failed:<code>`), in the policy's order.
    var upstreams: [(String, String)]
    package var prev: String

    package static func == (a: AuditReceipt, b: AuditReceipt) -> Bool {
        a.seq == b.seq && a.kind == b.kind && a.app == b.app && a.contact == b.contact && a.atMillis == b.atMillis
            && a.requestID == b.requestID && a.installations == b.installations && a.prev == b.prev
            && a.upstreams.map(\.0) == b.upstreams.map(\.0) && a.upstreams.map(\.1) == b.upstreams.map(\.1)
    }

    var json: JSONValue {
        .object(JSONObject([
            JSONMember("v", .number(String(Self.version))),
            JSONMember("seq", .number(String(seq))),
            JSONMember("kind", .string(kind)),
            JSONMember("app", .string(app)),
            JSONMember("contact", .string(contact)),
            JSONMember("at", .string(RFC3339.utc(epochMillis: atMillis))),
            JSONMember("at_ms", .number(String(atMillis))),
            JSONMember("request_id", .string(requestID)),
            JSONMember("installations", .number(String(installations))),
            JSONMember("upstreams", .object(JSONObject(upstreams.map { JSONMember($0.0, .string($0.1)) }))),
            JSONMember("prev", .string(prev)),
        ]))
    }

    /// The bytes that are signed, hashed into the next receipt's `prev`, and stored.
    var body: String { json.encodedString() }

    package static func hash(ofBody body: String) -> String { Hex.encode(SHA256.hash(Array(body.utf8))) }

    /// A stored body read back; nil when it is not a receipt of this version.
    package init?(body: String) {
        guard let object = (try? JSONValue.parse(Array(body.utf8)))?.objectValue,
              object["v"] == .number(String(Self.version)),
              let seq = Self.integer(object["seq"]), let kind = object["kind"]?.stringValue, let app = object["app"]?.stringValue,
              let contact = object["contact"]?.stringValue, let at = Self.integer(object["at_ms"]).map(Int64.init),
              let requestID = object["request_id"]?.stringValue, let installations = Self.integer(object["installations"]),
              let prev = object["prev"]?.stringValue, case .object(let upstreams)? = object["upstreams"] else { return nil }
        self.init(seq: seq, kind: kind, app: app, contact: contact, atMillis: at, requestID: requestID, installations: installations,
                  upstreams: upstreams.members.map { ($0.key, $0.value.stringValue ?? "") }, prev: prev)
    }

    init(seq: Int, kind: String, app: String, contact: String, atMillis: Int64, requestID: String, installations: Int,
         upstreams: [(String, String)], prev: String) {
        self.seq = seq
        self.kind = kind
        self.app = app
        self.contact = contact
        self.atMillis = atMillis
        self.requestID = requestID
        self.installations = installations
        self.upstreams = upstreams
        self.prev = prev
    }

    private static func integer(_ value: JSONValue?) -> Int? {
        guard case .number(let text)? = value, let number = Int(text), number >= 0 else { return nil }
        return number
    }
}
