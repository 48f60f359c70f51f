#!/usr/bin/env bash
# Headless Chromium for tests/python/test_inspect_html.py (the `compactd
# inspect --html` page, rendered and screenshotted): Debian's `chromium`
# package, installed when `chromium` is not on PATH. Uses sudo only when not
# already root. Does nothing when chromium is already there.
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "chromium.sh: chromium is missing and installing it needs root (no sudo found)" >&2
  exit 1
fi

${as_root[@]+"${as_root[@]}"} apt-get update
${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y --no-install-recommends chromium

command -v chromium >/dev/null 2>&1 || {
  echo "chromium.sh: apt-get installed chromium but it is not on PATH" >&2
  exit 1
}
chromium --version
