import Foundation
import Loops
import PushWarden
import PushWardenTestSupport
import RedisClient
@testable import RedisStores
@testable import Registration
import Testing

/// The dedupe store's operations behave the same in memory and in Redis.
@Suite struct StoreSemanticsTests {
    enum Kind: String, CaseIterable, Sendable { case memory, redis }

    static func store(_ kind: Kind) throws -> any DedupeStore {
        switch kind {
        case .memory: return MemoryStore()
        case .redis: return RedisStore(client: RedisClient(configuration: try RedisConfiguration(url: RedisServer.shared.url)))
        }
    }

    static func keys() -> (entry: String, lock: String) {
        let id = UUID().uuidString
        return ("test:entry:\(id)", "test:lock:\(id)")
    }

    @Test(arguments: Kind.allCases)
    func checkAndLockThenCommit(_ kind: Kind) async throws {
        let store = try Self.store(kind)
        let (entry, lock) = Self.keys()
        #expect(try await store.checkAndLock(entry: entry, fingerprint: "f1", lock: lock, owner: "a", ttlMillis: 5000, on: nil) == .acquired)
        #expect(try await store.checkAndLock(entry: entry, fingerprint: "f1", lock: lock, owner: "b", ttlMillis: 5000, on: nil) == .busy)
        try await store.commitAndUnlock(entry: entry, fingerprint: "f1", ttlSeconds: 60, lock: lock, owner: "a", on: nil)
        #expect(try await store.get(entry, on: nil) == "f1")
        #expect(try await store.checkAndLock(entry: entry, fingerprint: "f1", lock: lock, owner: "b", ttlMillis: 5000, on: nil) == .current)
        // Another fingerprint (a contact change) takes the now free lock.
        #expect(try await store.checkAndLock(entry: entry, fingerprint: "f2", lock: lock, owner: "b", ttlMillis: 5000, on: nil) == .acquired)
    }

    /// The same sequence from a task on an event loop, where Redis commands go over the loop's
    /// own connection and the lock and the lookup share one round trip.
    @Test func checkAndLockFromALoop() async throws {
        let loop = try EventLoop(name: "test-store")
        try loop.start()
        defer { loop.stop() }
        let store = try Self.store(.redis)
        let (entry, lock) = Self.keys()
        let outcomes = try await Task(executorPreference: loop) { () throws -> [LockAttempt] in
            var seen: [LockAttempt] = []
            seen.append(try await store.checkAndLock(entry: entry, fingerprint: "f1", lock: lock, owner: "a", ttlMillis: 5000, on: loop))
            seen.append(try await store.checkAndLock(entry: entry, fingerprint: "f1", lock: lock, owner: "b", ttlMillis: 5000, on: loop))
            try await store.commitAndUnlock(entry: entry, fingerprint: "f1", ttlSeconds: 60, lock: lock, owner: "a", on: loop)
            seen.append(try await store.checkAndLock(entry: entry, fingerprint: "f1", lock: lock, owner: "b", ttlMillis: 5000, on: loop))
            // `.current` gave back the lock it took on the way: another fingerprint gets it.
            seen.append(try await store.checkAndLock(entry: entry, fingerprint: "f2", lock: lock, owner: "c", ttlMillis: 5000, on: loop))
            return seen
        }.value
        #expect(outcomes == [.acquired, .busy, .current, .acquired])
        #expect(try await store.get(lock, on: nil) != nil, "c holds the lock")
    }

    /// Scripts run by their SHA-1; a Redis that forgot them (restart, SCRIPT FLUSH) gets the
    /// source again instead of an error.
    @Test func scriptsSurviveARedisThatForgotThem() async throws {
        let client = RedisClient(configuration: try RedisConfiguration(url: RedisServer.shared.url))
        let store = RedisStore(client: client)
        let (entry, lock) = Self.keys()
        #expect(try await store.checkAndLock(entry: entry, fingerprint: "f", lock: lock, owner: "a", ttlMillis: 5000, on: nil) == .acquired)
        #expect(try await client.send(["SCRIPT", "FLUSH"]) == .status("OK"))
        try await store.commitAndUnlock(entry: entry, fingerprint: "f", ttlSeconds: 60, lock: lock, owner: "a", on: nil)
        #expect(try await store.checkAndLock(entry: entry, fingerprint: "f", lock: lock, owner: "b", ttlMillis: 5000, on: nil) == .current)
    }

    @Test(arguments: Kind.allCases)
    func commitLeavesAnotherOwnersLock(_ kind: Kind) async throws {
        let store = try Self.store(kind)
        let (entry, lock) = Self.keys()
        #expect(try await store.checkAndLock(entry: entry, fingerprint: "f", lock: lock, owner: "b", ttlMillis: 5000, on: nil) == .acquired)
        // A holder whose lock expired and was taken over must not free the new holder's lock.
        try await store.commitAndUnlock(entry: entry, fingerprint: "f", ttlSeconds: 60, lock: lock, owner: "a", on: nil)
        #expect(try await store.checkAndLock(entry: entry, fingerprint: "g", lock: lock, owner: "c", ttlMillis: 5000, on: nil) == .busy)
        try await store.release(lock, owner: "b", on: nil)
        #expect(try await store.checkAndLock(entry: entry, fingerprint: "g", lock: lock, owner: "c", ttlMillis: 5000, on: nil) == .acquired)
    }

    @Test(arguments: Kind.allCases)
    func entriesAndLocksExpire(_ kind: Kind) async throws {
        let store = try Self.store(kind)
        let (entry, lock) = Self.keys()
        #expect(try await store.checkAndLock(entry: entry, fingerprint: "f", lock: lock, owner: "a", ttlMillis: 200, on: nil) == .acquired)
        try await store.set(entry, "f", ttlSeconds: 1, on: nil)
        #expect(try await store.get(entry, on: nil) == "f")
        try await Task.sleep(for: .milliseconds(1300))
        #expect(try await store.get(entry, on: nil) == nil)
        #expect(try await store.checkAndLock(entry: entry, fingerprint: "f", lock: lock, owner: "b", ttlMillis: 200, on: nil) == .acquired)
    }

    @Test(arguments: Kind.allCases)
    func deleteForgets(_ kind: Kind) async throws {
        let store = try Self.store(kind)
        let (entry, _) = Self.keys()
        try await store.set(entry, "f", ttlSeconds: 60, on: nil)
        try await store.delete(entry, on: nil)
        #expect(try await store.get(entry, on: nil) == nil)
    }
}
