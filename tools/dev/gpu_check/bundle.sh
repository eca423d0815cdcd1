#!/usr/bin/env bash
# Makes .devcheck/: the installed trainscope of a build directory (stripped), the Debian shared
# libraries its programs and the probe library load (from ldd), and this folder's scripts, so
# that a machine without Debian's packages (the GPU machine of the device tool: its own image,
# Python 3.12 with torch and CUDA, no network) can run the check:
#   tools/dev/gpu_check/bundle.sh [BUILD_DIR]        (default: build; must be built)
# then there, from the repository root, with .devcheck carried along:
#   OUT=DIR timeout -k 10 340 bash .devcheck/run.sh
# run.sh starts a collector and an agent, runs DDP (CUDA over NCCL and gloo, CPU) and FSDP
# (CPU over gloo, CUDA over NCCL) jobs plain and under `trainscope run`, and writes
# DIR/devcheck.log (a summary and a verdict at its end), DIR/results.json and DIR/logs.tar.gz.
# It compiles agent/torch/trainscope_torch.cpp against the machine's torch there when g++ is
# found. The bundle is about 20 MiB; .devcheck/ is for .git/info/exclude, never for commits.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
BUILD="$(cd "${1:-$ROOT/build}" && pwd)"
OUTDIR="$ROOT/.devcheck"
HERE="$ROOT/tools/dev/gpu_check"
[[ -x "$BUILD/collector/trainscope-collector" ]] ||
  { echo "bundle.sh: $BUILD has no built collector (build it first)" >&2; exit 2; }
grep -qx '/.devcheck/' "$ROOT/.git/info/exclude" 2>/dev/null ||
  echo '/.devcheck/' >>"$ROOT/.git/info/exclude"
rm -rf "$OUTDIR"
mkdir -p "$OUTDIR/lib" "$OUTDIR/lib-fallback" "$OUTDIR/torch113"
meson install -C "$BUILD" --no-rebuild --quiet --destdir "$OUTDIR/root" >/dev/null
rm -f "$OUTDIR"/root/usr/local/bin/trainscope-simtrain
for f in "$OUTDIR"/root/usr/local/bin/* "$OUTDIR"/root/usr/local/lib/*/libtrainscope_*.so; do
  [[ -f "$f" ]] && strip "$f"
done
# Every library ldd resolves outside glibc, libstdc++ and libgcc (the machine has newer ones).
for f in "$OUTDIR"/root/usr/local/bin/* "$OUTDIR"/root/usr/local/lib/*/libtrainscope_probe.so; do
  ldd "$f" | awk '$3 ~ /^\// { print $3 }'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libresolv.so.*|ld-linux*) ;;
    libstdc++.so.*|libgcc_s.so.*) ;;
    *) cp -L "$lib" "$OUTDIR/lib/" ;;
  esac
done
# Debian's libstdc++ and libgcc, used there only if a program fails to start without them.
for name in libstdc++.so.6 libgcc_s.so.1; do
  lib=$(ldd "$OUTDIR/root/usr/local/bin/trainscope-collector" | awk -v n="$name" '$1 == n { print $3 }')
  [[ -n "$lib" ]] && cp -L "$lib" "$OUTDIR/lib-fallback/"
done
# The operator library built against this machine's torch: for a dry run here only.
[[ -f "$BUILD/agent/torch/libtrainscope_torch.so" ]] &&
  cp "$BUILD/agent/torch/libtrainscope_torch.so" "$OUTDIR/torch113/"
rm -f "$OUTDIR"/root/usr/local/lib/*/libtrainscope_torch.so
cp "$HERE/run.sh" "$HERE"/*.py "$OUTDIR/"
echo "bundle.sh: $(du -sh "$OUTDIR" | cut -f1) in $OUTDIR; run there: OUT=DIR timeout -k 10 340 bash .devcheck/run.sh"
