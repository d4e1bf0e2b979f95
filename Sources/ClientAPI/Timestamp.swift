import PWCore

/// RFC 3339 `date-time` (the ISO-8601 profile Voyado's `occurred_at` uses), read strictly:
/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`, upper-case `T` and `Z`, one to nine fraction
/// digits, a real calendar date (leap years included), seconds 00...59 (a leap second is not
/// accepted because common upstream parsers refuse it), years 0001...9999.
enum Timestamp {
    static func isValid(_ text: String) -> Bool {
        let b = Array(text.utf8)
        guard b.count >= 20, b.count <= 35 else { return false }

        func number(_ start: Int, _ count: Int) -> Int? {
            guard start + count <= b.count else { return nil }
            var v = 0
            for i in start..<(start + count) {
                guard ByteClass.isDigit(b[i]) else { return nil }
                v = v * 10 + Int(b[i] - 0x30)
            }
            return v
        }
        func byte(_ i: Int, is c: Character) -> Bool { i < b.count && b[i] == c.asciiValue! }

        guard let year = number(0, 4), byte(4, is: "-"), let month = number(5, 2), byte(7, is: "-"),
              let day = number(8, 2), byte(10, is: "T"),
              let hour = number(11, 2), byte(13, is: ":"), let minute = number(14, 2), byte(16, is: ":"),
              let second = number(17, 2) else { return false }
        guard year >= 1, (1...12).contains(month), day >= 1, day <= daysIn(month: month, year: year),
              hour <= 23, minute <= 59, second <= 59 else { return false }

        var i = 19
        if byte(i, is: ".") {
            i += 1
            let start = i
            while i < b.count, ByteClass.isDigit(b[i]) { i += 1 }
            guard (1...9).contains(i - start) else { return false }
        }
        if byte(i, is: "Z") { return i + 1 == b.count }
        guard byte(i, is: "+") || byte(i, is: "-"), i + 6 == b.count,
              let offsetHour = number(i + 1, 2), byte(i + 3, is: ":"), let offsetMinute = number(i + 4, 2) else {
            return false
        }
        return offsetHour <= 23 && offsetMinute <= 59
    }

    static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }
}
