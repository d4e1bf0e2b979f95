import Foundation
import HTTPClient
import PWCore

/// `--client-load URL`: drives `HTTPClient` alone against a URL (normally a second mock-upstream
/// with `--latency-ms`) with `concurrency` calls always in flight, then prints calls/s and the
/// CPU this whole process spent per call. The process does little else, so that figure is the
/// client's own cost per transfer (plus the small cost of the driving tasks).
enum ClientLoad {
    struct Options {
        var url: String
        var concurrency = 512
        var seconds = 5.0
        var connectionsPerHost = 512
        var apiKey = "voyado-test-key"
    }

    struct Tally: Sendable {
        var ok = 0
        var failed = 0
        var firstError: String?
    }

    static func run(_ options: Options) async throws {
        let client = try HTTPClient(configuration: HTTPClientConfiguration(
            maxConnectionsPerHost: options.connectionsPerHost, maxTotalConnections: options.connectionsPerHost * 2))
        defer { client.shutdown() }
        let body = Array(#"{"platform":"ios","push_token":"0123456789abcdef0123456789abcdef","contact_id":"c-42"}"#.utf8)
        let request = HTTPClientRequest(
            method: "POST", url: options.url,
            headers: ["Authorization": "Bearer \(options.apiKey)", "Content-Type": "application/json"],
            body: body)

        // A short warm-up opens the connections, so the measured window sees steady state only.
        _ = await drive(client, request, concurrency: options.concurrency, seconds: min(1, options.seconds))
        let cpuBefore = cpuSeconds()
        let start = ContinuousClock.now
        let tally = await drive(client, request, concurrency: options.concurrency, seconds: options.seconds)
        let elapsed = start.duration(to: .now)
        let cpu = cpuSeconds() - cpuBefore
        let wall = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let total = tally.ok + tally.failed
        let line = String(
            format: "client-load: %d ok, %d failed in %.2f s: %.0f req/s, cpu %.2f s, %.1f us cpu/req%@\n",
            tally.ok, tally.failed, wall, Double(total) / wall, cpu, total > 0 ? cpu * 1e6 / Double(total) : 0,
            tally.firstError.map { " (first error: \($0))" } ?? "")
        FileHandle.standardOutput.write(Data(line.utf8))
    }

    private static func drive(_ client: HTTPClient, _ request: HTTPClientRequest, concurrency: Int, seconds: Double) async -> Tally {
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
        return await withTaskGroup(of: Tally.self) { group in
            for _ in 0..<concurrency {
                group.addTask {
                    var tally = Tally()
                    while ContinuousClock.now < deadline {
                        do {
                            let response = try await client.execute(request)
                            if response.status < 300 { tally.ok += 1 } else {
                                tally.failed += 1
                                if tally.firstError == nil { tally.firstError = "status \(response.status)" }
                            }
                        } catch {
                            tally.failed += 1
                            if tally.firstError == nil { tally.firstError = "\(error)" }
                        }
                    }
                    return tally
                }
            }
            var sum = Tally()
            for await part in group {
                sum.ok += part.ok
                sum.failed += part.failed
                if sum.firstError == nil { sum.firstError = part.firstError }
            }
            return sum
        }
    }

    private static func cpuSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
        return seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }
}
