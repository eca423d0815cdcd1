#!/usr/bin/env bash
# Lint: clang-format (.clang-format) over every C++ file git tracks, and clang-tidy (.clang-tidy,
# every finding an error) over every C++ source of the tree in BUILD's compile database. Part of
# tools/test.sh (CI). Prints one line per stage and the findings; exits 1 on any.
# Usage: tools/lint.sh [--build DIR] [--format-only | --tidy-only] [--changed] [--jobs N] [--fix]
#   --build DIR   build whose compile_commands.json clang-tidy reads (default build-asan;
#                 configured if missing; its generated headers are built first)
#   --changed     clang-tidy only the C++ sources changed since TRAINSCOPE_TIDY_BASE (default:
#                 the merge base with main, or HEAD~1 when HEAD is main), uncommitted changes
#                 included; a changed header selects its own .cpp. The whole tree takes ~17 s
#                 of CPU per file, about an hour on two cores without the cache below
#   --jobs N      clang-tidy processes at once (default 2)
#   --fix         let clang-format rewrite the files instead of only checking them
# clang-tidy results are cached by the preprocessed source (plus the tool's version and
# configuration) in ${TRAINSCOPE_TIDY_CACHE:-~/.cache/trainscope-tidy}: a file whose
# preprocessed text did not change since it last passed is not analysed again.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=build-asan
format=1
tidy=1
jobs=2
fix=0
changed=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --format-only) tidy=0; shift ;;
    --tidy-only) format=0; shift ;;
    --jobs) jobs=$2; shift 2 ;;
    --fix) fix=1; shift ;;
    --changed) changed=1; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
    *) echo "lint.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

status=0
if [[ $format -eq 1 ]]; then
  mapfile -t files < <(git ls-files '*.cpp' '*.h')
  start=$(date +%s)
  if [[ $fix -eq 1 ]]; then
    clang-format -i "${files[@]}"
    echo "lint: clang-format rewrote ${#files[@]} files as .clang-format says"
  elif clang-format --dry-run -Werror "${files[@]}"; then
    echo "lint: clang-format: ${#files[@]} files formatted ($(($(date +%s) - start)) s)"
  else
    echo "lint: clang-format: files differ from .clang-format (tools/lint.sh --fix rewrites them)"
    status=1
  fi
fi

if [[ $tidy -eq 1 ]]; then
  # shellcheck source=tools/dev/builds.sh
  . tools/dev/builds.sh
  setup_build "$build"
  # The generated protobuf headers every file includes.
  ninja -C "$build" schema/trainscope.pb.h >/dev/null
  select=()
  if [[ $changed -eq 1 ]]; then
    base=${TRAINSCOPE_TIDY_BASE:-}
    if [[ -z $base ]] && git rev-parse -q --verify main >/dev/null; then
      base=$(git merge-base HEAD main)
      [[ $base == $(git rev-parse HEAD) ]] && base=
    fi
    if [[ -z $base ]] && git rev-parse -q --verify HEAD~1 >/dev/null; then base=HEAD~1; fi
    if [[ -z $base ]]; then
      echo "lint: clang-tidy: no base to compare with (set TRAINSCOPE_TIDY_BASE); nothing checked"
      exit $status
    fi
    mapfile -t paths < <(git diff --name-only --diff-filter=d "$base" -- '*.cpp' '*.h'
                         git ls-files --others --exclude-standard -- '*.cpp' '*.h')
    for f in "${paths[@]}"; do
      [[ $f == *.h && -f ${f%.h}.cpp ]] && f=${f%.h}.cpp
      [[ $f == *.cpp ]] && select+=(--file "$f")
    done
    echo "lint: clang-tidy: $((${#select[@]} / 2)) changed sources since $(git rev-parse --short "$base")"
    if [[ ${#select[@]} -eq 0 ]]; then exit $status; fi
  fi
  python3 tools/dev/tidy.py --build "$build" --jobs "$jobs" "${select[@]}" || status=1
fi
exit $status
