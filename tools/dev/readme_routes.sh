#!/bin/sh
# Rewrites the README's HTTP API table (between "<!-- routes: begin -->" and "<!-- routes: end
# -->") from the collector's route table (collector/http/routes.cpp), as printed by
# `trainscope-collector --list-routes`. Usage: tools/dev/readme_routes.sh [BUILD_DIR]
# (default build/). tests/collector/http/router_test.cpp fails while the two differ.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
collector="$build/collector/trainscope-collector"
[ -x "$collector" ] || { echo "readme_routes.sh: no $collector (build it first)" >&2; exit 1; }
tmp=$(mktemp)
trap 'rm -f "$tmp" "$tmp.readme"' EXIT
"$collector" --list-routes >"$tmp"
grep -q '^<!-- routes: begin -->$' "$root/README.md" ||
  { echo "readme_routes.sh: README.md has no '<!-- routes: begin -->' line" >&2; exit 1; }
awk -v table="$tmp" '
  /^<!-- routes: begin -->$/ { print; while ((getline line < table) > 0) print line; skip = 1; next }
  /^<!-- routes: end -->$/ { skip = 0 }
  !skip' "$root/README.md" >"$tmp.readme"
cat "$tmp.readme" >"$root/README.md"
