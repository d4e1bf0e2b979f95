import Foundation
import HTTPClient
import HTTPServer
import PWCore
import PWCrypto
import PWPolicy
import PushWarden
import PushWardenTestSupport
@testable import RedisStores
@testable import Registration
import SessionAuth
import Synchronization
import Testing

/// `session.jwks_url` (docs/configuration.md, sessions) against an identity provider on loopback: keys
/// fetched before the listener opens, one refetch for an unknown kid per interval, the last good
/// keys kept through every kind of failed fetch, weak keys skipped, and the metrics.
@Suite(.serialized) struct JWKSURLTests {
    /// An identity provider serving whatever `document` holds, with `headers`.
    final class IdentityProvider: Sendable {
        let server: MockServer
        let answer = Mutex<(status: Int, headers: HTTPHeaders, body: [UInt8])>((200, ["Cache-Control": "max-age=3600"], []))

        init() throws {
            server = try MockServer()
            server.respond { [weak self] _ in
                guard let (status, headers, body) = self?.answer.withLock({ $0 }) else { return HTTPResponse(status: 503) }
                var all = headers
                all.set("Content-Type", "application/json")
                return HTTPResponse(status: status, headers: all, body: body)
            }
        }

        var url: String { "http://127.0.0.1:\(server.port)/.well-known/jwks.json" }
        var fetches: Int { server.received(path: "/jwks.json").count }

        func serve(_ keys: [JSONObject], status: Int = 200, cacheControl: String = "max-age=3600") {
            serve(raw: Array(JSONValue.object(JSONObject([JSONMember("keys", .array(keys.map(JSONValue.object)))])).encoded()),
                  status: status, cacheControl: cacheControl)
        }

        func serve(raw: [UInt8], status: Int = 200, cacheControl: String = "max-age=3600") {
            answer.withLock { $0 = (status, ["Cache-Control": cacheControl], raw) }
        }
    }

    static func policy(jwksURL: String, fallback: String? = nil, app: String = "shop") -> Policy {
        let yaml = """
            version: 1
            apps:
              \(app):
                session:
                  type: jwt
                  algorithms: [RS256, ES256]
                  jwks_url: \(jwksURL)
            \(fallback.map { "      jwks_file: \($0)\n" } ?? "")      contact_claim: contact_id
                client:
                  platforms: [ios]
                upstreams:
                  - name: voyado
                    provider: dry_run

            """
        switch PolicyLoader.load(text: yaml, path: "jwks.yaml") {
        case .success(let policy): return policy
        case .failure(let diagnostics): fatalError("\(diagnostics)")
        }
    }

    static func start(_ policy: Policy, logs: LogSink, timing: JWKSTiming = JWKSTiming()) async throws -> Sidecar {
        try await Sidecar.start(policy: policy, configuration: ServeConfiguration(listen: HostPort(host: "127.0.0.1", port: 0),
                                                                                  admin: HostPort(host: "127.0.0.1", port: 0), threads: 2),
                                logger: Logger(label: "test", level: .debug, sink: logs), store: MemoryStore(), jwksTiming: timing)
    }

    static func claims(_ contact: String = "alice") -> JSONObject {
        JSONObject([JSONMember("contact_id", .string(contact)), JSONMember("exp", .number(String(Int(Date().timeIntervalSince1970) + 600)))])
    }

