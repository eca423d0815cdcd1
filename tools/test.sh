#!/usr/bin/env bash
# What CI runs (.ci/run): the checks of the tree in stages, each in its own build directory
# (tools/dev/builds.sh says how each is configured). Default stages (CI): format, asan, fuzz,
# release, tsan, tidy. The others are run on request.
#   format    clang-format --dry-run -Werror over every C++ file git tracks (tools/lint.sh)
#   asan      clang with ASan + UBSan (build-asan/): the whole suite, unit and whole-system
#             tests, but the fuzz targets; python3 tests get the sanitizer runtime preloaded
#   fuzz      the same build, the libFuzzer targets only: each replays its seed corpus and kept
#             crashes, then fuzzes 10 s (suite fuzz; tools/fuzz/run.sh)
#   release   GCC -O3 (build-release/), what packagers build: the product, the benchmarks and
#             every test compiled (GCC's warnings, werror, over all of it), then the
#             whole-system tests (suite e2e) run against it
#   tsan      clang with TSan (build-tsan/): the threaded tests (suite threads: probe runtime,
#             ingest, HTTP); builds only what they need; libzmq's own accesses are not checked
#             (tools/dev/tsan.supp says why)
#   tidy      clang-tidy (.clang-tidy, every finding an error, build-asan/'s compile database)
#             over the C++ files changed since the last tree that passed whole (.ci/tidy-clean,
#             written by tools/lint.sh --tidy-only --record; TRAINSCOPE_TIDY_BASE overrides),
#             a changed header through every source that includes it; no result cache
#   main      GCC debugoptimized (build/, the everyday build): the whole suite
#             without sanitizers                                      [on request]
# Installs missing Debian packages first. Ends with one line summed over the stages,
# "tests: N passed, N failed, N skipped" (a lint stage counts as one test, a Python test file as
# its pytest cases), and exits non-zero when any stage failed.
# Usage: tools/test.sh [--only STAGE[,STAGE...]] [extra meson test args for the whole suite
#                     (asan, main)]
#   or   TRAINSCOPE_TEST_STAGES=main tools/test.sh   (e.g. only the everyday suite)
set -euo pipefail
cd "$(dirname "$0")/.."
only=${TRAINSCOPE_TEST_STAGES:+,$TRAINSCOPE_TEST_STAGES,}
default_stages=,format,asan,fuzz,release,tsan,tidy,
if [[ ${1:-} == --only ]]; then
  only=,$2,
  shift 2
fi
for s in ${only//,/ }; do
  case $s in format|main|fuzz|release|asan|tsan|tidy) ;;
    *) echo "test.sh: unknown stage '$s' (format, main, fuzz, release, asan, tsan, tidy)" >&2; exit 2 ;;
  esac
done
tools/dev/deps.sh test
# shellcheck source=tools/dev/builds.sh
. tools/dev/builds.sh

log=$(mktemp)
# Each Python test file is one meson test run by tests/pytest_run.py, which appends its cases'
# "pytest: N passed, N failed, N skipped" here: the closing line counts those cases.
pytest_counts=$(mktemp)
export TRAINSCOPE_PYTEST_COUNTS=$pytest_counts
failures=$(mktemp)
current_stage=
trap 'rm -f "$log" "$pytest_counts" "$failures"' EXIT
status=0
stage_times=()
failed_stages=()

wanted() {
  if [[ -n $only ]]; then [[ $only == *,$1,* ]]; else [[ $default_stages == *,$1,* ]]; fi
}

# run_stage NAME COMMAND...: runs one stage, timing it; a failure fails the run, not the stage
# after it. (Inside the stage errexit is off, as in any `if`: the stage functions chain with &&.)
run_stage() {
  local name=$1 start
  shift
  wanted "$name" || return 0
  echo "== $name"
  current_stage=$name
  start=$(date +%s)
  if ! "$@"; then
    echo "== $name: FAILED"
    failed_stages+=("$name")
    status=1
  fi
  stage_times+=("$name $(($(date +%s) - start)) s")
}

