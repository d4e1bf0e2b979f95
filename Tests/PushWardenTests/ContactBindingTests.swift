import Foundation
import PWCore
import PushWarden
import PushWardenTestSupport
@testable import RedisStores
@testable import Registration
import SessionAuth
import Testing

/// The contact a request acts for, over real HTTP: the session's contact claim must be a clean
/// id, and a client-sent `contact_id` must be the session's byte for byte.
@Suite struct ContactBindingTests {
    @Test func verifyComparesBytesNotCanonicalEquivalence() async throws {
        let h = try await Harness()
        let precomposed = "ren\u{E9}e", decomposed = "rene\u{301}e"
        #expect(precomposed == decomposed)  // what Swift's String == says
        let cases: [(session: String, sent: String)] = [
            (precomposed, decomposed), (decomposed, precomposed), ("K-42", "\u{212A}-42"), ("\u{212A}-42", "K-42"),
        ]
        for (session, sent) in cases {
            for (route, body) in [
                ("/installations", #"{"platform":"ios","push_token":"\#(Harness.apnsToken())","contact_id":\#(JSONValue.string(sent).encodedString())}"#),
                ("/installations/unregister", #"{"push_token":"\#(Harness.apnsToken())","contact_id":\#(JSONValue.string(sent).encodedString())}"#),
            ] {
                let reply = try await h.post(route, body, contact: session)
                #expect(reply.status == 403, "\(route) \(Array(sent.unicodeScalars)): \(reply.text)")
                #expect(reply.errorCode == "contact_mismatch")
            }
        }
        // The same escapes in the JSON text: e + U+0301 against a precomposed session.
        let escaped = try await h.post("/installations", #"{"platform":"ios","push_token":"\#(Harness.apnsToken())","contact_id":"rene\u0301e"}"#,
                                       contact: precomposed)
        #expect(escaped.errorCode == "contact_mismatch")
        #expect(h.mock.received.isEmpty)

        // Identical bytes are accepted and forwarded with the session's contact.
        for contact in [precomposed, decomposed, "\u{212A}-42"] {
            let body = #"{"platform":"ios","push_token":"\#(Harness.apnsToken())","contact_id":\#(JSONValue.string(contact).encodedString())}"#
            let reply = try await h.post("/installations", body, contact: contact)
            #expect(reply.status == 202, "\(Array(contact.unicodeScalars)): \(reply.text)")
        }
        let forwarded = h.mock.received.compactMap { (try? JSONValue.parse($0.body))?.objectValue?["contact_id"]?.stringValue }
        #expect(forwarded.map { Array($0.utf8) } == [precomposed, decomposed, "\u{212A}-42"].map { Array($0.utf8) })
        await h.stop()
    }

    @Test func sessionContactWithInvisibleCharactersIsUnauthorized() async throws {
        let h = try await Harness()
        let body = #"{"platform":"ios","push_token":"\#(Harness.apnsToken())"}"#
        for contact in ["alice\u{202E}", "\u{200B}alice", "al\u{200D}ice", "\u{FEFF}alice", "a\u{061C}", "a\u{2060}", "  ", ""] {
            let reply = try await h.post("/installations", body, contact: contact)
            #expect(reply.status == 401, "\(Array(contact.unicodeScalars)): \(reply.text)")
            #expect(reply.errorCode == "unauthorized")
        }
        #expect(h.mock.received.isEmpty)
        await h.stop()
    }
    /// A contact claim that is a JSON integer reaches the provider as its decimal text, and a
    /// client-sent `contact_id` must be that text; a float or a boolean is 401.
    @Test func integerContactClaimOverHTTP() async throws {
        let h = try await Harness()
        func token(_ contact: JSONValue) -> String {
            let now = Int(Date().timeIntervalSince1970)
            return JWTMinter.mintHS256(claims: JSONObject([
                JSONMember("contact_id", contact), JSONMember("iss", "https://auth.test"), JSONMember("aud", "test-app"),
                JSONMember("exp", .number(String(now + 600))),
            ]), secret: h.sessionSecret)
        }
        let body = #"{"platform":"ios","push_token":"\#(Harness.apnsToken())","contact_id":"12345"}"#
        let reply = try await h.post("/installations", body, token: token(.number("12345")))
        #expect(reply.status == 202, "\(reply.text)")
        let forwarded = h.mock.received.compactMap { (try? JSONValue.parse($0.body))?.objectValue?["contact_id"]?.stringValue }
        #expect(forwarded == ["12345"])
        let mismatch = try await h.post("/installations", #"{"platform":"ios","push_token":"\#(Harness.apnsToken())","contact_id":"012345"}"#,
                                        token: token(.number("12345")))
        #expect(mismatch.errorCode == "contact_mismatch")
        for refused: JSONValue in [.number("12345.0"), .number("1e5"), .bool(true), .object(JSONObject()), .array([.number("1")])] {
            let reply = try await h.post("/installations", #"{"platform":"ios","push_token":"\#(Harness.apnsToken())"}"#, token: token(refused))
            #expect(reply.status == 401, "\(refused): \(reply.text)")
            #expect(reply.errorCode == "unauthorized")
        }
        await h.stop()
    }
}
