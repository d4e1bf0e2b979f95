#if canImport(Glibc)
import Glibc
#endif
import PWCore

/// An import file read as a stream of lines through one fixed buffer: memory stays the same for a
/// file of any length. A line longer than `maxLine` is reported (its start kept), not held.
struct LineReader {
    struct Line {
        /// From 1, as an editor counts.
        let number: Int
        let bytes: [UInt8]
        let tooLong: Bool
        var isBlank: Bool { !tooLong && bytes.allSatisfy { $0 == 0x20 || $0 == 0x09 || $0 == 0x0D } }
    }

    private let fd: Int32
    private let path: String
    private let maxLine: Int
    /// Room for the longest line taken whole.
    private var buffer: [UInt8]
    private var start = 0
    private var end = 0
    private var atEOF = false
    private var number = 0
    private(set) var bytesRead: UInt64 = 0
    private let size: UInt64

    init(path: String, maxLine: Int) throws(ConfigurationError) {
        fd = open(path, O_RDONLY)
        guard fd >= 0 else { throw ConfigurationError("cannot read \(path): \(String(cString: strerror(errno)))") }
        var info = stat()
        if fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR {
            Glibc.close(fd)
            throw ConfigurationError("cannot read \(path): it is a directory")
        }
        size = fstat(fd, &info) == 0 && info.st_size > 0 ? UInt64(info.st_size) : 0
        self.path = path
        self.maxLine = max(maxLine, 1)
        buffer = [UInt8](repeating: 0, count: max(1 << 16, maxLine + 2))
    }

    func close() { Glibc.close(fd) }

    /// How much of the file has been read, for the progress bar (0 when its size is unknown).
    var fraction: Double { size == 0 ? 0 : Double(bytesRead) / Double(size) }

    /// Refuses, before anything is registered, a file that is not one JSON object per line: a
    /// binary file (a compressed export, say), a JSON array, CSV or other text, a pretty-printed
    /// object. Reads ahead only; `next()` still starts at line 1.
    mutating func checkNDJSON() throws(ConfigurationError) {
        try fill()
        if end - start >= 3, buffer[start] == 0xEF, buffer[start + 1] == 0xBB, buffer[start + 2] == 0xBF { start += 3 }
        let sample = buffer[start..<end]
        let notNDJSON = "\(path) is not NDJSON (one JSON object per line)"
        // The read may end inside a character: valid once up to three bytes are left off.
        let text = sample.count > 0 && (0...(atEOF ? 0 : min(3, sample.count - 1))).contains { String(validating: sample.dropLast($0), as: UTF8.self) != nil }
        if sample.contains(0) || (!sample.isEmpty && !text) {
            throw ConfigurationError("\(notNDJSON): it holds bytes that are not UTF-8 text (a binary or compressed file?)")
        }
        guard let first = sample.first(where: { !Self.isSpace($0) && $0 != 0x0A }) else { return }
        if first == UInt8(ascii: "[") {
            throw ConfigurationError("\(notNDJSON): it is a JSON array; write one object per line (jq -c '.[]' FILE)")
        }
        guard first == UInt8(ascii: "{") else {
            throw ConfigurationError("\(notNDJSON): its first line is not a JSON object (CSV or other text?)")
        }
        let firstLine = sample.split(separator: 0x0A, omittingEmptySubsequences: true).first { !$0.allSatisfy(Self.isSpace) } ?? []
        if firstLine.filter({ !Self.isSpace($0) }) == [UInt8(ascii: "{")] {
            throw ConfigurationError("\(notNDJSON): its first line holds only `{` (pretty-printed JSON?); write one object per line (jq -c)")
        }
    }

    private static func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 || byte == 0x0D }

    /// The next line (without its newline), nil at the end of the file.
    mutating func next() throws(ConfigurationError) -> Line? {
        // The start of a line longer than the buffer, while the rest of it is skipped.
        var overlong: [UInt8]?
        while true {
            if let newline = buffer[start..<end].firstIndex(of: 0x0A) {
                number += 1
                let piece = buffer[start..<newline]
                start = newline + 1
                return line(overlong ?? Array(piece), tooLong: overlong != nil)
            }
            if atEOF {
                guard start < end || overlong != nil else { return nil }
                number += 1
                let piece = buffer[start..<end]
                start = end
                return line(overlong ?? Array(piece), tooLong: overlong != nil)
            }
            if start == 0, end == buffer.count {
                if overlong == nil { overlong = Array(buffer[0..<Self.keep]) }
                start = end
            }
            try fill()
        }
    }

    /// How much of an overlong line is kept for its refusal.
    static let keep = 256

    private func line(_ bytes: [UInt8], tooLong: Bool) -> Line {
        var bytes = bytes
        if !tooLong, bytes.last == 0x0D { bytes.removeLast() }
        if tooLong || bytes.count > maxLine { return Line(number: number, bytes: Array(bytes.prefix(Self.keep)), tooLong: true) }
        return Line(number: number, bytes: bytes, tooLong: false)
    }

    /// Moves what is left to the front and reads more; sets `atEOF` at the end.
    private mutating func fill() throws(ConfigurationError) {
        if start > 0 {
            let left = end - start
            for index in 0..<left { buffer[index] = buffer[start + index] }
            start = 0
            end = left
        }
        guard !atEOF, end < buffer.count else { return }
        var count = -1
        repeat {
            count = buffer.withUnsafeMutableBytes { raw in
                guard let base = raw.baseAddress else { return 0 }
                return read(fd, base + end, raw.count - end)
            }
        } while count < 0 && errno == EINTR
        if count < 0 { throw ConfigurationError("reading \(path): \(String(cString: strerror(errno)))") }
        if count == 0 { atEOF = true }
        end += count
        bytesRead += UInt64(count)
    }
}
