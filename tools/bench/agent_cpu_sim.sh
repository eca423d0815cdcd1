#!/usr/bin/env bash
# agent_cpu_sim: the CPU a real trainscope-agent spends relaying a simulated job's real probes
# (trainscope-simtrain: one probe per rank, 32 operators and 8 collectives per step) to a real
# collector, as % of one core from /proc/<agent pid>/stat (utime + stime) over a fixed window,
# once per probe batching setting given (TRAINSCOPE_BATCH_MS: how long a step report may wait
# for later steps to share its message; 0 = one message per report, as before). Each setting
# gets a fresh collector, agent and simulator. Also prints the step rows the collector stored
# against the steps the ranks ran, so a setting that loses reports shows. Prints figures; exit
# 0 unless a process failed to start. Needs curl and jq.
set -euo pipefail

usage() {
  cat <<USAGE
usage: $0 [flags]
  --build DIR        build directory with the binaries (default: \$TRAINSCOPE_BUILD_DIR, else
                     build-release, else build, next to this script's repository)
  --ranks N          simulated ranks, all on one agent (default 64)
  --step-ms MS       step time of the simulated job (default 100: 10 steps/s)
  --seconds S        measured window (default 60)
  --warmup S         seconds before the window (default 5)
  --batch-ms LIST    comma-separated TRAINSCOPE_BATCH_MS settings, measured in turn
                     (default 0,200: before and after probe batching)
  --batch-steps N    TRAINSCOPE_BATCH_STEPS for every run (default: the probe's, 16)
  --keep             keep the temp directory (logs, data) and print its path
  -h, --help         this text
USAGE
}

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${TRAINSCOPE_BUILD_DIR:-}"
RANKS=64
STEP_MS=100
SECONDS_=60
WARMUP=5
BATCH_MS=0,200
BATCH_STEPS=
KEEP=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --ranks) RANKS="$2"; shift 2 ;;
    --step-ms) STEP_MS="$2"; shift 2 ;;
    --seconds) SECONDS_="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --batch-ms) BATCH_MS="$2"; shift 2 ;;
    --batch-steps) BATCH_STEPS="$2"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "agent_cpu_sim: unknown flag '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for v in RANKS SECONDS_ WARMUP; do
  if ! [[ "${!v}" =~ ^[0-9]+$ ]] || [[ "${!v}" -lt 1 ]]; then
    echo "agent_cpu_sim: --$(echo "${v%_}" | tr 'A-Z' 'a-z') must be a whole number >= 1, got '${!v}'" >&2
    exit 2
  fi
done
if ! [[ "$STEP_MS" =~ ^[0-9]+([.][0-9]+)?$ ]]; then
  echo "agent_cpu_sim: --step-ms must be a number of milliseconds, got '$STEP_MS'" >&2
  exit 2
fi
if ! [[ "$BATCH_MS" =~ ^[0-9]+(,[0-9]+)*$ ]]; then
  echo "agent_cpu_sim: --batch-ms must be comma-separated whole milliseconds, got '$BATCH_MS'" >&2
  exit 2
fi
if [[ -n "$BATCH_STEPS" ]] && ! [[ "$BATCH_STEPS" =~ ^[0-9]+$ ]]; then
  echo "agent_cpu_sim: --batch-steps must be a whole number, got '$BATCH_STEPS'" >&2
  exit 2
fi
for tool in curl jq; do
  command -v "$tool" >/dev/null || { echo "agent_cpu_sim: needs $tool" >&2; exit 77; }
done
if [[ -z "$BUILD" ]]; then
  for d in "$ROOT/build-release" "$ROOT/build"; do
    [[ -x "$d/agent/trainscope-agent" ]] && { BUILD="$d"; break; }
  done
fi
BUILD="$(cd "${BUILD:-.}" && pwd)"
COLLECTOR="$BUILD/collector/trainscope-collector"
AGENT="$BUILD/agent/trainscope-agent"
SIM="$BUILD/tools/simtrain/trainscope-simtrain"
for b in "$COLLECTOR" "$AGENT" "$SIM"; do
  [[ -x "$b" ]] || { echo "agent_cpu_sim: $b is not built (--build DIR)" >&2; exit 2; }
done

