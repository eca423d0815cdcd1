#!/usr/bin/env bash
# Lint: clang-format (.clang-format) over every C++ file git tracks, and clang-tidy (.clang-tidy,
# every finding an error) over every C++ source of the tree in BUILD's compile database. Part of
# tools/test.sh (CI). Prints one line per stage and the findings; exits 1 on any.
# Usage: tools/lint.sh [--build DIR] [--format-only | --tidy-only] [--changed] [--record]
#                      [--jobs N] [--no-cache] [--fix]
#   --build DIR   build whose compile_commands.json clang-tidy reads (default build-asan;
#                 configured if missing; its generated headers are built first)
#   --changed     clang-tidy only the C++ sources changed since the last tree the whole of
#                 which passed (the commit in .ci/tidy-clean; TRAINSCOPE_TIDY_BASE overrides;
#                 none recorded yet: the merge base with main, or HEAD~1 on main), uncommitted
#                 changes included; a changed header selects its own .cpp and every source
#                 that includes it, directly or not. Without that commit in the history (a
#                 shallow clone), the whole tree. tools/test.sh's tidy stage
#   --record      clang-tidy over the whole tree; when it passes on a clean work tree, write
#                 HEAD's hash to .ci/tidy-clean (commit it) so --changed starts from there.
#                 The whole tree takes ~17 s of CPU per file, about half an hour on two cores
#                 without the cache below. With --changed: only the sources changed since the
#                 last clean tree; when they pass, so does the whole tree (it did at the base),
#                 and HEAD is recorded. A .clang-tidy changed since the base means the whole tree
#   --list        with --changed: print the sources it would check, check nothing
#   --jobs N      clang-tidy processes at once (default 2)
#   --no-cache    analyse every selected file, passed before or not (TRAINSCOPE_TIDY_CACHE=off)
#   --fix         let clang-format rewrite the files instead of only checking them
# clang-tidy results are cached by the preprocessed source (plus the tool's version and
# configuration) in ${TRAINSCOPE_TIDY_CACHE:-~/.cache/trainscope-tidy}: a file whose
# preprocessed text did not change since it last passed is not analysed again. That text has no
# comments, so a NOLINT removed is seen only without the cache (--no-cache; the CI stage).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=build-asan
format=1
tidy=1
jobs=2
fix=0
changed=0
record=0
list=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --format-only) tidy=0; shift ;;
    --tidy-only) format=0; shift ;;
    --jobs) jobs=$2; shift 2 ;;
    --fix) fix=1; shift ;;
    --changed) changed=1; shift ;;
    --record) record=1; shift ;;
    --list) list=1; shift ;;
    --no-cache) export TRAINSCOPE_TIDY_CACHE=off; shift ;;
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
  # Names HEAD in .ci/tidy-clean: the whole tree passes there.
  record_head() {
    git rev-parse HEAD >.ci/tidy-clean
    echo "lint: clang-tidy: the whole tree at $(git rev-parse --short HEAD) passes;" \
      "recorded in .ci/tidy-clean (commit it)"
  }
  if [[ $record -eq 1 && -n $(git status --porcelain --untracked-files=no -- '*.cpp' '*.h') ]]; then
    echo "lint.sh: --record needs the C++ files committed (the record names a commit)" >&2
    exit 2
  fi
  if [[ $changed -eq 1 ]]; then
    base=${TRAINSCOPE_TIDY_BASE:-}
    [[ -z $base && -f .ci/tidy-clean ]] && base=$(tr -d '[:space:]' <.ci/tidy-clean)
    # No clean tree recorded yet: what this branch changed (the merge base with main, or the
    # last commit on main).
    if [[ -z $base ]] && git rev-parse -q --verify main >/dev/null; then
      base=$(git merge-base HEAD main)
      [[ $base == $(git rev-parse HEAD) ]] && base=HEAD~1
    fi
    if [[ -z $base ]] || ! git rev-parse -q --verify "$base^{commit}" >/dev/null; then
      echo "lint: clang-tidy: the last clean tree (${base:-none recorded}) is not in this" \
        "history: the whole tree"
    elif [[ $record -eq 1 && -n $(git diff -U0 "$base" -- .clang-tidy '*/.clang-tidy' |
                                   grep -E '^[-+]' | grep -vE '^(\+\+\+|---) ' |
                                   grep -vE '^[-+][[:space:]]*(#|$)') ]]; then
      # Comments say nothing to clang-tidy: only a changed setting checks the whole tree.
      echo "lint: clang-tidy: .clang-tidy changed since the last clean tree: the whole tree"
    else
      mapfile -t paths < <(git diff --name-only --diff-filter=d "$base" -- '*.cpp' '*.h'
                           git ls-files --others --exclude-standard -- '*.cpp' '*.h')
      # A changed header is checked through every source that includes it, directly or
      # through other headers (includes are spelled by their path from the root), and its own
      # .cpp.
      declare -A picked=() seen=()
      queue=()
      for f in "${paths[@]}"; do
        if [[ $f == *.h ]]; then queue+=("$f"); seen[$f]=1; elif [[ $f == *.cpp ]]; then picked[$f]=1; fi
      done
      while [[ ${#queue[@]} -gt 0 ]]; do
        h=${queue[0]}
        queue=("${queue[@]:1}")
        [[ -f ${h%.h}.cpp ]] && picked[${h%.h}.cpp]=1
        while IFS= read -r user; do
          if [[ $user == *.cpp ]]; then
            picked[$user]=1
          elif [[ -z ${seen[$user]:-} ]]; then
            seen[$user]=1
            queue+=("$user")
          fi
        done < <(git grep -l -F "#include \"$h\"" -- '*.cpp' '*.h' || true)
      done
      for f in "${!picked[@]}"; do select+=(--file "$f"); done
      if [[ $list -eq 1 ]]; then printf '%s\n' "${!picked[@]}" | sort; exit 0; fi
      echo "lint: clang-tidy: $((${#select[@]} / 2)) sources changed since the last clean" \
        "tree $(git rev-parse --short "$base")"
      if [[ ${#select[@]} -eq 0 ]]; then
        if [[ $record -eq 1 ]]; then record_head; fi
        exit $status
      fi
    fi
  fi
  if python3 tools/dev/tidy.py --build "$build" --jobs "$jobs" "${select[@]}"; then
    if [[ $record -eq 1 ]]; then record_head; fi
  else
    status=1
  fi
fi
exit $status
