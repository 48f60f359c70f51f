# compactd container image, in two stages:
#  1. builder: the Rust toolchain compiles the service crate of the workspace,
#     `--locked` against Cargo.lock;
#  2. runtime: distroless cc (glibc, libgcc, CA certificates; no shell, no
#     package manager) running the binary as the numeric non-root user 65532.
#
#   docker build -t compactd:0.1.0 .
#
# BuildKit (the default builder since Docker 23) is needed for the cache mounts.

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS builder
WORKDIR /src
# The whole workspace (.dockerignore leaves out target/, .git/, .venv/ and
# the like): building one package still reads every member's manifest
# (testkit, plugins/sdk, plugins/examples/*, plugins/testing/misbehave) and
# the bench targets the root manifest declares, and plugins/sdk generates
# its code from proto/.
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p compactd --bin compactd \
    && install -D -m 0555 target/release/compactd /out/compactd

# Same Debian release as the builder, so the glibc the binary was linked
# against is there.
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="compactd" \
      org.opencontainers.image.description="Context compaction service for LLM agent threads" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/compactd /usr/local/bin/compactd
# Numeric, so Kubernetes' runAsNonRoot can verify it without /etc/passwd.
USER 65532:65532
# gRPC API; grpc.health.v1 alone when health_listen is set (the Helm chart does).
EXPOSE 50051 8081
ENTRYPOINT ["/usr/local/bin/compactd"]
CMD ["serve"]
