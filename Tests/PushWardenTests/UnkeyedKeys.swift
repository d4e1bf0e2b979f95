@testable import Registration

/// The names a store without `store.digest_key` uses, as the tests that pin them spell them; the
/// product makes every name through a `KeyDigest`.
extension RegistrationKeys {
    init(app: String, upstream: String, pushToken: String) {
        self = KeyDigest.unkeyed.registration(pushToken, app: app, upstream: upstream)
    }
}

extension ContactKeys {
    init(app: String, contactID: String) {
        self = KeyDigest.unkeyed.contact(contactID, app: app)
    }
}

extension TokenKeys {
    init(app: String, pushToken: String) {
        self = KeyDigest.unkeyed.token(pushToken, app: app)
    }
}
