# The build directories the scripts under tools/ use, each configured one way, named by its
# directory. Source this file, then: setup_build DIR  (configures DIR once; a no-op after).
#   build          GCC, debugoptimized: the everyday build (docs/TESTING.md)
#   build-release  GCC, release (-O3): what packagers build; whole-system tests and benchmarks
#   build-asan     clang, ASan + UBSan, libFuzzer targets: the whole suite runs here in CI
#   build-tsan     clang, TSan: the threaded tests (probe runtime, ingest, HTTP)
# Any other name gets the everyday configuration.
setup_build() {
  local dir=$1
  [[ -f $dir/build.ninja ]] && return 0
  local args=(--buildtype=debugoptimized) env=()
  case $(basename "$dir") in
    build-release) args=(--buildtype=release) ;;
    # b_lundef=false: the probe's shared libraries leave the sanitizer runtime to the program
    # that loads them (the test binary, or python3 with the runtime preloaded).
    build-asan) env=(CC=clang CXX=clang++)
      # Benchmarks configured (not built: each stage builds only its targets) so that the
      # compile database clang-tidy reads (tools/lint.sh) covers them too.
      args+=(-Db_sanitize=address,undefined -Db_lundef=false -Dfuzzing=enabled
             -Dbenchmarks=enabled) ;;
    build-tsan) env=(CC=clang CXX=clang++)
      args+=(-Db_sanitize=thread -Db_lundef=false -Dbenchmarks=disabled) ;;
  esac
  env "${env[@]}" meson setup "$dir" "${args[@]}" >/dev/null
}
