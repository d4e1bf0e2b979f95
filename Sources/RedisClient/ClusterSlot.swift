/// Which of Redis Cluster's 16384 slots a command belongs to
/// (https://redis.io/docs/reference/cluster-spec/#key-distribution-model).
///
/// A command names its routing key by where it stands, derived from the command's name: the
/// first argument for nearly every command (`GET`, `SET`, `DEL`, `XADD`, `INCR`...), the first of
/// the `numkeys` keys for scripts (`EVAL`, `EVALSHA`, `FCALL`), none for commands without keys
/// (`PING`, `SCRIPT`, `CLUSTER`, `INFO`...). Callers keep sending plain argument arrays, so a single
/// Redis never pays for any of this. A keyless command may go to any node; a key guessed wrong
/// costs a `MOVED`, never a wrong answer.
///
/// Every key of a multi-key command or script must hash to one slot (put them under one
/// `{hash tag}`): debug builds check it with an assertion, since Redis would refuse the command
/// with `CROSSSLOT`.
enum ClusterSlot {
    static let count = 16_384

    /// The slot of `key`: CRC16 (XMODEM) of the key, or of its hash tag (the bytes between the
    /// first `{` and the first `}` after it, when not empty), modulo 16384.
    static func of(_ key: some Collection<UInt8>) -> Int {
        key.withContiguousStorageIfAvailable(of(contiguous:)) ?? Array(key).withUnsafeBufferPointer(of(contiguous:))
    }

    private static func of(contiguous bytes: UnsafeBufferPointer<UInt8>) -> Int {
        var start = 0
        var end = bytes.count
        if let open = bytes.firstIndex(of: UInt8(ascii: "{")),
           let close = bytes[(open + 1)...].firstIndex(of: UInt8(ascii: "}")), close > open + 1 {
            start = open + 1
            end = close
        }
        var crc: UInt16 = 0
        table.withUnsafeBufferPointer { table in
            for index in start..<end {
                crc = (crc << 8) ^ table[Int(UInt8(truncatingIfNeeded: crc >> 8) ^ bytes[index])]
            }
        }
        return Int(crc) & (count - 1)
    }

    /// CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, no reflection.
    private static let table: [UInt16] = (0..<256).map { byte in
        var crc = UInt16(byte) << 8
        for _ in 0..<8 { crc = crc & 0x8000 != 0 ? (crc << 1) ^ 0x1021 : crc << 1 }
        return crc
    }

    /// The slot `arguments` must run in, or nil for a command without keys.
    /// Generic over the arguments' bytes: byte arrays, or strings' UTF-8 views.
    static func of<Argument: Collection<UInt8>>(command arguments: [Argument]) -> Int? {
        guard arguments.count > 1 else { return nil }
        let name = arguments[0]
        switch keys(of: name) {
        case .none:
            return nil
        case .first:
            return of(arguments[1])
        case .at(let index):
            return arguments.count > index ? of(arguments[index]) : nil
        case .afterStreams:
            // XREADGROUP GROUP g c [COUNT n] [BLOCK ms] [NOACK] STREAMS key [key ...] id [id ...]
            guard let streams = arguments.firstIndex(where: { matches($0, "STREAMS") }), streams + 1 < arguments.count else { return nil }
            let keyCount = (arguments.count - streams - 1) / 2
            let slot = of(arguments[streams + 1])
            assert(sameSlot(arguments, from: streams + 1, step: 1, count: streams + 1 + keyCount, as: slot),
                   "\(String(decoding: name, as: UTF8.self)): streams in different cluster slots")
            return slot
        case .all(let from, let step):
            let slot = of(arguments[from])
            assert(sameSlot(arguments, from: from, step: step, count: arguments.count, as: slot),
                   "\(String(decoding: name, as: UTF8.self)): keys in different cluster slots")
            return slot
        case .script:
            // EVAL script numkeys key [key ...] arg [arg ...]
            guard arguments.count > 3, let numkeys = Int(String(decoding: Array(arguments[2]), as: UTF8.self)), numkeys > 0,
                  arguments.count >= 3 + numkeys else { return nil }
            let slot = of(arguments[3])
            assert(sameSlot(arguments, from: 3, step: 1, count: 3 + numkeys, as: slot),
                   "\(String(decoding: name, as: UTF8.self)): script keys in different cluster slots")
            return slot
        }
    }

