import Foundation
import PushWardenTestSupport

/// `mock-upstream --port P --latency-ms N [--key KEY]`: a Voyado-compatible upstream for the
/// benchmark and for manual trials. Loopback only; stops on SIGTERM/SIGINT.
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
FileHandle.standardOutput.write(Data("mock-upstream listening on 127.0.0.1:\(mock.port) base path \(mock.basePathPrefix) latency \(latency)ms\n".utf8))
signal(SIGTERM, SIG_IGN)
signal(SIGINT, SIG_IGN)
let sources = [SIGTERM, SIGINT].map { sig -> DispatchSourceSignal in
    let source = DispatchSource.makeSignalSource(signal: sig, queue: .main)
    source.setEventHandler { exit(0) }
    source.resume()
    return source
}
withExtendedLifetime(sources) { dispatchMain() }
