import ClientAPI
import PWCore
import PWPolicy
import Testing

@Suite struct InstallationAccepted {
    @Test func iosTokenIsLowerCased() throws {
        let i = try RequestValidator.installation(body: bytes(iosBody), policy: allPlatforms, contactID: session)
        #expect(i.platform == .ios)
        #expect(i.pushService == .apns)
        #expect(i.pushToken == apnsToken.lowercased())
        #expect(i.environment == .production)
        #expect(i.webPushKeys == nil)
        #expect(i.metadata == InstallationMetadata())
    }

    @Test func voyadoExampleWithMetadataAndContact() throws {
        let body = edited(iosBody, [
            ("contact_id", .string(session)), ("app_version", "3.4.1"), ("os_version", "26.4.4"),
            ("device_model", "iPhone15,2"), ("locale", "sv-SE"), ("timezone", "Europe/Stockholm"),
        ])
        let i = try RequestValidator.installation(body: bytes(body), policy: mobileOnly, contactID: session)
        #expect(i.metadata == InstallationMetadata(appVersion: "3.4.1", osVersion: "26.4.4", deviceModel: "iPhone15,2",
                                                   locale: "sv-SE", timezone: "Europe/Stockholm"))
    }

    @Test func apnsVoipSandboxWithRotation() throws {
        let previous = String(repeating: "0F", count: 40)
        let body = edited(iosBody, [("push_service", "apns_voip"), ("environment", "sandbox"),
                                    ("previous_push_token", .string(previous)), ("installation_id", "inst-42_A.b")])
        let i = try RequestValidator.installation(body: bytes(body), policy: allPlatforms, contactID: session)
        #expect(i.pushService == .apnsVoip)
        #expect(i.environment == .sandbox)
        #expect(i.previousPushToken == previous.lowercased())
        #expect(i.installationID == "inst-42_A.b")
    }

    @Test func androidFCMKeptAsSent() throws {
        let i = try RequestValidator.installation(body: bytes(androidBody), policy: allPlatforms, contactID: session)
        #expect(i.pushService == .fcm)
        #expect(i.pushToken == fcmToken)
        #expect(i.environment == .production)
    }

    @Test func androidHexTokenIsAValidFCMToken() throws {
        let body = obj(["platform": "android", "push_token": .string(apnsToken)])
        let i = try RequestValidator.installation(body: bytes(body), policy: allPlatforms, contactID: session)
        #expect(i.pushToken == apnsToken)
    }

    @Test func webPushKeysAreCanonicalised() throws {
        let padded = obj(["p256dh": .string(p256dh + "="), "auth": .string(authSecret + "==")])
        let body = edited(webBody, [("web_push_keys", padded)])
        let i = try RequestValidator.installation(body: bytes(body), policy: allPlatforms, contactID: session)
        #expect(i.pushService == .webPush)
        #expect(i.pushToken == endpoint)
        #expect(i.webPushKeys == WebPushKeys(p256dh: p256dh, auth: authSecret))
    }

    @Test func unifiedPushOnAndroid() throws {
        let body = obj(["platform": "android", "push_service": "unified_push", "push_token": "https://ntfy.sh/upAbC123?up=1",
                        "web_push_keys": webKeys])
        let i = try RequestValidator.installation(body: bytes(body), policy: allPlatforms, contactID: session)
        #expect(i.pushService == .unifiedPush)
        #expect(i.webPushKeys != nil)
    }

    @Test func nullOptionalFieldsAreAbsent() throws {
        let body = edited(iosBody, [("push_service", .null), ("environment", .null), ("contact_id", .null),
                                    ("web_push_keys", .null), ("locale", .null), ("previous_push_token", .null)])
        let i = try RequestValidator.installation(body: bytes(body), policy: rejectContact, contactID: session)
        #expect(i.pushService == .apns)
        #expect(i.previousPushToken == nil)
    }

    @Test func emptyMetadataIsAbsent() throws {
        let body = edited(iosBody, [("app_version", ""), ("locale", "")])
        let i = try RequestValidator.installation(body: bytes(body), policy: allPlatforms, contactID: session)
        #expect(i.metadata.appVersion == nil)
        #expect(i.metadata.locale == nil)
    }

    @Test func productionEnvironmentIsAcceptedForFCM() throws {
        let body = edited(androidBody, [("environment", "production")])
        #expect(try RequestValidator.installation(body: bytes(body), policy: allPlatforms, contactID: session).environment == .production)
    }

    @Test func unknownFieldsAreDroppedWhenThePolicySaysSo() throws {
        let body = edited(iosBody, [("badge", 3), ("extra", obj(["a": 1]))])
        let i = try RequestValidator.installation(body: bytes(body), policy: dropUnknown, contactID: session)
        #expect(i.pushToken == apnsToken.lowercased())
        // Dropping unknown fields does not relax type checks on known ones.
        let typed = edited(body, [("locale", 5)])
        #expect(refusal { try RequestValidator.installation(body: bytes(typed), policy: dropUnknown, contactID: session) }?.code == .invalidRequest)
    }

    @Test(arguments: [
        String(repeating: "ab", count: 32), String(repeating: "AB", count: 100), String(repeating: "0", count: 64),
        "740f4707bebcf74f9b7c25d48e3358945f6aa01da5ddb387462c7eaf61bb78ad",
    ])
    func apnsNormalisation(token: String) throws {
        let body = obj(["platform": "ios", "push_token": .string(token)])
        let i = try RequestValidator.installation(body: bytes(body), policy: allPlatforms, contactID: session)
        #expect(i.pushToken == token.lowercased())
        #expect(i.pushToken.utf8.allSatisfy { !($0 >= 0x41 && $0 <= 0x5A) })
    }
}

