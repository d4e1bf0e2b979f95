import FuzzSupport
import PWCore
import PWPolicy
@testable import ClientAPI

/// The client request bodies (`RequestValidator`): the first byte picks the route (register,
/// unregister, events) and the policy (unknown fields rejected or dropped, `contact_id` verified
/// or rejected); the rest is the body. RequestValidator promises that no input traps or yields
/// anything but a value or a 400/403 `ContractError`; a refusal's `field` and message must stay
/// bounded and printable (they are sent to the client and logged), and its envelope must be JSON.
@_cdecl("fuzz_request_main")
func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv, fuzzOne)
}

let contact = "alice"
let policies: [ClientPolicy] = {
    var out: [ClientPolicy] = []
    for unknown in [ClientPolicy.UnknownFields.reject, .drop] {
        for contactMode in [ClientPolicy.ContactIDMode.verify, .reject] {
            out.append(ClientPolicy(platforms: [.ios, .android, .web], contactID: contactMode, unknownFields: unknown, maxEvents: 8))
        }
    }
    // One app that takes iOS only.
    out.append(ClientPolicy(platforms: [.ios], maxEvents: 8))
    return out
}()

@_cdecl("LLVMFuzzerTestOneInput")
func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = fuzzBytes(data, size)
    guard let selector = input.first else { return 0 }
    let body = Array(input.dropFirst())
    let policy = policies[Int(selector >> 2) % policies.count]
    do throws(ContractError) {
        switch selector & 3 {
        case 0, 3:
            let installation = try RequestValidator.installation(body: body, policy: policy, contactID: contact)
            guard policy.platforms.contains(installation.platform) else { violated("registered a disabled platform") }
            guard !installation.pushToken.isEmpty else { violated("registered an empty push token") }
            if let previous = installation.previousPushToken, previous == installation.pushToken {
                violated("previous_push_token equal to push_token accepted")
            }
            if PushTokenRules.looksLikeURL(installation.pushToken) {
                do throws(ContractError) { try EndpointURL.validate(installation.pushToken, field: "push_token") } catch {
                    violated("registered endpoint \(installation.pushToken) fails the endpoint check: \(error.message)")
                }
                guard installation.webPushKeys != nil else { violated("endpoint registered without web_push_keys") }
            }
        case 1:
            let token = try RequestValidator.unregister(body: body, policy: policy, contactID: contact)
            guard !token.isEmpty else { violated("unregistered an empty token") }
        default:
            let events = try RequestValidator.events(body: body, policy: policy, contactID: contact)
            guard !events.isEmpty, events.count <= policy.maxEvents else { violated("accepted a batch of \(events.count) events") }
        }
    } catch {
        guard error.status == 400 || error.status == 403 else { violated("refused with status \(error.status) (\(error.code))") }
        if let field = error.field {
            guard isPrintable(field), field.unicodeScalars.count <= 100 else { violated("refusal field is not bounded text: \(field)") }
        }
        guard !error.message.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
            violated("refusal message holds a control character")
        }
        guard error.message.unicodeScalars.count <= 400 else { violated("refusal message of \(error.message.unicodeScalars.count) scalars") }
        let envelope = error.envelope(requestID: "fuzz")
        guard (try? JSONValue.parse(envelope))?.objectValue?["error"] != nil else { violated("refusal envelope is not JSON") }
    }
    return 0
}
