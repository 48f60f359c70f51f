#!/usr/bin/env bash
# The long property run: every property test at COMPACTD_PROPTEST_CASES cases
# (default 2000, at least that in CI), built optimized with debug assertions
# on (the `checked` profile, which scripts/test.sh has already built). The
# quick run inside `cargo test` uses each property's own smaller default.
# Prints how many cases reached the Ok path.
set -euo pipefail
cd "$(dirname "$0")/.."
export COMPACTD_PROPTEST_CASES="${COMPACTD_PROPTEST_CASES:-2000}"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if cargo test --locked --profile checked -p compactd \
  --lib --test invariants --test hard_threads --test unicode -- --nocapture >"$log" 2>&1; then
  grep -E '^test result|cases reached|bodies rendered' "$log"
else
  tail -n 200 "$log"
  echo "long property run failed (COMPACTD_PROPTEST_CASES=$COMPACTD_PROPTEST_CASES)" >&2
  exit 1
fi
