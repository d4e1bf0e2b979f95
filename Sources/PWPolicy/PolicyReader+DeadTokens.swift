import PWCore
import YAMLKit

/// The mass-death guard of dead-token reports (`apps.<id>.dead_tokens`): how many removals one
/// minute of reports may make before further ones are held for an operator.
public struct DeadTokenPolicy: Sendable, Equatable {
    /// Removals within a minute that never trip the guard, whatever the share (`min_count`).
    public var minCount: Int
    /// The share of the app's installations one minute of reports may remove, in hundredths of a
    /// percent (`max_share: 5%` is 500).
    public var maxShareBasisPoints: Int

    public init(minCount: Int = 100, maxShareBasisPoints: Int = 500) {
        self.minCount = minCount
        self.maxShareBasisPoints = maxShareBasisPoints
    }

    /// How many removals one minute may make for an app of `installations`: more than both the
    /// share and `min_count` trips the guard.
    public func removalLimit(installations: Int) -> Int {
        // Below 2^62 the product converts back to Int exactly enough, whatever count the store gave.
        let share = Int(min(Double(max(0, installations)) * Double(maxShareBasisPoints) / 10_000, 0x1p62).rounded(.down))
        return max(minCount, share)
    }

    /// `5%`, `0.5%`, `12.25%`.
    public var maxShareText: String { Self.percentText(basisPoints: maxShareBasisPoints) }

    public static func percentText(basisPoints: Int) -> String {
        let whole = basisPoints / 100, fraction = basisPoints % 100
        guard fraction != 0 else { return "\(whole)%" }
        let digits = fraction % 10 == 0 ? String(fraction / 10) : (fraction < 10 ? "0" : "") + String(fraction)
        return "\(whole).\(digits)%"
    }

    /// A percentage as the policy writes it (`5%`, `0.5%`, two decimals at most) in hundredths of
    /// a percent; nil for anything else.
    public static func basisPoints(_ text: String) -> Int? {
        guard text.hasSuffix("%") else { return nil }
        let number = text.dropLast()
        let parts = number.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        guard let wholeText = parts.first, !wholeText.isEmpty, wholeText.utf8.count <= 3,
              wholeText.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let whole = Int(wholeText) else { return nil }
        var fraction = 0
        if parts.count == 2 {
            let digits = parts[1]
            guard (1...2).contains(digits.utf8.count), digits.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                  let value = Int(digits) else { return nil }
            fraction = digits.utf8.count == 1 ? value * 10 : value
        }
        return whole * 100 + fraction
    }
}

extension PolicyReader {
    func deadTokens(_ node: YAMLNode, _ path: String) -> DeadTokenPolicy? {
        let fields = Fields(checker, node, path, allowed: ["min_count", "max_share"])
        guard fields.isMapping else { return nil }
        var policy = DeadTokenPolicy()
        var ok = true
        if let value = fields["min_count"] {
            if let count = checker.int(value, fields.at("min_count"), in: 0...100_000_000) { policy.minCount = count } else { ok = false }
        }
        if let value = fields["max_share"] {
            let at = fields.at("max_share")
            if case .scalar(let text, _) = value.kind, !value.isNull, let points = DeadTokenPolicy.basisPoints(text) {
                if (1...10_000).contains(points) {
                    policy.maxShareBasisPoints = points
                } else {
                    checker.report(value.mark, at, "must be between 0.01% and 100%, found \(text)")
                    ok = false
                }
            } else if case .scalar(let text, .plain) = value.kind, Double(text) != nil {
                checker.report(value.mark, at, "expected a percentage like 5% or 0.5%, found a number without %")
                ok = false
            } else {
                checker.report(value.mark, at, "expected a percentage like 5% or 0.5%, found \(Checker.describe(value))")
                ok = false
            }
        }
        return ok ? policy : nil
    }
}
