# PushWarden: the two commands a new machine needs are `make run` and `make test`.
SHELL := /bin/bash
export PATH := /opt/swift/usr/bin:$(PATH)

POLICY ?= policies/example.yaml
LISTEN ?= 127.0.0.1:8080
ADMIN ?= 127.0.0.1:9090
CONTACT ?= alice
# The demo app's session secret, generated once per checkout and never committed.
DEV_SECRET_FILE := .dev-session-secret

.PHONY: deps build run token test bench fuzz clean

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

## Runs every test (starts its own redis-server on a free loopback port), then the checks beside
## the Swift tests (scripts/checks/*.check.sh: OpenAPI, manifests, container, fuzzing, ...); the
## soak alone builds the release binary and serves it for about four minutes.
test: deps
	swift build --build-tests
	timeout 1200 swift test --skip-build --no-parallel
	timeout 1800 scripts/checks/run-all.sh

## Benchmarks the release build against nginx, every scenario twice in a row (see BENCHMARKS.md).
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