@Suite struct InstallationRefused {
    static let cases: [Refusal] = [
        Refusal("malformed JSON", raw: "{\"platform\": \"ios\",", .invalidJSON, nil),
        Refusal("empty body", raw: "", .invalidJSON, nil),
        Refusal("trailing comma", raw: "{\"platform\": \"ios\",}", .invalidJSON, nil),
        Refusal("duplicate key", raw: "{\"platform\": \"ios\", \"platform\": \"web\"}", .invalidJSON, nil),
        Refusal("array body", raw: "[]", .invalidRequest, nil),
        Refusal("string body", raw: "\"ios\"", .invalidRequest, nil),
        Refusal("null body", raw: "null", .invalidRequest, nil),
        Refusal("platform missing", edited(iosBody, [("platform", nil)]), .invalidRequest, "platform"),
        Refusal("platform null", edited(iosBody, [("platform", .null)]), .invalidRequest, "platform"),
        Refusal("platform unknown", edited(iosBody, [("platform", "windows")]), .invalidPlatform, "platform"),
        Refusal("platform wrong case", edited(iosBody, [("platform", "iOS")]), .invalidPlatform, "platform"),
        Refusal("platform not enabled", webBody, policy: mobileOnly, .invalidPlatform, "platform"),
        Refusal("push_token missing", edited(iosBody, [("push_token", nil)]), .invalidRequest, "push_token"),
        Refusal("push_token null", edited(iosBody, [("push_token", .null)]), .invalidRequest, "push_token"),
        Refusal("push_token empty", edited(iosBody, [("push_token", "")]), .invalidRequest, "push_token"),
        Refusal("push_service unknown", edited(iosBody, [("push_service", "gcm")]), .invalidRequest, "push_service"),
        Refusal("ios with unified_push", edited(iosBody, [("push_service", "unified_push")]), .tokenPlatformMismatch, "push_service"),
        Refusal("ios with web_push", edited(iosBody, [("push_service", "web_push")]), .tokenPlatformMismatch, "push_service"),
        Refusal("android with apns", edited(androidBody, [("push_service", "apns")]), .tokenPlatformMismatch, "push_service"),
        Refusal("android with web_push", edited(androidBody, [("push_service", "web_push")]), .tokenPlatformMismatch, "push_service"),
        Refusal("web with fcm", edited(webBody, [("push_service", "fcm")]), .tokenPlatformMismatch, "push_service"),
        Refusal("web with unified_push", edited(webBody, [("push_service", "unified_push")]), .tokenPlatformMismatch, "push_service"),
        // apns and fcm also come in a Web Push form (an endpoint URL), which needs its keys.
        Refusal("URL token for apns without keys", edited(iosBody, [("push_token", .string(endpoint))]), .invalidWebPush, "web_push_keys"),
        Refusal("URL token for fcm without keys", edited(androidBody, [("push_token", .string(endpoint))]), .invalidWebPush, "web_push_keys"),
        Refusal("raw token for web_push", edited(webBody, [("push_token", .string(apnsToken))]), .tokenPlatformMismatch, "push_token"),
        Refusal("raw token for unified_push",
                obj(["platform": "android", "push_service": "unified_push", "push_token": .string(fcmToken), "web_push_keys": webKeys]),
                .tokenPlatformMismatch, "push_token"),
        Refusal("FCM token for apns", edited(iosBody, [("push_token", .string(fcmToken))]), .tokenPlatformMismatch, "push_token"),
        Refusal("Expo token on ios", edited(iosBody, [("push_token", "ExponentPushToken[xxxxxxxxxxxxxxxxxxxxxx]")]),
                .unsupportedTokenType, "push_token"),
        Refusal("Expo token on android", edited(androidBody, [("push_token", "ExpoPushToken[yyyyyyyyyyyyyyyyyyyyyy]")]),
                .unsupportedTokenType, "push_token"),
        Refusal("Expo token on web", edited(webBody, [("push_token", "ExponentPushToken[zzzzzzzzzzzzzzzzzzzzzz]")]),
                .unsupportedTokenType, "push_token"),
        Refusal("APNs odd length", edited(iosBody, [("push_token", .string(apnsToken + "a"))]), .invalidTokenFormat, "push_token"),
        Refusal("APNs too short", edited(iosBody, [("push_token", .string(String(repeating: "ab", count: 31)))]),
                .invalidTokenFormat, "push_token"),
        Refusal("APNs too long", edited(iosBody, [("push_token", .string(String(repeating: "ab", count: 101)))]),
                .invalidTokenFormat, "push_token"),
        Refusal("APNs not hex", edited(iosBody, [("push_token", .string(String(repeating: "zz", count: 32)))]),
                .invalidTokenFormat, "push_token"),
        Refusal("APNs description format", edited(iosBody, [("push_token", .string("<" + String(repeating: "abcd1234 ", count: 8) + ">"))]),
                .invalidTokenFormat, "push_token"),
        Refusal("FCM too short", edited(androidBody, [("push_token", .string(String(repeating: "a", count: 31)))]),
                .invalidTokenFormat, "push_token"),
        Refusal("FCM too long", edited(androidBody, [("push_token", .string(String(repeating: "a", count: 401)))]),
                .invalidTokenFormat, "push_token"),
        Refusal("FCM bad character", edited(androidBody, [("push_token", .string(fcmToken + "+/="))]), .invalidTokenFormat, "push_token"),
        Refusal("FCM with newline", edited(androidBody, [("push_token", .string(fcmToken + "\n"))]), .invalidTokenFormat, "push_token"),
        Refusal("FCM with space", edited(androidBody, [("push_token", .string(" " + fcmToken))]), .invalidTokenFormat, "push_token"),
        Refusal("web push over http", edited(webBody, [("push_token", "http://push.example.com/x")]), .invalidWebPush, "push_token"),
        Refusal("web push loopback", edited(webBody, [("push_token", "https://127.0.0.1/x")]), .urlNotPubliclyRoutable, "push_token"),
        Refusal("web push too long", edited(webBody, [("push_token", .string("https://push.example.com/" + String(repeating: "a", count: 976)))]),
                .invalidWebPush, "push_token"),
        Refusal("unified_push private", obj(["platform": "android", "push_service": "unified_push",
                                             "push_token": "https://192.168.1.20/up", "web_push_keys": webKeys]),
                .urlNotPubliclyRoutable, "push_token"),
        Refusal("web_push_keys missing", edited(webBody, [("web_push_keys", nil)]), .invalidWebPush, "web_push_keys"),
        Refusal("web_push_keys with APNs", edited(iosBody, [("web_push_keys", webKeys)]), .invalidWebPush, "web_push_keys"),
        Refusal("web_push_keys with FCM", edited(androidBody, [("web_push_keys", webKeys)]), .invalidWebPush, "web_push_keys"),
        Refusal("p256dh 64 bytes", edited(webBody, [("web_push_keys", obj([
            "p256dh": .string(Base64URL.encode([UInt8](repeating: 4, count: 64))), "auth": .string(authSecret)]))]),
                .invalidWebPush, "web_push_keys.p256dh"),
        Refusal("p256dh compressed point", edited(webBody, [("web_push_keys", obj([
            "p256dh": .string(Base64URL.encode([UInt8(0x02)] + [UInt8](repeating: 7, count: 64))), "auth": .string(authSecret)]))]),
                .invalidWebPush, "web_push_keys.p256dh"),
        Refusal("p256dh not base64url", edited(webBody, [("web_push_keys", obj(["p256dh": "!!!not-base64!!!", "auth": .string(authSecret)]))]),
                .invalidWebPush, "web_push_keys.p256dh"),
        Refusal("p256dh standard base64", edited(webBody, [("web_push_keys", obj([
            "p256dh": .string(String(repeating: "+/", count: 43) + "A"), "auth": .string(authSecret)]))]),
                .invalidWebPush, "web_push_keys.p256dh"),
        Refusal("p256dh missing", edited(webBody, [("web_push_keys", obj(["auth": .string(authSecret)]))]),
                .invalidWebPush, "web_push_keys.p256dh"),
        Refusal("auth 15 bytes", edited(webBody, [("web_push_keys", obj([
            "p256dh": .string(p256dh), "auth": .string(Base64URL.encode([UInt8](repeating: 1, count: 15)))]))]),
                .invalidWebPush, "web_push_keys.auth"),
        Refusal("auth missing", edited(webBody, [("web_push_keys", obj(["p256dh": .string(p256dh)]))]), .invalidWebPush, "web_push_keys.auth"),
        Refusal("auth null", edited(webBody, [("web_push_keys", obj(["p256dh": .string(p256dh), "auth": .null]))]),
                .invalidWebPush, "web_push_keys.auth"),
        Refusal("web_push_keys unknown member", edited(webBody, [("web_push_keys", obj([
            "p256dh": .string(p256dh), "auth": .string(authSecret), "expirationTime": .null]))]),
                .unknownField, "web_push_keys.expirationTime"),
        Refusal("web_push_keys unknown member even when dropping", edited(webBody, [("web_push_keys", obj([
            "p256dh": .string(p256dh), "auth": .string(authSecret), "x": 1]))]), policy: dropUnknown,
                .unknownField, "web_push_keys.x"),
        Refusal("environment unknown", edited(iosBody, [("environment", "development")]), .invalidRequest, "environment"),
        Refusal("sandbox with fcm", edited(androidBody, [("environment", "sandbox")]), .invalidRequest, "environment"),
        Refusal("sandbox with web_push", edited(webBody, [("environment", "sandbox")]), .invalidRequest, "environment"),
        Refusal("previous equals current", edited(iosBody, [("previous_push_token", .string(apnsToken.lowercased()))]),
                .invalidRequest, "previous_push_token"),
        Refusal("previous malformed", edited(iosBody, [("previous_push_token", "abc")]), .invalidTokenFormat, "previous_push_token"),
        Refusal("previous Expo", edited(iosBody, [("previous_push_token", "ExponentPushToken[abc]")]),
                .unsupportedTokenType, "previous_push_token"),
        Refusal("previous URL for apns", edited(iosBody, [("previous_push_token", .string(endpoint))]),
                .tokenPlatformMismatch, "previous_push_token"),
        Refusal("previous private URL", edited(webBody, [("previous_push_token", "https://10.1.2.3/old")]),
                .urlNotPubliclyRoutable, "previous_push_token"),
        Refusal("installation_id empty", edited(iosBody, [("installation_id", "")]), .invalidRequest, "installation_id"),
        Refusal("installation_id space", edited(iosBody, [("installation_id", "a b")]), .invalidRequest, "installation_id"),
        Refusal("installation_id non-ASCII", edited(iosBody, [("installation_id", "inställning")]), .invalidRequest, "installation_id"),
        Refusal("installation_id too long", edited(iosBody, [("installation_id", .string(String(repeating: "i", count: 201)))]),
                .invalidRequest, "installation_id"),
        Refusal("app_version too long", edited(iosBody, [("app_version", .string(String(repeating: "1", count: 65)))]),
                .invalidRequest, "app_version"),
        Refusal("os_version too long", edited(iosBody, [("os_version", .string(String(repeating: "1", count: 65)))]),
                .invalidRequest, "os_version"),
        Refusal("os_version control character", edited(iosBody, [("os_version", "17.0\n")]), .invalidRequest, "os_version"),
        Refusal("device_model too long", edited(iosBody, [("device_model", .string(String(repeating: "m", count: 129)))]),
                .invalidRequest, "device_model"),
        Refusal("device_model bidi override", edited(iosBody, [("device_model", "iPhone\u{202E}evil")]), .invalidRequest, "device_model"),
        Refusal("device_model zero-width joiner", edited(iosBody, [("device_model", "iPhone\u{200D}")]), .invalidRequest, "device_model"),
        Refusal("app_version word joiner", edited(iosBody, [("app_version", "1.0\u{2060}")]), .invalidRequest, "app_version"),
        Refusal("os_version Arabic letter mark", edited(iosBody, [("os_version", "17\u{61C}")]), .invalidRequest, "os_version"),
        Refusal("app_version NUL", edited(iosBody, [("app_version", "1.0\u{0}")]), .invalidRequest, "app_version"),
        Refusal("locale with space", edited(iosBody, [("locale", "en US")]), .invalidRequest, "locale"),
        Refusal("locale too long", edited(iosBody, [("locale", .string(String(repeating: "a", count: 36)))]), .invalidRequest, "locale"),
        Refusal("timezone with space", edited(iosBody, [("timezone", "Europe/Stock holm")]), .invalidRequest, "timezone"),
        Refusal("timezone too long", edited(iosBody, [("timezone", .string(String(repeating: "z", count: 65)))]), .invalidRequest, "timezone"),
        Refusal("unknown field", edited(iosBody, [("badge", 1)]), .unknownField, "badge"),
        Refusal("first unknown field in document order", edited(iosBody, [("zeta", 1), ("alpha", 2)]), .unknownField, "zeta"),
        Refusal("unknown field wrong case", edited(iosBody, [("Platform", "ios")]), .unknownField, "Platform"),
        Refusal("contact_id mismatch", edited(iosBody, [("contact_id", "someone-else")]), .contactMismatch, "contact_id"),
        Refusal("contact_id empty", edited(iosBody, [("contact_id", "")]), .contactMismatch, "contact_id"),
        Refusal("contact_id forbidden", edited(iosBody, [("contact_id", .string(session))]), policy: rejectContact, .forbidden, "contact_id"),
    ]

