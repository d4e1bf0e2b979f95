import PWCore
import PWCrypto
import PWPolicy

/// The contact id a session names, by the rules every session type shares, and how refusals
/// quote what a client sent.
extension SessionVerifier {
    /// The contact id in `value` (a JWT claim, or a member of an introspection answer) by the
    /// rules every session type shares: `contactText`, then not empty, at most
    /// `maxContactIDLength` characters, no control or invisible formatting character, not only
    /// white space. `label` starts the refusal's reason ("contact claim sub").
    public static func contactID(_ value: JSONValue, named label: String) -> Result<String, AuthFailure> {
        func fail(_ reason: String) -> Result<String, AuthFailure> { .failure(AuthFailure(reason)) }
        let contact: String
        switch contactText(value) {
        case .success(let text): contact = text
        case .failure(let failure): return .failure(AuthFailure("\(label) \(failure.reason)", kind: "\(label) \(failure.kind)"))
        }
        guard !contact.isEmpty else { return fail("\(label) is empty") }
        // A scalar is at least one byte, so only an id of more bytes than the limit needs counting.
        let bytes = contact.utf8.count
        let length = bytes <= maxContactIDLength ? bytes : contact.unicodeScalars.count
        guard length <= maxContactIDLength else {
            return fail("\(label) is longer than \(maxContactIDLength) characters")
        }
        // The rule client fields obey (TextRules): whatever vouched for the session, the contact id
        // is forwarded, logged and shown on provider dashboards as it is.
        if let scalar = TextRules.firstForbidden(in: contact) {
            return fail("\(label) contains a control or invisible formatting character (\(TextRules.codePoint(scalar)))")
        }
        guard !TextRules.isBlank(contact) else { return fail("\(label) is only white space") }
        return .success(contact)
    }

    /// A contact claim's text: a string as it is, or a JSON integer (identity providers that key
    /// users by a database id send `"sub": 12345`) as its decimal digits exactly as written, when
    /// the text is the canonical decimal of a 64-bit signed integer (no fraction, exponent, `-0`
    /// or value beyond `Int64`), so two spellings never name the same contact. Anything else
    /// (a float, a boolean, null, an object, an array) is refused. `reason` completes
    /// "contact claim NAME ...".
    static func contactText(_ value: JSONValue) -> Result<String, AuthFailure> {
        switch value {
        case .string(let text):
            return .success(text)
        case .number(let text):
            guard let integer = Int64(text), String(integer) == text else {
                return .failure(AuthFailure("is a number that is not an integer within 64 bits (\(echo(text)))",
                                            kind: "is a number that is not an integer within 64 bits"))
            }
            return .success(text)
        default:
            return .failure(AuthFailure("is \(value.typeName), not a string or an integer"))
        }
    }

    /// A value the client chose (a `kid`, an `alg`, a claim), as a reason shows it: `sha256:` and
    /// the first 8 hex digits of its SHA-256. A client may put anything there, a provider key or
    /// bidirectional controls included, and no clip or character filter tells a key from a name;
    /// an operator compares with `printf %s VALUE | sha256sum`.
    public static func echo(_ value: String) -> String {
        "sha256:" + String(SHA256.hexHash(Array(value.utf8)).prefix(8))
    }

    /// The JOSE algorithm names (RFC 7518, RFC 8037): an `alg` among them is shown as it is.
    static let joseAlgorithms: Set<String> = [
        "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512", "EdDSA",
    ]

    /// A value of our own key set, shortened for a log line.
    static func clip(_ text: String) -> String {
        text.unicodeScalars.count <= 40 ? text : String(String.UnicodeScalarView(text.unicodeScalars.prefix(40))) + "…"
    }
}
