#!/usr/bin/env bash
# A short libFuzzer pass over every fuzz target (scripts/fuzz.sh, FUZZ_CHECK_SECONDS per target,
# 20 by default, two targets side by side): fails on any crash, leak, hang or out-of-memory.
# `make fuzz` is the longer run. The sanitized build lives in .build/fuzz, apart from .build/debug.
source "$(dirname "$0")/lib.sh"
# The C libraries the targets link (what scripts/install-deps.sh installs for the build);
# LeakSanitizer and the symbolizer come with the Swift toolchain.
ensure_apt pkg-config libmicrohttpd-dev libcurl4-openssl-dev libhiredis-dev libssl-dev libyaml-dev
cd "$ROOT"
FUZZ_SECONDS=${FUZZ_CHECK_SECONDS:-20} FUZZ_JOBS=${FUZZ_JOBS:-2} FUZZ_TIMEOUT=${FUZZ_TIMEOUT:-10} scripts/fuzz.sh
