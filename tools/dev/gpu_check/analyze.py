"""Helpers for .devcheck/run.sh (standard library only; any Python 3.8+).

  analyze.py ports N                      N free TCP ports on 127.0.0.1, one per line
  analyze.py wait-http URL SECONDS        exit 0 once GET URL answers 200
  analyze.py wait-rows URL JOB N SECONDS  exit 0 once the collector holds >= N step rows of JOB
  analyze.py env FILE                     versions (python, torch, CUDA, NCCL, GPU) -> FILE (JSON)
  analyze.py report URL WORK OUT          per-job results from WORK/launches.jsonl and the
                                          collector's API -> OUT/results.json + a summary
"""
import json
import os
import re
import shlex
import socket
import statistics
import sys
import time
import urllib.error
import urllib.parse
import urllib.request


def get(url, timeout=10.0):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except Exception as e:  # noqa: BLE001 - connection refused, timeout...
        return 0, repr(e)


def get_json(url, timeout=20.0):
    status, body = get(url, timeout)
    if status != 200:
        return None, "%s %s" % (status, body[:300])
    try:
        return json.loads(body), None
    except ValueError as e:
        return None, "bad JSON: %s" % e


def cmd_ports(n):
    socks = []
    for _ in range(int(n)):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    for s in socks:
        print(s.getsockname()[1])
        s.close()


def cmd_wait_http(url, seconds):
    deadline = time.time() + float(seconds)
    while time.time() < deadline:
        if get(url, 1.0)[0] == 200:
            return 0
        time.sleep(0.1)
    return 1


def job_row(base, job):
    j, _ = get_json(base + "/api/v1/jobs", 5.0)
    for row in (j or {}).get("jobs", []):
        if row.get("job") == job:
            return row
    return None


def cmd_wait_rows(base, job, n, seconds):
    deadline = time.time() + float(seconds)
    rows = -1
    while time.time() < deadline:
        row = job_row(base, job)
        rows = row.get("step_rows", 0) if row else 0
        if rows >= int(n):
            print("wait-rows: %s has %d step rows" % (job, rows))
            return 0
        time.sleep(0.25)
    print("wait-rows: %s has %d step rows, wanted %s" % (job, rows, n))
    return 1


