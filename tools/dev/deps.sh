#!/usr/bin/env bash
# Installs the Debian 12 packages trainscope needs, skipping those already present.
# Usage: tools/dev/deps.sh [build|test]   ("test" adds what tools/test.sh uses: clang, torch,
# clickhouse-server, ...)
set -euo pipefail

need=(pkg-config g++ meson ninja-build libzmq3-dev cppzmq-dev libprotobuf-dev protobuf-compiler
      libsqlite3-dev libboost-dev libunwind-dev catch2 nlohmann-json3-dev libcli11-dev zlib1g-dev
      libisal-dev)
mode=${1:-build}
if [[ "$mode" == "test" ]]; then
  # Real-training tests (torch; libtorch-dev builds libtrainscope_torch.so, the ATen operator
  # callback the real-training capture test needs), the browser test (chromium +
  # playwright-core from npm), the dashboard's lint (ESLint from npm) and the Prometheus
  # scrape test; the alerting test sends to Debian's Alertmanager.
  need+=(python3 python3-torch libtorch-dev chromium prometheus prometheus-alertmanager)
  # The Python tests run under pytest (tests/pytest_run.py).
  need+=(python3-pytest)
  # The ClickHouse store's tests start Debian's clickhouse-server (18.16) on a loopback port.
  need+=(clickhouse-server)
  # The sanitizer builds, libFuzzer and the lint stages (tools/test.sh, tools/lint.sh).
  # (libclang-rt-14-dev holds the sanitizer runtimes and libFuzzer; clang only recommends it.)
  need+=(clang libclang-rt-14-dev clang-tidy clang-format)
  command -v npm >/dev/null 2>&1 || need+=(nodejs npm)
fi

missing=()
for pkg in "${need[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "trainscope: installing ${missing[*]}" >&2
  sudo=()
  [[ $(id -u) -ne 0 ]] && sudo=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# npm packages of the tests, each pinned by its folder's package-lock.json: playwright-core
# for the browser test, ESLint for the dashboard's lint test.
npm_ci() {  # npm_ci FOLDER PACKAGE: installs FOLDER's packages unless PACKAGE is there
  local dir
  dir="$(dirname "$0")/../../$1"
  [[ -d "$dir/node_modules/$2" ]] || (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
}
if [[ "$mode" == "test" ]]; then
  npm_ci tests/e2e/browser playwright-core
  npm_ci tests/web eslint
fi
