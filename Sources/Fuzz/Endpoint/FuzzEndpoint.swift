#if canImport(Glibc)
import Glibc
#endif
import CCurl
import FuzzSupport
import PWCore
@testable import ClientAPI

/// The Web Push endpoint check. Each input runs as a whole URL, as the authority and path after
/// `https://`, and as a bare address for `isPubliclyRoutable(address:)`. Refusals must be one of
/// the two contract codes with a message that never echoes the input. An accepted URL must name
/// the same host to libcurl's URL parser (the one the egress client uses) as to the check; the
/// IPv6 reader must agree with glibc's `inet_pton` on every address it accepts, as must the
/// strict IPv4 reader.
@_cdecl("fuzz_endpoint_main")
func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv, fuzzOne)
}

@_cdecl("LLVMFuzzerTestOneInput")
func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let text = String(decoding: fuzzBytes(data, size), as: UTF8.self)
    for url in [text, "https://" + text] {
        do throws(ContractError) {
            try EndpointURL.validate(url, field: "push_token")
            guard url.utf8.count <= EndpointURL.maxLength else { violated("accepted a URL of \(url.utf8.count) bytes") }
            guard url.lowercased().hasPrefix("https://") else { violated("accepted a URL that is not https") }
            compareWithCurl(url)
        } catch {
            guard error.code == .invalidWebPush || error.code == .urlNotPubliclyRoutable else { violated("refused with \(error.code)") }
            guard error.field == "push_token", error.message.hasPrefix("push_token must") else { violated("refusal \(error.message)") }
            guard isPrintable(error.message), error.message.utf8.count <= 200 else { violated("refusal message echoes input: \(error.message)") }
        }
    }
    _ = EndpointURL.isPubliclyRoutable(address: text)
    compareIPv6(text)
    compareIPv4(text)
    return 0
}

/// Ours accepts ⇒ `inet_pton(AF_INET6)` accepts, with the same 16 bytes.
func compareIPv6(_ text: String) {
    guard let ours = IPv6Address(text) else { return }
    guard ours.pieces.count == 8 else { violated("IPv6 \(text) read as \(ours.pieces.count) pieces") }
    var theirs = in6_addr()
    guard inet_pton(AF_INET6, text, &theirs) == 1 else { violated("IPv6 \(text) accepted, inet_pton refuses it") }
    let bytes = withUnsafeBytes(of: &theirs) { Array($0) }
    let expected = ours.pieces.flatMap { [UInt8($0 >> 8), UInt8($0 & 0xFF)] }
    guard bytes == expected else { violated("IPv6 \(text) read as \(expected), inet_pton as \(bytes)") }
}

/// The canonical dotted-decimal reading agrees with `inet_pton(AF_INET)`, both ways.
func compareIPv4(_ text: String) {
    guard !text.utf8.contains(0) else { return }  // inet_pton would stop at the NUL
    let parts = text.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
    let ours = IPv4Address.isCanonical(parts) ? IPv4Address.parse(parts: parts, leadingZeroIsOctal: false) : nil
    var theirs = in_addr()
    let accepted = inet_pton(AF_INET, text, &theirs) == 1
    guard accepted == (ours != nil) else { violated("IPv4 \(text): ours \(String(describing: ours)), inet_pton \(accepted)") }
    if let ours, ours.value != UInt32(bigEndian: theirs.s_addr) {
        violated("IPv4 \(text) read as \(ours.value), inet_pton as \(UInt32(bigEndian: theirs.s_addr))")
    }
}

/// The host the check judged (the authority after `https://` up to `/` or `?`, without the
/// port), as libcurl's URL API reads the same URL: the same name (ASCII case aside) or the same
/// address.
func compareWithCurl(_ url: String) {
    let bytes = Array(url.utf8)
    let rest = bytes[8...]
    let end = rest.firstIndex { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") } ?? rest.endIndex
    var authority = String(decoding: rest[rest.startIndex..<end], as: UTF8.self)
    if authority.hasPrefix("[") {
        authority = String(authority[...authority.firstIndex(of: "]")!])
    } else if let colon = authority.lastIndex(of: ":") {
        authority = String(authority[..<colon])
    }
    guard let handle = curl_url() else { violated("curl_url failed") }
    defer { curl_url_cleanup(handle) }
    let set = curl_url_set(handle, CURLUPART_URL, url, 0)
    guard set == CURLUE_OK else { violated("accepted \(url), libcurl refuses it (CURLUcode \(set.rawValue))") }
    var part: UnsafeMutablePointer<CChar>?
    let got = curl_url_get(handle, CURLUPART_HOST, &part, 0)
    guard got == CURLUE_OK, let part else { violated("libcurl finds no host in \(url) (CURLUcode \(got.rawValue))") }
    let curlHost = String(cString: part)
    curl_free(part)
    if authority.hasPrefix("[") {
        var ours = in6_addr(), theirs = in6_addr()
        let inner = { (s: String) in String(s.dropFirst().prefix { $0 != "]" }) }
        guard inet_pton(AF_INET6, inner(authority), &ours) == 1, inet_pton(AF_INET6, inner(curlHost), &theirs) == 1,
              withUnsafeBytes(of: &ours, { Array($0) }) == withUnsafeBytes(of: &theirs, { Array($0) }) else {
            violated("\(url): the check judged host \(authority), libcurl reads \(curlHost)")
        }
    } else if authority.lowercased() != curlHost.lowercased() {
        violated("\(url): the check judged host \(authority), libcurl reads \(curlHost)")
    }
}
