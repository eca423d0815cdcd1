#!/bin/sh
# dist/prometheus/trainscope-rules.yml as Prometheus's own tool reads it: `promtool check rules`
# (syntax, PromQL, templates), then its unit tests (tests/dist/trainscope_rules_test.yml: each
# alert fired by some series and spared by others). Exits 77 (skipped) without promtool
# (Debian: apt install prometheus). Usage: promtool_rules_test.sh SOURCE_ROOT
set -eu
root=${1:?usage: promtool_rules_test.sh SOURCE_ROOT}
promtool=${PROMTOOL:-$(command -v promtool || true)}
if [ -z "$promtool" ]; then
  echo "skipped: promtool is not installed (apt install prometheus)"
  exit 77
fi
"$promtool" check rules "$root/dist/prometheus/trainscope-rules.yml"
"$promtool" test rules "$root/tests/dist/trainscope_rules_test.yml"
