import Foundation
import HTTPClient
import PWCore
import SessionAuth

/// `bench-tool erase --url http://127.0.0.1:P --admin-url http://127.0.0.1:A --secret S --admin-token T
/// [--app bench] [--installations 20] [--contacts 5]`
///
/// For each of `--contacts` fresh contacts: registers `--installations` new Android tokens (each
/// forwarded to the mock upstream), then times the erasure of the contact on the admin listener
/// (`DELETE /v1/apps/{app}/contacts/{contact}/installations`), which unregisters every one at the
/// upstream. Prints `erase_ms=<each>` and `erase_installations=<each count>`. Benchmark tooling only.
func runErase() async throws {
    guard let url = value("--url"), let adminURL = value("--admin-url"), let secret = value("--secret"),
          let adminToken = value("--admin-token") else {
        throw BenchError("usage: bench-tool erase --url U --admin-url A --secret S --admin-token T [--app A] [--installations N] [--contacts K]")
    }
    let app = value("--app") ?? "bench"
    let installations = value("--installations").flatMap(Int.init) ?? 20
    let contacts = value("--contacts").flatMap(Int.init) ?? 5
    let client = try HTTPClient()
    defer { client.shutdown() }
    let run = String(ProcessInfo.processInfo.processIdentifier)
    var times: [Double] = []
    var counts: [Int] = []
    for k in 0..<contacts {
        let contact = "erase-\(run)-\(k)"
        let now = Int(Date().timeIntervalSince1970)
        let session = JWTMinter.mintHS256(claims: JSONObject([
            JSONMember("sub", .string(contact)), JSONMember("iss", "https://auth.bench"), JSONMember("aud", "bench"),
            JSONMember("iat", .number(String(now))), JSONMember("exp", .number(String(now + 600))),
        ]), secret: Array(secret.utf8))
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<installations {
                group.addTask {
                    let body = #"{"platform":"android","push_token":"bench-erase-token-\#(contact)-\#(i)-aaaaaaaaaaaa"}"#
                    let response = try await client.execute(HTTPClientRequest(
                        method: "POST", url: "\(url)/v1/apps/\(app)/installations",
                        headers: ["Content-Type": "application/json", "Authorization": "Bearer " + session],
                        body: Array(body.utf8), timeoutMillis: 10_000))
                    guard response.status == 202 else { throw BenchError("registration answered \(response.status)") }
                }
            }
            try await group.waitForAll()
        }
        let started = ContinuousClock.now
        let response = try await client.execute(HTTPClientRequest(
            method: "DELETE", url: "\(adminURL)/v1/apps/\(app)/contacts/\(contact)/installations",
            headers: ["Authorization": "Bearer " + adminToken], timeoutMillis: 30_000))
        let elapsed = started.duration(to: .now)
        guard response.status == 202 else { throw BenchError("erase answered \(response.status): \(String(decoding: response.body, as: UTF8.self))") }
        let erased = (try? JSONValue.parse(response.body))?.objectValue?["installations"].flatMap { value -> Int? in
            if case .number(let text) = value { return Int(text) }
            return nil
        } ?? -1
        times.append(Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15)
        counts.append(erased)
    }
    print("erase_ms=" + times.map { String(format: "%.1f", $0) }.joined(separator: ","))
    print("erase_installations=" + counts.map(String.init).joined(separator: ","))
}

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
