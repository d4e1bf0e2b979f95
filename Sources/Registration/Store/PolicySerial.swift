import PWCore
import PWPolicy
import Synchronization

/// A signed policy's place in its series: its `serial` and the SHA-256 of its file's bytes.
///
/// A signature says who approved a file, not when: every file ever signed with the key verifies
/// for ever. The serial orders them. With `serve --policy-key` a policy is put in force only when
/// its serial is above the one in force (a reload) and above the highest the store has seen (a
/// start, or another replica's reload); the same serial is taken again only with the very same
/// bytes, since two different files signed with one serial could otherwise be swapped for each
/// other.
public struct PolicyVersion: Sendable, Equatable {
    public var serial: Int
    /// Lowercase hex.
    public var sha256: String

    public init(serial: Int, sha256: String) {
        self.serial = serial
        self.sha256 = sha256
    }

    /// Against what a new version was judged, for the message.
    package enum Reference {
        case running
        case store
    }

    /// Why `self` may not follow `seen`, or nil when it may.
    package func refusal(after seen: PolicyVersion?, _ reference: Reference) -> String? {
        guard let seen else { return nil }
        let rollBack = "a signed policy is never rolled back (to go back, sign the older content again with a higher serial)"
        let raise = "every signed change needs a higher serial"
        if serial < seen.serial {
            switch reference {
            case .running: return "serial \(serial) is lower than the running policy's serial \(seen.serial): \(rollBack)"
            case .store: return "serial \(serial) is lower than serial \(seen.serial), the highest this store has seen: \(rollBack)"
            }
        }
        if serial == seen.serial && sha256 != seen.sha256 {
            switch reference {
            case .running:
                return "serial \(serial) is the running policy's, but the file differs (sha256 \(sha256), running \(seen.sha256)): \(raise)"
            case .store:
                return "serial \(serial) was seen by this store with other content (sha256 \(seen.sha256), this file \(sha256)): \(raise)"
            }
        }
        return nil
    }
}

/// Where the highest signed policy version put in force is kept: in Redis for every replica
/// sharing it, in the process with the memory store.
package protocol PolicySerialRecord: Sendable {
    /// Raises the record to `version` unless it holds a higher serial, or this serial with other
    /// bytes; in one step, so the record only ever rises.
    /// - Returns: nil when `version` is admitted (recorded, or already the record), else the
    ///   record that refuses it.
    func admit(_ version: PolicyVersion) async throws(StoreError) -> PolicyVersion?
}

/// The record of a process on the memory store: the versions this process put in force.
package final class ProcessPolicySerials: PolicySerialRecord {
    private let highest = Mutex<PolicyVersion?>(nil)

    package init() {}

    package func admit(_ version: PolicyVersion) async throws(StoreError) -> PolicyVersion? {
        highest.withLock { highest -> PolicyVersion? in
            if let seen = highest, version.refusal(after: seen, .store) != nil { return seen }
            highest = version
            return nil
        }
    }
}
