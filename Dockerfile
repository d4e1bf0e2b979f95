# syntax=docker/dockerfile:1
# Multi-stage: build with the Swift toolchain, run on slim Debian with only the shared libraries.
FROM swift:6.0-bookworm AS build
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
RUN apt-get update && apt-get install -y --no-install-recommends \
      libmicrohttpd12 libcurl4 libhiredis0.14 libssl3 libyaml-0-2 ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin pushwarden
COPY --from=build /out/pushwarden /usr/local/bin/pushwarden
USER 10001:10001
# The policy is mounted read-only: docker run -v ./policies/prod.yaml:/etc/pushwarden/policy.yaml:ro
ENV PUSHWARDEN_POLICY=/etc/pushwarden/policy.yaml \
    PUSHWARDEN_LISTEN=0.0.0.0:8080 \
    PUSHWARDEN_ADMIN=0.0.0.0:9090
EXPOSE 8080 9090
HEALTHCHECK --interval=10s --timeout=2s --retries=3 CMD curl -fsS http://127.0.0.1:9090/healthz || exit 1
ENTRYPOINT ["/usr/local/bin/pushwarden"]
CMD ["serve"]
