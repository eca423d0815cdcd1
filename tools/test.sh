#!/usr/bin/env bash
# Builds trainscope and runs the whole test suite (unit and whole-system tests).
# Installs missing Debian packages first. Usage: tools/test.sh [extra meson test args]
set -euo pipefail
cd "$(dirname "$0")/.."
tools/dev/deps.sh test
if [[ ! -f build/build.ninja ]]; then
  meson setup build --buildtype=debugoptimized >/dev/null
fi
ninja -C build
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
meson test -C build --print-errorlogs --num-processes 2 "$@" 2>&1 | tee "$log" || status=$?
# One closing line in the plain form CI readers understand.
count() { awk -v k="$1" '$1 == k":" {print $2}' "$log" | tail -n1; }
echo "tests: $(( $(count Ok) + 0 )) passed, $(( $(count Fail) + $(count Timeout) + 0 )) failed, $(( $(count Skipped) + 0 )) skipped"
exit "$status"
