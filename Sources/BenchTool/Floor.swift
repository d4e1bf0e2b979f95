import Foundation
import HTTPClient
import HTTPServer
import Loops
import PWCore
import PWCrypto
import RedisClient
import Synchronization

/// `bench-tool floor --port P --redis URL [--upstream URL] [--threads N]`: the ceiling of PushWarden's hot path
/// on this machine, for the benchmark's information rows. A server on our `HTTPServer` whose
/// handler does only the fixed part of a dedupe hit:
/// - `GET /inline`: a bare 202 answered before the handler returns (no suspension);
/// - `GET /resume`: suspended, then answered on the loop's next turn (suspend/resume alone);
/// - `GET /redis`: one `GET` on the loop's Redis connection, answered when Redis replies
///   (suspend/resume plus a Redis round trip, all on one thread);
/// - `POST /accept`: the Redis writes a queued registration cannot do without, in one batch on the
///   loop's connection, each under keys of its own (a counter): the queued mark (`SET … GET`), the
///   outbox entry (`XADD`, an entry of the size PushWarden writes), and the inventory's record
///   (`HSET`), holder (`SET … GET`) and last-seen index (`ZADD`); answered when the last reply is
///   in. The ceiling of a queued accept, beside `/redis`, the ceiling of a hit;
/// - `POST /forward`: the request body posted to `--upstream` with our `HTTPClient` (a task, as
///   in PushWarden), answered 202 once the upstream answered 2xx: a forward with no Redis, no
///   session check and no validation;
/// - `POST /v1/apps/<app>/installations` (P1's own requests, sessions and bodies): one `GET`, then
///   a 202 of a dedupe hit's shape (its three fields and a body of its length): the HTTP exchange a
///   hit cannot avoid plus its Redis round trip, where `/redis` is a bare GET and a bare 202;
/// - the same for app `benches`, with one ES256 verification (a signature made at start) before
///   the `GET`: the ceiling of P1 ES256, where every token is verified.
/// Whatever a real hit costs beyond `/redis` is PushWarden's own work. Benchmark tooling only.
struct FloorHandler: HTTPHandler {
    let redis: RedisClient
    let client: HTTPClient
    let upstream: String
    /// What `/v1/apps/benches/...` verifies on every request.
    let es256: (key: PublicKey, message: [UInt8], signature: [UInt8])
    static let key: [[UInt8]] = [Array("GET".utf8), Array("pw-floor".utf8)]

    func decide(_ head: HTTPRequestHead) -> HeadDecision { .readBody(limit: 1 << 16) }
    func payloadTooLarge(_ head: HTTPRequestHead, context: (any Sendable)?) -> HTTPResponse { HTTPResponse(status: 413) }

