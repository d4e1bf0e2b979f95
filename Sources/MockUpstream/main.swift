import Foundation
import PushWardenTestSupport

/// `mock-upstream --port P --latency-ms N [--key KEY]`: a Voyado-compatible upstream for the
/// benchmark and for manual trials. Loopback only; stops on SIGTERM/SIGINT.
///
/// With `--introspect-port I [--introspect-token T]` it also serves an RFC 7662 introspection
/// endpoint there (`MockIntrospection`, no latency: the app backend's own, next door), which
/// vouches for every token with the contact in its middle part (`s.contact-7.x` is `contact-7`).
///
/// `mock-upstream --client-load URL [--concurrency N] [--seconds S] [--connections N] [--key KEY]`
/// instead measures the HTTP client's CPU per call against such an upstream (see `ClientLoad`).
var port = 0
var latency = 0
var key = "voyado-test-key"
var threads = 2
var load: ClientLoad.Options?
var concurrency = 512
var seconds = 5.0
var connections = 512
var introspectPort: Int?
var introspectToken = "bench-introspect-token"
var arguments = CommandLine.arguments.dropFirst()
while let flag = arguments.popFirst() {
    guard let value = arguments.popFirst() else { fatalError("\(flag) needs a value") }
    switch flag {
    case "--port": port = Int(value) ?? 0
    case "--latency-ms": latency = Int(value) ?? 0
    case "--key": key = value
    case "--threads": threads = Int(value) ?? 2
    case "--client-load": load = ClientLoad.Options(url: value)
    case "--concurrency": concurrency = Int(value) ?? 512
    case "--seconds": seconds = Double(value) ?? 5
    case "--connections": connections = Int(value) ?? 512
    case "--introspect-port": introspectPort = Int(value)
    case "--introspect-token": introspectToken = value
    default: fatalError("unknown flag \(flag)")
    }
}
if var load {
    load.concurrency = concurrency
    load.seconds = seconds
    load.connectionsPerHost = connections
    load.apiKey = key
    try await ClientLoad.run(load)
    exit(0)
}
let mock = try MockVoyado(apiKey: key, latencyMillis: latency, record: false, port: port, threads: threads)
let introspection = try introspectPort.map { port in
    try MockIntrospection(credential: .bearer(introspectToken), record: false, port: port, threads: 1)
}
if let introspection { FileHandle.standardOutput.write(Data("introspection endpoint on \(introspection.url)\n".utf8)) }
FileHandle.standardOutput.write(Data("mock-upstream listening on 127.0.0.1:\(mock.port) base path \(mock.basePathPrefix) latency \(latency)ms\n".utf8))
signal(SIGTERM, SIG_IGN)
signal(SIGINT, SIG_IGN)
let sources = [SIGTERM, SIGINT].map { sig -> DispatchSourceSignal in
    let source = DispatchSource.makeSignalSource(signal: sig, queue: .main)
    source.setEventHandler { exit(0) }
    source.resume()
    return source
}
withExtendedLifetime((sources, introspection)) { dispatchMain() }
