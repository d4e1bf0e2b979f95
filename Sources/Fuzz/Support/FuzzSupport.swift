/// What every libFuzzer target shares: the entry point and small helpers.
///
/// The fuzz targets exist only in a build with `PUSHWARDEN_FUZZ=1` in the environment (see
/// Package.swift and `make fuzz`) and `-sanitize=fuzzer,address`, which links libFuzzer. Each
/// target defines `LLVMFuzzerTestOneInput` with `@_cdecl`. SwiftPM renames an executable's entry
/// point to `<target>_main` and links with `--defsym main=<target>_main`, which takes the place
/// of libFuzzer's own `main`; so each target also defines that symbol and hands control to
/// libFuzzer's driver, which is exactly what libFuzzer's `main` does.

/// libFuzzer's driver (compiler-rt, `FuzzerInterface.h`): `int LLVMFuzzerRunDriver(int *argc,
/// char ***argv, int (*UserCb)(const uint8_t *Data, size_t Size))`. Pointers and ints only, so the
/// Swift and C conventions agree on x86-64 and arm64.
@_silgen_name("LLVMFuzzerRunDriver")
private func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
) -> CInt

public typealias FuzzCallback = @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt

/// Runs libFuzzer with the process's arguments and `callback` as the target.
public func runFuzzer(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?, _ callback: FuzzCallback) -> CInt {
    var count = argc
    var vector = argv
    return LLVMFuzzerRunDriver(&count, &vector, callback)
}

/// One input as bytes (an empty input has no base address).
public func fuzzBytes(_ data: UnsafePointer<UInt8>?, _ size: Int) -> [UInt8] {
    guard let data, size > 0 else { return [] }
    return Array(UnsafeBufferPointer(start: data, count: size))
}

/// A property the fuzzer found false: a crash libFuzzer reports, with the input saved.
public func violated(_ what: String, file: StaticString = #fileID, line: UInt = #line) -> Never {
    fatalError("fuzz property violated: \(what)", file: file, line: line)
}

/// Splits an input at the first `separator` byte (the rest is empty when there is none).
public func split(_ bytes: [UInt8], at separator: UInt8) -> ([UInt8], [UInt8]) {
    guard let i = bytes.firstIndex(of: separator) else { return (bytes, []) }
    return (Array(bytes[..<i]), Array(bytes[(i + 1)...]))
}

/// Whether every scalar of `s` is printable ASCII or the ellipsis a bounded text ends with.
public func isPrintable(_ s: String) -> Bool {
    s.unicodeScalars.allSatisfy { ($0.value >= 0x20 && $0.value <= 0x7E) || $0 == "…" }
}
