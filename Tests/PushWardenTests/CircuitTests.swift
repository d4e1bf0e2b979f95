import Foundation
import PWCore
import PushWarden
import PushWardenTestSupport
@testable import RedisStores
@testable import Registration
import Testing

/// The circuit breaker end to end: a real sidecar in front of a mock Voyado scripted to fail.
@Suite struct CircuitTests {
    static let circuit = "{failures: 3, within: 10s, open_for: 1s}"
    static let oneAttempt = "{attempts: 1, backoff: 10ms, max_backoff: 20ms}"

    static func register(_ h: Harness) async throws -> Harness.Reply {
        try await h.post("/installations", #"{"platform":"android","push_token":"fcm-\#(UUID().uuidString)"}"#)
    }

    static func gauge(_ h: Harness, upstream: String = "voyado") async throws -> String? {
        let prefix = #"pushwarden_upstream_circuit_state{app="\#(h.app)",upstream="\#(upstream)"} "#
        return try await h.admin("/metrics").text.split(separator: "\n").first { $0.hasPrefix(prefix) }.map { String($0.dropFirst(prefix.count)) }
    }

    /// Three calls that end unavailable open the circuit.
    static func open(_ h: Harness) async throws {
        h.mock.enqueue(.init(status: 503), .init(status: 503), .init(status: 503))
        for _ in 0..<3 {
            let reply = try await register(h)
            #expect(reply.status == 503)
            #expect(reply.errorCode == "upstream_unavailable")
        }
        #expect(h.mock.received(path: "/installations").count == 3)
    }

    @Test func anOpenCircuitAnswersAtOnceWithoutCallingThenAHealthyProbeClosesIt() async throws {
        let h = try await Harness(retry: Self.oneAttempt, circuit: Self.circuit)
        #expect(try await Self.gauge(h) == "0")
        try await Self.open(h)
        #expect(try await Self.gauge(h) == "1")
        #expect(h.logs.text.contains("upstream circuit opened"))

        let clock = ContinuousClock()
        let started = clock.now
        let fast = try await Self.register(h)
        let took = clock.now - started
        #expect(fast.status == 503)
        #expect(fast.errorCode == "upstream_unavailable")
        #expect(fast.headers["Retry-After"] == "1")
        #expect(took < .milliseconds(50), "an open circuit answered after \(took)")
        #expect(h.mock.received(path: "/installations").count == 3)  // nothing was sent

        try await Task.sleep(for: .milliseconds(1_100))
        let probe = try await Self.register(h)
        #expect(probe.status == 202)
        #expect(probe.outcome == "forwarded")
        #expect(h.mock.received(path: "/installations").count == 4)
        #expect(try await Self.gauge(h) == "0")
        #expect(h.logs.text.contains("upstream circuit closed"))
        // Requests flow again.
        #expect(try await Self.register(h).outcome == "forwarded")
        #expect(h.mock.received(path: "/installations").count == 5)
        await h.stop()
    }

    @Test func aFailedProbeReopensTheCircuit() async throws {
        let h = try await Harness(retry: Self.oneAttempt, circuit: Self.circuit)
        try await Self.open(h)
        try await Task.sleep(for: .milliseconds(1_100))
        h.mock.enqueue(.init(status: 503))
        let probe = try await Self.register(h)
        #expect(probe.status == 503)
        #expect(h.mock.received(path: "/installations").count == 4)  // the probe went
        #expect(try await Self.gauge(h) == "1")
        #expect(h.logs.text.contains("upstream circuit re-opened"))
        let fast = try await Self.register(h)
        #expect(fast.status == 503)
        #expect(fast.headers["Retry-After"] == "1")
        #expect(h.mock.received(path: "/installations").count == 4)  // open again: nothing sent
        try await Task.sleep(for: .milliseconds(1_100))
        #expect(try await Self.register(h).outcome == "forwarded")
        #expect(try await Self.gauge(h) == "0")
        await h.stop()
    }

    @Test func aShadowsOpenCircuitDoesNotFailThePrimarysAnswer() async throws {
        let primary = try MockVoyado(apiKey: "main-key"), shadow = try MockVoyado(apiKey: "next-key")
        let h = try await SidecarHarness(upstreams: """
                  - name: main
                    provider: voyado
                    role: primary
                    base_path: \(primary.basePath)
                    api_key: {env: MAIN_KEY}
                    retry: {attempts: 1, backoff: 10ms, max_backoff: 20ms}
                    circuit: {failures: 2, within: 10s, open_for: 30s}
                  - name: next
                    provider: voyado
                    role: shadow
                    base_path: \(shadow.basePath)
                    api_key: {env: NEXT_KEY}
                    retry: {attempts: 1, backoff: 10ms, max_backoff: 20ms}
                    circuit: {failures: 2, within: 10s, open_for: 30s}
            """, secrets: [.env("MAIN_KEY"): "main-key", .env("NEXT_KEY"): "next-key"])
        shadow.enqueue(.init(status: 503), .init(status: 503))
        for _ in 0..<3 {
            let reply = try await h.post("/installations", #"{"platform":"android","push_token":"fcm-\#(UUID().uuidString)"}"#)
            #expect(reply.status == 202)
            #expect(reply.outcome("main") == "forwarded")
            #expect(reply.outcome("next") == "failed")
        }
        #expect(primary.received(path: "/installations").count == 3)
        #expect(shadow.received(path: "/installations").count == 2)  // the third found it open
        let metrics = try await h.admin("/metrics").text
        #expect(metrics.contains(#"pushwarden_upstream_circuit_state{app="\#(h.app)",upstream="next"} 1"#))
        #expect(metrics.contains(#"pushwarden_upstream_circuit_state{app="\#(h.app)",upstream="main"} 0"#))
        await h.stop()
        await primary.stop()
        await shadow.stop()
    }
}
