// swift-tools-version:6.0
// The Swift client snippet of docs/clients: a library to copy into an app, and a demo that runs
// it against a live sidecar (scripts/checks/swift-client.check.sh). Foundation only.
import PackageDescription

let package = Package(
    name: "PushWardenClient",
    platforms: [.macOS(.v12), .iOS(.v15)],
    products: [
        .library(name: "PushWardenClient", targets: ["PushWardenClient"]),
        .executable(name: "pushwarden-client-demo", targets: ["pushwarden-client-demo"]),
    ],
    targets: [
        .target(name: "PushWardenClient"),
        .executableTarget(name: "pushwarden-client-demo", dependencies: ["PushWardenClient"]),
    ]
)
