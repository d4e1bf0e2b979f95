import PWCore
import PWCrypto
import PWPolicy
import Registration

/// One admin bearer token in force (policy `admin.token` or `apps.<id>.admin.token`), kept only
/// as its SHA-256: the value itself is dropped once hashed, so no copy of it outlives start-up or
/// a reload.
///
/// A presented token is hashed too and the two 32-byte digests are compared with
/// `constantTimeEquals` (`CRYPTO_memcmp`): the time taken depends on neither how many leading
/// bytes matched nor the presented token's length, so timing reveals nothing of the real one.
struct AdminToken: Sendable {
    /// Where the token came from (`env:NAME`), for messages; never the value.
    let reference: SecretRef
    fileprivate let digest: [UInt8]

    init(reference: SecretRef, value: [UInt8]) {
        self.reference = reference
        digest = SHA256.hash(value)
    }

    /// Whether `digest` is the SHA-256 of this token, compared in constant time.
    func matches(digest presented: [UInt8]) -> Bool {
        constantTimeEquals(presented, digest)
    }
}

/// Who may call the server-to-server API: the operator's token (`admin.token`), which reaches
/// every app, and each app's own (`apps.<id>.admin.token`), which reaches that app only. One
/// policy can so serve several tenants without any of them reaching another's contacts.
struct AdminTokens: Sendable {
    /// What a presented token may reach.
    enum Grant: Sendable, Equatable {
        /// The operator's token: every app.
        case everyApp
        /// An app's own token: that app only.
        case app(String)

        /// The audit line's `credential`.
        var credential: String {
            switch self {
            case .everyApp: return "operator token"
            case .app: return "app token"
            }
        }
    }

    let operatorToken: AdminToken?
    /// Each app's own token, in policy order.
    let apps: [(app: String, token: AdminToken)]

    static let none = AdminTokens(operatorToken: nil, apps: [])

    /// No token at all: the routes answer `404`, as if they did not exist.
    var isEmpty: Bool { operatorToken == nil && apps.isEmpty }

    /// What `presented` reaches, or nil when it is no token in force. Every token's digest is
    /// compared, whichever matches first, so the time taken says nothing about which one (or
    /// whether any) matched.
    func grant(_ presented: [UInt8]) -> Grant? {
        let digest = SHA256.hash(presented)
        var grant: Grant?
        if let operatorToken, operatorToken.matches(digest: digest) { grant = .everyApp }
        for (app, token) in apps where token.matches(digest: digest) && grant == nil { grant = .app(app) }
        return grant
    }

    /// The tokens `policy` names, read and judged (`AdminPolicy.problem`). A secret that cannot
    /// be read, is too short, or has the value of another token of the policy (two tenants, or a
    /// tenant and the operator, sharing one credential) is refused as a diagnostic at the token's
    /// place (file, line, column), naming references, never values.
    static func resolve(_ policy: Policy, secrets: any SecretResolving) throws(ConfigurationError) -> AdminTokens {
        var read: [(path: String, token: AdminToken)] = []
        func load(_ admin: AdminPolicy, at path: String) throws(ConfigurationError) -> AdminToken {
            let value: [UInt8]
            do {
                value = try secrets.resolve(admin.token)
            } catch {
                throw ConfigurationError(policy.diagnostic(at: path, error.description).description)
            }
            if let problem = admin.problem(with: value) {
                throw ConfigurationError(policy.diagnostic(at: path, problem).description)
            }
            let token = AdminToken(reference: admin.token, value: value)
            // Start-up only: whether this comparison is constant-time tells a caller nothing.
            if let earlier = read.first(where: { $0.token.digest == token.digest }) {
                throw ConfigurationError(policy.diagnostic(at: path, "the admin token from \(admin.token) has the same value as the one from "
                    + "\(earlier.token.reference) (\(earlier.path)): every app needs a token of its own, other than the operator's").description)
            }
            read.append((path, token))
            return token
        }
        var operatorToken: AdminToken?
        if let admin = policy.admin { operatorToken = try load(admin, at: "admin.token") }
        var apps: [(app: String, token: AdminToken)] = []
        for app in policy.apps {
            guard let admin = app.admin else { continue }
            apps.append((app.id, try load(admin, at: "apps.\(app.id).admin.token")))
        }
        return AdminTokens(operatorToken: operatorToken, apps: apps)
    }
}