    func start(_ request: HTTPRequest, on loop: EventLoop, responder: HTTPResponder) {
        switch request.head.path {
        case "/inline":
            responder.respond(HTTPResponse(status: 202))
        case "/resume":
            loop.execute { responder.respond(HTTPResponse(status: 202)) }
        case "/redis":
            redis.send(bytes: Self.key, on: loop) { result in
                if case .success = result {
                    responder.respond(HTTPResponse(status: 202))
                } else {
                    responder.respond(HTTPResponse(status: 503))
                }
            }
        case "/accept":
            let n = String(Self.accepted.wrappingAdd(1, ordering: .relaxed).oldValue)
            let commands: [[String]] = [
                ["SET", "pw-floor:{q" + n + "}:q", Self.fingerprint, "EX", "60", "GET"],
                ["XADD", "pw-floor:{outbox}:s" + String(n.utf8.last.map { $0 & 7 } ?? 0), "*", "e", Self.entry],
                ["HSET", "pw-floor:{c" + n + "}:inv", Self.fingerprint, Self.record],
                ["SET", "pw-floor:{t" + n + "}:owner", Self.fingerprint, "GET"],
                ["ZADD", "pw-floor:{seen}", n, n + ":" + Self.fingerprint],
            ]
            let remaining = Remaining(commands.count)
            for command in commands {
                redis.send(command, on: loop) { result in
                    if case .failure = result { remaining.failed = true }
                    remaining.count -= 1
                    if remaining.count == 0 { responder.respond(HTTPResponse(status: remaining.failed ? 503 : 202)) }
                }
            }
        case "/forward":
            let call = HTTPClientRequest(
                method: "POST", url: upstream,
                headers: ["Authorization": "Bearer bench-key", "Content-Type": "application/json"],
                body: request.body)
            let client = self.client
            Task(executorPreference: loop) {
                let status = (try? await client.execute(call, on: loop))?.status ?? 599
                responder.respond(HTTPResponse(status: (200..<300).contains(status) ? 202 : 502))
            }
        default:
            guard request.head.path.hasPrefix("/v1/apps/") else {
                responder.respond(HTTPResponse(status: 404))
                return
            }
            if request.head.path.hasPrefix("/v1/apps/benches/"),
               !es256.key.verifyES256(signature: es256.signature, message: es256.message) {
                responder.respond(HTTPResponse(status: 401))
                return
            }
            redis.send(bytes: Self.key, on: loop) { result in
                guard case .success = result else {
                    responder.respond(HTTPResponse(status: 503))
                    return
                }
                responder.respond(Self.hitShaped())
            }
        }
    }

    /// A 202 of a dedupe hit's shape: PushWarden's three fields and a body of its length.
    private static func hitShaped() -> HTTPResponse {
        let id = requestIDPrefix + String(accepted.wrappingAdd(1, ordering: .relaxed).oldValue, radix: 36)
        var headers = HTTPHeaders()
        headers.reserveCapacity(3)
        headers.add("Content-Type", "application/json")
        headers.add("X-Request-Id", id)
        headers.add("Cache-Control", "no-store")
        return HTTPResponse(status: 202, headers: headers, body: Array(#"{"request_id":"\#(id)","upstreams":{"voyado":"unchanged"}}"#.utf8))
    }

    private static let requestIDPrefix = "Fl00rBench00-"

    private static let accepted = Atomic<UInt64>(0)
    private static let fingerprint = String(repeating: "f", count: 64)
    /// About what PushWarden's outbox entry and inventory record hold for a bench registration.
    private static let entry = String(repeating: "e", count: 320)
    private static let record = String(repeating: "r", count: 240)

    /// The replies one `/accept` still waits for (loop-confined: its completions run on the loop).
    private final class Remaining: @unchecked Sendable {
        var count: Int
        var failed = false
        init(_ count: Int) { self.count = count }
    }

}

func runFloor() throws {
    guard let port = value("--port").flatMap(Int.init), let url = value("--redis") else {
        FileHandle.standardError.write(Data("usage: bench-tool floor --port P --redis URL [--upstream URL] [--threads N]\n".utf8))
        exit(2)
    }
    let redis = RedisClient(configuration: try RedisConfiguration(url: url))
    let configuration = HTTPServerConfiguration(
        port: port, threads: value("--threads").flatMap(Int.init) ?? HTTPServerConfiguration.coreCount, name: "floor")
    let client = try HTTPClient(configuration: HTTPClientConfiguration(maxConnectionsPerHost: 512, maxTotalConnections: 1024))
    let signing = try PrivateKey.generateP256()
    let message = Array("eyJhbGciOiJFUzI1NiIsImtpZCI6ImZsb29yIn0.eyJzdWIiOiJjb250YWN0LTEiLCJhdWQiOiJiZW5jaCJ9".utf8)
    let handler = FloorHandler(redis: redis, client: client, upstream: value("--upstream") ?? "http://127.0.0.1:1/",
                               es256: (signing.publicKey, message, try signing.signES256(message: message)))
    let server = try HTTPServer(configuration: configuration, handler: handler)
    FileHandle.standardOutput.write(Data("floor listening on 127.0.0.1:\(server.port)\n".utf8))
    withExtendedLifetime(server) {
        while true { sleep(3600) }
    }
}
