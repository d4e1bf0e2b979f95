import ClientAPI
import PWCore
import PWPolicy
import Testing

let session = "496977ad-1d09-4993-9957-ef019eaa1eb3"
let allPlatforms = ClientPolicy(platforms: [.ios, .android, .web])
let mobileOnly = ClientPolicy(platforms: [.ios, .android])
let dropUnknown = ClientPolicy(platforms: [.ios, .android, .web], unknownFields: .drop)
let rejectContact = ClientPolicy(platforms: [.ios, .android, .web], contactID: .reject)

/// 64 hex digits, upper case so normalisation is visible.
let apnsToken = String(repeating: "A1B2C3D4", count: 8)
let fcmToken = "dQw4w9WgXcQ:APA91bH" + String(repeating: "x7_Kq-Zr", count: 18)
let endpoint = "https://fcm.googleapis.com/fcm/send/eXaMpLe:APA91bGZ"
let p256dh = Base64URL.encode([UInt8(0x04)] + (1...64).map { UInt8($0) })
let authSecret = Base64URL.encode((1...16).map { UInt8($0 * 3) })
let webKeys: JSONValue = obj(["p256dh": .string(p256dh), "auth": .string(authSecret)])

func obj(_ pairs: KeyValuePairs<String, JSONValue>) -> JSONValue {
    .object(JSONObject(pairs.map { JSONMember($0.key, $0.value) }))
}

func bytes(_ value: JSONValue) -> [UInt8] { value.encoded() }

/// A member list edited from a base: `nil` removes a key, a new key is appended.
func edited(_ base: JSONValue, _ changes: [(String, JSONValue?)]) -> JSONValue {
    guard case .object(var o) = base else { return base }
    for (key, value) in changes { o[key] = value }
    return .object(o)
}

let iosBody = obj(["platform": "ios", "push_token": .string(apnsToken)])
let androidBody = obj(["platform": "android", "push_token": .string(fcmToken)])
let webBody = obj(["platform": "web", "push_token": .string(endpoint), "web_push_keys": webKeys])

func event(_ changes: [(String, JSONValue?)] = []) -> JSONValue {
    edited(obj([
        "type": "opened", "message_id": "msg-abc123", "recipient_id": "572c44be-945d-879-41a2-77826b6bb21b",
        "occurred_at": "2026-07-02T10:20:42.456Z",
    ]), changes)
}

func batch(_ events: [JSONValue]) -> JSONValue { obj(["events": .array(events)]) }

/// Runs `body` and returns its refusal, or nil when it succeeded. (Closures infer `any Error`, so
/// anything but a `ContractError` comes back as a 500 `internal`, which every assertion refuses.)
func refusal<T>(_ body: () throws -> T) -> ContractError? {
    do {
        _ = try body()
        return nil
    } catch let error as ContractError {
        return error
    } catch {
        return ContractError(.internal, "not a ContractError: \(error)")
    }
}

/// One expected refusal: what a client developer would read in the envelope.
struct Refusal: Sendable, CustomTestStringConvertible {
    var name: String
    var body: [UInt8]
    var policy: ClientPolicy = allPlatforms
    var code: ErrorCode
    var field: String?

    init(_ name: String, _ body: JSONValue, policy: ClientPolicy = allPlatforms, _ code: ErrorCode, _ field: String?) {
        self.name = name
        self.body = bytes(body)
        self.policy = policy
        self.code = code
        self.field = field
    }

    init(_ name: String, raw: String, policy: ClientPolicy = allPlatforms, _ code: ErrorCode, _ field: String?) {
        self.name = name
        self.body = Array(raw.utf8)
        self.policy = policy
        self.code = code
        self.field = field
    }

    var testDescription: String { name }

    func check(_ error: ContractError?, sourceLocation: SourceLocation = #_sourceLocation) {
        guard let error else {
            Issue.record("\(name): expected \(code.rawValue), but the request was accepted", sourceLocation: sourceLocation)
            return
        }
        #expect(error.code == code, "\(name): \(error.message)", sourceLocation: sourceLocation)
        #expect(error.status == code.status, sourceLocation: sourceLocation)
        #expect(error.field == field, "\(name): \(error.message)", sourceLocation: sourceLocation)
        #expect(!error.message.isEmpty, sourceLocation: sourceLocation)
    }
}
