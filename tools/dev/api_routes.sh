#!/bin/sh
# Rewrites docs/API.md's route table (between "<!-- routes: begin -->" and "<!-- routes: end
# -->") from the collector's route table (collector/http/routes.cpp), as printed by
# `trainscope-collector --list-routes`. Usage: tools/dev/api_routes.sh [BUILD_DIR]
# (default build/). tests/collector/http/router_test.cpp fails while the two differ.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
collector="$build/collector/trainscope-collector"
doc="$root/docs/API.md"
[ -x "$collector" ] || { echo "api_routes.sh: no $collector (build it first)" >&2; exit 1; }
tmp=$(mktemp)
trap 'rm -f "$tmp" "$tmp.doc"' EXIT
"$collector" --list-routes >"$tmp"
grep -q '^<!-- routes: begin -->$' "$doc" ||
  { echo "api_routes.sh: docs/API.md has no '<!-- routes: begin -->' line" >&2; exit 1; }
awk -v table="$tmp" '
  /^<!-- routes: begin -->$/ { print; while ((getline line < table) > 0) print line; skip = 1; next }
  /^<!-- routes: end -->$/ { skip = 0 }
  !skip' "$doc" >"$tmp.doc"
cat "$tmp.doc" >"$doc"
