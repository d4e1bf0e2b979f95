// swift-tools-version:6.0
import PackageDescription

/// PushWarden: one system-library target per C library, one thin Swift wrapper per
/// library, a pure policy/domain layer, the sidecar itself and a thin command layer.
let package = Package(
    name: "PushWarden",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "pushwarden", targets: ["pushwarden"]),
    ],
    targets: [
        // MARK: C libraries (Debian packages)
        .systemLibrary(name: "CMicroHTTPD", pkgConfig: "libmicrohttpd", providers: [.apt(["libmicrohttpd-dev"])]),
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "CHiredis", providers: [.apt(["libhiredis-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CYAML", pkgConfig: "yaml-0.1", providers: [.apt(["libyaml-dev"])]),
        // Typed forwarders for the variadic C functions Swift cannot call.
        .target(name: "CShims", dependencies: ["CMicroHTTPD", "CCurl"]),

        // MARK: Pure Swift, no C
        .target(name: "PWCore"),
        /// One thread, one epoll set: the loops that the server and the loop-local Redis connections share.
        .target(name: "Loops", dependencies: ["PWCore", "CShims"]),
        .target(name: "PWPolicy", dependencies: ["PWCore", "YAMLKit"]),
        /// The client API's request shapes and every validation docs/api.md names.
        .target(name: "ClientAPI", dependencies: ["PWCore", "PWPolicy"]),

        // MARK: One thin wrapper per C library
        .target(name: "YAMLKit", dependencies: ["CYAML"]),
        .target(name: "PWCrypto", dependencies: ["COpenSSL"]),
        .target(name: "HTTPServer", dependencies: ["PWCore", "Loops", "CMicroHTTPD", "CShims"]),
        .target(name: "HTTPClient", dependencies: ["PWCore", "Loops", "CCurl", "CShims"]),
        .target(name: "RedisClient", dependencies: ["PWCore", "Loops", "CHiredis", "CShims"]),

        // MARK: Domain built on the wrappers
        .target(name: "SessionAuth", dependencies: ["PWCore", "PWPolicy", "PWCrypto"]),
        /// The upstream providers: what PushWarden asks of a provider (the adapter protocol, the call
        /// context, failures, transports) and one folder per provider with its adapter and error codes.
        /// Their policy settings stay in PWPolicy/Providers, which the policy loader reads below this layer.
        .target(name: "Providers", dependencies: ["PWCore", "PWPolicy", "ClientAPI", "PWCrypto", "Loops", "HTTPClient"]),
        /// The registration runtime: the operations (Registrar, Deduper, plans, keys), the apps in
        /// force (AppRuntime, AppTable), the inventory and outbox logic, sessions, upstream calls, and
        /// the store protocols with the in-memory stores. No Redis and no HTTP server in sight.
        .target(name: "Registration", dependencies: [
            "PWCore", "PWPolicy", "ClientAPI", "PWCrypto", "SessionAuth", "Loops", "HTTPClient", "Providers",
        ]),
        /// Every Redis-backed store behind the runtime's protocols (dedupe, identities, inventory,
        /// outbox streams, shared rate limits, policy serials, the audit trail) and their scripts.
        .target(name: "RedisStores", dependencies: ["PWCore", "PWPolicy", "PWCrypto", "Loops", "RedisClient", "Providers", "Registration"]),
        /// The HTTP edges (client API, admin and server-to-server API) and the composition root.
        .target(name: "PushWarden", dependencies: [
            "PWCore", "PWPolicy", "ClientAPI", "PWCrypto", "SessionAuth", "Loops", "HTTPServer", "HTTPClient", "RedisClient", "Providers",
            "Registration", "RedisStores",
        ]),
        .executableTarget(name: "pushwarden", dependencies: [
            "PushWarden", "Registration", "RedisStores", "PWPolicy", "PWCore", "SessionAuth", "PWCrypto", "HTTPClient", "CShims",
        ]),

        // MARK: Tests
        .target(name: "PushWardenTestSupport", dependencies: ["PWCore", "PWPolicy", "Loops", "HTTPServer", "HTTPClient", "RedisClient"]),
        /// A mock upstream process for the benchmark and manual trials (Voyado's API, configurable latency).
        .executableTarget(name: "mock-upstream", dependencies: ["PushWardenTestSupport"], path: "Sources/MockUpstream"),
        /// Mints the benchmark's session token pools (HS256, ES256 with a JWKS).
        .executableTarget(name: "bench-tool", dependencies: ["PWCore", "PWPolicy", "ClientAPI", "PWCrypto", "SessionAuth", "HTTPServer", "HTTPClient", "Loops", "RedisClient"], path: "Sources/BenchTool"),
        .testTarget(name: "CoreTests", dependencies: ["PWCore"]),
        .testTarget(name: "ClientAPITests", dependencies: ["ClientAPI", "PWPolicy", "PWCore"]),
        .testTarget(name: "PolicyTests", dependencies: ["PWPolicy", "YAMLKit"]),
        .testTarget(name: "SessionAuthTests", dependencies: ["SessionAuth", "PWCrypto", "PWPolicy", "PWCore"]),
        .testTarget(name: "HTTPServerTests", dependencies: ["HTTPServer", "Loops", "PushWardenTestSupport"]),
        .testTarget(name: "HTTPClientTests", dependencies: ["HTTPClient", "HTTPServer", "Loops", "PushWardenTestSupport"]),
        .testTarget(name: "RedisClientTests", dependencies: ["RedisClient", "Loops", "PushWardenTestSupport"]),
        .testTarget(name: "PushWardenTests", dependencies: [
            "PushWarden", "Providers", "Registration", "RedisStores", "PushWardenTestSupport", "PWPolicy", "PWCore", "ClientAPI", "SessionAuth", "PWCrypto", "HTTPClient",
            "RedisClient", "Loops",
        ]),
    ],
    swiftLanguageModes: [.v6]
)

// MARK: Fuzzing (issue 15)
// libFuzzer targets, declared only with PUSHWARDEN_FUZZ=1 in the environment (`make fuzz`,
// scripts/checks/fuzz.check.sh), so the normal build and `swift test` neither compile nor link
// them. They are built with `-Xswiftc -sanitize=fuzzer,address` in their own scratch path
// (.build/fuzz); each defines its `<target>_main` entry and hands control to libFuzzer's driver.
if Context.environment["PUSHWARDEN_FUZZ"] == "1" {
    // No implicit main: the entry point is the target's @_cdecl("<target>_main").
    let library: [SwiftSetting] = [.unsafeFlags(["-parse-as-library"])]
    package.targets += [
        .target(name: "FuzzSupport", path: "Sources/Fuzz/Support"),
        .executableTarget(name: "fuzz-json", dependencies: ["FuzzSupport", "PWCore"], path: "Sources/Fuzz/JSON", swiftSettings: library),
        .executableTarget(name: "fuzz-jwt", dependencies: ["FuzzSupport", "PWCore", "PWCrypto", "PWPolicy", "SessionAuth"],
                          path: "Sources/Fuzz/JWT", swiftSettings: library),
        .executableTarget(name: "fuzz-policy", dependencies: ["FuzzSupport", "PWPolicy"], path: "Sources/Fuzz/Policy", swiftSettings: library),
        .executableTarget(name: "fuzz-endpoint", dependencies: ["FuzzSupport", "PWCore", "ClientAPI", "CCurl"], path: "Sources/Fuzz/Endpoint", swiftSettings: library),
        .executableTarget(name: "fuzz-request", dependencies: ["FuzzSupport", "PWCore", "PWPolicy", "ClientAPI"], path: "Sources/Fuzz/Request", swiftSettings: library),
        .executableTarget(name: "fuzz-head", dependencies: ["FuzzSupport", "PWCore", "PWPolicy", "SessionAuth", "HTTPServer", "PushWarden", "Registration"],
                          path: "Sources/Fuzz/Head", swiftSettings: library),
    ]
}
