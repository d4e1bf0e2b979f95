import FuzzSupport
@testable import HTTPServer
import PWCore
import PWPolicy
@testable import PushWarden
@testable import Registration
import SessionAuth

/// The request head, before any body byte is read: the server's target split and body
/// announcement (HTTPServer) and the client API's decision (`ClientAPIHandler.decide`: route,
/// app, method, media type, body cap), plus the request id and the session lookup it feeds.
///
/// Input: a request line `METHOD TARGET`, then header lines `Name: value`, split at LF. The
/// decision is checked against a plain restatement of the contract: only `POST` with a JSON
/// media type to one of the app's three routes reads a body (with the app's `max_body`); every
/// other head is answered at once with 404, 405 or 415 (in that order of precedence) in the
/// contract's envelope, with a sane `X-Request-Id`.
@_cdecl("fuzz_head_main")
func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv, fuzzOne)
}

struct FixedClock: WallClock {
    func now() -> Double { 1_700_000_000 }
}

let maxBody = 4096
let secretRef = SecretRef.env("PUSHWARDEN_FUZZ_SESSION_KEY")
let app = AppPolicy(
    id: "demo",
    session: SessionPolicy(header: "Authorization", cookie: "pw_session", algorithms: [.hs256], keys: .hmacSecret(secretRef),
                           issuer: nil, audience: nil, contactClaim: "sub", leewaySeconds: 30),
    client: ClientPolicy(platforms: [.ios, .android, .web], maxBody: maxBody),
    dedupe: DedupePolicy(refreshAfterSeconds: 3600),
    upstreams: [])

let handler: ClientAPIHandler = {
    let sessions: SessionVerifier
    do {
        // A fuzzing-only key, not a secret of any deployment.
        sessions = try SessionVerifier(policy: app.session.jwt!, secrets: StaticSecrets([secretRef: Array("pushwarden-fuzz-hs256-key-0123456789".utf8)]),
                                       clock: FixedClock())
    } catch {
        violated("the fuzz session policy is refused: \(error)")
    }
    let logger = Logger(label: "fuzz", level: .error, sink: .standardError)
    let metrics = Metrics()
    let store = MemoryStore()
    let registrar = Registrar(deduper: Deduper(store: store, metrics: metrics, logger: logger),
                              identities: IdentityStore(store: store, logger: logger), metrics: metrics, logger: logger)
    return ClientAPIHandler(apps: AppTable(["demo": AppRuntime(policy: app, sessions: sessions, upstreams: [])]),
                            registrar: registrar, rateLimiter: RateLimiter(shared: nil, digests: .unkeyed, metrics: metrics, logger: logger), metrics: metrics, logger: logger)
}()

let routes = ["/v1/apps/demo/installations", "/v1/apps/demo/installations/unregister", "/v1/apps/demo/events"].map { Array($0.utf8) }

@_cdecl("LLVMFuzzerTestOneInput")
func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let lines = fuzzBytes(data, size).split(separator: 0x0A, omittingEmptySubsequences: false).map(Array.init)
    guard let requestLine = lines.first else { return 0 }
    let (methodBytes, targetBytes) = split(requestLine, at: 0x20)
    let rawTarget = String(decoding: targetBytes, as: UTF8.self)
    var headers = HTTPHeaders()
    for line in lines.dropFirst() {
        let (name, value) = split(line, at: UInt8(ascii: ":"))
        headers.add(String(decoding: name, as: UTF8.self), String(decoding: value.drop { $0 == 0x20 }, as: UTF8.self))
    }

    // HTTPServer: the target split is lossless and the path holds no '?'.
    let (path, query) = RequestContext.splitTarget(rawTarget)
    guard !path.utf8.contains(UInt8(ascii: "?")) else { violated("path \(path) holds a '?'") }
    guard Array(path.utf8) + (rawTarget.utf8.contains(UInt8(ascii: "?")) ? [UInt8(ascii: "?")] + Array(query.utf8) : []) == Array(rawTarget.utf8) else {
        violated("target \(rawTarget) split into \(path) and \(query)")
    }
    _ = RequestContext.announcesBody(headers)
    let head = HTTPRequestHead(method: String(decoding: methodBytes, as: UTF8.self), path: path, query: query, headers: headers,
                               remoteAddress: "192.0.2.1")

    let expectedStatus: Int?
    if !routes.contains(Array(head.path.utf8)) {
        expectedStatus = 404
    } else if head.method != "POST" {
        expectedStatus = 405
    } else if !referenceIsJSON(headers["Content-Type"]) {
        expectedStatus = 415
    } else {
        expectedStatus = nil
    }
    var context: (any Sendable)?
    switch handler.decide(head) {
    case .readBody(let limit, let resolved):
        guard expectedStatus == nil else { violated("read the body of a head that deserves \(expectedStatus!)") }
        guard limit == maxBody else { violated("body limit \(limit), policy says \(maxBody)") }
        guard resolved is ClientAPIHandler.Resolved else { violated("the resolved route does not travel with the request") }
        context = resolved
    case .respond(let response):
        guard let expectedStatus else { violated("answered \(response.status) to a head that should read its body") }
        guard response.status == expectedStatus else { violated("answered \(response.status), expected \(expectedStatus)") }
        checkEnvelope(response, headers: headers)
    }
    let tooLarge = handler.payloadTooLarge(head, context: context)
    guard tooLarge.status == 413 else { violated("payloadTooLarge answered \(tooLarge.status)") }
    checkEnvelope(tooLarge, headers: headers)
    // A JWT app's session check is decided on the loop, never a lookup.
    guard case .decided = handler.apps[id: "demo"]!.sessions.check(headers) else { violated("a JWT session check was not decided at once") }
    return 0
}

/// The contract's error envelope, and the caller's `X-Request-Id` echoed only when it is sane.
func checkEnvelope(_ response: HTTPResponse, headers: HTTPHeaders) {
    guard let envelope = (try? JSONValue.parse(response.body))?.objectValue?["error"]?.objectValue,
          envelope["code"]?.stringValue != nil else {
        violated("response \(response.status) has no error envelope")
    }
    guard let id = response.headers["X-Request-Id"], RequestID.isSane(id), envelope["request_id"]?.stringValue == id else {
        violated("response without a sane X-Request-Id")
    }
    if let given = headers["X-Request-Id"], RequestID.isSane(given), id != given { violated("sane request id \(given) replaced by \(id)") }
    if response.status == 405, response.headers["Allow"] != "POST" { violated("405 without Allow: POST") }
}

/// `application/json` in any ASCII case after optional blanks, then nothing or parameters.
func referenceIsJSON(_ value: String?) -> Bool {
    guard let value else { return false }
    var scalars = Substring(value).unicodeScalars.drop { $0 == " " || $0 == "\t" }
    let expected = "application/json".unicodeScalars
    for e in expected {
        guard let c = scalars.first else { return false }
        let lower = ("A"..."Z").contains(c) ? Unicode.Scalar(c.value + 0x20)! : c
        guard lower == e else { return false }
        scalars = scalars.dropFirst()
    }
    let rest = scalars.drop { $0 == " " || $0 == "\t" }
    return rest.isEmpty || rest.first == ";"
}
