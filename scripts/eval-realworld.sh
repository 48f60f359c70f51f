#!/usr/bin/env bash
# Regenerates the real-log table (eval/results/realworld/): builds the release
# binary, creates the test venv on first use (as scripts/eval.sh does), and
# runs eval/realworld.py over tests/data/*.json and ../shared/realworld/*.json
# (when present) at 1/4, 1/10 and 1/40 of each log (never below 8,000 tokens),
# in the openai, anthropic and responses formats, next to keep-the-newest
# truncation, LangChain trim_messages and observation masking. A compactd
# failure is a row of the table, not a failure of this script. Extra arguments
# go to realworld.py (e.g. --logs DIR, --formats openai, --timeout 120).
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/venv.sh
cargo build --release --locked --bin compactd
bin="${CARGO_TARGET_DIR:-$PWD/target}/release/compactd"
"$venv/bin/python" eval/realworld.py --compactd-bin "$bin" "$@"
