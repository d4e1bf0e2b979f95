# syntax=docker/dockerfile:1
# Multi-stage: build with the Swift toolchain, run on slim Debian with only the shared libraries.
# The toolchain the tests run with (make test, CI): Swift 6.3.1; the sources are not tried on older ones.
FROM swift:6.3.1-bookworm AS build
# Versions are not pinned (DL3008): Debian's security updates replace a bookworm version in the
# archive, and a pinned build would then fail; the base image's tag fixes the release.
# hadolint ignore=DL3008
RUN apt-get update && apt-get install -y --no-install-recommends \
      pkg-config libmicrohttpd-dev libcurl4-openssl-dev libhiredis-dev libssl-dev libyaml-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Package.swift ./
COPY Sources ./Sources
# Test targets are declared in Package.swift, so their folders must exist for the manifest to load.
COPY Tests ./Tests
RUN swift build -c release --product pushwarden --static-swift-stdlib \
    && install -D "$(swift build -c release --show-bin-path)/pushwarden" /out/pushwarden

FROM debian:bookworm-slim
# Exactly the packages of the shared libraries the binary loads (libstdc++6 for the static Swift
# runtime; glibc is the base image's), and ca-certificates for https upstreams.
# scripts/checks/container.check.sh compares this list with the binary. No curl: the
# HEALTHCHECK is the binary's own. Not pinned, as above (DL3008).
# hadolint ignore=DL3008
RUN apt-get update && apt-get install -y --no-install-recommends \
      libcurl4 libhiredis0.14 libmicrohttpd12 libssl3 libstdc++6 libyaml-0-2 \
      ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin pushwarden
COPY --from=build /out/pushwarden /usr/local/bin/pushwarden
USER 10001:10001
# The policy is mounted read-only: docker run -v ./policies/prod.yaml:/etc/pushwarden/policy.yaml:ro
ENV PUSHWARDEN_POLICY=/etc/pushwarden/policy.yaml \
    PUSHWARDEN_LISTEN=0.0.0.0:8080 \
    PUSHWARDEN_ADMIN=0.0.0.0:9090
EXPOSE 8080 9090
# GET /healthz on PUSHWARDEN_ADMIN (0.0.0.0 is reached on loopback) with a 1.5 s bound: exit 0 on 200, else 1.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 CMD ["/usr/local/bin/pushwarden", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/pushwarden"]
CMD ["serve"]
