import PWCore
import PWCrypto
import PWPolicy

/// The admin bearer token in force (policy `admin.token`), kept only as its SHA-256: the value
/// itself is dropped once hashed, so no copy of it outlives start-up or a reload.
///
/// A presented token is hashed too and the two 32-byte digests are compared with
/// `constantTimeEquals` (`CRYPTO_memcmp`): the time taken depends on neither how many leading
/// bytes matched nor the presented token's length, so timing reveals nothing of the real one.
struct AdminToken: Sendable {
    /// Where the token came from (`env:NAME`), for messages; never the value.
    let reference: SecretRef
    private let digest: [UInt8]

    init(reference: SecretRef, value: [UInt8]) {
        self.reference = reference
        digest = SHA256.hash(value)
    }

    /// Whether `presented` is the admin token.
    func accepts(_ presented: [UInt8]) -> Bool {
        constantTimeEquals(SHA256.hash(presented), digest)
    }

    /// The token `policy.admin` names, read and judged (`AdminPolicy.problem`): nil when the
    /// policy has no `admin` block. A secret that cannot be read or is too short is refused as a
    /// diagnostic at `admin.token` (file, line, column), naming the reference, never the value.
    static func resolve(_ policy: Policy, secrets: any SecretResolving) throws(StartupError) -> AdminToken? {
        guard let admin = policy.admin else { return nil }
        let value: [UInt8]
        do {
            value = try secrets.resolve(admin.token)
        } catch {
            throw StartupError(policy.diagnostic(at: "admin.token", error.description).description)
        }
        if let problem = admin.problem(with: value) {
            throw StartupError(policy.diagnostic(at: "admin.token", problem).description)
        }
        return AdminToken(reference: admin.token, value: value)
    }
}
