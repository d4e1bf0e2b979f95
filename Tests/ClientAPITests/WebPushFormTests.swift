import ClientAPI
import PWCore
import PWPolicy
import Testing

/// apns, apns_voip and fcm registrations also come in the Web Push form (an endpoint URL with
/// keys), as Fluxer registers them; the raw-token form stays the default.
@Suite struct WebPushFormTests {
    @Test(arguments: [("android", "fcm"), ("ios", "apns"), ("ios", "apns_voip"), ("android", "unified_push"), ("web", "web_push")])
    func endpointWithKeysIsAccepted(platform: String, service: String) throws {
        let body = obj(["platform": .string(platform), "push_service": .string(service), "push_token": .string(endpoint), "web_push_keys": webKeys])
        let installation = try RequestValidator.installation(body: bytes(body), policy: allPlatforms, contactID: session)
        #expect(installation.isWebPushForm)
        #expect(installation.pushToken == endpoint)
        #expect(installation.pushService.rawValue == service)
    }

    @Test func rawTokenIsNotWebPushForm() throws {
        let body = obj(["platform": "android", "push_token": .string(String(repeating: "a", count: 40))])
        let installation = try RequestValidator.installation(body: bytes(body), policy: allPlatforms, contactID: session)
        #expect(!installation.isWebPushForm)
    }

    @Test func rotationCannotSwitchForm() {
        let body = obj(["platform": "android", "push_token": .string(String(repeating: "a", count: 40)),
                        "previous_push_token": .string(endpoint)])
        let e = refusal { try RequestValidator.installation(body: bytes(body), policy: allPlatforms, contactID: session) }
        #expect(e?.code == .tokenPlatformMismatch)
        #expect(e?.field == "previous_push_token")
    }

    @Test func rawVoipTokenStaysValid() throws {
        let body = obj(["platform": "ios", "push_service": "apns_voip", "push_token": .string(String(repeating: "ab", count: 32))])
        #expect(try !RequestValidator.installation(body: bytes(body), policy: allPlatforms, contactID: session).isWebPushForm)
    }
}
