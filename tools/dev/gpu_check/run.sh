#!/usr/bin/env bash
# trainscope device check: runs the installed trainscope (carried in .devcheck/root, its shared
# libraries in .devcheck/lib) against real PyTorch jobs on a GPU machine, each job plain and
# under `trainscope run`, then reads what the collector stored. Usage, from the repo root:
#   OUT=/some/dir bash .devcheck/run.sh        (PY=/path/to/python3 to choose the interpreter)
# Writes OUT/devcheck.log (everything), OUT/results.json, OUT/logs.tar.gz (rank/daemon logs,
# API dumps). Never hangs: every step runs under `timeout`, and the jobs stop being started
# once DEVCHECK_BUDGET_S (default 270) seconds have passed.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
OUT=${OUT:-/tmp/devcheck-out}
mkdir -p "$OUT"
LOG=$OUT/devcheck.log
: >"$LOG"

ROOT=$HERE/root/usr/local
BIN=$ROOT/bin
LIBDIR=$ROOT/lib/x86_64-linux-gnu
TLIB=$LIBDIR/libtrainscope_torch.so
W=$(mktemp -d /tmp/devcheck.XXXXXX)
BUDGET=${DEVCHECK_BUDGET_S:-270}
T0=$SECONDS
PIDS_DAEMONS=()

