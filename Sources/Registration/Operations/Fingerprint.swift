import ClientAPI
import PWCore
import PWCrypto

/// The value cached for a registration: a hash of everything PushWarden forwards for it (the
/// installation as validated, the session's contact, and the upstream's request-shaping
/// settings, and the user's own credential when the provider takes one), so any change is
/// forwarded again. Identities a provider handed back are not part of it: they follow from the
/// registration. The credential enters only this hash, never the store.
package enum Fingerprint {
    static func of(_ installation: Installation, contactID: String, settings: String, credential: String? = nil) -> String {
        let m = installation.metadata
        var material: [UInt8] = []
        material.reserveCapacity(320)
        func add(_ part: String?) {
            // A 0x01 marks absence, so nil and "" differ; 0x00 separates fields.
            if let part { material.append(contentsOf: part.utf8) } else { material.append(1) }
            material.append(0)
        }
        add(installation.platform.rawValue)
        add(installation.pushService.rawValue)
        add(installation.pushToken)
        add(installation.webPushKeys?.p256dh)
        add(installation.webPushKeys?.auth)
        add(installation.environment.rawValue)
        add(installation.installationID)
        add(m.appVersion)
        add(m.osVersion)
        add(m.deviceModel)
        add(m.locale)
        add(m.timezone)
        add(contactID)
        add(settings)
        if let credential { add(credential) }
        // The first 16 bytes as hex: the first 32 hex digits of the digest.
        return SHA256.hexHash(material, hexDigits: 32)
    }
}
