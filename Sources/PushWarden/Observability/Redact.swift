import PWCrypto

/// How sensitive values appear in logs: never in full.
public enum Redact {
    /// A push token or session token as a short, stable hash (`tok:3f2a9c1b`), enough to
    /// correlate log lines without revealing the value.
    public static func token(_ value: String) -> String {
        "tok:" + String(SHA256.hexHash(Array(value.utf8)).prefix(8))
    }

    /// A contact id is personal data but not a credential; logs carry a hash of it too.
    public static func contact(_ value: String) -> String {
        "ct:" + String(SHA256.hexHash(Array(value.utf8)).prefix(8))
    }
}
