import ClientAPI
import PWCore
import PWPolicy
import Testing

/// `client.contact_id: verify` compares the client's `contact_id` with the session's by bytes
/// (UTF-8): a spelling that is only canonically equivalent is another contact.
@Suite struct ContactVerifyTests {
    static let precomposed = "ren\u{E9}e"     // é as one scalar
    static let decomposed = "rene\u{301}e"     // e + COMBINING ACUTE ACCENT
    static let kelvin = "\u{212A}-42"         // KELVIN SIGN
    static let latinK = "K-42"

    @Test func thePremise() {
        // Swift's String == treats these as the same string; their bytes differ.
        #expect(Self.precomposed == Self.decomposed)
        #expect(Self.kelvin == Self.latinK)
        #expect(!Self.precomposed.utf8.elementsEqual(Self.decomposed.utf8))
        #expect(!Self.kelvin.utf8.elementsEqual(Self.latinK.utf8))
    }

    static let pairs: [(sent: String, session: String)] = [
        (decomposed, precomposed), (precomposed, decomposed), (kelvin, latinK), (latinK, kelvin),
    ]

    @Test func canonicallyEquivalentContactsDoNotMatch() {
        for (sent, contact) in Self.pairs {
            let install = refusal {
                try RequestValidator.installation(body: bytes(edited(iosBody, [("contact_id", .string(sent))])), policy: allPlatforms,
                                                  contactID: contact)
            }
            #expect(install?.code == .contactMismatch, "\(Array(sent.unicodeScalars))")
            #expect(install?.field == "contact_id")
            let unregister = refusal {
                try RequestValidator.unregister(body: bytes(obj(["push_token": .string(apnsToken), "contact_id": .string(sent)])),
                                                policy: allPlatforms, contactID: contact)
            }
            #expect(unregister?.code == .contactMismatch)
            let events = refusal {
                try RequestValidator.events(body: bytes(batch([event([("contact_id", .string(sent))])])), policy: allPlatforms,
                                            contactID: contact)
            }
            #expect(events?.code == .contactMismatch)
            #expect(events?.field == "events[0].contact_id")
        }
    }

    @Test func identicalBytesMatch() throws {
        for contact in [Self.precomposed, Self.decomposed, Self.kelvin, Self.latinK] {
            let body = bytes(edited(iosBody, [("contact_id", .string(contact))]))
            _ = try RequestValidator.installation(body: body, policy: allPlatforms, contactID: contact)
            _ = try RequestValidator.unregister(body: bytes(obj(["push_token": .string(apnsToken), "contact_id": .string(contact)])),
                                                policy: allPlatforms, contactID: contact)
            _ = try RequestValidator.events(body: bytes(batch([event([("contact_id", .string(contact))])])), policy: allPlatforms,
                                            contactID: contact)
        }
    }
}
