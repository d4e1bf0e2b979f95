import PWCore
import PWPolicy

/// The shape rules for push tokens, per push service. Refusal messages describe the expected shape
/// and never contain the token.
package enum PushTokenRules {
    static let apnsMinLength = 64
    static let apnsMaxLength = 200
    static let fcmMinLength = 32
    static let fcmMaxLength = 400

    /// The services whose token is an endpoint URL; the others take an opaque provider token.
    static func takesURL(_ service: PushService) -> Bool {
        service == .webPush || service == .unifiedPush
    }

    /// The native services that also come in a Web Push form: an endpoint URL with keys, delivered
    /// over that vendor's transport (Fluxer registers `android_fcm`, `ios_apns` and `ios_apns_voip`
    /// this way). Providers that only take the vendor's raw token skip the URL form.
    static func carriesWebPush(_ service: PushService) -> Bool {
        service == .apns || service == .apnsVoip || service == .fcm
    }

    /// The platform → push service pairs a device can actually hold.
    static func allowed(_ service: PushService, on platform: Platform) -> Bool {
        switch platform {
        // iOS apps built on Firebase hold an FCM token too (PushNotice relays iOS through FCM).
        case .ios: return service == .apns || service == .apnsVoip || service == .fcm
        case .android: return service == .fcm || service == .unifiedPush
        case .web: return service == .webPush
        }
    }

    static func defaultService(for platform: Platform) -> PushService {
        switch platform {
        case .ios: return .apns
        case .android: return .fcm
        case .web: return .webPush
        }
    }

    /// Expo's own tokens (`ExponentPushToken[...]`, `ExpoPushToken[...]`) only work through Expo's
    /// push service, which PushWarden does not talk to.
    static func isExpoToken(_ token: String) -> Bool {
        // Most tokens fail the byte check; only a byte match pays for the character-level answer.
        guard Text.hasASCIIPrefixIgnoringCase(token, "exponentpushtoken[") || Text.hasASCIIPrefixIgnoringCase(token, "expopushtoken[") else {
            return false
        }
        let lower = Text.asciiLowercased(String(token.prefix(20)))
        return lower.hasPrefix("exponentpushtoken[") || lower.hasPrefix("expopushtoken[")
    }

    /// `https://...`, `http:...` or anything with a `scheme://`: no provider token looks like this.
    package static func looksLikeURL(_ token: String) -> Bool {
        guard Text.hasASCIIPrefixIgnoringCase(token, "http:") || Text.hasASCIIPrefixIgnoringCase(token, "https:") else {
            return containsSchemeSeparator(token)
        }
        let lower = Text.asciiLowercased(String(token.prefix(8)))
        return lower.hasPrefix("https:") || lower.hasPrefix("http:") || containsSchemeSeparator(token)
    }

    /// Whether `://` occurs, by a byte scan (the generic substring search is slow on the hot path).
    static func containsSchemeSeparator(_ token: String) -> Bool {
        var token = token
        return token.withUTF8 { b in
            var i = 2
            while i < b.count {
                if b[i] == UInt8(ascii: "/"), b[i - 1] == UInt8(ascii: "/"), b[i - 2] == UInt8(ascii: ":") { return true }
                i += 1
            }
            return false
        }
    }

    /// An FCM registration token's alphabet (base64url plus `:` and `.`).
    static func isFCMCharacter(_ b: UInt8) -> Bool {
        ByteClass.isAlphanumeric(b) || b == UInt8(ascii: "_") || b == UInt8(ascii: "-") || b == UInt8(ascii: ":") || b == UInt8(ascii: ".")
    }

    /// Even-length hex of 64 to 200 characters: what every APNs device token looks like.
    static func looksLikeAPNs(_ token: String) -> Bool {
        token.utf8.count <= apnsMaxLength && isAPNsShaped(token)
    }

    /// Even-length hex of at least 64 characters, however long: the loose rule for a token
    /// issued under older limits (an unregister).
    package static func isAPNsShaped(_ token: String) -> Bool {
        let n = token.utf8.count
        return n >= apnsMinLength && n % 2 == 0 && Text.all(token, in: Text.isHexDigit)
    }

    /// Validates a registration token for `service` and returns it normalised.
    ///
    /// - Throws: `invalid_request` (empty), `unsupported_token_type` (Expo), `token_platform_mismatch`
    ///   (a URL for a token service or the reverse), `invalid_token_format`, `invalid_web_push`,
    ///   `url_not_publicly_routable`.
    static func validate(_ token: String, service: PushService, platform: Platform, field: String) throws(ContractError) -> String {
        guard !token.isEmpty else { throw ContractError(.invalidRequest, "\(field) must not be empty", field: field) }
        if isExpoToken(token) {
            throw ContractError(.unsupportedTokenType,
                                "Expo push tokens are not supported; send the device's native APNs or FCM token (getDevicePushTokenAsync)",
                                field: field)
        }
        let isURL = looksLikeURL(token)
        if takesURL(service) || (isURL && carriesWebPush(service)) {
            guard isURL else {
                throw ContractError(.tokenPlatformMismatch,
                                    "push_service \(service.rawValue) expects the subscription's endpoint URL in \(field)",
                                    field: field)
            }
            try EndpointURL.validate(token, field: field)
            return token
        }
        guard !TextRules.hasForbiddenCharacter(token) else {
            throw ContractError(.invalidTokenFormat, "\(field) contains control characters", field: field)
        }
        guard !isURL else {
            throw ContractError(.tokenPlatformMismatch,
                                "\(field) is an endpoint URL, but push_service \(service.rawValue) on platform \(platform.rawValue) expects a device token",
                                field: field)
        }
        switch service {
        case .apns, .apnsVoip:
            let n = token.utf8.count
            guard Text.all(token, in: Text.isHexDigit) else {
                if Text.all(token, in: isFCMCharacter), token.contains(":") {
                    throw ContractError(.tokenPlatformMismatch,
                                        "\(field) looks like an FCM registration token, but push_service \(service.rawValue) expects an APNs device token",
                                        field: field)
                }
                throw ContractError(.invalidTokenFormat,
                                    "\(field) must be the APNs device token as hex digits (no spaces or brackets)", field: field)
            }
            guard n >= apnsMinLength, n <= apnsMaxLength, n % 2 == 0 else {
                throw ContractError(.invalidTokenFormat,
                                    "\(field) must be an even number of hex digits, \(apnsMinLength) to \(apnsMaxLength) long", field: field)
            }
            return Text.asciiLowercased(token)
        case .fcm:
            let n = token.utf8.count
            guard n >= fcmMinLength, n <= fcmMaxLength else {
                throw ContractError(.invalidTokenFormat,
                                    "\(field) must be an FCM registration token of \(fcmMinLength) to \(fcmMaxLength) characters", field: field)
            }
            guard Text.all(token, in: isFCMCharacter) else {
                throw ContractError(.invalidTokenFormat,
                                    "\(field) may only contain letters, digits and - _ : . (an FCM registration token)", field: field)
            }
            return token
        case .webPush, .unifiedPush:
            return token  // handled above
        }
    }

    /// The loose rule for unregister: a token issued under older validation rules must still be
    /// removable, so only the basics are checked. APNs-looking hex is lower-cased so it matches the
    /// form it was registered in.
    static func validateForRemoval(_ token: String, field: String) throws(ContractError) -> String {
        guard !token.isEmpty else { throw ContractError(.invalidRequest, "\(field) must not be empty", field: field) }
        guard token.utf8.count <= EndpointURL.maxLength else {
            throw ContractError(.invalidTokenFormat, "\(field) must be at most \(EndpointURL.maxLength) characters", field: field)
        }
        guard !TextRules.hasForbiddenCharacter(token) else {
            throw ContractError(.invalidTokenFormat, "\(field) contains control characters", field: field)
        }
        return looksLikeAPNs(token) ? Text.asciiLowercased(token) : token
    }
}
