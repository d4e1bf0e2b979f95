import ClientAPI
import PWCore
import PWPolicy
import Testing

/// SplitMix64: deterministic, so a failure reproduces from the printed seed and iteration.
struct SplitMix64 {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
    mutating func pick<T>(_ items: [T]) -> T { items[below(items.count)] }
}

/// Pieces a hostile or buggy client might send, mixed into documents and strings.
private let interesting: [String] = [
    "", " ", "ios", "android", "web", "apns", "apns_voip", "fcm", "unified_push", "web_push", "sandbox", "production",
    apnsToken, fcmToken, endpoint, "https://127.0.0.1/", "https://[::ffff:7f00:1]/", "https://0x7f.1/", "https://[",
    "https://a@b/", "ExponentPushToken[x]", "\u{0}", "\u{202E}", "💥", "%00", "\\", "2026-07-02T10:20:42Z",
    "2026-02-30T10:20:42Z", "delivered", "opened", "dismissed", "killed", session, p256dh, authSecret, "=",
    String(repeating: "a", count: 1001), String(repeating: "f", count: 64),
]
private let keys = [
    "platform", "push_token", "push_service", "web_push_keys", "environment", "previous_push_token", "installation_id",
    "app_version", "os_version", "device_model", "locale", "timezone", "contact_id", "events", "type", "message_id",
    "recipient_id", "occurred_at", "app_state", "deeplink", "action_id", "p256dh", "auth", "x",
]

private func randomJSON(_ rng: inout SplitMix64, depth: Int) -> JSONValue {
    switch rng.below(depth > 3 ? 5 : 8) {
    case 0: return .null
    case 1: return .bool(rng.below(2) == 0)
    case 2: return .number(rng.pick(["0", "-1", "1e308", "3.25", "18446744073709551616"]))
    case 3, 4: return .string(rng.pick(interesting))
    case 5: return .array((0..<rng.below(4)).map { _ in randomJSON(&rng, depth: depth + 1) })
    default:
        var o = JSONObject()
        for _ in 0..<rng.below(6) { o[rng.pick(keys)] = randomJSON(&rng, depth: depth + 1) }
        return .object(o)
    }
}

/// A document close to a valid request, with a few members replaced, so the deep rules run too.
private func nearValid(_ rng: inout SplitMix64) -> JSONValue {
    var base = rng.pick([iosBody, androidBody, webBody, batch([event(), event()]), obj(["push_token": .string(apnsToken)])])
    guard case .object(var o) = base else { return base }
    for _ in 0..<rng.below(3) {
        if rng.below(4) == 0, case .array(var events)? = o["events"], !events.isEmpty {
            let i = rng.below(events.count)
            if case .object(var e) = events[i] {
                e[rng.pick(keys)] = rng.below(3) == 0 ? nil : randomJSON(&rng, depth: 2)
                events[i] = .object(e)
            }
            o["events"] = .array(events)
        } else {
            o[rng.pick(keys)] = rng.below(4) == 0 ? nil : randomJSON(&rng, depth: 1)
        }
    }
    base = .object(o)
    return base
}

private func mutate(_ input: [UInt8], _ rng: inout SplitMix64) -> [UInt8] {
    var b = input
    for _ in 0..<(1 + rng.below(4)) {
        switch rng.below(4) {
        case 0 where !b.isEmpty: b[rng.below(b.count)] = UInt8(truncatingIfNeeded: rng.next())
        case 1: b.insert(rng.pick(Array("{}[]\",:\\0x7f.%@ \u{0}é".utf8)), at: rng.below(b.count + 1))
        case 2 where !b.isEmpty: b.remove(at: rng.below(b.count))
        default:
            if b.count > 2 {
                let start = rng.below(b.count - 1)
                let end = min(b.count, start + 1 + rng.below(16))
                b.insert(contentsOf: b[start..<end], at: rng.below(b.count + 1))
            }
        }
    }
    return b
}

/// Feeds one body to every route under every policy flavour: each call returns a value or a
/// 400/403 refusal carrying a message (a crash would end the test process).
private func exercise(_ body: [UInt8]) -> Int {
    var refusals = 0
    for policy in [allPlatforms, dropUnknown, rejectContact, ClientPolicy(platforms: [], maxEvents: 1)] {
        let errors = [
            refusal { try RequestValidator.installation(body: body, policy: policy, contactID: session) },
            refusal { try RequestValidator.unregister(body: body, policy: policy, contactID: session) },
            refusal { try RequestValidator.events(body: body, policy: policy, contactID: session) },
        ]
        for case let e? in errors {
            refusals += 1
            #expect(e.status == 400 || e.status == 403, "\(e.code.rawValue): \(e.message)")
            #expect(!e.message.isEmpty)
            #expect(e.field.map { !$0.isEmpty } ?? true)
        }
    }
    return refusals
}

@Suite struct Fuzz {
    @Test func randomBytes() {
        var rng = SplitMix64(state: 0xC0FFEE)
        for _ in 0..<1500 {
            let body = (0..<rng.below(96)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            _ = exercise(body)
        }
    }

    @Test func mutatedValidBodies() {
        var rng = SplitMix64(state: 0xBADC0DE)
        let seeds = [iosBody, androidBody, webBody, batch([event(), event([("contact_id", .string(session))])]),
                     obj(["push_token": .string(apnsToken)])].map(bytes)
        for _ in 0..<2500 {
            _ = exercise(mutate(rng.pick(seeds), &rng))
        }
    }

    @Test func randomDocuments() {
        var rng = SplitMix64(state: 0x5EED)
        var accepted = 0
        for i in 0..<3000 {
            let doc = i % 2 == 0 ? randomJSON(&rng, depth: 0) : nearValid(&rng)
            accepted += 12 - exercise(bytes(doc))
        }
        // The near-valid half must actually reach the deep rules, not stop at the first check.
        #expect(accepted > 300)
    }

    @Test func randomEndpointURLs() {
        var rng = SplitMix64(state: 0xF00D)
        let parts = ["https://", "http://", "[", "]", ":", "::", "ffff", "127", "0x7f", "0177", ".", "1", "0", "@", "%2e",
                     "/", "?", "#", "localhost", "example", "com", "fe80", "64:ff9b", "8.8.8.8", "é", "\\", "\t", "99999"]
        for _ in 0..<3000 {
            let url = (0..<(1 + rng.below(10))).map { _ in rng.pick(parts) }.joined()
            if let e = refusal({ try EndpointURL.validate(url, field: "push_token") }) {
                #expect(e.code == .invalidWebPush || e.code == .urlNotPubliclyRoutable, "\(e.code.rawValue)")
                #expect(e.field == "push_token")
            }
        }
    }
}
