import PWCrypto

/// How sensitive values appear in logs: never in full.
public enum Redact {
    /// A push token or session token as a short, stable hash (`tok:3f2a9c1b`), enough to
    /// correlate log lines without revealing the value.
    public static func token(_ value: String) -> String {
        "tok:" + shortHash(value)
    }

    /// A contact id is personal data but not a credential; logs carry a hash of it too.
    public static func contact(_ value: String) -> String {
        "ct:" + shortHash(value)
    }

    /// The first 8 hex digits of the value's SHA-256: the short hash behind every redacted form.
    public static func shortHash(_ value: String) -> String {
        String(SHA256.hexHash(Array(value.utf8)).prefix(8))
    }
}
