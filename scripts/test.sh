#!/usr/bin/env bash
# The whole test suite, on a fresh machine with only the Rust toolchain,
# Python 3.11 with pip, and gcc: formatting, lints, every Rust test (unit,
# property, golden, CLI, gRPC integration), the long property run, a minute
# of fuzzing, then the Python tests (grpcio-tools client and SDK payload
# checks) against the real binary. Creates .venv on first use.
set -euo pipefail
cd "$(dirname "$0")/.."

# Where the time goes, one line per step: CI must stay well inside its limit,
# and whoever adds a long test should see what it costs.
last=$SECONDS
took() {
  echo "time: $1 $((SECONDS - last)) s (total $SECONDS s)"
  last=$SECONDS
}

source scripts/venv.sh
# The S3/KMS tests (tests/server_s3.rs) start moto from this venv.
export COMPACTD_MOTO_SERVER="$(cd "$venv" && pwd)/bin/moto_server"
took venv

cargo fmt --all -- --check
took fmt
# The protocol: buf lint, and no wire-breaking change since the last release.
./scripts/buf.sh
took buf
cargo clippy --locked --workspace --all-targets -- -D warnings
took clippy
# Every Rust test (unit, property at each one's default cases, golden, CLI,
# gRPC integration), built once in the `checked` profile (optimized, with
# debug assertions and overflow checks) that the next two steps reuse.
cargo test --locked --workspace --profile checked
took cargo-test
# Every property again at 2,000 cases, optimized.
./scripts/proptest-long.sh
took proptest-long
# The fuzz harness for 60 seconds, optimized, and the crash corpus.
./scripts/fuzz.sh
took fuzz
# The Python tests drive the binary that `cargo test` just built.
./scripts/chromium.sh
took chromium
COMPACTD_BIN="${CARGO_TARGET_DIR:-$PWD/target}/checked/compactd" "$venv/bin/python" -m pytest -q tests/python
took python
