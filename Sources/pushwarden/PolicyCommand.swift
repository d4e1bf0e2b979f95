#if canImport(Glibc)
import Glibc
#endif
import PWCrypto
import PWPolicy
import PushWarden
import SessionAuth

func policyCommand(_ arguments: ArraySlice<String>) -> Never {
    guard let sub = arguments.first else { fail(usage) }
    let files = arguments.dropFirst()
    switch sub {
    case "check":
        guard !files.isEmpty else { fail("policy check needs at least one FILE") }
        var failed = false
        for file in files {
            switch PolicyLoader.load(path: file) {
            case .success(let policy):
                // What serve reads at start-up: the JWKS files, by serve's rules, and the store keys
                // (a reference that cannot be read here is a warning: checks seldom hold the secrets).
                let found = SessionPolicyCheck.diagnostics(for: policy) + StoreKeys.diagnostics(for: policy)
                for diagnostic in found { print(diagnostic.description) }
                if found.contains(where: { $0.severity == .error }) {
                    failed = true
                } else {
                    print("\(file): ok")
                }
            case .failure(let diagnostics):
                failed = true
                for diagnostic in diagnostics.diagnostics { print(diagnostic.description) }
            }
        }
        exit(failed ? 1 : 0)
    case "explain":
        // `--format text|html` (default text) before FILE; html is one self-contained page.
        var rest = Array(files), format = "text"
        if let first = rest.first, first == "--format" || first.hasPrefix("--format=") {
            if first == "--format" {
                guard rest.count > 1 else { fail("--format needs a value") }
                format = rest[1]
                rest.removeFirst(2)
            } else {
                format = String(first.dropFirst("--format=".count))
                rest.removeFirst()
            }
        }
        guard format == "text" || format == "html" else { fail("--format must be text or html, not \(format)") }
        guard rest.count == 1, let file = rest.first, !file.hasPrefix("--") else { fail("policy explain needs exactly one FILE") }
        let policy = loadPolicyOrExit(file)
        print(format == "html" ? PolicyExplainerHTML.render(policy) : PolicyExplainer.explain(policy), terminator: "")
        exit(0)
    case "sign", "verify":
        signOrVerify(sub, files)
    default:
        fail("unknown policy command \(sub)\n\(usage)")
    }
}

/// `policy sign --key PRIVATE.pem FILE` writes `FILE.sig`; `policy verify --key PUBLIC.pem FILE`
/// checks it. Exit 0 on success, 1 when the signature is missing or wrong (or a file unreadable),
/// 2 on usage errors.
func signOrVerify(_ command: String, _ arguments: ArraySlice<String>) -> Never {
    var rest = arguments
    var keyPath: String?
    var files: [String] = []
    while let argument = rest.popFirst() {
        if argument == "--key" {
            guard keyPath == nil, let value = rest.popFirst() else { fail("policy \(command): --key needs one value") }
            keyPath = value
        } else if argument.hasPrefix("--key=") {
            guard keyPath == nil else { fail("policy \(command): --key given twice") }
            keyPath = String(argument.dropFirst("--key=".count))
        } else if argument.hasPrefix("--") {
            fail("unknown argument \(argument)\n\(usage)")
        } else {
            files.append(argument)
        }
    }
    guard let keyPath, files.count == 1, let file = files.first else { fail("policy \(command) needs --key KEY.pem and exactly one FILE") }
    guard let bytes = readWholeFile(file) else { fail("cannot read \(file)", code: 1) }
    if command == "sign" {
        // Only what `serve --policy-key` would take is signed: a valid policy with a serial.
        guard let text = String(validating: bytes, as: UTF8.self) else { fail("\(file): the policy file is not valid UTF-8", code: 1) }
        let serial: Int
        switch PolicyLoader.load(text: text, path: file) {
        case .failure(let diagnostics):
            for diagnostic in diagnostics.diagnostics { printError(diagnostic.description) }
            exit(1)
        case .success(let policy):
            guard let value = policy.serial else { fail(policy.diagnostic(at: "serial", PolicyFile.missingSerial).description, code: 1) }
            serial = value
        }
        guard let pem = readWholeFile(keyPath) else { fail("cannot read the key \(keyPath)", code: 1) }
        do {
            let key = try Ed25519PrivateKey(pem: pem)
            let signature = try key.sign(bytes)
            let target = PolicyFile.signaturePath(file)
            guard writeWholeFile(target, signature) else { fail("cannot write \(target)", code: 1) }
            print("\(target): signed \(file) (sha256 \(SHA256.hexHash(bytes)), serial \(serial))")
            exit(0)
        } catch {
            fail("the key \(keyPath) is not a PEM Ed25519 private key (\(error.message))", code: 1)
        }
    }
    let key: Ed25519PublicKey
    switch PolicyFile.publicKey(path: keyPath) {
    case .success(let loaded): key = loaded
    case .failure(let error): fail(error.description, code: 1)
    }
    if let problem = PolicyFile.signatureProblem(bytes: bytes, path: file, key: key) { fail("\(file): \(problem)", code: 1) }
    print("\(file): signature ok (sha256 \(SHA256.hexHash(bytes)))")
    exit(0)
}

/// Writes `bytes` to `path` through a temporary file and a rename, so a reader (a watching
/// `serve`) never sees half a signature.
func writeWholeFile(_ path: String, _ bytes: [UInt8]) -> Bool {
    let temporary = path + ".tmp-\(getpid())"
    let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
    guard fd >= 0 else { return false }
    let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    guard close(fd) == 0, written == bytes.count, rename(temporary, path) == 0 else {
        unlink(temporary)
        return false
    }
    return true
}