    @Test(arguments: cases)
    func refused(_ c: Refusal) {
        c.check(refusal { try RequestValidator.installation(body: c.body, policy: c.policy, contactID: session) })
    }

    /// A type error is reported before a later unknown field, and an unknown field before a later
    /// type error: the first problem in document order wins.
    @Test func structuralProblemsInDocumentOrder() {
        let typeFirst = obj(["platform": 1, "bogus": "x", "push_token": .string(apnsToken)])
        Refusal("type first", typeFirst, .invalidRequest, "platform")
            .check(refusal { try RequestValidator.installation(body: bytes(typeFirst), policy: allPlatforms, contactID: session) })
        let unknownFirst = obj(["bogus": "x", "platform": 1, "push_token": .string(apnsToken)])
        Refusal("unknown first", unknownFirst, .unknownField, "bogus")
            .check(refusal { try RequestValidator.installation(body: bytes(unknownFirst), policy: allPlatforms, contactID: session) })
    }

    @Test func policyPlatformsAreListed() {
        let e = refusal { try RequestValidator.installation(body: bytes(edited(iosBody, [("platform", "windows")])), policy: mobileOnly, contactID: session) }
        #expect(e?.message == "platform must be one of ios, android")
        let w = refusal { try RequestValidator.installation(body: bytes(webBody), policy: mobileOnly, contactID: session) }
        #expect(w?.message == "platform web is not enabled for this app")
    }

