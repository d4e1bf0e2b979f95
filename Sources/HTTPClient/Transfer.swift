internal import CCurl
internal import CShims
import PWCore
import Synchronization

/// One in-flight call: the request, the caller's continuation and the response being collected.
///
/// Thread-safety: the creating task sets `continuation` and hands the object to the thread that
/// drives its multi handle (the client's thread, through its lock, or the task's own event loop,
/// directly); from then on every mutable field is touched only by that thread
/// (curl's callbacks run inside `curl_multi_socket_action` on that thread). `cancelRequested` is the one
/// field other threads write. Hence `@unchecked Sendable`.
final class Transfer: @unchecked Sendable {
    typealias Outcome = Result<HTTPClientResponse, HTTPClientError>

    let request: HTTPClientRequest
    let maxResponseBytes: Int
    /// Set by the task's cancellation handler; read by the driver when it adds the transfer.
    let cancelRequested = Atomic<Bool>(false)

    var continuation: CheckedContinuation<Outcome, Never>?
    var easy: EasyHandle?
    /// Fields of the response's current header block; a few slots are reserved up front, as
    /// every response brings several.
    var responseFields: [HTTPHeaders.Field] = []
    var responseHeaderBytes = 0
    var body: [UInt8] = []
    var exceededLimit = false

    init(request: HTTPClientRequest, maxResponseBytes: Int) {
        self.request = request
        self.maxResponseBytes = maxResponseBytes
    }

    /// Resumes the caller at most once; later calls are ignored.
    func finish(_ outcome: Outcome) {
        guard let continuation else { return }
        self.continuation = nil
        continuation.resume(returning: outcome)
    }

    /// The opaque pointer curl hands back to the callbacks. Unretained: the driver's table of
    /// active transfers owns the object until the easy handle has left the multi handle, after
    /// which curl never calls back with it.
    var opaque: UnsafeMutableRawPointer { Unmanaged.passUnretained(self).toOpaque() }

    static func from(_ opaque: UnsafeMutableRawPointer) -> Transfer {
        Unmanaged<Transfer>.fromOpaque(opaque).takeUnretainedValue()
    }
}

/// CURLOPT_WRITEFUNCTION: appends body bytes; returning less than offered makes curl abort the
/// transfer with CURLE_WRITE_ERROR, which `exceededLimit` turns into `.tooLarge`.
let transferWriteCallback: pw_curl_data_cb = { data, size, count, userdata in
    guard let userdata else { return 0 }
    let transfer = Transfer.from(userdata)
    let length = size * count
    guard length > 0, let data else { return length }
    guard transfer.body.count + length <= transfer.maxResponseBytes else {
        transfer.exceededLimit = true
        return 0
    }
    transfer.body.append(contentsOf: UnsafeRawBufferPointer(start: data, count: length))
    return length
}

/// CURLOPT_HEADERFUNCTION: called once per header line, status lines and the blank line included.
/// A status line starts a new header block, so interim (1xx) responses leave nothing behind.
let transferHeaderCallback: pw_curl_data_cb = { data, size, count, userdata in
    guard let userdata else { return 0 }
    let transfer = Transfer.from(userdata)
    let length = size * count
    guard length > 0, let data else { return length }
    transfer.responseHeaderBytes += length
    guard transfer.responseHeaderBytes <= transfer.maxResponseBytes else {
        transfer.exceededLimit = true
        return 0
    }
    let line = UnsafeRawBufferPointer(start: data, count: length)
    if line.starts(with: "HTTP/".utf8) {
        if transfer.responseFields.capacity == 0 {
            transfer.responseFields.reserveCapacity(8)
        } else {
            transfer.responseFields.removeAll(keepingCapacity: true)
        }
        return length
    }
    guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { return length }
    let name = String(decoding: line[..<colon], as: UTF8.self)
    let value = trimmed(line[(colon + 1)...])
    transfer.responseFields.append(HTTPHeaders.Field(name, String(decoding: value, as: UTF8.self)))
    return length
}

private func trimmed(_ bytes: Slice<UnsafeRawBufferPointer>) -> Slice<UnsafeRawBufferPointer> {
    func isSpace(_ b: UInt8) -> Bool { b == 0x20 || b == 0x09 || b == 0x0D || b == 0x0A }
    var result = bytes
    while let first = result.first, isSpace(first) { result = result.dropFirst() }
    while let last = result.last, isSpace(last) { result = result.dropLast() }
    return result
}
