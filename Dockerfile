# syntax=docker/dockerfile:1
#
# The Oxbow broker as a container image: `docker build -t oxbow .` then
# `docker run -p 9092:9092 -p 8080:8080 -v oxbow-data:/var/lib/oxbow oxbow`.
#
# Two stages: the first compiles only the `oxbow` binary (package oxbow-gateway; the load
# generator and its C librdkafka build are left out), the second is a slim Debian of the same
# release (same glibc) holding that binary, CA certificates for S3 over HTTPS and curl for
# the health check. It runs as an unprivileged user; the WAL, the embedded metadata and the
# local object store live in the /var/lib/oxbow volume (a cluster keeps only its WAL and read
# cache there). Every `oxbow serve` flag reads an OXBOW_* variable: `docker run -e ...`.

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=trixie

FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS build
# cmake: aws-lc-sys (rustls' crypto) may fall back to it. protoc is not needed: the build
# runs the one vendored in a crate (.cargo/config.toml, scripts/protoc).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends cmake \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The caches make a rebuild after a source change incremental; the binary is copied out of
# the cached target dir in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p oxbow-gateway --bin oxbow \
    && install -D -m 0755 target/release/oxbow /out/oxbow

FROM debian:${DEBIAN_RELEASE}-slim AS runtime
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 oxbow \
    && useradd --system --uid 10001 --gid oxbow --home-dir /var/lib/oxbow --shell /usr/sbin/nologin oxbow \
    && install -d -o oxbow -g oxbow -m 0750 /var/lib/oxbow
COPY --from=build /out/oxbow /usr/local/bin/oxbow

# Listen on every interface (the container's network namespace) and tell clients
# `localhost:9092`, right for `docker run -p 9092:9092` with clients on the host; set
# OXBOW_ADVERTISED_KAFKA_ADDR to the address clients use otherwise. In a cluster also set
# OXBOW_METADATA, OXBOW_OBJECT_STORE, OXBOW_AZ, OXBOW_BROKER_ID and OXBOW_INTERNAL_ADDR
# (+ OXBOW_ADVERTISED_INTERNAL_ADDR, OXBOW_INTERNAL_AUTH_SECRET_FILE): see README "Deploy".
ENV OXBOW_DATA_DIR=/var/lib/oxbow \
    OXBOW_KAFKA_ADDR=0.0.0.0:9092 \
    OXBOW_ADVERTISED_KAFKA_ADDR=localhost:9092 \
    OXBOW_HTTP_ADDR=0.0.0.0:8080 \
    OXBOW_LOG_FORMAT=json

USER 10001:10001
WORKDIR /var/lib/oxbow
VOLUME ["/var/lib/oxbow"]
EXPOSE 9092 8080

# Ready = serving its partitions (503 while it waits for WAL replicas or after a disk
# failure, with the reason in the body). The port follows OXBOW_HTTP_ADDR.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD curl -fsS -o /dev/null "http://127.0.0.1:${OXBOW_HTTP_ADDR##*:}/readyz" || exit 1

# SIGTERM hands every partition over and uploads the WAL before exiting 0: give
# `docker stop` time for it (`docker stop -t 120`, Kubernetes terminationGracePeriodSeconds).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/oxbow"]
CMD ["serve"]
