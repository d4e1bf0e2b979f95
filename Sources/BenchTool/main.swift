import Foundation
import PWCore
import PWCrypto
import SessionAuth

/// `bench-tool tokens --alg HS256|ES256|opaque --count N --out FILE [--secret S] [--jwks FILE]`
///
/// Mints the benchmark's pool of session tokens, one contact each (`contact-<i>`), issuer
/// `https://auth.bench`, audience `bench`, valid for three hours. For ES256 it generates a fresh
/// P-256 key and writes its public half as a JWKS file for the policy. `opaque`: session ids of
/// the form `s.contact-<i>.<random>`, whose contact `mock-upstream --introspect-port` vouches
/// for. Benchmark tooling only.
func value(_ flag: String) -> String? {
    guard let i = CommandLine.arguments.firstIndex(of: flag), i + 1 < CommandLine.arguments.count else { return nil }
    return CommandLine.arguments[i + 1]
}

if CommandLine.arguments.dropFirst().first == "floor" {
    do { try runFloor() } catch {
        FileHandle.standardError.write(Data("floor failed: \(error)\n".utf8))
        exit(1)
    }
    exit(0)
}

/// `bench-tool policy --mock-port P [--jwks FILE] [--queued-mock-port Q] [--introspect-port I] [--admin] [--reused] [--bytes] [--import-app]`: prints the benchmark's policy (`BenchPolicy`).
if CommandLine.arguments.dropFirst().first == "policy" {
    guard let port = value("--mock-port").flatMap(Int.init) else {
        FileHandle.standardError.write(Data("usage: bench-tool policy --mock-port P [--jwks FILE]\n".utf8))
        exit(2)
    }
    FileHandle.standardOutput.write(Data(BenchPolicy.yaml(mockPort: port, jwksPath: value("--jwks"),
                                                          queuedMockPort: value("--queued-mock-port").flatMap(Int.init),
                                                          introspectPort: value("--introspect-port").flatMap(Int.init),
                                                          admin: CommandLine.arguments.contains("--admin"),
                                                          reused: CommandLine.arguments.contains("--reused"),
                                                          bytes: CommandLine.arguments.contains("--bytes"),
                                                          importApp: CommandLine.arguments.contains("--import-app")).utf8))
    exit(0)
}

if CommandLine.arguments.dropFirst().first == "erase" {
    let done = DispatchSemaphore(value: 0)
    Task.detached {
        do { try await runErase() } catch {
            FileHandle.standardError.write(Data("erase failed: \(error)\n".utf8))
            exit(1)
        }
        done.signal()
    }
    done.wait()
    exit(0)
}

if CommandLine.arguments.dropFirst().first == "slowloris" {
    do { try runSlowloris() } catch {
        FileHandle.standardError.write(Data("slowloris failed: \(error)\n".utf8))
        exit(1)
    }
    exit(0)
}

if CommandLine.arguments.dropFirst().first == "profile" {
    do { try runProfile() } catch {
        FileHandle.standardError.write(Data("profile failed: \(error)\n".utf8))
        exit(1)
    }
    exit(0)
}

guard CommandLine.arguments.dropFirst().first == "tokens", let alg = value("--alg"), let out = value("--out"),
      let count = value("--count").flatMap(Int.init), count > 0 else {
    FileHandle.standardError.write(Data("usage: bench-tool tokens --alg HS256|ES256|opaque --count N --out FILE [--secret S] [--jwks FILE]\n".utf8))
    exit(2)
}
let now = Int(Date().timeIntervalSince1970)
func claims(_ i: Int) -> JSONObject { BenchPolicy.claims(i, now: now) }
var lines: [String] = []
lines.reserveCapacity(count)
switch alg {
case "HS256":
    guard let secret = value("--secret") else { FileHandle.standardError.write(Data("--secret needed\n".utf8)); exit(2) }
    for i in 0..<count { lines.append(JWTMinter.mintHS256(claims: claims(i), secret: Array(secret.utf8))) }
case "ES256":
    guard let jwksPath = value("--jwks") else { FileHandle.standardError.write(Data("--jwks needed\n".utf8)); exit(2) }
    let key = try PrivateKey.generateP256()
    var jwk = key.publicKeyJWK(kid: "bench")
    jwk["use"] = "sig"
    jwk["alg"] = "ES256"
    let jwks = JSONValue.object(JSONObject([JSONMember("keys", .array([.object(jwk)]))]))
    try Data(jwks.encoded()).write(to: URL(fileURLWithPath: jwksPath))
    for i in 0..<count { lines.append(try JWTMinter.mintES256(claims: claims(i), key: key, kid: "bench")) }
case "opaque":
    // The random part makes each run's sessions unknown to any cache a previous run left.
    for i in 0..<count { lines.append("s.contact-\(i).\(Hex.encode(SecureRandom.bytes(16)))") }
default:
    FileHandle.standardError.write(Data("--alg must be HS256, ES256 or opaque\n".utf8))
    exit(2)
}
try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: out))
