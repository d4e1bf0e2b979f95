import PWCore
import PWPolicy
@testable import PushWarden
import PushWardenTestSupport
import RedisClient
@testable import RedisStores
@testable import Registration
import Testing

/// The record of the highest signed policy version (`PolicySerialRecord`): in Redis, one script
/// that only ever raises it; in the process, the same rules.
@Suite(.serialized) struct PolicySerialTests {
    static func version(_ serial: Int, _ content: String = "a") -> PolicyVersion {
        PolicyVersion(serial: serial, sha256: String(repeating: content, count: 64))
    }

    /// The same sequence of admissions, and what each must answer, for both records.
    static func playTheRules(_ record: any PolicySerialRecord) async throws {
        #expect(try await record.admit(version(5)) == nil, "the first is recorded")
        #expect(try await record.admit(version(5)) == nil, "the same file again")
        #expect(try await record.admit(version(3)) == version(5), "lower: refused, naming the record")
        #expect(try await record.admit(version(5, "b")) == version(5), "same serial, other bytes: refused")
        #expect(try await record.admit(version(6, "b")) == nil, "higher: recorded")
        #expect(try await record.admit(version(5)) == version(6, "b"))
        #expect(try await record.admit(version(Policy.maximumSerial)) == nil)
        #expect(try await record.admit(version(Policy.maximumSerial - 1)) == version(Policy.maximumSerial), "exact near 2^53")
    }

    @Test func theProcessRecord() async throws {
        try await Self.playTheRules(ProcessPolicySerials())
    }

    @Test func theRedisRecordOnlyRises() async throws {
        let server = try RedisServer.start()
        defer { server.stop() }
        let client = RedisClient(configuration: server.configuration())
        defer { client.close() }
        let store = RedisStore(client: client)
        try await Self.playTheRules(store)
        #expect(try await client.send(["HGET", RedisStore.policySerialKey, "serial"]).string == String(Policy.maximumSerial))

        // Many replicas at once: whatever the order, the record ends at the highest.
        _ = try await client.send(["DEL", RedisStore.policySerialKey])
        let serials = Array(1...40).shuffled()
        await withTaskGroup(of: Void.self) { group in
            for serial in serials { group.addTask { _ = try? await store.admit(Self.version(serial)) } }
        }
        #expect(try await client.send(["HGET", RedisStore.policySerialKey, "serial"]).string == "40")
        #expect(try await store.admit(Self.version(39)) == Self.version(40))
    }
}