    @Test func hugeUnknownKeyIsBoundedInTheField() {
        let key = String(repeating: "k", count: 5000)
        let e = refusal { try RequestValidator.installation(body: bytes(edited(iosBody, [(key, 1)])), policy: allPlatforms, contactID: session) }
        #expect(e?.code == .unknownField)
        #expect((e?.field?.count ?? 0) < 100)
    }
}

/// A number, object, array or boolean where a string (or object) belongs never reaches a rule.
@Suite struct TypeConfusion {
    static let wrongValues: [JSONValue] = [42, .number("1.5e3"), obj(["a": "b"]), .array(["ios"]), true, false]
    static let stringFields = [
        "platform", "push_token", "push_service", "environment", "previous_push_token", "installation_id",
        "app_version", "os_version", "device_model", "locale", "timezone", "contact_id",
    ]

    @Test(arguments: stringFields, wrongValues)
    func installationStringField(field: String, value: JSONValue) {
        let body = edited(webBody, [(field, value)])
        let e = refusal { try RequestValidator.installation(body: bytes(body), policy: allPlatforms, contactID: session) }
        #expect(e?.code == .invalidRequest)
        #expect(e?.field == field)
        #expect(e?.message.contains("must be a string") == true)
    }

    @Test(arguments: [JSONValue.string("keys"), 7, .array([]), true])
    func webPushKeysMustBeAnObject(value: JSONValue) {
        let e = refusal { try RequestValidator.installation(body: bytes(edited(webBody, [("web_push_keys", value)])), policy: allPlatforms, contactID: session) }
        #expect(e?.code == .invalidRequest)
        #expect(e?.field == "web_push_keys")
        #expect(e?.message.contains("must be an object") == true)
    }

