#!/usr/bin/env bash
# Runs trainscope's libFuzzer targets (tests/fuzz/<target>_fuzz.cpp) in the ASan + UBSan build:
# each replays its seed corpus and every crash kept under tests/fuzz/<target>/, then fuzzes for
# the given time or number of runs. New interesting inputs accumulate in BUILD/fuzz/<target>/
# corpus (kept between runs); a crash, leak or timeout is written to BUILD/fuzz/<target>/
# artifacts/ and fails the run. Prints one line per target: runs, exec/s, peak RSS, verdict.
# Usage: tools/fuzz/run.sh [--build DIR] [--seconds N | --runs N] [--jobs N] [--no-build]
#                          [target...]
#   --build DIR   the build with -Dfuzzing=enabled (default build-asan, configured if missing)
#   --seconds N   fuzz each target for N seconds (default 60)
#   --runs N      fuzz each target for N executions instead (e.g. 10000000), in all its jobs
#   --jobs N      N fuzzing processes per target at once (libFuzzer's -jobs/-workers), sharing
#                 the corpus; --runs is split between them, the line sums them (default 1)
#   --timeout N   an input running longer than N seconds (wall clock) is a failure (default 30:
#                 generous, as on a loaded shared machine a niced run can wait seconds for a CPU)
#   --no-build    do not run ninja first (meson test calls it this way)
#   target        a tests/fuzz/<target>_fuzz.cpp; --help lists them (default: all)
# A crash found: fix it, then copy the artifact into tests/fuzz/<target>/crashes/ so every later
# run replays it.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build-asan
seconds=60
timeout=30
runs=
jobs=1
do_build=1
targets=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$(realpath -m "$2"); shift 2 ;;
    --seconds) seconds=$2; runs=; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --no-build) do_build=0; shift ;;
    -h|--help)
      awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"
      printf 'Targets:'
      for f in "$root"/tests/fuzz/*_fuzz.cpp; do printf ' %s' "$(basename "$f" _fuzz.cpp)"; done
      echo
      exit 0 ;;
    -*) echo "run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if [[ ${#targets[@]} -eq 0 ]]; then
  for f in "$root"/tests/fuzz/*_fuzz.cpp; do
    t=$(basename "$f" _fuzz.cpp)
    targets+=("$t")
  done
fi
if ! [[ $jobs =~ ^[1-9][0-9]*$ ]]; then
  echo "run.sh: --jobs needs a positive number, not '$jobs'" >&2
  exit 2
fi
for t in "${targets[@]}"; do
  if [[ ! -f $root/tests/fuzz/${t}_fuzz.cpp ]]; then
    echo "run.sh: no fuzz target '$t' (tests/fuzz/${t}_fuzz.cpp)" >&2
    exit 2
  fi
done

if [[ $do_build -eq 1 ]]; then
  # shellcheck source=tools/dev/builds.sh
  . "$root/tools/dev/builds.sh"
  setup_build "$build"
  exes=()
  for t in "${targets[@]}"; do exes+=("tests/fuzz/${t}_fuzz"); done
  ninja -C "$build" "${exes[@]}"
fi

# Scratch files of the targets (spool directories, capture files) go to memory when possible.
if [[ -d /dev/shm && -w /dev/shm ]]; then export TMPDIR=/dev/shm; fi
# The targets feed bad input on purpose: their warnings would cost more than the code under test.
export TRAINSCOPE_LOG=error

status=0
for t in "${targets[@]}"; do
  exe=$build/tests/fuzz/${t}_fuzz
  if [[ ! -x $exe ]]; then
    echo "fuzz $t: $exe is not built (configure the build with -Dfuzzing=enabled, clang)" >&2
    status=1
    continue
  fi
  work=$build/fuzz/$t
  mkdir -p "$work/corpus" "$work/artifacts"
  args=("-timeout=$timeout" -rss_limit_mb=2048 -print_final_stats=1 -close_fd_mask=3
        "-artifact_prefix=$work/artifacts/")
  if [[ -n $runs ]]; then args+=("-runs=$(((runs + jobs - 1) / jobs))"); else args+=("-max_total_time=$seconds"); fi
  # With jobs, libFuzzer writes each one's output to fuzz-J.log in the working directory too.
  rm -f "$work"/fuzz-*.log
  [[ $jobs -gt 1 ]] && args+=("-jobs=$jobs" "-workers=$jobs")
  [[ -f $root/tests/fuzz/$t.dict ]] && args+=("-dict=$root/tests/fuzz/$t.dict")
  dirs=("$work/corpus")
  for d in corpus crashes; do
    [[ -d $root/tests/fuzz/$t/$d ]] && dirs+=("$root/tests/fuzz/$t/$d")
  done
  log=$work/last_run.log
  start=$(date +%s)
  if (cd "$work" && "$exe" "${args[@]}" "${dirs[@]}") >"$log" 2>&1; then verdict=ok; else verdict=FAILED; fi
  elapsed=$(($(date +%s) - start))
  # A statistic summed over the jobs (libFuzzer copies each job's log into the run's when it
  # ends; peak RSS: the largest).
  stat() {
    awk -v k="stat::$1:" -v max="${2:-0}" '$1 == k {v = $2 + 0; if (max) {if (v > s) s = v} else s += v}
      END {print s + 0}' "$log"
  }
  echo "fuzz $t: $(stat number_of_executed_units) runs in ${elapsed} s" \
    "($(stat average_exec_per_sec) exec/s), peak RSS $(stat peak_rss_mb 1) MB," \
    "corpus $(find "$work/corpus" -type f | wc -l) inputs: $verdict"
  if [[ $verdict != ok ]]; then
    status=1
    grep -E 'ERROR|SUMMARY|Test unit written|==[0-9]+==|#[0-9]+ ' "$log" | head -40 >&2 || true
    echo "fuzz $t: full log $log; artifacts in $work/artifacts/" >&2
  fi
done
exit $status
