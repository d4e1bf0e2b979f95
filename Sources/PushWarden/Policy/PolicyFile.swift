#if canImport(Glibc)
import Glibc
#endif
import PWCore
import PWCrypto
import PWPolicy
import Registration

/// A policy file as `serve` reads it, at start and at every reload: its bytes read once, their
/// Ed25519 signature checked (with `--policy-key`) before anything is parsed, their SHA-256
/// taken, then the text validated by `PolicyLoader`.
public struct PolicySource: Sendable {
    public let policy: Policy
    /// SHA-256 of the file's bytes, lowercase hex: `pushwarden_policy_info{sha256}`.
    public let sha256: String
    /// Whether its signature was checked (`--policy-key`): then it has a serial, which must rise.
    public let signed: Bool
}

public enum PolicyFile {
    /// Why a signed policy without a `serial` is refused (`serve --policy-key`, `policy sign`).
    public static let missingSerial = "a signed policy needs a top-level serial (a non-negative integer, raised with every signed change): "
        + "without one an older signed file could be put back in its place"

    /// Where the signature of `path` lies: `FILE.sig`, the 64 raw bytes of an Ed25519 signature
    /// over the file's bytes (what `openssl pkeyutl -sign -rawin` writes).
    public static func signaturePath(_ path: String) -> String { path + ".sig" }

    /// Reads and validates the policy at `path`; with `key`, refuses it unless `FILE.sig` holds
    /// `key`'s signature over exactly these bytes and it has a `serial` (without one, nothing
    /// would tell an older signed file from the current one).
    /// - Returns: the policy, or every diagnostic (`file:line:col: message` lines).
    public static func load(path: String, key: Ed25519PublicKey?) -> Result<PolicySource, PolicyDiagnostics> {
        func fail(_ message: String) -> Result<PolicySource, PolicyDiagnostics> {
            .failure(PolicyDiagnostics([Diagnostic(file: path, line: 1, column: 1, path: "", message: message)]))
        }
        guard let bytes = readWholeFile(path) else { return fail("cannot read the policy file: \(String(cString: strerror(errno)))") }
        if let key, let problem = signatureProblem(bytes: bytes, path: path, key: key) { return fail(problem) }
        guard let text = String(validating: bytes, as: UTF8.self) else { return fail("the policy file is not valid UTF-8") }
        switch PolicyLoader.load(text: text, path: path) {
        case .failure(let diagnostics):
            return .failure(diagnostics)
        case .success(let policy):
            if key != nil, policy.serial == nil {
                return .failure(PolicyDiagnostics([policy.diagnostic(at: "serial", missingSerial)]))
            }
            return .success(PolicySource(policy: policy, sha256: SHA256.hexHash(bytes), signed: key != nil))
        }
    }

    /// Why `FILE.sig` is not `key`'s signature over `bytes`, or nil when it is.
    public static func signatureProblem(bytes: [UInt8], path: String, key: Ed25519PublicKey) -> String? {
        let sigPath = signaturePath(path)
        guard let signature = readWholeFile(sigPath) else {
            return "signature \(sigPath) is missing or unreadable (\(String(cString: strerror(errno)))); sign with pushwarden policy sign"
        }
        guard signature.count == 64 else { return "signature \(sigPath) is \(signature.count) bytes, not a 64-byte Ed25519 signature" }
        guard key.verify(signature: signature, message: bytes) else {
            return "signature \(sigPath) does not match: the file was changed after signing, or signed with another key"
        }
        return nil
    }

    /// Reads a PEM Ed25519 key file (`--key`, `--policy-key`); the reason when it cannot.
    public static func publicKey(path: String) -> Result<Ed25519PublicKey, ConfigurationError> {
        guard let pem = readWholeFile(path) else { return .failure(ConfigurationError("cannot read the policy key \(path): \(String(cString: strerror(errno)))")) }
        do {
            let key = try Ed25519PublicKey(pem: pem)
            return .success(key)
        } catch {
            return .failure(ConfigurationError("the policy key \(path) is not a PEM Ed25519 public key (\(error.message))"))
        }
    }
}
