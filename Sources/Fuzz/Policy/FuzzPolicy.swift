import FuzzSupport
import PWPolicy

/// `PolicyLoader.load(text:path:)` on arbitrary text (libyaml underneath, then the strict schema
/// checks). A refusal must carry at least one diagnostic with a real position; an accepted policy
/// must explain itself without trapping.
@_cdecl("fuzz_policy_main")
func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv, fuzzOne)
}

@_cdecl("LLVMFuzzerTestOneInput")
func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let text = String(decoding: fuzzBytes(data, size), as: UTF8.self)
    switch PolicyLoader.load(text: text, path: "fuzz.yaml") {
    case .success(let policy):
        guard !policy.apps.isEmpty else { violated("accepted a policy without apps") }
        _ = PolicyExplainer.explain(policy)
    case .failure(let diagnostics):
        guard !diagnostics.diagnostics.isEmpty else { violated("refused without a diagnostic") }
        for d in diagnostics.diagnostics where d.line < 1 || d.column < 1 {
            violated("diagnostic at line \(d.line), column \(d.column): \(d.message)")
        }
        _ = diagnostics.description
    }
    return 0
}
