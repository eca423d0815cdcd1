#!/usr/bin/env bash
# capture_latency: how long a capture of every rank of a job takes, from the POST to the merged
# trace being downloadable, next to its target of (lead + N) step times + 2 s, where lead is
# the start step's distance from the job's latest step when the request came (the default
# start step is the stored latest step + max(2 steps, 1 s), so the ranks must first run the lead steps, then the N recorded
# ones). Drives the real binaries: one collector, one agent, one trainscope-simtrain hosting
# all ranks. Needs curl and jq. Prints one line per run and a summary; exit 0 unless a run
# failed to produce a merged trace.
set -euo pipefail

usage() {
  cat <<EOF
usage: $0 [flags]
  --build DIR      build directory with the binaries (default: \$TRAINSCOPE_BUILD_DIR, else
                   build-capcli, else build, next to this script's repository)
  --ranks N        ranks of the simulated job, all captured (default 64)
  --steps N        steps recorded per capture, N (default 5)
  --step-ms MS     healthy step time of the simulated job (default 100)
  --runs K         captures taken one after the other (default 3)
  --warmup-steps S job steps to run before the first capture (default 20)
  --keep           keep the temp directory (logs, data) and print its path
  -h, --help       this text
EOF
}

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${TRAINSCOPE_BUILD_DIR:-}"
RANKS=64
STEPS=5
STEP_MS=100
RUNS=3
WARMUP=20
KEEP=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --ranks) RANKS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --step-ms) STEP_MS="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --warmup-steps) WARMUP="$2"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "capture_latency: unknown flag '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for v in RANKS STEPS RUNS WARMUP; do
  if ! [[ "${!v}" =~ ^[0-9]+$ ]] || [[ "${!v}" -lt 1 ]]; then
    echo "capture_latency: --$(echo "$v" | tr 'A-Z' 'a-z' | sed 's/warmup/warmup-steps/') must be a whole number >= 1, got '${!v}'" >&2
    exit 2
  fi
done
if ! [[ "$STEP_MS" =~ ^[0-9]+([.][0-9]+)?$ ]]; then
  echo "capture_latency: --step-ms must be a number of milliseconds, got '$STEP_MS'" >&2
  exit 2
fi
for tool in curl jq; do
  command -v "$tool" >/dev/null || { echo "capture_latency: needs $tool" >&2; exit 77; }
done
if [[ -z "$BUILD" ]]; then
  for d in "$ROOT/build-capcli" "$ROOT/build"; do
    [[ -x "$d/collector/trainscope-collector" ]] && { BUILD="$d"; break; }
  done
fi
COLLECTOR="$BUILD/collector/trainscope-collector"
AGENT="$BUILD/agent/trainscope-agent"
SIM="$BUILD/tools/simtrain/trainscope-simtrain"
for b in "$COLLECTOR" "$AGENT" "$SIM"; do
  [[ -x "$b" ]] || { echo "capture_latency: $b is not built (--build DIR)" >&2; exit 2; }
done

TMP="$(mktemp -d /tmp/capture-latency.XXXXXX)"
mkdir -p "$TMP/probe-captures"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  if [[ "$KEEP" == 1 ]]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

# A TCP port on 127.0.0.1 that nothing answers on right now.
free_port() {
  local p
  for _ in $(seq 100); do
    p=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
  done
  echo "capture_latency: no free port found" >&2
  exit 1
}
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

INGEST=$(free_port)
HTTP=$(free_port)
API="http://127.0.0.1:$HTTP/api/v1"
JOB=bench-capture
"$COLLECTOR" --data-dir "$TMP/data" --ingest "tcp://127.0.0.1:$INGEST" --http "127.0.0.1:$HTTP" \
  --ready-file "$TMP/collector.ready" --auto-capture-interval 0 >"$TMP/collector.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 150); do [[ -s "$TMP/collector.ready" ]] && break; sleep 0.1; done
[[ -s "$TMP/collector.ready" ]] || { echo "capture_latency: collector did not start:" >&2; tail "$TMP/collector.log" >&2; exit 1; }
"$AGENT" --collector "tcp://127.0.0.1:$INGEST" --endpoint "ipc://$TMP/agent.sock" --node node0 \
  --spool-dir "$TMP/spool" --capture-dir "$TMP/probe-captures" >"$TMP/agent.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do [[ -S "$TMP/agent.sock" ]] && break; sleep 0.1; done
