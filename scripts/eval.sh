#!/usr/bin/env bash
# Regenerates the fact-retention evaluation in docs/evaluation.md (eval/results/): builds
# the release binary, creates the test venv on first use, and runs
# eval/run.py over the default 12 seeded threads (3 domains x {480, 2000}
# messages x 2 seeds) and over the held-out generator's 16 threads, at 4:1,
# 10:1, 20:1 and 40:1 for compactd, naive truncation and LangChain's
# trim_messages. Extra arguments go to both run.py calls.
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/venv.sh
cargo build --release --locked --bin compactd
bin="${CARGO_TARGET_DIR:-$PWD/target}/release/compactd"
"$venv/bin/python" eval/run.py --compactd-bin "$bin" "$@"
# The held-out generator (eval/generate_alt.py), into eval/results/alt/.
"$venv/bin/python" eval/run.py --generator alt --compactd-bin "$bin" "$@"
