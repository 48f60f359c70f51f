#!/usr/bin/env bash
# The fuzz harness (tests/fuzz.rs) for COMPACTD_FUZZ_SECONDS (default 60),
# built like the long property run (the `checked` profile: optimized, with
# debug assertions and overflow checks, so an overflow is a finding too).
# The crash corpus (tests/fuzz_corpus/) is replayed alongside. A finding is
# written, with a shrunk copy, under $CARGO_TARGET_DIR/tmp/fuzz-crashes (or
# COMPACTD_FUZZ_CRASH_DIR) and fails the run; COMPACTD_FUZZ_SEED repeats a
# run. Prints how many inputs ran and how many bodies were checked.
set -euo pipefail
cd "$(dirname "$0")/.."
export COMPACTD_FUZZ_SECONDS="${COMPACTD_FUZZ_SECONDS:-60}"
export COMPACTD_FUZZ_HANG_SECONDS="${COMPACTD_FUZZ_HANG_SECONDS:-30}"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if cargo test --locked --profile checked -p compactd --test fuzz -- --nocapture >"$log" 2>&1; then
  grep -E '^fuzz|^test result' "$log"
else
  tail -n 100 "$log"
  echo "fuzz run failed (COMPACTD_FUZZ_SECONDS=$COMPACTD_FUZZ_SECONDS)" >&2
  exit 1
fi
