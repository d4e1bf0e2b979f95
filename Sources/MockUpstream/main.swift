import Foundation
import PushWardenTestSupport

/// `mock-upstream --port P --latency-ms N [--key KEY]`: a Voyado-compatible upstream for the
/// benchmark and for manual trials. Loopback only; stops on SIGTERM/SIGINT.
var port = 0
var latency = 0
var key = "voyado-test-key"
var threads = 2
var arguments = CommandLine.arguments.dropFirst()
while let flag = arguments.popFirst() {
    guard let value = arguments.popFirst() else { fatalError("\(flag) needs a value") }
    switch flag {
    case "--port": port = Int(value) ?? 0
    case "--latency-ms": latency = Int(value) ?? 0
    case "--key": key = value
    case "--threads": threads = Int(value) ?? 2
    default: fatalError("unknown flag \(flag)")
    }
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