    @Test(arguments: ["p256dh", "auth"], wrongValues)
    func webPushKeyMembers(member: String, value: JSONValue) throws {
        var keys = try #require(webKeys.objectValue)
        keys[member] = value
        let e = refusal { try RequestValidator.installation(body: bytes(edited(webBody, [("web_push_keys", .object(keys))])), policy: allPlatforms, contactID: session) }
        #expect(e?.code == .invalidRequest)
        #expect(e?.field == "web_push_keys." + member)
    }

    @Test(arguments: ["push_token", "contact_id"], wrongValues)
    func unregisterFields(field: String, value: JSONValue) {
        let body = edited(obj(["push_token": .string(apnsToken)]), [(field, value)])
        let e = refusal { try RequestValidator.unregister(body: bytes(body), policy: allPlatforms, contactID: session) }
        #expect(e?.code == .invalidRequest)
        #expect(e?.field == field)
    }

    @Test(arguments: ["type", "message_id", "recipient_id", "occurred_at", "app_state", "deeplink", "action_id", "contact_id"], wrongValues)
    func eventFields(field: String, value: JSONValue) {
        let body = batch([event(), event([(field, value)])])
        let e = refusal { try RequestValidator.events(body: bytes(body), policy: allPlatforms, contactID: session) }
        #expect(e?.code == .invalidEvent)
        #expect(e?.field == "events[1].\(field)")
        #expect(e?.message.contains("must be a string") == true)
    }