# lint_test NAME COMMAND...: a lint stage, counted as one test in the closing line.
lint_test() {
  local name=$1
  shift
  if "$@"; then echo "Ok: 1" >>"$log"; else echo "Fail: 1" >>"$log"; return 1; fi
}

# meson_tests DIR ARGS...: meson test in DIR, its summary kept for the closing line, and the
# failed tests' names with their last output lines kept for the end of the log (CI shows only its
# tail). Sanitized code runs a few times slower: the timeouts stretch with it.
meson_tests() {
  local dir=$1 rc=0
  shift
  rm -f "$dir/meson-logs/testlog.json"
  meson test -C "$dir" --print-errorlogs --num-processes 2 "$@" 2>&1 | tee -a "$log" || rc=$?
  tools/dev/failed_tests.py "$dir" "$current_stage" >>"$failures" || true
  return "$rc"
}

# build_for DIR ARGS...: configures DIR and builds the targets tools/dev/suite_targets.py lists.
build_for() {
  local dir=$1
  shift
  setup_build "$dir" || return 1
  # Regenerated first when a meson.build changed, so the introspected tests are today's.
  ninja -C "$dir" build.ninja >/dev/null || return 1
  mapfile -t targets < <(tools/dev/suite_targets.py "$dir" "$@") &&
    ninja -C "$dir" "${targets[@]}"
}

main_stage() {
  setup_build build && ninja -C build && meson_tests build --no-rebuild "$@"
}

fuzz_stage() {
  build_for build-asan --suite fuzz && meson_tests build-asan --no-rebuild --suite fuzz
}

asan_stage() {
  build_for build-asan --suite unit --suite e2e &&
    meson_tests build-asan --no-rebuild --timeout-multiplier 3 --no-suite fuzz "$@"
}

tsan_stage() {
  build_for build-tsan --suite threads &&
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tools/dev/tsan.supp" \
    meson_tests build-tsan --no-rebuild --timeout-multiplier 4 --suite threads
}

# GCC -O3 builds the product (benchmarks included) and the whole-system tests it runs; the unit
# tests are built and run by the asan stage (clang), which keeps CI within its time.
release_stage() {
  build_for build-release --product --suite e2e &&
    meson_tests build-release --no-rebuild --suite e2e
}

run_stage format lint_test format tools/lint.sh --format-only
run_stage asan asan_stage "$@"
run_stage fuzz fuzz_stage
run_stage release release_stage
run_stage tsan tsan_stage
run_stage main main_stage "$@"
run_stage tidy lint_test tidy tools/lint.sh --tidy-only --changed --no-cache --build build-asan

echo "== stage times: $(IFS=,; echo "${stage_times[*]}" | sed 's/,/, /g')"
if ((${#failed_stages[@]})); then
  echo "== failed stages: ${failed_stages[*]}"
  cat "$failures"
fi
# One closing line in the plain form CI readers understand, summed over the stages.
count() { awk -v k="$1:" 'index($0, k) == 1 {s += $NF} END {print s + 0}' "$log"; }
# pytest_extra OUTCOME: the pytest cases with that outcome, less the one meson test each file
# already counts (failed when a case failed, else passed when one passed, else skipped: the
# runner's exit status).
pytest_extra() {
  awk -v want="$1" '$1 == "pytest:" {
      p = $2; f = $4; s = $6
      counted = f > 0 ? "failed" : (p > 0 ? "passed" : "skipped")
      n = want == "passed" ? p : (want == "failed" ? f : s)
      total += n - (counted == want)
    } END { print total + 0 }' "$pytest_counts"
}
failed=$(($(count Fail) + $(count Timeout) + $(count 'Unexpected Pass') + $(pytest_extra failed)))
passed=$(($(count Ok) + $(count 'Expected Fail') + $(pytest_extra passed)))
echo "tests: $passed passed, $failed failed, $(($(count Skipped) + $(pytest_extra skipped))) skipped"
exit "$status"
