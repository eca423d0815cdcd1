// The collector's HTTP route table: every route the server answers, in one place (docs/API.md's
// route table is generated from it: `trainscope-collector --list-routes`). The handlers are Api's
// (api.cpp, capture_api.cpp, import_api.cpp); the server (server.cpp) is only the transport.
#include <vector>

#include "collector/http/api.h"
#include "collector/http/router.h"
#include "collector/http/static_files.h"

namespace trainscope::http {

using Q = std::vector<std::string_view>;

const Router& Api::router() {
  static const Router kRouter(
      {
          {"GET", "/healthz", Q{}, [](const Api& a, const RouteRequest&) { return a.healthz(); },
           "`{\"status\":\"ok\"}` while the collector serves"},
          {"GET", "/metrics", std::nullopt,
           [](const Api& a, const RouteRequest&) { return a.metrics(); },
           "Prometheus text: step times, bandwidth, agents, storage, ingest and HTTP counters, "
           "the collector's resident set and heap (in use / free)"},
          {"GET", kLivePath, std::nullopt,
           [](const Api& a, const RouteRequest& r) { return a.live(r.webSocketUpgrade); },
           "the live feed, a WebSocket (`ws://`): a snapshot, then every change"},
          {"GET", "/api/v1/jobs", Q{"limit", "offset"},
           [](const Api& a, const RouteRequest& r) { return a.jobs(r.query()); },
           "jobs, the newest first: state, world size, latest step (`limit=` up to 10,000, "
           "default 1,000; `offset=`; `total` and `truncated` say what is left)"},
          {"GET", "/api/v1/jobs/{job}/ranks", Q{},
           [](const Api& a, const RouteRequest& r) { return a.ranks(r.param("job")); },
           "a job's ranks: host, node, pid, latest step, `state` (`running`; `silent`: nothing "
           "from it for 30 s, as makes a job stale; `ended`), the GPU each uses with its latest "
           "clock, temperature and throttling (and coordinates when declared)"},
          {"GET", "/api/v1/jobs/{job}/topology", Q{},
           [](const Api& a, const RouteRequest& r) { return a.topology(r.param("job")); },
           "a job's parallel layout: axis sizes, each rank's coordinates, the groups"},
          {"GET", "/api/v1/jobs/{job}/steps", Q{"rank", "from", "to", "limit", "detail"},
           [](const Api& a, const RouteRequest& r) { return a.steps(r.param("job"), r.query()); },
           "step reports (`detail=1`: operators, collectives, parallel detail)"},
          {"GET", "/api/v1/jobs/{job}/summary", Q{"from", "to", "limit"},
           [](const Api& a, const RouteRequest& r) { return a.summary(r.param("job"), r.query()); },
           "min/median/max step time per step, slowest rank"},
          {"GET", "/api/v1/jobs/{job}/heatmap", Q{"from", "to"},
           [](const Api& a, const RouteRequest& r) { return a.heatmap(r.param("job"), r.query()); },
           "compute time per rank and step, compact (the dashboard's heatmap)"},
          {"GET", "/api/v1/jobs/{job}/parallel", Q{"from", "to"},
           [](const Api& a, const RouteRequest& r) {
             return a.parallel(r.param("job"), r.query());
           },
           "pipeline bubble, communication overlap, MFU/HFU and all-to-all share per rank and "
           "step, bubble per stage, compact"},
          {"GET", "/api/v1/jobs/{job}/anomalies", Q{},
           [](const Api& a, const RouteRequest& r) { return a.jobAnomalies(r.param("job")); },
           "a job's anomalies (kinds `step_shift`, `straggler`, `slow_comm`, `op_regression`, "
           "`hang`, `spike`, `stage_imbalance`, `workload_imbalance`, `expert_imbalance`, "
           "`gpu_fault`; state "
           "`open`, `resolved` with `resolved_step`, or `ended` with `ended_step`: its job ended "
           "while it was open — every rank said goodbye, or nothing of the job for "
           "`--job-end-idle`, default 600 s; `trainscope_anomalies_open` counts open ones only)"},
          {"GET", "/api/v1/anomalies", Q{"since"},
           [](const Api& a, const RouteRequest& r) { return a.anomaliesSince(r.query()); },
           "anomalies of every job updated since `since` (ns since the epoch)"},
          {"GET", "/api/v1/nodes", Q{}, [](const Api& a, const RouteRequest&) { return a.nodes(); },
           "agents: host load, clock offset, spool, and each GPU's latest reading"},
          {"GET", "/api/v1/nodes/{node}/gpus", Q{"from", "to", "limit"},
           [](const Api& a, const RouteRequest& r) {
             return a.nodeGpus(r.param("node"), r.query());
           },
           "a node's GPU samples (NVML: utilisation, memory, power, clocks, throttling, ECC, "
           "NVLink) and Xid/ECC events; `from`/`to` ns since the epoch, the newest `limit` "
           "samples (default 600, at most 3,600)"},
          {"GET", "/api/v1/jobs/{job}/captures", Q{},
           [](const Api& a, const RouteRequest& r) { return a.jobCaptures(r.param("job")); },
           "a job's captures, automatic ones too (docs/CAPTURE.md)"},
          {"POST", "/api/v1/jobs/{job}/captures", Q{},
           [](const Api& a, const RouteRequest& r) {
             return a.startCapture(r.param("job"), r.body);
           },
           "starts a capture (JSON body: ranks, steps, history, ...)"},
          {"GET", "/api/v1/captures/{id}", Q{},
           [](const Api& a, const RouteRequest& r) { return a.getCapture(r.param("id")); },
           "one capture with each rank's progress"},
          {"GET", "/api/v1/captures/{id}/trace", Q{},
           [](const Api& a, const RouteRequest& r) {
             return a.captureFile(r.param("id"), std::nullopt, r.acceptsGzip);
           },
           "the merged, clock-aligned Chrome trace"},
          {"GET", "/api/v1/captures/{id}/ranks/{rank}", Q{},
           [](const Api& a, const RouteRequest& r) {
             return a.captureFile(r.param("id"), r.param("rank"), r.acceptsGzip);
           },
           "one rank's trace file"},
          {"POST", "/api/v1/jobs/{job}/imports", Q{},
           [](const Api& a, const RouteRequest& r) { return a.openImport(r.param("job"), r.body); },
           "opens an import of existing traces (`trainscope import`)"},
          {"PUT", "/api/v1/imports/{id}/files/{name}", Q{"offset"},
           [](const Api& a, const RouteRequest& r) {
             return a.putImportFile(r.param("id"), r.param("name"), r.query(), r.body);
           },
           "uploads a chunk of one file of the import at `offset`"},
          {"POST", "/api/v1/imports/{id}/commit", std::nullopt,
           [](const Api& a, const RouteRequest& r) {
             return a.commitImport(r.param("id"), r.body);
           },
           "stores the whole import, all or nothing"},
          {"DELETE", "/api/v1/imports/{id}", std::nullopt,
           [](const Api& a, const RouteRequest& r) { return a.abortImport(r.param("id")); },
           "drops an import"},
          {"GET", "/{file...}", std::nullopt,
           [](const Api& a, const RouteRequest& r) { return a.staticFile(r); },
           "the dashboard's files (`--web-root`); `/` is `index.html`"},
      },
      "api");
  return kRouter;
}

std::string routeListing() {
  return Api::router().listing();
}

}  // namespace trainscope::http
