import PWCore
import PWPolicy
import Providers

/// Where the registration operations tell webhook receivers what they did: the event is queued in
/// a task of its own, so no answer waits for it.
extension Registrar {
    func emit(_ type: WebhookPolicy.Event, app: String, contactID: String, token: String, platform: String?,
              upstreams: [(String, String)], reason: String?, requestID: String) {
        guard let outbox, outbox.wantsWebhook(type) else { return }
        let event = WebhookEvent(type: type, app: app, contactID: contactID, token: token, platform: platform, upstreams: upstreams,
                                 reason: reason, requestID: requestID)
        outbox.emitting(event, metrics: metrics, logger: logger)
    }

    /// Whether every event handed over was queued within `millis` (see `Outbox.webhooksSettled`).
    package func webhooksSettled(withinMillis millis: UInt64) async -> Bool {
        guard let outbox else { return true }
        return await outbox.webhooksSettled(withinMillis: millis)
    }

    /// An outbox delivery given up (`dead_lettered`): which one, and why.
    package func emitDeadLettered(_ entry: OutboxEntry, reason: String) {
        guard entry.operation != .webhook else { return }  // a receiver's own dead letters would feed themselves
        emit(.deadLettered, app: entry.app, contactID: entry.contactID, token: Redact.token(entry.pushToken),
             platform: entry.installation?.platform.rawValue, upstreams: [(entry.upstream, "dead_lettered")],
             reason: entry.operation.rawValue + " " + reason, requestID: entry.requestID)
    }

    /// The event of an installation leaving its contact without its device asking.
    static func event(of removal: Removal) -> WebhookPolicy.Event {
        switch removal {
        case .evicted: return .evicted
        case .expired: return .expired
        case .erased: return .erased
        case .dead: return .deadToken
        case .loggedOut: return .loggedOut
        }
    }
}
