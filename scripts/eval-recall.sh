#!/usr/bin/env bash
# Regenerates the recall evaluation in docs/evaluation.md (eval/results/recall/): builds
# the release binary, creates the test venv on first use, and runs
# eval/recall.py over 14 threads of both generators at 10:1 and 30:1 for
# compactd (with and without its recall block), keep-the-newest truncation,
# LangChain's trim_messages and observation masking. Extra arguments go to
# recall.py (e.g. --quick).
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/venv.sh
cargo build --release --locked --bin compactd
bin="${CARGO_TARGET_DIR:-$PWD/target}/release/compactd"
"$venv/bin/python" eval/recall.py --compactd-bin "$bin" "$@"