def cmd_env(path):
    info = {"python": sys.version.split()[0], "executable": sys.executable}
    try:
        import torch
        info["torch"] = torch.__version__
        info["torch_file"] = torch.__file__
        info["cuda_build"] = torch.version.cuda
        info["cuda_available"] = torch.cuda.is_available()
        info["cxx11_abi"] = bool(torch._C._GLIBCXX_USE_CXX11_ABI)
        if torch.cuda.is_available():
            info["device_count"] = torch.cuda.device_count()
            info["device_name"] = torch.cuda.get_device_name(0)
            try:
                v = torch.cuda.nccl.version()
                info["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
            except Exception as e:  # noqa: BLE001
                info["nccl"] = "error: %r" % (e,)
        import torch.distributed as dist
        info["dist_available"] = dist.is_available()
        info["nccl_available"] = dist.is_nccl_available() if dist.is_available() else False
        info["gloo_available"] = dist.is_gloo_available() if dist.is_available() else False
        try:
            import torch.utils.cpp_extension as ce
            info["include_paths"] = [p for p in ce.include_paths() if os.path.isdir(p)]
            info["library_paths"] = [p for p in ce.library_paths() if os.path.isdir(p)]
        except Exception as e:  # noqa: BLE001 - e.g. no setuptools in a Python 3.12 venv
            info["cpp_extension_error"] = repr(e)
            base = os.path.dirname(torch.__file__)
            info["include_paths"] = [p for p in (os.path.join(base, "include"),
                                                 os.path.join(base, "include", "torch", "csrc",
                                                              "api", "include"))
                                     if os.path.isdir(p)]
            info["library_paths"] = [p for p in (os.path.join(base, "lib"),) if os.path.isdir(p)]
        try:
            import torch.distributed.fsdp  # noqa: F401
            info["fsdp_import"] = True
        except Exception as e:  # noqa: BLE001
            info["fsdp_import"] = "error: %r" % (e,)
    except Exception as e:  # noqa: BLE001
        info["torch_error"] = repr(e)
    try:
        import numpy
        info["numpy"] = numpy.__version__
    except Exception:  # noqa: BLE001
        info["numpy"] = None
    for mod in ("zlib", "lzma", "sqlite3", "ssl", "ctypes"):
        try:
            __import__(mod)
        except Exception as e:  # noqa: BLE001 - a carried library shadowing the system's?
            info.setdefault("stdlib_import_errors", {})[mod] = repr(e)
    with open(path, "w") as f:
        json.dump(info, f, indent=1)
    sh = {"TORCH_VER": info.get("torch", ""),
          "CUDA_OK": int(bool(info.get("cuda_available"))),
          "NCCL_OK": int(bool(info.get("nccl_available"))),
          "FSDP_OK": int(info.get("fsdp_import") is True),
          "ABI": int(bool(info.get("cxx11_abi", True))),
          "TORCH_INCS": " ".join("-I" + p for p in info.get("include_paths", [])),
          "TORCH_LIBDIRS": " ".join(info.get("library_paths", []))}
    with open(path + ".sh", "w") as f:
        for k, v in sh.items():
            f.write("%s=%s\n" % (k, shlex.quote(str(v))))
    for k, v in info.items():
        if k not in ("include_paths", "library_paths"):
            print("env: %s = %s" % (k, v))
    return 0


# ------------------------------------------------------------------------------------------
DONE_RE = re.compile(r"^rank (\d+): done, (\d+) steps, last loss (\S+), (?:params|shard) (\w+)",
                     re.M)


def med(xs):
    return statistics.median(xs) if xs else None


def ms(ns):
    return None if ns is None else round(ns / 1e6, 3)


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def launch_summary(launch):
    """What the script printed and timed, per rank, for one launch (plain or run)."""
    out = {"rcs": launch.get("rcs"), "wall_s": launch.get("wall_s"), "ranks": {}}
    step_s = []
    for r, log in enumerate(launch.get("logs", [])):
        text = read(log)
        m = DONE_RE.findall(text)
        rr = {"done": None, "steps": None}
        if m:
            rank, steps, loss, dig = m[-1]
            rr = {"done": "%s steps, loss %s, digest %s" % (steps, loss, dig),
                  "steps": int(steps), "loss": loss, "digest": dig}
        rr["trainscope_lines"] = [ln for ln in text.splitlines() if ln.startswith("trainscope")][:8]
        rr["traceback"] = "Traceback" in text
        if rr["traceback"] or launch.get("rcs", [0])[r:r + 1] not in ([0], []):
            rr["log_tail"] = text[-1500:]
        times = launch.get("times", [])
        if r < len(times):
            try:
                with open(times[r]) as f:
                    t = json.load(f)
                kept = t["step_s"][t.get("warmup", 0):] or t["step_s"]
                rr["script_step_ms_median"] = round(1e3 * med(kept), 3)
                rr["script_step_ms_p10_p90"] = [round(1e3 * sorted(kept)[int(f * (len(kept) - 1))], 3)
                                                for f in (0.1, 0.9)]
                step_s.extend(kept)
            except (OSError, ValueError, KeyError, TypeError):
                pass
        out["ranks"][str(r)] = rr
    out["script_step_ms_median"] = round(1e3 * med(step_s), 3) if step_s else None
    out["ok"] = bool(launch.get("rcs")) and all(rc == 0 for rc in launch["rcs"]) and all(
        v.get("done") for v in out["ranks"].values())
    return out


def api_summary(base, job, nranks, steps_run, warmup, work):
    q = urllib.parse.quote(job, safe="")
    res = {}
    raw = {}
    for name, path in (("job", None), ("ranks", "/ranks"), ("steps", "/steps?limit=100000&detail=1"),
                       ("summary", "/summary?limit=100000"), ("topology", "/topology"),
                       ("anomalies", "/anomalies")):
        if path is None:
            raw[name] = job_row(base, job)
            continue
        j, err = get_json(base + "/api/v1/jobs/" + q + path, 30.0)
        raw[name] = j if j is not None else {"error": err}
    os.makedirs(os.path.join(work, "api"), exist_ok=True)
    with open(os.path.join(work, "api", job + ".json"), "w") as f:
        json.dump(raw, f)
    jr = raw["job"] or {}
    res["job_row"] = {k: jr.get(k) for k in ("world_size", "ranks_seen", "ranks_ended",
                                               "latest_step", "step_rows", "state")}
    rows = raw["steps"].get("steps", []) if isinstance(raw["steps"], dict) else []
    res["steps_truncated"] = raw["steps"].get("truncated") if isinstance(raw["steps"], dict) else None
    res["step_rows_stored"] = len(rows)
    res["step_rows_expected"] = nranks * steps_run if steps_run else None
    per_rank = {}
    for row in rows:
        per_rank.setdefault(row["rank"], []).append(row)
    res["ranks_seen"] = sorted(per_rank)
    res["rows_per_rank"] = {str(k): len(v) for k, v in sorted(per_rank.items())}
    steps_seen = sorted({row["step"] for row in rows})
    res["steps_seen"] = [steps_seen[0], steps_seen[-1], len(steps_seen)] if steps_seen else None
    res["ranks_api"] = [{k: r.get(k) for k in ("rank", "world_size", "node", "latest_step", "ended",
                                                "ended_step")}
                        for r in (raw["ranks"].get("ranks", []) if isinstance(raw["ranks"], dict)
                                  else [])]
    # Step times: every row after the warm-up steps (the script drops its first `warmup`).
    first = steps_seen[0] if steps_seen else 0
    kept = [r for r in rows if r["step"] >= first + warmup] or rows
    fields = ("duration_ns", "compute_ns", "comm_ns", "exposed_comm_ns", "data_ns",
              "collective_ns", "exposed_collective_ns")
    res["median_ms"] = {f: ms(med([r.get(f, 0) or 0 for r in kept])) for f in fields}
    res["median_ms_per_rank"] = {str(k): ms(med([r["duration_ns"] for r in v if r in kept] or
                                                [r["duration_ns"] for r in v]))
                                 for k, v in sorted(per_rank.items())}
    summ = raw["summary"].get("steps", []) if isinstance(raw["summary"], dict) else []
    res["summary_median_of_step_medians_ms"] = ms(med([s["median_ns"] for s in summ
                                                       if s["step"] >= first + warmup]))
    res["records_dropped"] = sum(r.get("dropped", 0) or 0 for r in rows)
    res["records_median"] = med([r.get("records", 0) for r in rows])
    # Operators and collectives, summed over every stored step of every rank.
    ops = {}
    for row in rows:
        for o in row.get("ops", []):
            a = ops.setdefault(o["name"], [0, 0, 0])
            a[0] += o["count"]
            a[1] += o["total_ns"]
            a[2] = max(a[2], o["max_ns"])
    top = sorted(ops.items(), key=lambda kv: -kv[1][1])
    res["ops_distinct"] = len(ops)
    res["ops_total_count"] = sum(v[0] for v in ops.values())
    res["ops_top"] = [{"name": k, "count": v[0], "total_ms": ms(v[1]),
                       "mean_us": round(v[1] / v[0] / 1e3, 2) if v[0] else None,
                       "max_ms": ms(v[2])} for k, v in top[:15]]
    gpuish = [k for k in ops if re.search(r"cuda|cudnn|cublas|nccl|kernel|memcpy|Memcpy", k, re.I)]
    res["ops_gpu_named"] = sorted(gpuish)[:20]
    res["ops_rows_with_ops"] = sum(1 for r in rows if r.get("ops"))
    colls = {}
    per_step_coll = {}
    for row in rows:
        for c in row.get("collectives", []):
            # One entry per op, group and size in a step: DDP's buckets, the logged loss...
            key = "%s@%s/%dB" % (c["op"], c.get("group", ""), c["bytes"])
            a = colls.setdefault(key, {"count": 0, "bytes": 0, "total_ns": 0, "max_ns": 0,
                                       "steps": 0, "device_steps": 0, "host_total_ns": 0,
                                       "seq": [None, None], "nccl": ""})
            if c.get("device_timed"):
                # Timed by trainscope's NCCL profiler plugin (docs/GPU.md).
                a["device_steps"] += 1
                a["host_total_ns"] += c.get("host_total_ns", 0)
                lo, hi = a["seq"]
                a["seq"] = [c["first_seq"] if lo is None else min(lo, c["first_seq"]),
                            c["last_seq"] if hi is None else max(hi, c["last_seq"])]
                a["nccl"] = "%s/%s/%s/%sch" % (c.get("algorithm"), c.get("protocol"),
                                                c.get("datatype"), c.get("channels"))
            a["count"] += c["count"]
            a["bytes"] += c["bytes"]
            a["total_ns"] += c["total_ns"]
            a["max_ns"] = max(a["max_ns"], c["max_ns"])
            a["steps"] += 1
            per_step_coll.setdefault(key, []).append(c["total_ns"])
    res["collectives"] = {k: {"count": v["count"], "steps_with": v["steps"],
                              "bytes_per_step": v["bytes"] // max(1, v["steps"]),
                              "per_call_mean_ms": ms(v["total_ns"] / max(1, v["count"])),
                              "per_step_median_ms": ms(med(per_step_coll[k])),
                              "max_ms": ms(v["max_ns"]),
                              "device_timed_rows": v["device_steps"],
                              "host_per_call_mean_ms": ms(v["host_total_ns"] / max(1, v["count"]))
                              if v["device_steps"] else None,
                              "nccl_seq": v["seq"], "nccl": v["nccl"]}
                         for k, v in sorted(colls.items())}
    res["device_dropped"] = sum(r.get("device_dropped", 0) or 0 for r in rows)
    res["device_comm_ms_median"] = ms(med([r.get("device_comm_ns", 0) or 0 for r in rows]))
    p2p = sum(len(r.get("p2p", []) or []) for r in rows)
    res["p2p_entries"] = p2p
    an = raw["anomalies"].get("anomalies", []) if isinstance(raw["anomalies"], dict) else []
    res["anomalies"] = [{k: a.get(k) for k in ("kind", "ranks", "onset_step", "detected_step",
                                                "magnitude", "state", "summary")} for a in an]
    topo = raw["topology"] if isinstance(raw["topology"], dict) else {}
    res["topology"] = {k: topo.get(k) for k in ("declared", "ranks_declared", "sizes")
                       if k in topo}
    res["topology_groups"] = len(topo.get("groups", []) or [])
    return res


def cmd_report(base, work, out):
    launches = []
    notes = []
    with open(os.path.join(work, "launches.jsonl")) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                d = json.loads(line)
            except ValueError:
                notes.append({"bad_line": line})
                continue
            (notes if "note" in d else launches).append(d)
    env = {}
    for name in ("env.json", "torchlib.json"):
        try:
            with open(os.path.join(work, name)) as f:
                env[name[:-5]] = json.load(f)
        except (OSError, ValueError):
            pass
    jobs = {}
    order = []
    for ln in launches:
        tag = ln["tag"]
        if tag not in jobs:
            jobs[tag] = {"job": None, "nranks": ln.get("nranks"), "script": ln.get("script"),
                         "args": ln.get("args")}
            order.append(tag)
        jobs[tag][ln["mode"]] = launch_summary(ln)
        if ln["mode"] == "run":
            jobs[tag]["job"] = ln.get("job")
    for n in notes:
        if n.get("tag") in jobs:
            jobs[n["tag"]].setdefault("notes", []).append(n["note"])
    for tag in order:
        j = jobs[tag]
        plain, run = j.get("plain"), j.get("run")
        if plain and run:
            pd = [v.get("done") for _, v in sorted(plain["ranks"].items())]
            rd = [v.get("done") for _, v in sorted(run["ranks"].items())]
            j["training_identical"] = bool(pd) and all(pd) and pd == rd
            if j.get("plain2"):
                p2 = [v.get("done") for _, v in sorted(j["plain2"]["ranks"].items())]
                j["plain_repeat_identical"] = bool(p2) and all(p2) and p2 == pd
            if plain.get("script_step_ms_median") and run.get("script_step_ms_median"):
                j["overhead_pct"] = round(100.0 * (run["script_step_ms_median"] /
                                                   plain["script_step_ms_median"] - 1.0), 2)
        if run and j.get("job"):
            steps_run = None
            done_steps = [v.get("steps") for v in run["ranks"].values() if v.get("steps")]
            if done_steps:
                steps_run = max(done_steps)
            warm = 10 if steps_run and steps_run >= 50 else 3
            j["api"] = api_summary(base, j["job"], j["nranks"] or 1, steps_run, warm, work)
            a = j["api"]
            if run.get("script_step_ms_median") and a["median_ms"].get("duration_ns"):
                j["api_vs_script_step_ratio"] = round(a["median_ms"]["duration_ns"] /
                                                      run["script_step_ms_median"], 3)
    metrics_status, metrics = get(base + "/metrics", 10.0)
    with open(os.path.join(work, "metrics.txt"), "w") as f:
        f.write(metrics)
    mnames = sorted({m.group(1) for m in re.finditer(r"^(trainscope_[a-z_0-9]+)", metrics, re.M)})
    nodes, _ = get_json(base + "/api/v1/nodes", 10.0)
    results = {"env": env, "notes": [n for n in notes if n.get("tag") not in jobs],
               "jobs": jobs, "order": order,
               "metrics": {"status": metrics_status, "lines": metrics.count("\n"),
                           "names": mnames,
                           "job_lines": [ln for ln in metrics.splitlines()
                                         if "devcheck" in ln and not ln.startswith("#")][:40]},
               "nodes": nodes}
    results["verdict"] = verdict(results)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    print_summary(results)
    return 0


def verdict(res):
    v = []
    for tag in res["order"]:
        j = res["jobs"][tag]
        plain, run = j.get("plain"), j.get("run")
        if plain and not plain["ok"] and not run:
            v.append("%s: plain run failed (rcs %s): not monitored" % (tag, plain["rcs"]))
            continue
        if run and not run["ok"]:
            v.append("%s: FAIL monitored run failed (rcs %s)" % (tag, run["rcs"]))
        if "training_identical" in j and not j["training_identical"]:
            if j.get("plain_repeat_identical") is False:
                v.append("%s: WARN results differ with monitoring, but two plain runs differ "
                         "too (the job is not deterministic here)" % tag)
            else:
                v.append("%s: FAIL training differs with monitoring%s" % (
                    tag, " (two plain runs agree)" if j.get("plain_repeat_identical") else ""))
        a = j.get("api")
        if a:
            exp = a["step_rows_expected"]
            if exp is not None and a["step_rows_stored"] != exp:
                v.append("%s: FAIL %d step rows stored, %d expected" % (tag, a["step_rows_stored"],
                                                                        exp))
            if a["anomalies"]:
                v.append("%s: WARN anomalies on a healthy job: %s" % (
                    tag, ", ".join(x["kind"] for x in a["anomalies"])))
            if not a["collectives"]:
                v.append("%s: FAIL no collectives stored" % tag)
            elif "nccl" in tag and not any(c["device_timed_rows"]
                                           for c in a["collectives"].values()):
                v.append("%s: FAIL no NCCL device times (trainscope's NCCL profiler plugin; "
                         "docs/GPU.md)" % tag)
            if not a["ops_distinct"]:
                v.append("%s: WARN no operators stored" % tag)
            r = j.get("api_vs_script_step_ratio")
            if r is not None and not 0.8 <= r <= 1.25:
                v.append("%s: WARN API step median / script's = %s" % (tag, r))
        if j.get("overhead_pct") is not None and j["overhead_pct"] > 10:
            v.append("%s: WARN overhead %.1f%%" % (tag, j["overhead_pct"]))
    return v or ["no failure or warning"]


def print_summary(res):
    p = print
    p("=" * 100)
    p("SUMMARY")
    env = res["env"].get("env", {})
    p("env: python %s torch %s cuda %s nccl %s gpu %s numpy %s" % (
        env.get("python"), env.get("torch"), env.get("cuda_build"), env.get("nccl"),
        env.get("device_name"), env.get("numpy")))
    tl = res["env"].get("torchlib", {})
    p("libtrainscope_torch.so: %s" % (tl.get("status"),))
    for n in res["notes"]:
        p("note: %s" % n)
    for tag in res["order"]:
        j = res["jobs"][tag]
        p("-" * 100)
        p("%s (%s ranks, job %s): %s %s" % (tag, j["nranks"], j.get("job"), j.get("script"),
                                             j.get("args")))
        for n in j.get("notes", []):
            p("  note: %s" % n)
        for mode in ("plain", "run", "plain2"):
            m = j.get(mode)
            if not m:
                continue
            p("  %-5s rcs %s wall %ss script step median %s ms" % (
                mode, m["rcs"], m["wall_s"], m["script_step_ms_median"]))
            for r, rr in sorted(m["ranks"].items()):
                p("        rank %s: %s%s" % (r, rr.get("done"),
                                            " TRACEBACK" if rr.get("traceback") else ""))
                for ln in rr.get("trainscope_lines", [])[:3]:
                    p("          | %s" % ln[:200])
                if rr.get("log_tail"):
                    p("          tail: " + rr["log_tail"][-600:].replace("\n", "\n          | "))
        if "training_identical" in j:
            p("  training identical with/without monitoring: %s%s" % (
                j["training_identical"], "" if "plain_repeat_identical" not in j else
                "; two plain runs identical: %s" % j["plain_repeat_identical"]))
        if "overhead_pct" in j:
            p("  overhead (script step median, run vs plain): %+.2f%%" % j["overhead_pct"])
        a = j.get("api")
        if a:
            p("  API: rows %s/%s expected, ranks %s, steps %s, dropped records %s, state %s" % (
                a["step_rows_stored"], a["step_rows_expected"], a["ranks_seen"], a["steps_seen"],
                a["records_dropped"], a["job_row"].get("state")))
            p("  API medians ms: %s" % a["median_ms"])
            p("  API step median %s ms vs script %s ms (ratio %s); summary median %s ms" % (
                a["median_ms"]["duration_ns"], j["run"]["script_step_ms_median"],
                j.get("api_vs_script_step_ratio"), a["summary_median_of_step_medians_ms"]))
            p("  ops: %d distinct, %d calls, in %d rows; GPU-named: %s" % (
                a["ops_distinct"], a["ops_total_count"], a["ops_rows_with_ops"],
                a["ops_gpu_named"][:8]))
            for o in a["ops_top"][:8]:
                p("     %-45s n=%-7d total %9.2f ms mean %8.2f us" % (
                    o["name"][:45], o["count"], o["total_ms"] or 0, o["mean_us"] or 0))
            for k, c in a["collectives"].items():
                p("  coll %-32s n=%-6d rows %-5d bytes/row %-10d per-call %s ms, per-row "
                  "median %s ms, max %s ms" % (k, c["count"], c["steps_with"], c["bytes_per_step"],
                                               c["per_call_mean_ms"], c["per_step_median_ms"],
                                               c["max_ms"]))
                if c["device_timed_rows"]:
                    p("       device-timed in %d rows (host per-call %s ms), NCCL seq %s, %s" % (
                        c["device_timed_rows"], c["host_per_call_mean_ms"], c["nccl_seq"],
                        c["nccl"]))
            p("  device comm median %s ms per step, %d NCCL ops not timed" % (
                a["device_comm_ms_median"], a["device_dropped"]))
            p("  anomalies: %s" % ([(x["kind"], x["ranks"], x["summary"]) for x in a["anomalies"]]
                                   or "none"))
            p("  topology: %s groups %s" % (a["topology"], a["topology_groups"]))
    p("-" * 100)
    p("metrics: HTTP %s, %d lines, %d trainscope_* names" % (
        res["metrics"]["status"], res["metrics"]["lines"], len(res["metrics"]["names"])))
    p("VERDICT:")
    for line in res["verdict"]:
        p("  " + line)
    p("=" * 100)


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    cmd, rest = argv[1], argv[2:]
    if cmd == "ports":
        return cmd_ports(*rest) or 0
    if cmd == "wait-http":
        return cmd_wait_http(*rest)
    if cmd == "wait-rows":
        return cmd_wait_rows(*rest)
    if cmd == "env":
        return cmd_env(*rest)
    if cmd == "report":
        return cmd_report(*rest)
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
