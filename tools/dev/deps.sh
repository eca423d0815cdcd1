#!/usr/bin/env bash
# Installs the Debian 12 packages trainscope needs, skipping those already present.
# Usage: tools/dev/deps.sh [build|test]   ("test" adds what the test suite uses: torch, ...)
set -euo pipefail

need=(pkg-config g++ meson ninja-build libzmq3-dev cppzmq-dev libprotobuf-dev protobuf-compiler
      libsqlite3-dev libboost-dev libunwind-dev catch2 nlohmann-json3-dev libcli11-dev zlib1g-dev)
if [[ "${1:-build}" == "test" || "${1:-build}" == "demo" ]]; then
  need+=(python3 python3-torch)
fi

missing=()
for pkg in "${need[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "trainscope: installing ${missing[*]}" >&2
sudo=()
[[ $(id -u) -ne 0 ]] && sudo=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