    @Test(arguments: [JSONValue.string("events"), 3, obj(["0": event()]), true])
    func eventsMustBeAnArray(value: JSONValue) {
        let e = refusal { try RequestValidator.events(body: bytes(obj(["events": value])), policy: allPlatforms, contactID: session) }
        #expect(e?.code == .invalidRequest)
        #expect(e?.field == "events")
    }
}

/// Refusal messages are shown to clients and logged; they must never carry the token.
@Test(arguments: [
    ("ios", "apns", "ZZSECRETZZ" + String(repeating: "q", count: 60)),
    ("ios", "apns", "ZZSECRETZZ:APA91" + String(repeating: "q", count: 60)),
    ("android", "fcm", "ZZSECRETZZ/" + String(repeating: "q", count: 60)),
    ("android", "fcm", "https://ZZSECRETZZ.localhost/x"),
    ("web", "web_push", "https://127.0.0.1/ZZSECRETZZ"),
    ("web", "web_push", "http://push.example.com/ZZSECRETZZ"),
    ("web", "web_push", "ZZSECRETZZ"),
    ("ios", "apns", "ExponentPushToken[ZZSECRETZZ]"),
])
func messagesNeverEchoTheToken(platform: String, service: String, token: String) {
    let body = obj(["platform": .string(platform), "push_service": .string(service), "push_token": .string(token), "web_push_keys": webKeys])
    let e = refusal { try RequestValidator.installation(body: bytes(body), policy: allPlatforms, contactID: session) }
    #expect(e != nil)
    #expect(e?.message.contains("ZZSECRETZZ") == false)
    #expect(e?.field?.contains("ZZSECRETZZ") == false)
}
