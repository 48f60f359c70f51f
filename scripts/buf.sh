#!/usr/bin/env bash
# The protocol's hygiene: `buf lint` (STANDARD rules) and `buf breaking` (wire
# compatibility) against the last release's protos (the API and the plugin
# ABI), kept in .ci/proto-<release>/ so a shallow clone needs no tags (each
# is `git show <tag>:proto/<path>` of the release tag).
# buf comes from PyPI (buf-bin) in the test venv.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
release=v0.1.0
"$venv/bin/buf" lint
"$venv/bin/buf" breaking --against ".ci/proto-$release"
echo "buf: lint clean; no wire-breaking change since $release"
