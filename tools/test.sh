#!/usr/bin/env bash
# Builds trainscope and runs the whole test suite (unit and whole-system tests), then builds the
# release configuration a packager uses and runs the whole-system tests against it, so a build
# type that breaks (GCC 12 warns differently at -O3) cannot land. Installs missing Debian
# packages first. CI runs exactly this (.ci/run).
# Usage: tools/test.sh [extra meson test args for the main suite]
set -euo pipefail
cd "$(dirname "$0")/.."
tools/dev/deps.sh test

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0

# stage NAME BUILD_DIR BUILDTYPE [meson test args...]: configure (once), build, test.
stage() {
  local name=$1 dir=$2 type=$3
  shift 3
  echo "== $name: $dir (buildtype=$type)"
  if [[ ! -f $dir/build.ninja ]]; then
    meson setup "$dir" --buildtype="$type" >/dev/null
  fi
  ninja -C "$dir"
  meson test -C "$dir" --print-errorlogs --num-processes 2 "$@" 2>&1 | tee -a "$log" || status=1
}

stage "test build, whole suite" build debugoptimized "$@"
stage "release build, whole-system tests" build-release release --suite e2e

# One closing line in the plain form CI readers understand, summed over the stages.
count() { awk -v k="$1" '$1 == k":" {s += $2} END {print s + 0}' "$log"; }
echo "tests: $(count Ok) passed, $(( $(count Fail) + $(count Timeout) )) failed, $(count Skipped) skipped"
exit "$status"
