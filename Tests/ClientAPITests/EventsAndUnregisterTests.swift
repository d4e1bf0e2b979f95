import ClientAPI
import PWCore
import PWPolicy
import Testing

@Suite struct Events {
    @Test func voyadoExampleBatch() throws {
        let body = batch([
            event([("type", "delivered"), ("contact_id", .string(session)), ("occurred_at", "2026-07-02T10:20:15.123Z"),
                   ("app_state", "background")]),
            event([("contact_id", .string(session)), ("deeplink", "myapp://product/sku-123"), ("action_id", "buy")]),
        ])
        let events = try RequestValidator.events(body: bytes(body), policy: mobileOnly, contactID: session)
        #expect(events == [
            EngagementEvent(type: .delivered, messageID: "msg-abc123", recipientID: "572c44be-945d-879-41a2-77826b6bb21b",
                            occurredAt: "2026-07-02T10:20:15.123Z", appState: .background),
            EngagementEvent(type: .opened, messageID: "msg-abc123", recipientID: "572c44be-945d-879-41a2-77826b6bb21b",
                            occurredAt: "2026-07-02T10:20:42.456Z", deeplink: "myapp://product/sku-123", actionID: "buy"),
        ])
    }

    @Test func batchAtTheCapIsAccepted() throws {
        let policy = ClientPolicy(platforms: [.ios], maxEvents: 3)
        let events = try RequestValidator.events(body: bytes(batch([event(), event(), event()])), policy: policy, contactID: session)
        #expect(events.count == 3)
    }

    @Test func unknownEventKeysAreDroppedWhenThePolicySaysSo() throws {
        let body = obj(["events": .array([event([("foo", 1)])]), "sdk": "voyado-ios"])
        #expect(try RequestValidator.events(body: bytes(body), policy: dropUnknown, contactID: session).count == 1)
    }

    @Test func nullOptionalFieldsAreAbsent() throws {
        let body = batch([event([("app_state", .null), ("deeplink", .null), ("action_id", .null), ("contact_id", .null)])])
        let e = try RequestValidator.events(body: bytes(body), policy: rejectContact, contactID: session)
        #expect(e[0].appState == nil && e[0].deeplink == nil && e[0].actionID == nil)
    }

    static let cases: [Refusal] = [
        Refusal("malformed JSON", raw: "{\"events\": [", .invalidJSON, nil),
        Refusal("array body", raw: "[{}]", .invalidRequest, nil),
        Refusal("events missing", obj([:]), .invalidRequest, "events"),
        Refusal("events null", obj(["events": .null]), .invalidRequest, "events"),
        Refusal("events empty", batch([]), .invalidRequest, "events"),
        Refusal("too many events", batch([event(), event(), event(), event()]), policy: ClientPolicy(platforms: [.ios], maxEvents: 3),
                .invalidRequest, "events"),
        Refusal("top-level unknown field", obj(["events": .array([event()]), "contact_id": .string(session)]), .unknownField, "contact_id"),
        Refusal("null event", batch([event(), event(), .null]), .invalidEvent, "events[2]"),
        Refusal("number event", batch([event(), 5]), .invalidEvent, "events[1]"),
        Refusal("string event", batch(["opened"]), .invalidEvent, "events[0]"),
        Refusal("array event", batch([.array([event()])]), .invalidEvent, "events[0]"),
        Refusal("type missing", batch([event([("type", nil)])]), .invalidEvent, "events[0].type"),
        Refusal("type unknown", batch([event([("type", "clicked")])]), .invalidEventType, "events[0].type"),
        Refusal("type wrong case", batch([event(), event([("type", "Opened")])]), .invalidEventType, "events[1].type"),
        Refusal("message_id missing", batch([event([("message_id", nil)])]), .invalidEvent, "events[0].message_id"),
        Refusal("message_id empty", batch([event([("message_id", "")])]), .invalidEvent, "events[0].message_id"),
        Refusal("message_id too long", batch([event([("message_id", .string(String(repeating: "m", count: 201)))])]),
                .invalidEvent, "events[0].message_id"),
        Refusal("recipient_id missing", batch([event([("recipient_id", nil)])]), .invalidEvent, "events[0].recipient_id"),
        Refusal("recipient_id control character", batch([event([("recipient_id", "abc\u{7}")])]), .invalidEvent, "events[0].recipient_id"),
        Refusal("occurred_at missing", batch([event([("occurred_at", nil)])]), .invalidEvent, "events[0].occurred_at"),
        Refusal("occurred_at epoch seconds", batch([event([("occurred_at", "1751451642")])]), .invalidEvent, "events[0].occurred_at"),
        Refusal("app_state unknown", batch([event([("app_state", "asleep")])]), .invalidEvent, "events[0].app_state"),
        Refusal("deeplink too long", batch([event([("deeplink", .string("myapp://" + String(repeating: "d", count: 1993)))])]),
                .invalidEvent, "events[0].deeplink"),
        Refusal("action_id too long", batch([event([("action_id", .string(String(repeating: "a", count: 201)))])]),
                .invalidEvent, "events[0].action_id"),
        Refusal("unknown event key", batch([event(), event([("foo", "bar")])]), .unknownField, "events[1].foo"),
        Refusal("contact mismatch", batch([event([("contact_id", .string(session))]), event([("contact_id", "other-contact")])]),
                .contactMismatch, "events[1].contact_id"),
        Refusal("contact forbidden", batch([event([("contact_id", .string(session))])]), policy: rejectContact,
                .forbidden, "events[0].contact_id"),
    ]

    @Test(arguments: cases)
    func refused(_ c: Refusal) {
        c.check(refusal { try RequestValidator.events(body: c.body, policy: c.policy, contactID: session) })
    }

    /// The whole batch is checked and the first bad event is the one named.
    @Test(arguments: 0..<6)
    func firstFailingIndexIsReported(bad: Int) {
        var events = (0..<6).map { _ in event() }
        events[bad] = event([("occurred_at", "yesterday")])
        if bad < 5 { events[5] = event([("type", "clicked")]) }
        let e = refusal { try RequestValidator.events(body: bytes(batch(events)), policy: allPlatforms, contactID: session) }
        #expect(e?.code == .invalidEvent)
        #expect(e?.field == "events[\(bad)].occurred_at")
    }

    @Test func tooManyIsRefusedBeforeLookingAtEvents() {
        let body = batch(Array(repeating: .null, count: 101))
        let e = refusal { try RequestValidator.events(body: bytes(body), policy: allPlatforms, contactID: session) }
        #expect(e?.code == .invalidRequest)
        #expect(e?.message == "at most 100 events per request")
    }

    @Test(arguments: [
        "2026-07-02T10:20:42Z", "2026-07-02T10:20:42.456Z", "2026-07-02T10:20:42.1Z", "2026-07-02T10:20:42.123456789Z",
        "2024-02-29T00:00:00+01:00", "2000-02-29T23:59:59-05:30", "2026-12-31T23:59:59+14:00", "0001-01-01T00:00:00Z",
        "9999-12-31T23:59:59.999Z", "2026-07-02T10:20:42-00:00",
    ])
    func validTimestamps(_ ts: String) throws {
        let e = try RequestValidator.events(body: bytes(batch([event([("occurred_at", .string(ts))])])), policy: allPlatforms, contactID: session)
        #expect(e[0].occurredAt == ts)
    }

    @Test(arguments: [
        "", "2026-07-02", "2026-07-02T10:20:42", "2026-07-02 10:20:42Z", "2026-07-02t10:20:42z", "2026-07-02T10:20:42+0100",
        "2026-07-02T10:20:42+01", "2026-07-02T10:20Z", "2026-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2026-04-31T00:00:00Z",
        "2026-13-01T00:00:00Z", "2026-00-01T00:00:00Z", "2026-07-00T00:00:00Z", "2026-07-02T24:00:00Z", "2026-07-02T10:60:00Z",
        "2026-07-02T10:20:60Z", "2026-07-02T10:20:42.Z", "2026-07-02T10:20:42.1234567890Z", "0000-01-01T00:00:00Z",
        "2026-07-02T10:20:42Z ", " 2026-07-02T10:20:42Z", "2026-07-02T10:20:42+24:00", "2026-07-02T10:20:42+01:60",
        "+2026-07-02T10:20:42Z", "２０２６-07-02T10:20:42Z", "2026-07-02T10:20:42ZZ", "2026-7-2T10:20:42Z", "2026-07-02T10:20:42,5Z",
        "2026-W27-4T10:20:42Z", "2026-07-02T10:20:42.5+01:00:00",
    ])
    func invalidTimestamps(_ ts: String) {
        let e = refusal { try RequestValidator.events(body: bytes(batch([event([("occurred_at", .string(ts))])])), policy: allPlatforms, contactID: session) }
        #expect(e?.code == .invalidEvent)
        #expect(e?.field == "events[0].occurred_at")
    }
}

