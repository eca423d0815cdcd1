#!/usr/bin/env bash
# Builds trainscope and runs the demo: a collector, two agents (two simulated nodes) and a
# simulated 16-rank training job with a straggler injected at rank 5 from step 150.
# Installs missing Debian packages first. Ctrl-C stops everything.
#   TRAINSCOPE_DEMO_DIR   where data, spools and logs go (default /tmp/trainscope-demo)
#   TRAINSCOPE_HTTP_PORT  dashboard/API port (default 7600); TRAINSCOPE_INGEST_PORT (7601)
#   TRAINSCOPE_BUILD_DIR  the Meson build directory (default build)
set -euo pipefail
cd "$(dirname "$0")/.."
tools/dev/deps.sh build
build=${TRAINSCOPE_BUILD_DIR:-build}
if [[ ! -f "$build/build.ninja" ]]; then
  meson setup "$build" --buildtype=debugoptimized >/dev/null
fi
ninja -C "$build" collector/trainscope-collector agent/trainscope-agent \
  tools/cli/trainscope tools/simtrain/trainscope-simtrain

dir=${TRAINSCOPE_DEMO_DIR:-/tmp/trainscope-demo}
http_port=${TRAINSCOPE_HTTP_PORT:-7600}
ingest_port=${TRAINSCOPE_INGEST_PORT:-7601}
# The agents' sockets and spools live here: it must be ours and closed to other users (the
# probes refuse an agent socket bound by another user anyway).
mkdir -p -m 700 "$dir"
[[ -O "$dir" ]] || { echo "$dir belongs to another user; set TRAINSCOPE_DEMO_DIR" >&2; exit 1; }
chmod 700 "$dir"
mkdir -p "$dir/logs"
# Where the probes write capture files and the agents ship them from (one place per demo).
export TRAINSCOPE_CAPTURE_DIR="$dir/probe-captures"
pids=()
# Stops the newest first, each before the next: the job says goodbye through live agents, and
# the agents deliver what they hold before the collector goes.
cleanup() {
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill "${pids[i]}" 2>/dev/null || true
    wait "${pids[i]}" 2>/dev/null || true
  done
}
trap cleanup EXIT INT TERM

"$build"/collector/trainscope-collector --data-dir "$dir/data" \
  --ingest "tcp://127.0.0.1:$ingest_port" --http "127.0.0.1:$http_port" \
  --ready-file "$dir/collector.ready" >"$dir/logs/collector.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [[ -f "$dir/collector.ready" ]] && break; sleep 0.1; done
[[ -f "$dir/collector.ready" ]] || { echo "collector did not start; see $dir/logs/collector.log" >&2; exit 1; }

for node in node0 node1; do
  "$build"/agent/trainscope-agent --collector "tcp://127.0.0.1:$ingest_port" \
    --endpoint "ipc://$dir/$node.sock" --node "$node" --spool-dir "$dir/spool-$node" \
    --capture-dir "$TRAINSCOPE_CAPTURE_DIR" \
    >"$dir/logs/agent-$node.log" 2>&1 &
  pids+=($!)
done
sleep 0.5

job=demo-$(date +%s)
"$build"/tools/simtrain/trainscope-simtrain --job "$job" --ranks 16 --steps 0 --step-ms 100 \
  --agent "ipc://$dir/node0.sock" --agent "ipc://$dir/node1.sock" \
  --inject straggler:rank=5,from=150,factor=1.4 --truth "$dir/truth.json" \
  >"$dir/logs/simtrain.log" 2>&1 &
pids+=($!)

cat <<MSG

trainscope demo is running (job $job: 16 simulated ranks on 2 nodes, 10 steps/s,
rank 5 becomes a straggler at step 150; the collector then captures a trace of rank 5 and a
healthy rank by itself).

  dashboard / API   http://127.0.0.1:$http_port/      (e.g. /api/v1/jobs)
  CLI               $build/tools/cli/trainscope jobs
                    $build/tools/cli/trainscope summary $job
                    $build/tools/cli/trainscope steps $job --rank 5 --from 140 --to 160
                    $build/tools/cli/trainscope anomalies $job
                    $build/tools/cli/trainscope nodes
                    $build/tools/cli/trainscope captures $job
                    $build/tools/cli/trainscope capture $job --ranks 0,5 --steps 3 --wait --out trace.json
                    $build/tools/cli/trainscope stacks $job --ranks 0-3 --wait
  logs              $dir/logs/

Press Ctrl-C to stop.
MSG
wait
