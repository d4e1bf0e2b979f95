# PushWarden: the two commands a new machine needs are `make run` and `make test`.
SHELL := /bin/bash
export PATH := /opt/swift/usr/bin:$(PATH)

POLICY ?= policies/example.yaml
LISTEN ?= 127.0.0.1:8080
ADMIN ?= 127.0.0.1:9090
CONTACT ?= alice
# The demo app's session secret, generated once per checkout and never committed.
DEV_SECRET_FILE := .dev-session-secret

.PHONY: deps build run token test sanitize bench fuzz clean

deps:
	@scripts/install-deps.sh

build: deps
	swift build

$(DEV_SECRET_FILE):
	@umask 077; openssl rand -hex 32 > $(DEV_SECRET_FILE)

## Runs the sidecar on the embedded in-memory store with the example policy.
run: build $(DEV_SECRET_FILE)
	PUSHWARDEN_DEMO_SESSION_SECRET=$$(cat $(DEV_SECRET_FILE)) \
	  .build/debug/pushwarden serve --policy $(POLICY) --listen $(LISTEN) --admin $(ADMIN)

## Prints a session token for the demo app (CONTACT=alice by default).
token: $(DEV_SECRET_FILE)
	@swift build -q --product pushwarden >&2
	@PUSHWARDEN_DEMO_SESSION_SECRET=$$(cat $(DEV_SECRET_FILE)) \
	  .build/debug/pushwarden dev-token --policy $(POLICY) --app demo --contact $(CONTACT)

## Runs every test (starts its own redis-server and Redis Cluster on free loopback ports) in the
## debug build, then the suites that touch the store, the outbox, the inventory and registration
## again built as the product is (-O, RELEASE_SUITES), the C wrappers' suites under AddressSanitizer
## (ASAN_SUITES, the half of `make sanitize` that fits the budget), then the checks beside the Swift tests
## (scripts/checks/*.check.sh: the release binary's soak, OpenAPI, manifests, container, ...).
RELEASE_SUITES ?= ConcurrentMapTests|AuditTrailTests|PolicySerialTests|ConcurrentSendTests|PendingWritesTests|StoreSemanticsTests|RegistrationKeysTests|OutboxTests|OutboxProcessTests|OutsideNumbersTests|InventoryTests|InventoryLayoutTests|TouchMemoryTests|RegistrationTests|RegistrarTests|ClusterStoreTests|RateLimitStoreTests|ServerToServerTests|EncryptionAtRestTests|LoopAffinityTests|KeyedDigestTests|CoverageTests|DeadTokenTests|DeadTokenStoreTests|BackchannelLogoutTests|WebhookTests|ImportTests|RoundTripTests
test: deps
	swift build --build-tests
	timeout 1200 swift test --skip-build --no-parallel
	swift build -c release --build-tests -Xswiftc -enable-testing --scratch-path .build/release-tests
	timeout 900 swift test -c release --skip-build --scratch-path .build/release-tests --no-parallel --filter '$(RELEASE_SUITES)'
	SANITIZE_BUILD_SECONDS=900 SANITIZE_TEST_SECONDS=600 scripts/sanitize.sh address '$(ASAN_SUITES)'
	timeout 1200 scripts/checks/run-all.sh

## ThreadSanitizer over the suites with shared state across threads (store, outbox, inventory,
## cluster, the loops, the HTTP edge and server), AddressSanitizer over the wrappers of C libraries;
## each in a scratch path of its own. Every name must be a suite; fails on any report or failed
## suite (see docs/testing.md, "Sanitizers").
TSAN_SUITES ?= ConcurrentMapTests|ConcurrentSendTests|PendingWritesTests|StoreSemanticsTests|RateLimitStoreTests|OutboxTests|OutboxProcessTests|InventoryTests|TouchMemoryTests|RegistrationTests|RegistrarTests|ClusterStoreTests|ClusterClientTests|LoopRedisTests|LoopAffinityTests|ContractTests|EarlyRefusalTests|ServerToServerTests|HTTPServerTests|ConnectionLimitTests|RequestFramingTests
ASAN_SUITES ?= RedisCommandTests|RedisConfigurationTests|RedisAvailabilityTests|ClusterSlotTests|ClusterClientTests|LoopRedisTests|HTTPClientTests|HTTPClientTLSTests|LoopClientTests|HTTPServerTests|RequestFramingTests|ConnectionLimitTests|CryptoPrimitiveTests|KeyTests|AESGCMTests|AcceptedTokenTests|RefusedTokenTests|ConcurrencyTests|YAMLParserTests|PolicyLoaderTests
sanitize: deps
	scripts/sanitize.sh thread '$(TSAN_SUITES)'
	scripts/sanitize.sh address '$(ASAN_SUITES)'

## Benchmarks the release build against nginx, every scenario twice in a row (docs/benchmarks.md summarises the latest run).
RUNS ?= 2
bench:
	@scripts/install-deps.sh --bench
	RUNS=$(RUNS) scripts/bench.sh

## Runs every libFuzzer target (Sources/Fuzz, ASan and LeakSanitizer on) for FUZZ_SECONDS each
## from its seeds in fuzz/corpus/<target>; prints execs/s and coverage; fails on a crash, leak or hang.
FUZZ_SECONDS ?= 60
fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/fuzz.sh

clean:
	rm -rf .build