elapsed() { echo $((SECONDS - T0)); }
left() { echo $((BUDGET - (SECONDS - T0))); }
# tmo WANTED: WANTED seconds, or what is left of the budget if less (at least 5).
tmo() {
  local w=$1 l
  l=$(left)
  ((l < w)) && w=$l
  ((w < 5)) && w=5
  echo "$w"
}
step() { printf '\n### [%3ds] %s\n' "$(elapsed)" "$*"; }
note() { # note TAG TEXT: printed, and kept for results.json
  echo "NOTE ($1): $2"
  local t=${2//\\/\\\\}
  t=${t//\"/\\\"}
  printf '{"tag":"%s","note":"%s"}\n' "$1" "$t" >>"$W/launches.jsonl"
}

cleanup() {
  local p
  for p in "${PIDS_DAEMONS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  # A library built here against another torch must never travel back with the tree.
  rm -f "$TLIB"
}

pick_python() {
  if [ -n "${PY:-}" ]; then
    command -v "$PY"
    return
  fi
  local c p
  for c in python3 /opt/torch/.venv/bin/python3 python; do
    p=$(command -v "$c" 2>/dev/null) || continue
    if timeout 60 "$p" -c 'import torch' >/dev/null 2>&1; then
      echo "$p"
      return
    fi
  done
  command -v python3
}

# launch TAG MODE NRANKS TIMEOUT SCRIPT ARGS...: NRANKS ranks of SCRIPT (plain, or under
# `trainscope run` when MODE is run), RANK/WORLD_SIZE/MASTER_* set by hand; "@TIMES@" in ARGS
# becomes this launch's step-times file. Sets LAUNCH_OK (1: every rank exited 0).
launch() {
  local tag=$1 mode=$2 n=$3 t=$4 script=$5
  shift 5
  local port job=devcheck-$tag tt r pids=() logs=() times=() rcs=() args=() a
  port=$("$PYBIN" "$HERE/analyze.py" ports 1)
  tt=$(tmo "$t")
  step "$tag/$mode: $n rank(s), timeout ${tt}s: $(basename "$script") $*"
  local t0=$SECONDS
  for ((r = 0; r < n; r++)); do
    local log=$W/$tag-$mode-rank$r.log
    args=()
    for a in "$@"; do
      [ "$a" = "@TIMES@" ] && a="$W/$tag-$mode-rank{rank}.times.json"
      args+=("$a")
    done
    local pre=()
    [ "$mode" = run ] && pre=("$BIN/trainscope" run --job "$job" --agent "ipc://$W/agent.sock"
      --capture-dir "$W/captures" --)
    env RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 \
      MASTER_PORT="$port" OMP_NUM_THREADS=1 CUBLAS_WORKSPACE_CONFIG=:4096:8 \
      "${EXTRA_ENV[@]}" timeout -k 5 "$tt" "${pre[@]}" "$PYBIN" "$script" "${args[@]}" \
      >"$log" 2>&1 </dev/null &
    pids+=($!)
    logs+=("\"$log\"")
    times+=("\"$W/$tag-$mode-rank$r.times.json\"")
  done
  # Wait for every rank; once one has failed, the others get 5 s before they are stopped
  # (a rank whose peer died may wait in a collective until its timeout).
  LAUNCH_OK=1
  local alive failed_at=-1
  rcs=()
  while :; do
    alive=0
    for ((r = 0; r < n; r++)); do
      [ -n "${rcs[$r]:-}" ] && continue
      if kill -0 "${pids[$r]}" 2>/dev/null; then
        alive=$((alive + 1))
      else
        wait "${pids[$r]}"
        rcs[r]=$?
        if [ "${rcs[$r]}" != 0 ] && ((failed_at < 0)); then
          failed_at=$SECONDS
        fi
      fi
    done
    ((alive == 0)) && break
    if ((failed_at >= 0 && SECONDS - failed_at >= 5)); then
      for ((r = 0; r < n; r++)); do
        [ -n "${rcs[$r]:-}" ] || kill -TERM "${pids[$r]}" 2>/dev/null
      done
    fi
    sleep 0.2
  done
  for ((r = 0; r < n; r++)); do [ "${rcs[$r]}" = 0 ] || LAUNCH_OK=0; done
  local wall=$((SECONDS - t0))
  for ((r = 0; r < n; r++)); do
    echo "  rank $r rc ${rcs[$r]}: $(grep -E '^rank [0-9]+: (done|step_ms)|^trainscope|Error|error:' \
      "$W/$tag-$mode-rank$r.log" | tail -n 6 | tr '\n' '|' | cut -c1-900)"
    [ "${rcs[$r]}" = 0 ] || tail -n 25 "$W/$tag-$mode-rank$r.log" | sed 's/^/    | /'
  done
  local qa=${*//\"/}
  printf '{"tag":"%s","mode":"%s","job":"%s","nranks":%d,"script":"%s","args":"%s","rcs":[%s],"logs":[%s],"times":[%s],"wall_s":%d}\n' \
    "$tag" "$mode" "$job" "$n" "$script" "$qa" "$(
      IFS=,
      echo "${rcs[*]}"
    )" "$(
      IFS=,
      echo "${logs[*]}"
    )" "$(
      IFS=,
      echo "${times[*]}"
    )" "$wall" >>"$W/launches.jsonl"
  if [ "$mode" = run ]; then
    local want=0 s
    for ((r = 0; r < n; r++)); do
      s=$(grep -oE 'done, [0-9]+ steps' "$W/$tag-$mode-rank$r.log" | tail -1 | grep -oE '[0-9]+')
      want=$((want + ${s:-0}))
    done
    ((want > 0)) && timeout 20 "$PYBIN" "$HERE/analyze.py" wait-rows "$URL" "$job" "$want" 15
  fi
}

# pair TAG NRANKS TIMEOUT MINLEFT SCRIPT ARGS...: plain, then (if plain worked) monitored.
# Skipped with a note when less than MINLEFT seconds of the budget are left.
pair() {
  local tag=$1 n=$2 t=$3 minleft=$4
  shift 4
  if (($(left) < minleft)); then
    note "$tag" "skipped: $(left)s of the budget left, $minleft needed"
    PAIR_PLAIN_OK=0
    return
  fi
  launch "$tag" plain "$n" "$t" "$@"
  PAIR_PLAIN_OK=$LAUNCH_OK
  if [ "$LAUNCH_OK" != 1 ]; then
    note "$tag" "plain run failed; not run under trainscope"
    return
  fi
  launch "$tag" run "$n" "$t" "$@"
  # Different results with monitoring: is the job deterministic at all? A second plain run
  # tells (when the budget allows).
  if [ "$(done_lines "$tag" plain "$n")" != "$(done_lines "$tag" run "$n")" ]; then
    if (($(left) > minleft)); then
      launch "$tag" plain2 "$n" "$t" "$@"
    else
      note "$tag" "results differ with monitoring; no budget left for a second plain run"
    fi
  fi
}

# done_lines TAG MODE NRANKS: each rank's "rank N: done, ..." line.
done_lines() {
  local r
  for ((r = 0; r < $3; r++)); do
    grep -E '^rank [0-9]+: done' "$W/$1-$2-rank$r.log" 2>/dev/null | tail -1
  done
}

main() {
  step "devcheck in $W, repo $REPO, out $OUT, budget ${BUDGET}s"
  trap cleanup EXIT
  rm -f "$TLIB"
  : >"$W/launches.jsonl"
  chmod +x "$BIN"/* 2>/dev/null # in case the copy lost the modes
  local f
  for f in "$BIN/trainscope" "$BIN/trainscope-agent" "$BIN/trainscope-collector" \
    "$LIBDIR/libtrainscope_probe.so" "$REPO/agent/torch/trainscope_torch.cpp" \
    "$REPO/tests/e2e/fsdp_train_plain.py"; do
    [ -e "$f" ] || echo "MISSING: $f"
  done
  EXTRA_ENV=()

  step "machine"
  timeout 20 nvidia-smi -L 2>&1 || echo "nvidia-smi: not available (rc $?)"
  timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | head -5
  uname -srm
  grep -E '^(PRETTY_NAME)=' /etc/os-release 2>/dev/null
  ldd --version 2>&1 | head -1
  echo "cpus $(nproc), $(free -g 2>/dev/null | awk '/^Mem:/{print $2 " GiB RAM"}')"
  CXX=${CXX:-$(command -v g++ || command -v c++ || command -v clang++ || true)}
  echo "c++ compiler: ${CXX:-none} $([ -n "$CXX" ] && "$CXX" --version 2>&1 | head -1)"
  LDCONFIG=$(command -v ldconfig || echo /sbin/ldconfig)
  strings -a "$("$LDCONFIG" -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/{print $NF; exit}')" 2>/dev/null |
    grep -oE '^GLIBCXX_3\.4\.[0-9]+$' | sort -V | tail -1 | sed 's/^/system libstdc++ max: /'

  PYBIN=$(pick_python)
  echo "python: $PYBIN"
  [ -x "$PYBIN" ] || {
    echo "FATAL: no python3"
    return 1
  }

  step "carried runtime: binaries and libraries"
  export LD_LIBRARY_PATH=$HERE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  local b bad=0
  for b in "$BIN/trainscope" "$BIN/trainscope-agent" "$BIN/trainscope-collector" "$LIBDIR/libtrainscope_probe.so"; do
    echo "$(basename "$b"): $(ldd "$b" 2>&1 | awk '/not found/{nf=nf" "$1} /=> /{n++} /devcheck\/lib\//{c++} END{printf "%d libs, %d from .devcheck/lib%s", n, c, (nf ? ", NOT FOUND:" nf : "")}')"
  done
  for b in trainscope trainscope-agent trainscope-collector; do
    timeout 10 "$BIN/$b" --help >/dev/null 2>"$W/start-$b.err" || bad=1
  done
  if [ $bad = 1 ]; then
    echo "a binary failed to start:"
    cat "$W"/start-*.err | head -20
    export LD_LIBRARY_PATH=$HERE/lib:$HERE/lib-fallback${LD_LIBRARY_PATH#"$HERE/lib"}
    note setup "binaries needed .devcheck/lib-fallback (Debian's libstdc++)"
    for b in trainscope trainscope-agent trainscope-collector; do
      timeout 10 "$BIN/$b" --help >/dev/null 2>&1 || echo "FATAL: $b does not start even with lib-fallback"
    done
  else
    echo "all three binaries start with .devcheck/lib"
  fi
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"

  step "python environment (with the carried libraries on LD_LIBRARY_PATH)"
  timeout 120 "$PYBIN" "$HERE/analyze.py" env "$W/env.json" || echo "env probe failed (rc $?)"
  TORCH_VER='' CUDA_OK=0 NCCL_OK=0 FSDP_OK=0 ABI=1 TORCH_INCS='' TORCH_LIBDIRS=''
  # shellcheck disable=SC1091
  [ -f "$W/env.json.sh" ] && . "$W/env.json.sh"
  if [ -z "$TORCH_VER" ] && env -u LD_LIBRARY_PATH timeout 60 "$PYBIN" -c 'import torch' >/dev/null 2>&1; then
    # torch imports without the carried libraries but not with them: one of them shadows a
    # system library torch needs. Keep only those the system lacks.
    mkdir -p "$W/lib-min"
    local so
    for so in "$HERE"/lib/*; do
      "$LDCONFIG" -p 2>/dev/null | grep -q "^[[:space:]]*$(basename "$so") " || ln -s "$so" "$W/lib-min/"
    done
    note setup "torch does not import with .devcheck/lib on LD_LIBRARY_PATH; using only the libraries the system lacks: $(ls "$W/lib-min" | tr '\n' ' ')"
    export LD_LIBRARY_PATH=$W/lib-min${LD_LIBRARY_PATH#"$HERE/lib"}
    timeout 120 "$PYBIN" "$HERE/analyze.py" env "$W/env.json" || echo "env probe failed (rc $?)"
    # shellcheck disable=SC1091
    [ -f "$W/env.json.sh" ] && . "$W/env.json.sh"
  fi
  timeout 60 "$PYBIN" -c "import ctypes; ctypes.CDLL('$LIBDIR/libtrainscope_probe.so'); print('probe library loads into python')" 2>&1

  step "libtrainscope_torch.so for torch $TORCH_VER (g++, -D_GLIBCXX_USE_CXX11_ABI=$ABI)"
  local tstatus="not built" std ldirs="" d
  for d in $TORCH_LIBDIRS; do ldirs="$ldirs -L$d -Wl,-rpath,$d"; done
  if [ "${DEVCHECK_TORCHLIB:-1}" = 0 ]; then
    tstatus="not built (DEVCHECK_TORCHLIB=0)"
  elif [ -z "$CXX" ]; then
    tstatus="no C++ compiler"
  elif [ -z "$TORCH_INCS" ]; then
    tstatus="no torch include paths"
  else
    for std in c++20 c++17; do
      # shellcheck disable=SC2086
      if timeout "$(tmo 150)" nice "$CXX" -std=$std -O2 -fPIC -shared -D_GLIBCXX_USE_CXX11_ABI=$ABI \
        -I"$REPO" $TORCH_INCS -Wno-deprecated-enum-enum-conversion -Wno-deprecated-declarations \
        "$REPO/agent/torch/trainscope_torch.cpp" -o "$W/libtrainscope_torch.so" \
        -L"$LIBDIR" -ltrainscope_probe -Wl,-rpath-link,"$HERE/lib" $ldirs -ltorch_cpu -lc10 \
        -Wl,-rpath,'$ORIGIN' >"$W/torchlib-$std.log" 2>&1; then
        tstatus="built (-std=$std)"
        break
      fi
      tstatus="compile failed (-std=$std): $(grep -m1 -E 'error' "$W/torchlib-$std.log" | cut -c1-300)"
      tail -n 15 "$W/torchlib-$std.log"
    done
  fi
  if [ -f "$W/libtrainscope_torch.so" ]; then
    cp "$W/libtrainscope_torch.so" "$TLIB" 2>/dev/null || export TRAINSCOPE_TORCH_LIB=$W/libtrainscope_torch.so
    local tl=${TRAINSCOPE_TORCH_LIB:-$TLIB}
    if timeout 60 "$PYBIN" -c "import torch, ctypes; ctypes.CDLL('$LIBDIR/libtrainscope_probe.so'); ctypes.CDLL('$tl')" >"$W/torchlib-load.log" 2>&1; then
      tstatus="$tstatus, loads into torch $TORCH_VER ($tl)"
    else
      tstatus="$tstatus, but does not load: $(tail -c 300 "$W/torchlib-load.log")"
      rm -f "$TLIB"
      unset TRAINSCOPE_TORCH_LIB
    fi
  fi
  if [ "${DEVCHECK_TORCHLIB:-1}" != 0 ] && [ ! -f "$TLIB" ] && [ -z "${TRAINSCOPE_TORCH_LIB:-}" ] && [[ $TORCH_VER == 1.13* ]] && [ -f "$HERE/torch113/libtrainscope_torch.so" ]; then
    export TRAINSCOPE_TORCH_LIB=$HERE/torch113/libtrainscope_torch.so
    tstatus="$tstatus; using the carried torch 1.13 build"
  fi
  [ -f "$TLIB" ] || [ -n "${TRAINSCOPE_TORCH_LIB:-}" ] ||
    tstatus="$tstatus; jobs run without it (each monitored process warns once: operators not recorded)"
  echo "libtrainscope_torch.so: $tstatus"
  "$PYBIN" -c 'import json, sys; json.dump({"status": sys.argv[1]}, open(sys.argv[2], "w"))' \
    "$tstatus" "$W/torchlib.json"

  step "collector and agent"
  local ports
  ports=$("$PYBIN" "$HERE/analyze.py" ports 2 | tr '\n' ' ')
  read -r IPORT HPORT <<<"$ports"
  URL=http://127.0.0.1:$HPORT
  timeout -k 5 $((BUDGET + 150)) "$BIN/trainscope-collector" --data-dir "$W/data" \
    --ingest "tcp://127.0.0.1:$IPORT" --http "127.0.0.1:$HPORT" --ready-file "$W/collector.ready" \
    >"$W/collector.log" 2>&1 &
  PIDS_DAEMONS+=($!)
  if ! timeout 25 "$PYBIN" "$HERE/analyze.py" wait-http "$URL/healthz" 20; then
    echo "FATAL: the collector did not come up"
    tail -n 30 "$W/collector.log"
    return 1
  fi
  timeout -k 5 $((BUDGET + 150)) "$BIN/trainscope-agent" --collector "tcp://127.0.0.1:$IPORT" \
    --endpoint "ipc://$W/agent.sock" --node node0 --spool-dir "$W/spool" \
    --capture-dir "$W/captures" >"$W/agent.log" 2>&1 &
  PIDS_DAEMONS+=($!)
  local i
  for ((i = 0; i < 100; i++)); do
    [ -S "$W/agent.sock" ] && break
    sleep 0.1
  done
  [ -S "$W/agent.sock" ] || {
    echo "FATAL: the agent did not come up"
    tail -n 30 "$W/agent.log"
    return 1
  }
  echo "collector $URL (ingest $IPORT), agent ipc://$W/agent.sock"

  local DDP=$HERE/ddp_gpu_train.py FSDP=$HERE/fsdp_train.py
  step "control: CPU DDP, 2 ranks over gloo"
  pair cpu-ddp 2 90 40 "$DDP" --device cpu --backend gloo --steps 40 --warmup 5 --batch 64 \
    --width 256 --depth 2 --times-out @TIMES@

  if [ "$CUDA_OK" = 1 ]; then
    step "GPU DDP: 2 ranks sharing cuda:0 over gloo"
    pair gpu-ddp-gloo 2 110 60 "$DDP" --device cuda --backend gloo --steps 200 --times-out @TIMES@
    if [ "$NCCL_OK" = 1 ]; then
      step "GPU DDP: 1 rank on cuda:0 over NCCL"
      pair gpu-ddp-nccl 1 100 50 "$DDP" --device cuda --backend nccl --steps 200 --batch 16384 \
        --times-out @TIMES@
    else
      note gpu-ddp-nccl "skipped: torch.distributed has no NCCL"
    fi
  else
    note gpu "GPU jobs skipped: torch $TORCH_VER sees no CUDA"
  fi

  local fsdp_cpu_ok=0
  if [ "$FSDP_OK" = 1 ]; then
    step "FSDP: tests/e2e/fsdp_train_plain.py as it is, 2 CPU ranks over gloo"
    pair fsdp-e2e 2 60 40 "$REPO/tests/e2e/fsdp_train_plain.py" --steps 20
    fsdp_cpu_ok=$PAIR_PLAIN_OK
    if [ "$fsdp_cpu_ok" != 1 ]; then
      step "FSDP: adapted copy with device_id=cpu, 2 CPU ranks over gloo"
      pair fsdp-cpu 2 90 40 "$FSDP" --device cpu --steps 20 --times-out @TIMES@
      fsdp_cpu_ok=$PAIR_PLAIN_OK
    fi
    if [ "$CUDA_OK" = 1 ] && [ "$NCCL_OK" = 1 ]; then
      if [ "$fsdp_cpu_ok" != 1 ] || (($(left) > 70)); then
        step "FSDP: 1 rank on cuda:0 over NCCL"
        pair fsdp-cuda 1 90 35 "$FSDP" --device cuda --steps 50 --times-out @TIMES@
      else
        note fsdp-cuda "skipped: CPU FSDP worked and little budget is left"
      fi
    fi
  else
    note fsdp "skipped: torch $TORCH_VER cannot import torch.distributed.fsdp ($(
      "$PYBIN" -c "import json; print(json.load(open('$W/env.json')).get('fsdp_import'))" 2>&1 | cut -c1-200))"
  fi

  step "CLI against the collector"
  local j
  timeout 10 "$BIN/trainscope" --server "$URL" jobs 2>&1 | head -20
  timeout 10 "$BIN/trainscope" --server "$URL" nodes 2>&1 | head -5
  for j in $(sed -n 's/.*"mode":"run","job":"\([^"]*\)".*/\1/p' "$W/launches.jsonl" | sort -u); do
    echo "--- $j"
    timeout 10 "$BIN/trainscope" --server "$URL" anomalies "$j" 2>&1 | head -8
    timeout 10 "$BIN/trainscope" --server "$URL" steps "$j" --rank 0 --from 20 --to 22 --detail 2>&1 | head -30
  done

  step "report"
  timeout 45 "$PYBIN" "$HERE/analyze.py" report "$URL" "$W" "$OUT" || echo "report failed (rc $?)"

  step "daemons: stop and log tails"
  for i in "${PIDS_DAEMONS[@]}"; do kill -TERM "$i" 2>/dev/null; done
  for i in "${PIDS_DAEMONS[@]}"; do timeout 10 tail --pid="$i" -f /dev/null; done
  PIDS_DAEMONS=()
  for d in collector agent; do
    echo "--- $d.log: $(grep -ciE 'error|warn' "$W/$d.log") error/warn lines; last lines:"
    grep -iE 'error|warn' "$W/$d.log" | tail -n 8 | cut -c1-300
    tail -n 5 "$W/$d.log" | cut -c1-300
  done
  tar -C "$W" --exclude=./data --exclude=./spool --exclude=./captures --exclude='*.so' \
    -czf "$OUT/logs.tar.gz" . 2>/dev/null
  ls -la "$OUT"
  step "done in $(elapsed)s"
}

[ "${DEVCHECK_SOURCE_ONLY:-0}" = 1 ] && return 0
main 2>&1 | tee -a "$LOG"
exit "${PIPESTATUS[0]}"