TRAINSCOPE_CAPTURE_DIR="$TMP/probe-captures" "$SIM" --agent "ipc://$TMP/agent.sock" --job "$JOB" \
  --ranks "$RANKS" --steps 0 --step-ms "$STEP_MS" --quiet >"$TMP/sim.log" 2>&1 &
PIDS+=($!)

latest_step() {
  curl -sf "$API/jobs" | jq -r --arg j "$JOB" '[.jobs[] | select(.job == $j) | .latest_step][0] // -1'
}
for _ in $(seq 600); do
  [[ "$(latest_step)" -ge "$WARMUP" ]] && break
  sleep 0.1
done
[[ "$(latest_step)" -ge "$WARMUP" ]] || { echo "capture_latency: the job did not reach step $WARMUP" >&2; exit 1; }

echo "capture_latency: $RANKS ranks (one simtrain, one agent), captures of all ranks for N=$STEPS steps"
echo "  with the default start step (latest stored step + max(2 steps, 1 s)) and history; step time $STEP_MS ms"
echo "  target per run = (lead + N) x step time + 2 s, lead = start step - latest step at the POST"
printf '%-4s %-24s %6s %6s %10s %10s %10s %s\n' run capture lead ranks latency_ms target_ms trace_kib result
failed=0
latencies=()
for run in $(seq "$RUNS"); do
  latest=$(latest_step)
  t0=$(now_ms)
  reply=$(curl -s -w '\n%{http_code}' -X POST -H 'Content-Type: application/json' \
    -d "{\"steps\": $STEPS, \"reason\": \"capture_latency run $run\"}" "$API/jobs/$JOB/captures")
  code=${reply##*$'\n'}
  body=${reply%$'\n'*}
  if [[ "$code" != 201 ]]; then
    echo "capture_latency: POST answered $code: $body" >&2
    exit 1
  fi
  id=$(jq -r .id <<<"$body")
  start=$(jq -r .start_step <<<"$body")
  lead=$((start - latest))
  state=running
  while [[ "$state" == running ]]; do
    sleep 0.05
    state=$(curl -sf "$API/captures/$id" | jq -r .state)
  done
  bytes=$(curl -s -o "$TMP/trace-$run.json" -w '%{size_download}' -H 'Accept-Encoding: gzip' \
    "$API/captures/$id/trace" || true)
  t1=$(now_ms)
  done_ranks=$(curl -sf "$API/captures/$id" | jq '[.rank_status[] | select(.state == "done")] | length')
  latency=$((t1 - t0))
  target=$(awk -v l="$lead" -v n="$STEPS" -v s="$STEP_MS" 'BEGIN { printf "%d", (l + n) * s + 2000 }')
  result=ok
  if [[ "$state" != complete ]]; then result="$state"; failed=1; fi
  [[ "$latency" -gt "$target" && "$result" == ok ]] && result="over target"
  printf '%-4s %-24s %6s %6s %10s %10s %10s %s\n' "$run" "$id" "$lead" "$done_ranks/$RANKS" \
    "$latency" "$target" "$(( ${bytes:-0} / 1024 ))" "$result"
  if [[ "$state" != complete ]]; then
    echo "     first failed rank: $(curl -sf "$API/captures/$id" |
      jq -r '[.rank_status[] | select(.state == "failed")][0] | "rank \(.rank): \(.detail)"')"
  else
    latencies+=("$latency")
  fi
  # The next capture may not overlap this one's ranks; it has ended, so only wait a step.
  sleep "$(awk -v s="$STEP_MS" 'BEGIN { print s / 1000 }')"
done
if [[ ${#latencies[@]} -eq 0 ]]; then echo "no run completed"; exit 1; fi
sorted=$(printf '%s\n' "${latencies[@]}" | sort -n)
echo "latency_ms (complete runs) min $(head -1 <<<"$sorted") median $(sed -n "$(( (${#latencies[@]} + 1) / 2 ))p" <<<"$sorted") max $(tail -1 <<<"$sorted"), ${#latencies[@]} of $RUNS runs complete"
exit "$failed"