@Suite struct Unregister {
    @Test(arguments: [
        (apnsToken, apnsToken.lowercased()),
        (fcmToken, fcmToken),
        (endpoint, endpoint),
        ("ABCDEF0123", "ABCDEF0123"),                 // too short for APNs today: kept as sent, still removable
        ("legacy token with spaces", "legacy token with spaces"),
        ("ExponentPushToken[abc]", "ExponentPushToken[abc]"),
    ])
    func tokenIsReturnedNormalised(sent: String, expected: String) throws {
        let token = try RequestValidator.unregister(body: bytes(obj(["push_token": .string(sent)])), policy: allPlatforms, contactID: session)
        #expect(token == expected)
    }

    @Test func matchingContactIsAccepted() throws {
        let body = obj(["push_token": .string(apnsToken), "contact_id": .string(session)])
        #expect(try RequestValidator.unregister(body: bytes(body), policy: allPlatforms, contactID: session) == apnsToken.lowercased())
    }

    @Test func unknownFieldsDropped() throws {
        let body = obj(["push_token": .string(apnsToken), "platform": "ios"])
        #expect(try RequestValidator.unregister(body: bytes(body), policy: dropUnknown, contactID: session) == apnsToken.lowercased())
    }

    static let cases: [Refusal] = [
        Refusal("malformed JSON", raw: "{push_token: 1}", .invalidJSON, nil),
        Refusal("not an object", raw: "\"token\"", .invalidRequest, nil),
        Refusal("push_token missing", obj([:]), .invalidRequest, "push_token"),
        Refusal("push_token null", obj(["push_token": .null]), .invalidRequest, "push_token"),
        Refusal("push_token empty", obj(["push_token": ""]), .invalidRequest, "push_token"),
        Refusal("push_token too long", obj(["push_token": .string(String(repeating: "t", count: 1001))]), .invalidTokenFormat, "push_token"),
        Refusal("push_token control character", obj(["push_token": .string(apnsToken + "\r\n")]), .invalidTokenFormat, "push_token"),
        Refusal("unknown field", obj(["push_token": .string(apnsToken), "platform": "ios"]), .unknownField, "platform"),
        Refusal("contact mismatch", obj(["push_token": .string(apnsToken), "contact_id": "x"]), .contactMismatch, "contact_id"),
        Refusal("contact forbidden", obj(["push_token": .string(apnsToken), "contact_id": .string(session)]), policy: rejectContact,
                .forbidden, "contact_id"),
    ]

    @Test(arguments: cases)
    func refused(_ c: Refusal) {
        c.check(refusal { try RequestValidator.unregister(body: c.body, policy: c.policy, contactID: session) })
    }
}

/// Every code this module can produce, with its contract status.
@Test func everyClientErrorCodeIsReachable() {
    let produced = Set((InstallationRefused.cases + Events.cases + Unregister.cases).map(\.code))
    let expected: Set<ErrorCode> = [
        .invalidJSON, .invalidRequest, .invalidPlatform, .invalidTokenFormat, .tokenPlatformMismatch, .unsupportedTokenType,
        .invalidWebPush, .urlNotPubliclyRoutable, .invalidEvent, .invalidEventType, .unknownField, .contactMismatch, .forbidden,
    ]
    #expect(produced == expected)
    #expect(produced.allSatisfy { $0.status == 400 || $0.status == 403 })
}
