import PWCore
import PWCrypto
import RedisClient
import RedisStores
import Registration

/// `pushwarden audit verify`: reads an app's trail whole and says whether it is complete and
/// unedited under a public key. Each finding names the stream entry and the receipt's `seq`.
public enum AuditVerification {
    /// What one trail holds and what is wrong with it.
    public struct Report: Sendable {
        public var app: String
        public var receipts = 0
        public var findings: [String] = []
        public var isIntact: Bool { findings.isEmpty }
    }

    /// `pushwarden audit verify`: one line per trail and per finding; true when every trail is
    /// intact (and at least one was found).
    public static func run(redisURL: String, publicKeyPEMs: [[UInt8]], apps: [String], write: (String) -> Void) async throws(ConfigurationError) -> Bool {
        var keys: [Ed25519PublicKey] = []
        for pem in publicKeyPEMs {
            do {
                keys.append(try Ed25519PublicKey(pem: pem))
            } catch {
                throw ConfigurationError("an audit key is not a PEM Ed25519 public key (openssl pkey -pubout makes one)")
            }
        }
        let client = try RedisClient.forCommand(redisURL)
        defer { client.close() }
        let reports: [Report]
        do {
            reports = try await verify(redis: client, keys: keys, apps: apps)
        } catch {
            throw ConfigurationError("redis: \(error.detail)")
        }
        if reports.isEmpty { write("no evidence trail found") }
        for report in reports {
            write("\(report.app): \(report.receipts) receipts, " + (report.isIntact ? "intact" : "\(report.findings.count) problems"))
            for finding in report.findings { write("  \(report.app): \(finding)") }
        }
        return !reports.isEmpty && reports.allSatisfy(\.isIntact)
    }

    /// Checks the trail of every app named (all trails in the Redis when none is); a receipt
    /// verifies under any of `keys` (the current signing key's and those it replaced).
    public static func verify(redis client: RedisClient, keys: [Ed25519PublicKey], apps: [String]) async throws(RedisError) -> [Report] {
        var names = apps
        if names.isEmpty { names = try await trailApps(client) }
        var reports: [Report] = []
        for app in names { reports.append(try await verify(app: app, redis: client, keys: keys)) }
        return reports
    }

    static func verify(app: String, redis client: RedisClient, keys: [Ed25519PublicKey]) async throws(RedisError) -> Report {
        let trail = AuditTrail.Keys(app: app)
        var report = Report(app: app)
        var expected = (seq: 0, hash: AuditReceipt.genesis)
        var cursor = "-"
        while true {
            let page = try await client.send(["XRANGE", trail.receipts, cursor, "+", "COUNT", "500"])
            guard case .array(let entries) = page, !entries.isEmpty else { break }
            for entry in entries {
                guard case .array(let parts) = entry, parts.count == 2, let id = parts[0].string, case .array(let raw) = parts[1] else {
                    report.findings.append("an entry of an unexpected shape")
                    continue
                }
                cursor = "(" + id
                var fields: [String: String] = [:]
                var index = 0
                while index + 1 < raw.count {
                    if let name = raw[index].string, let value = raw[index + 1].string { fields[name] = value }
                    index += 2
                }
                report.receipts += 1
                check(id: id, body: fields["body"], signature: fields["sig"], app: app, keys: keys, expected: &expected, into: &report)
            }
        }
        let head = try await client.send(["GET", trail.head]).string ?? ""
        let (headSeq, headHash) = AuditTrail.parse(head: head)
        if headSeq != expected.seq || headHash != expected.hash {
            report.findings.append("the trail ends at seq \(expected.seq) but its head names seq \(headSeq): receipts were removed at its end")
        }
        return report
    }

    private static func check(id: String, body: String?, signature: String?, app: String, keys: [Ed25519PublicKey],
                              expected: inout (seq: Int, hash: String), into report: inout Report) {
        guard let body, let receipt = AuditReceipt(body: body) else {
            report.findings.append("entry \(id): not a receipt (edited)")
            return
        }
        guard let signature = signature.flatMap({ Base64URL.decode($0) }), keys.contains(where: { $0.verify(signature: signature, message: Array(body.utf8)) }) else {
            report.findings.append("entry \(id) (seq \(receipt.seq)): the signature does not verify (edited, or another key)")
            expected = (receipt.seq, AuditReceipt.hash(ofBody: body))
            return
        }
        if receipt.app != app { report.findings.append("entry \(id) (seq \(receipt.seq)): a receipt of app \(receipt.app) in this trail") }
        if receipt.seq != expected.seq + 1 {
            report.findings.append("entry \(id): seq \(receipt.seq) follows seq \(expected.seq): receipts are missing")
        } else if receipt.prev != expected.hash {
            report.findings.append("entry \(id) (seq \(receipt.seq)): it does not chain to the receipt before it")
        }
        expected = (receipt.seq, AuditReceipt.hash(ofBody: body))
    }

    /// The apps whose trails this Redis holds (read from their newest receipt).
    private static func trailApps(_ client: RedisClient) async throws(RedisError) -> [String] {
        var apps: Set<String> = []
        var cursor = "0"
        repeat {
            guard case .array(let reply) = try await client.send(["SCAN", cursor, "MATCH", "pw:v2:{audit:*}:receipts", "COUNT", "1000"]),
                  reply.count == 2, let next = reply[0].string, case .array(let keys) = reply[1] else { break }
            cursor = next
            for case let key? in keys.map(\.string) {
                guard case .array(let last) = try await client.send(["XREVRANGE", key, "+", "-", "COUNT", "1"]),
                      case .array(let parts)? = last.first, parts.count == 2, case .array(let raw) = parts[1] else { continue }
                var index = 0
                while index + 1 < raw.count {
                    if raw[index].string == "body", let body = raw[index + 1].string, let receipt = AuditReceipt(body: body) { apps.insert(receipt.app) }
                    index += 2
                }
            }
        } while cursor != "0"
        return apps.sorted()
    }
}