    static func register(_ sidecar: Sidecar, _ token: String, app: String = "shop", client: HTTPClient) async throws -> Int {
        let apns = String(repeating: "ab", count: 32)
        let response = try await client.execute(HTTPClientRequest(
            method: "POST", url: "http://127.0.0.1:\(sidecar.port)/v1/apps/\(app)/installations",
            headers: ["Authorization": "Bearer \(token)", "Content-Type": "application/json"],
            body: Array(#"{"platform":"ios","push_token":"\#(apns)"}"#.utf8)))
        return response.status
    }

    static func metrics(_ sidecar: Sidecar, client: HTTPClient) async throws -> String {
        let response = try await client.execute(HTTPClientRequest(method: "GET", url: "http://127.0.0.1:\(sidecar.adminPort)/metrics"))
        return String(decoding: response.body, as: UTF8.self)
    }

    /// Waits up to `seconds` for `condition`.
    static func eventually(_ seconds: Double = 5, _ condition: () async throws -> Bool) async rethrows -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try await condition() { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return try await condition()
    }

    /// A compact ES256 JWS signed by the `openssl` command line with the PEM key at `keyFile`.
    static func opensslES256(claims: JSONObject, kid: String, keyFile: String, directory: URL) throws -> String {
        let header = JSONValue.object(JSONObject([JSONMember("alg", "ES256"), JSONMember("kid", .string(kid))])).encoded()
        let input = Base64URL.encode(header) + "." + Base64URL.encode(JSONValue.object(claims).encoded())
        let message = directory.appendingPathComponent("msg-\(UUID().uuidString)")
        try Data(input.utf8).write(to: message)
        let der = Array(try JWKSCommandLineTests.Keys.openssl(["dgst", "-sha256", "-sign", keyFile, message.path]))
        // ECDSA-Sig-Value (DER) to JOSE r || s.
        var i = 2
        if der[1] & 0x80 != 0 { i += Int(der[1] & 0x7F) }
        func integer() -> [UInt8] {
            let length = Int(der[i + 1])
            var value = Array(der[(i + 2)..<(i + 2 + length)])
            i += 2 + length
            while value.count > 32, value.first == 0 { value.removeFirst() }
            return [UInt8](repeating: 0, count: 32 - value.count) + value
        }
        return input + "." + Base64URL.encode(integer() + integer())
    }

    @Test func fetchedBeforeListeningAndOneRefetchPerBurstOfUnknownKids() async throws {
        let idp = try IdentityProvider()
        let a = try PrivateKey.generateP256()
        let b = try PrivateKey.generateRSA()
        idp.serve([a.publicKeyJWK(kid: "a")])
        let logs = LogSink.memory()
        let sidecar = try await Self.start(Self.policy(jwksURL: idp.url), logs: logs)
        let client = try HTTPClient()
        #expect(idp.fetches == 1, "fetched once, before start returned")
        #expect(try await Self.register(sidecar, JWTMinter.mintES256(claims: Self.claims(), key: a, kid: "a"), client: client) == 202)

        // The provider rotates in key b; a burst of tokens with unknown kids costs one fetch and is refused.
        idp.serve([a.publicKeyJWK(kid: "a"), b.publicKeyJWK(kid: "b")])
        for n in 0..<10 {
            let token = try JWTMinter.mintES256(claims: Self.claims(), key: a, kid: "unknown-\(n)")
            #expect(try await Self.register(sidecar, token, client: client) == 401)
        }
        #expect(await Self.eventually { idp.fetches == 2 })
        try await Task.sleep(for: .milliseconds(200))
        #expect(idp.fetches == 2, "one refetch for the whole burst")
        // The refetch brought b: its tokens pass now. A further unknown kid within 30 s fetches nothing.
        #expect(try await Self.register(sidecar, JWTMinter.mintRS256(claims: Self.claims(), key: b, kid: "b"), client: client) == 202)
        #expect(try await Self.register(sidecar, JWTMinter.mintES256(claims: Self.claims(), key: a, kid: "c"), client: client) == 401)
        try await Task.sleep(for: .milliseconds(200))
        #expect(idp.fetches == 2)

        let metrics = try await Self.metrics(sidecar, client: client)
        #expect(metrics.contains(#"pushwarden_jwks_fetches_total{app="shop",result="ok"} 2"#), "\(metrics)")
        #expect(metrics.contains(#"pushwarden_jwks_age_seconds{app="shop"} "#), "\(metrics)")
        await sidecar.shutdown(gracePeriodSeconds: 1)
        client.shutdown()
        await idp.server.stop()
    }

    @Test func failedFetchesKeepTheLastGoodKeysAndWeakKeysAreSkipped() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pw-jwksurl-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        // The good key and a weak one, both made by the openssl command line.
        let pem = directory.appendingPathComponent("ec.pem").path
        try JWKSCommandLineTests.Keys.openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", pem])
        let good = try PrivateKey(pem: String(decoding: try Data(contentsOf: URL(fileURLWithPath: pem)), as: UTF8.self))
        let weakPEM = directory.appendingPathComponent("rsa1024.pem").path
        try JWKSCommandLineTests.Keys.openssl(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024", "-out", weakPEM])
        let modulusLine = String(decoding: try JWKSCommandLineTests.Keys.openssl(["rsa", "-in", weakPEM, "-noout", "-modulus"]), as: UTF8.self)
        let hex = modulusLine.split(separator: "=").last.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) } ?? ""
        let weak = JSONObject([JSONMember("kty", "RSA"), JSONMember("kid", "weak"),
                               JSONMember("n", .string(Base64URL.encode(JWKSCommandLineTests.Keys.bytes(hex: hex)))), JSONMember("e", "AQAB")])
        let p384 = JSONObject([JSONMember("kty", "EC"), JSONMember("kid", "p384"), JSONMember("crv", "P-384"),
                               JSONMember("x", "AAAA"), JSONMember("y", "AAAA")])

        let idp = try IdentityProvider()
        idp.serve([weak, good.publicKeyJWK(kid: "good"), p384], cacheControl: "public, max-age=0")
        let logs = LogSink.memory()
        var timing = JWKSTiming()
        timing.minimumRefresh = 0.05
        timing.retryAfterFailure = 0.05
        let sidecar = try await Self.start(Self.policy(jwksURL: idp.url), logs: logs, timing: timing)
        let client = try HTTPClient()
        let token = try Self.opensslES256(claims: Self.claims(), kid: "good", keyFile: pem, directory: directory)
        #expect(try await Self.register(sidecar, token, client: client) == 202)
        #expect(logs.text.contains(#""kid":"weak""#) && logs.text.contains("RSA modulus of 1024 bits is too small"), "\(logs.text)")
        #expect(logs.text.contains(#""kid":"p384""#) && logs.text.contains("EC curve P-384 is not P-256"), "\(logs.text)")

        let failures: [(String, () -> Void)] = [
            ("http_error", { idp.serve([good.publicKeyJWK(kid: "good")], status: 500, cacheControl: "max-age=0") }),
            ("invalid", { idp.serve(raw: Array("<html>not json</html>".utf8), cacheControl: "max-age=0") }),
            ("too_large", { idp.serve(raw: Array(#"{"keys":[],"pad":""#.utf8) + [UInt8](repeating: 0x61, count: 70_000) + Array(#""}"#.utf8)) }),
            ("invalid", { idp.serve([weak, p384], cacheControl: "max-age=0") }),
        ]
        for (result, install) in failures {
            install()
            let before = try await Self.metrics(sidecar, client: client)
            let count = Self.counter(before, result)
            #expect(try await Self.eventually { Self.counter(try await Self.metrics(sidecar, client: client), result) > count }, "\(result)")
            // The last good keys still verify.
            #expect(try await Self.register(sidecar, token, client: client) == 202, "\(result)")
        }
        // The network down: the listener of the provider gone.
        await idp.server.stop()
        let count = Self.counter(try await Self.metrics(sidecar, client: client), "network_error")
        #expect(try await Self.eventually { Self.counter(try await Self.metrics(sidecar, client: client), "network_error") > count })
        #expect(try await Self.register(sidecar, token, client: client) == 202)
        #expect(logs.text.contains("jwks refresh failed; the last good keys stay"))
        await sidecar.shutdown(gracePeriodSeconds: 1)
        client.shutdown()
    }

    static func counter(_ metrics: String, _ result: String) -> Int {
        let prefix = #"pushwarden_jwks_fetches_total{app="shop",result="\#(result)"} "#
        return metrics.split(separator: "\n").first { $0.hasPrefix(prefix) }.flatMap { Int($0.dropFirst(prefix.count)) } ?? 0
    }

    @Test func firstFetchFailureStopsTheStartUnlessAFallbackFileIsGiven() async throws {
        let idp = try IdentityProvider()
        idp.serve([], status: 503)
        do {
            _ = try await Self.start(Self.policy(jwksURL: idp.url), logs: LogSink.memory())
            Issue.record("started without keys")
        } catch {
            #expect("\(error)".contains(idp.url), "\(error)")
            #expect("\(error)".contains("no jwks_file fallback"), "\(error)")
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pw-jwksfb-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let key = try PrivateKey.generateP256()
        let file = directory.appendingPathComponent("jwks.json").path
        try JSONValue.object(JSONObject([JSONMember("keys", .array([.object(key.publicKeyJWK(kid: "file"))]))])).encodedString()
            .write(toFile: file, atomically: true, encoding: .utf8)
        let logs = LogSink.memory()
        let sidecar = try await Self.start(Self.policy(jwksURL: idp.url, fallback: file), logs: logs)
        let client = try HTTPClient()
        #expect(try await Self.register(sidecar, JWTMinter.mintES256(claims: Self.claims(), key: key, kid: "file"), client: client) == 202)
        #expect(logs.text.contains("starting with the jwks_file fallback"))
        let metrics = try await Self.metrics(sidecar, client: client)
        #expect(metrics.contains(#"pushwarden_jwks_fetches_total{app="shop",result="http_error"} 1"#), "\(metrics)")
        await sidecar.shutdown(gracePeriodSeconds: 1)
        client.shutdown()
        await idp.server.stop()
    }

    /// The real binary: `serve` exits 1 naming the URL when the first fetch fails.
    @Test func serveExitsNamingTheURL() throws {
        let port = try #require(Loopback.unusedPort())
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pw-jwkscli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = "http://127.0.0.1:\(port)/jwks.json"
        let policy = directory.appendingPathComponent("p.yaml").path
        try """
            version: 1
            apps:
              shop:
                session:
                  type: jwt
                  algorithms: [ES256]
                  jwks_url: \(url)
                client:
                  platforms: [ios]
                upstreams:
                  - name: up
                    provider: dry_run

            """.write(toFile: policy, atomically: true, encoding: .utf8)
        #expect(try CommandLineTests.run(["policy", "check", policy]).status == 0)
        let served = try JWKSCommandLineTests.serve(policy)
        #expect(served.status == 1, "\(served.stderr)")
        #expect(served.stderr.contains(url), "\(served.stderr)")
        #expect(!served.stderr.contains("pushwarden listening"))
    }
}