TMP="$(mktemp -d /tmp/agent-cpu-sim.XXXXXX)"
PIDS=()
stop_all() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
}
cleanup() {
  stop_all
  if [[ "$KEEP" == 1 ]]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

# A TCP port on 127.0.0.1 that nothing answers on right now, below the usual ephemeral range
# (32768 and up), whose ports outgoing connections may hold.
free_port() {
  local p
  for _ in $(seq 100); do
    p=$((20000 + RANDOM % 12000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
  done
  echo "agent_cpu_sim: no free port found" >&2
  exit 1
}
# utime + stime of a process, in clock ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
TICK=$(getconf CLK_TCK)

echo "agent_cpu_sim: $RANKS ranks at $STEP_MS ms steps on one agent, ${SECONDS_} s window after ${WARMUP} s"
printf '%-9s %12s %10s %14s %14s\n' batch_ms agent_cpu_% cpu_s rows_stored steps_x_ranks
for ms in ${BATCH_MS//,/ }; do
  DIR="$TMP/batch-$ms"
  mkdir -p "$DIR"
  JOB="agent-cpu-$ms"
  # A port taken between the check and the bind (other tests on the machine): try others.
  for attempt in 1 2 3 4 5; do
    INGEST=$(free_port)
    HTTP=$(free_port)
    [[ "$INGEST" != "$HTTP" ]] || continue
    rm -rf "$DIR/data" "$DIR/collector.ready"
    "$COLLECTOR" --data-dir "$DIR/data" --ingest "tcp://127.0.0.1:$INGEST" --http "127.0.0.1:$HTTP" \
      --ready-file "$DIR/collector.ready" --auto-capture-interval 0 >"$DIR/collector.log" 2>&1 &
    COLLECTOR_PID=$!
    for _ in $(seq 150); do
      [[ -s "$DIR/collector.ready" ]] && break
      kill -0 "$COLLECTOR_PID" 2>/dev/null || break
      sleep 0.1
    done
    if [[ -s "$DIR/collector.ready" ]]; then PIDS+=($COLLECTOR_PID); break; fi
    kill "$COLLECTOR_PID" 2>/dev/null || true
    wait "$COLLECTOR_PID" 2>/dev/null || true
  done
  [[ -s "$DIR/collector.ready" ]] || { echo "agent_cpu_sim: collector did not start:" >&2; tail "$DIR/collector.log" >&2; exit 1; }
  API="http://127.0.0.1:$HTTP/api/v1"
  "$AGENT" --collector "tcp://127.0.0.1:$INGEST" --endpoint "ipc://$DIR/agent.sock" --node node0 \
    --spool-dir "$DIR/spool" --capture-dir "$DIR/captures" >"$DIR/agent.log" 2>&1 &
  AGENT_PID=$!
  PIDS+=($AGENT_PID)
  for _ in $(seq 100); do [[ -S "$DIR/agent.sock" ]] && break; sleep 0.1; done
  [[ -S "$DIR/agent.sock" ]] || { echo "agent_cpu_sim: agent did not start:" >&2; tail "$DIR/agent.log" >&2; exit 1; }
  env TRAINSCOPE_BATCH_MS="$ms" ${BATCH_STEPS:+TRAINSCOPE_BATCH_STEPS=$BATCH_STEPS} \
    TRAINSCOPE_CAPTURE_DIR="$DIR/captures" "$SIM" --agent "ipc://$DIR/agent.sock" --job "$JOB" \
    --ranks "$RANKS" --steps 0 --step-ms "$STEP_MS" --quiet >"$DIR/sim.log" 2>&1 &
  SIM_PID=$!
  PIDS+=($SIM_PID)
  sleep "$WARMUP"
  t0=$(cpu_ticks "$AGENT_PID")
  sleep "$SECONDS_"
  t1=$(cpu_ticks "$AGENT_PID")
  # The simulator's clean stop flushes and says goodbye; then every step it ran is stored.
  kill -INT "$SIM_PID" 2>/dev/null || true
  wait "$SIM_PID" 2>/dev/null || true
  sleep 2
  stats=$(curl -sf "$API/jobs" | jq -r --arg j "$JOB" '[.jobs[] | select(.job == $j)][0] | "\(.step_rows) \(.latest_step)"')
  rows=${stats% *}
  latest=${stats#* }
  cpu=$(awk -v a="$t0" -v b="$t1" -v t="$TICK" 'BEGIN { printf "%.2f", (b - a) / t }')
  pct=$(awk -v c="$cpu" -v s="$SECONDS_" 'BEGIN { printf "%.2f", 100 * c / s }')
  printf '%-9s %12s %10s %14s %14s\n' "$ms" "$pct" "$cpu" "$rows" "$(( (latest + 1) * RANKS ))"
  stop_all
done
