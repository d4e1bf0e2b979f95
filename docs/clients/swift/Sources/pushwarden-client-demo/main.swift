// Runs the Swift client against a live sidecar and checks every step of the lifecycle:
//   pushwarden-client-demo --base-url http://127.0.0.1:8080 --app demo --session JWT [--spare-session JWT]
// `--spare-session` (another contact's session) is used up by the rate-limit step.
// Exit status 0 when every step answered as docs/clients/README.md says.
import Foundation
import PushWardenClient

func argument(_ name: String) -> String? {
    let args = CommandLine.arguments
    guard let i = args.firstIndex(of: name), i + 1 < args.count else { return nil }
    return args[i + 1]
}

guard let base = argument("--base-url").flatMap(URL.init(string:)), let session = argument("--session") else {
    FileHandle.standardError.write(Data("usage: pushwarden-client-demo --base-url URL --app APP --session JWT [--spare-session JWT]\n".utf8))
    exit(2)
}
let app = argument("--app") ?? "demo"
let spareSession = argument("--spare-session")

nonisolated(unsafe) var failures = 0
func check(_ ok: Bool, _ what: String) {
    print((ok ? "ok   " : "FAIL ") + what)
    if !ok { failures += 1 }
}
func describe(_ result: Result<Accepted, PushWardenError>?) -> String {
    switch result {
    case .success(let accepted)?: return "202 \(accepted.upstreams.sorted { $0.key < $1.key })"
    case .failure(let error)?: return "\(error.status) \(error.code) (\(error.action))"
    case nil: return "no request"
    }
}
func outcome(_ result: Result<Accepted, PushWardenError>?) -> String? {
    guard case .success(let accepted)? = result else { return nil }
    return accepted.upstreams["voyado"]
}

// Random APNs tokens (64 hex digits), so that each run starts from a token never seen.
func apnsToken() -> String { (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined() }

let client = PushWardenClient(baseURL: base, app: app) { session }
let storage = MemoryStorage()
let registrar = PushRegistrar(client: client, platform: "ios", storage: storage)
let first = apnsToken()
let rotated = apnsToken()

// 1. Sign-in: registered and forwarded upstream.
var result: Result<Accepted, PushWardenError>? = await registrar.signedIn(token: first)
check(outcome(result) == "forwarded", "sign-in registers: \(describe(result))")

// 2. The next launch, same token: answered from the dedupe cache.
result = await registrar.launched(token: first)
check(outcome(result) == "unchanged", "launch re-registers, unchanged: \(describe(result))")

// 3. The OS rotated the token: sent with previous_push_token, forwarded.
result = await registrar.tokenRefreshed(rotated)
check(outcome(result) == "forwarded", "rotation with previous_push_token forwarded: \(describe(result))")
check(await registrar.registeredToken == rotated, "the rotated token is the registered one")

// 4. Sign-out: unregistered.
result = await registrar.signingOut()
check(outcome(result) == "forwarded", "sign-out unregisters: \(describe(result))")
check(await registrar.registeredToken == nil, "nothing registered after sign-out")

// 5. A refused request: a malformed token is never retried.
let refusing = PushRegistrar(client: client, platform: "ios", storage: MemoryStorage())
result = await refusing.signedIn(token: "not-an-apns-token")
if case .failure(let error)? = result {
    check(error.status == 400 && error.code == "invalid_token_format" && error.field == "push_token" && error.requestID != nil,
          "a malformed token is refused: \(describe(result)), field \(error.field ?? "-")")
    check(error.action == .neverRetry, "its action is never retry")
} else {
    check(false, "a malformed token is refused: \(describe(result))")
}
let sentBefore = await refusing.requestsSent
result = await refusing.launched(token: "not-an-apns-token")
check(await refusing.requestsSent == sentBefore, "the refused token is not sent again on the next launch")

// 6. A session the sidecar does not accept: sign in again, then register.
let stranger = PushWardenClient(baseURL: base, app: app) { "not.a.jwt" }
result = await stranger.register(Installation(platform: "ios", pushToken: apnsToken()))
if case .failure(let error)? = result {
    check(error.status == 401 && error.code == "unauthorized" && error.action == .reauthenticate,
          "a bad session gets 401, reauthenticate: \(describe(result))")
} else {
    check(false, "a bad session gets 401: \(describe(result))")
}

// 7. A contact over its rate limit: retry on the next launch, after Retry-After.
if let spareSession {
    let spare = PushWardenClient(baseURL: base, app: app) { spareSession }
    let token = apnsToken()
    var limited: PushWardenError?
    for _ in 0..<100 {
        if case .failure(let error) = await spare.register(Installation(platform: "ios", pushToken: token)), error.code == "rate_limited" {
            limited = error
            break
        }
    }
    if let limited {
        check(limited.status == 429 && (limited.retryAfter ?? 0) > 0, "over the rate limit: 429 with Retry-After \(limited.retryAfter ?? 0) s")
        check(limited.action == .retryNextLaunch(after: limited.retryAfter), "its action is retry on the next launch: \(limited.action)")
    } else {
        check(false, "the rate limit was never reached")
    }
}

// 8. Events: a good batch is accepted; a bad one is refused whole and never retried.
result = await client.report(events: [["type": "opened", "message_id": "m-1", "recipient_id": "r-1",
                                       "occurred_at": "2026-07-02T10:20:42.456Z", "app_state": "background"]])
if case .success(let accepted)? = result {
    check(accepted.accepted == 1, "an event batch is accepted: \(describe(result))")
} else {
    check(false, "an event batch is accepted: \(describe(result))")
}
result = await client.report(events: [["type": "opened", "message_id": "m-1", "recipient_id": "r-1", "occurred_at": "yesterday"]])
if case .failure(let error)? = result {
    check(error.code == "invalid_event" && error.field == "events[0].occurred_at" && error.action == .neverRetry,
          "a bad event is refused, never retried: \(describe(result)), field \(error.field ?? "-")")
} else {
    check(false, "a bad event is refused: \(describe(result))")
}

print(failures == 0 ? "swift client: every step as documented" : "swift client: \(failures) step(s) failed")
exit(failures == 0 ? 0 : 1)