    private static func sameSlot<Argument: Collection<UInt8>>(_ arguments: [Argument], from: Int, step: Int, count: Int, as slot: Int) -> Bool {
        stride(from: from, to: count, by: step).allSatisfy { of(arguments[$0]) == slot }
    }

    private enum Keys {
        case none
        case first
        /// The key is argument `index` (`XGROUP CREATE key ...`).
        case at(Int)
        /// The keys follow `STREAMS` (`XREAD`, `XREADGROUP`).
        case afterStreams
        /// Every `step`-th argument from `from` is a key.
        case all(from: Int, step: Int)
        case script
    }

    private static func keys(of name: some Collection<UInt8>) -> Keys {
        // The commands requests send most (`GET`, `SET`, `HSET`, `ZADD`, `XADD`...) take their first
        // argument as the key, and no command of another kind has the same first letter and
        // length: those are answered before any name is compared.
        guard let first = name.first else { return .first }
        let letter = first >= 0x61 && first <= 0x7A ? first - 0x20 : first
        switch (letter, name.count) {
        // GET, SET; HSET, HGET, HDEL, HLEN; HSETNX; HGETALL, HINCRBY, HEXISTS; XADD, XACK, XDEL,
        // XLEN; every Z... and L... command. (HELLO and HMSET, of five letters, go the long way.)
        case (UInt8(ascii: "G"), 3), (UInt8(ascii: "S"), 3), (UInt8(ascii: "H"), 4), (UInt8(ascii: "H"), 6), (UInt8(ascii: "H"), 7),
             (UInt8(ascii: "X"), 4), (UInt8(ascii: "Z"), _), (UInt8(ascii: "L"), _):
            return .first
        default:
            break
        }
        // Compare case-insensitively without allocating.
        if matches(name, "EVALSHA") || matches(name, "EVAL") || matches(name, "FCALL") || matches(name, "EVALSHA_RO")
            || matches(name, "EVAL_RO") || matches(name, "FCALL_RO") { return .script }
        if matches(name, "DEL") || matches(name, "UNLINK") || matches(name, "EXISTS") || matches(name, "MGET")
            || matches(name, "TOUCH") || matches(name, "WATCH") || matches(name, "RENAME") || matches(name, "RENAMENX")
            || matches(name, "SUNION") || matches(name, "SINTER") || matches(name, "SDIFF") { return .all(from: 1, step: 1) }
        if matches(name, "MSET") || matches(name, "MSETNX") { return .all(from: 1, step: 2) }
        if matches(name, "XGROUP") || matches(name, "XINFO") { return .at(2) }
        if matches(name, "XREADGROUP") || matches(name, "XREAD") { return .afterStreams }
        if matches(name, "PING") || matches(name, "SCRIPT") || matches(name, "CLUSTER") || matches(name, "INFO")
            || matches(name, "ASKING") || matches(name, "FLUSHALL") || matches(name, "FLUSHDB") || matches(name, "DBSIZE")
            || matches(name, "KEYS") || matches(name, "SCAN") || matches(name, "TIME") || matches(name, "CONFIG")
            || matches(name, "FUNCTION") || matches(name, "ECHO") || matches(name, "AUTH") || matches(name, "HELLO")
            || matches(name, "CLIENT") || matches(name, "COMMAND") || matches(name, "READONLY") { return .none }
        return .first
    }

    private static func matches(_ name: some Collection<UInt8>, _ expected: StaticString) -> Bool {
        guard name.count == expected.utf8CodeUnitCount else { return false }
        let pointer = expected.utf8Start
        for (index, byte) in name.enumerated() {
            let upper = byte >= 0x61 && byte <= 0x7A ? byte - 0x20 : byte
            guard upper == pointer[index] else { return false }
        }
        return true
    }
}
