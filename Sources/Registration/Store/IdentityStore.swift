import Loops
import PWCore
import Providers

/// Keeps what providers hand back per push token (`UpstreamIdentity`), so the device never has
/// to, under `RegistrationKeys.identity` (a hash of app, upstream and token, like the dedupe entry);
/// values are small JSON objects, each sealed whole by `sealer` (some providers' identities hold
/// the push token itself, and none needs to be readable in the store).
///
/// Identities outlive dedupe entries: a registration unchanged for months must still be
/// removable. A store failure, and a value that cannot be opened (a key this process does not
/// hold, or altered bytes), is logged and treated as "no identity known".
public struct IdentityStore: Sendable {
    let store: any DedupeStore
    let logger: Logger
    let sealer: StoreSealer
    /// Where a write that failed after the upstream handed the identity back waits for the store.
    let pending: PendingWrites?
    /// 400 days: longer than any realistic gap between two app launches.
    public static let ttlSeconds = 400 * 86_400

    public init(store: any DedupeStore, logger: Logger, sealer: StoreSealer = .none, pending: PendingWrites? = nil) {
        self.store = store
        self.logger = logger
        self.sealer = sealer
        self.pending = pending
    }

    /// The identity kept under `keys.identity`, if any. `loop`, as for every operation here: the
    /// request's loop, whose own store connection is used, or nil off the loops.
    /// With `store.digest_key`, an identity a build without it kept (under the unkeyed name) is
    /// read when the keyed name holds none, and moved under the keyed name.
    public func get(_ keys: RegistrationKeys, upstream: String, on loop: EventLoop?) async -> UpstreamIdentity? {
        do {
            var place = keys.identity
            var found = try await store.get(place, on: loop)
            if found == nil, let legacy = keys.legacyIdentity {
                place = legacy
                found = try await store.get(legacy, on: loop)
            }
            guard let stored = found else { return nil }
            guard let raw = sealer.open(stored, boundTo: place) else {
                logger.bounded(.warning, "identity cannot be opened (a store key this process does not hold, or altered); treated as none",
                               key: upstream, [("upstream", upstream)])
                return nil
            }
            guard let object = (try? JSONValue.parse(raw))?.objectValue else { return nil }
            var values: [String: String] = [:]
            for member in object.members {
                if let value = member.value.stringValue { values[member.key] = value }
            }
            let identity = UpstreamIdentity(values)
            if let legacy = keys.legacyIdentity, place == legacy {
                await move(identity, keys, from: legacy, upstream: upstream, on: loop)
            }
            return identity
        } catch {
            logger.bounded(.warning, "identity store unavailable", key: upstream, [("upstream", upstream), ("error", error.detail)])
            return nil
        }
    }

    public func set(_ identity: UpstreamIdentity, _ keys: RegistrationKeys, upstream: String, on loop: EventLoop?) async {
        let object = JSONObject(identity.values.sorted { $0.key < $1.key }.map { JSONMember($0.key, .string($0.value)) })
        let value = sealer.seal(JSONValue.object(object).encodedString(), boundTo: keys.identity)
        let store = store
        await write(keys, upstream: upstream, on: loop) { (loop) async throws(StoreError) in
            try await store.set(keys.identity, value, ttlSeconds: Self.ttlSeconds, on: loop)
        }
    }

    /// Writes an identity found under the unkeyed name under the keyed one, then drops the unkeyed.
    private func move(_ identity: UpstreamIdentity, _ keys: RegistrationKeys, from legacy: String, upstream: String, on loop: EventLoop?) async {
        let object = JSONObject(identity.values.sorted { $0.key < $1.key }.map { JSONMember($0.key, .string($0.value)) })
        let value = sealer.seal(JSONValue.object(object).encodedString(), boundTo: keys.identity)
        let store = store
        await write(keys, upstream: upstream, on: loop) { (loop) async throws(StoreError) in
            try await store.set(keys.identity, value, ttlSeconds: Self.ttlSeconds, on: loop)
            try await store.delete(legacy, on: loop)
        }
    }

    public func delete(_ keys: RegistrationKeys, upstream: String, on loop: EventLoop?) async {
        let store = store
        await write(keys, upstream: upstream, on: loop) { (loop) async throws(StoreError) in
            try await store.delete(keys.identity, on: loop)
            if let legacy = keys.legacyIdentity { try await store.delete(legacy, on: loop) }
        }
    }

    /// A write after the upstream answered: on failure it waits in `pending` (the newest write per
    /// key wins) instead of being lost.
    private func write(_ keys: RegistrationKeys, upstream: String, on loop: EventLoop?,
                       _ body: @escaping @Sendable (EventLoop?) async throws(StoreError) -> Void) async {
        pending?.cancel(keys.identity)
        do {
            try await body(loop)
        } catch {
            guard let pending else {
                logger.bounded(.warning, "identity store unavailable; identity not kept", key: upstream, [("upstream", upstream), ("error", error.detail)])
                return
            }
            pending.add(.identity, key: keys.identity, error: error) { () async throws(StoreError) in try await body(nil) }
        }
    }
}
