// The shape Swift 6.3's -O miscompiles: a task group child that returns `(index, .success(try
// await …))` from inside do/catch never writes `index`. scripts/checks/miscompile.check.sh builds
// this file as it is (UNSAFE) and with the child rewritten as PWCore's mapConcurrently does it.
enum Reply: Sendable, Equatable {
    case status(String)
    case error(String)
    case integer(Int64)
    case bulk([UInt8])
    case null
    case array([Reply])
}
struct E: Error, Sendable, Equatable {
    enum Kind: Sendable, Equatable { case a, b, c, d, e }
    let kind: Kind
    let detail: String
}

final class Sender: Sendable {
    @inline(never)
    func send(_ c: [String], on: Int?) async throws(E) -> Reply {
        if c.isEmpty { throw E(kind: .a, detail: "empty") }
        await Task.yield()
        return .array([.bulk(Array(c[0].utf8)), .integer(1)])
    }
    func sendConcurrently(_ commands: [[String]]) async throws(E) -> [Reply] {
        let results = await withTaskGroup(of: (Int, Result<Reply, E>).self) { group in
            var results = [Result<Reply, E>?](repeating: nil, count: commands.count)
            var next = 0
            func start() {
                let index = next
                next += 1
                group.addTask { [self] in
                    do throws(E) { return (index, .success(try await send(commands[index], on: nil))) } catch { return (index, .failure(error)) }
                }
            }
            while next < min(32, commands.count) { start() }
            while let (index, result) = await group.next() {
                if index < 0 || index >= results.count { continue }
                results[index] = result
                if next < commands.count { start() }
            }
                        return results
        }
        var out: [Reply] = []
        for case let r? in results { out.append(try r.get()) }
        return out
    }
}

@main struct Main {
    static func main() async {
        let cmds = (0..<257).map { ["v\($0)"] }
        do {
            let r = try await Sender().sendConcurrently(cmds)
            let right = r == cmds.map { Reply.array([.bulk(Array($0[0].utf8)), .integer(1)]) }
            print(right ? "correct" : "wrong: \(r.count) replies to \(cmds.count) commands")
        } catch { print("wrong: threw") }
    }
}
