// Prometheus e2e: Debian's prometheus scrapes the collector's /metrics every second while the
// simulator runs; its query API must then hold each rank's step-time series, and
// `promtool check metrics` must find nothing to say about the page (names, units, HELP).
// The shipped rules (dist/prometheus) and dashboard (dist/grafana) are checked against the same
// collector: every trainscope_* name they use is a family the page declares, Prometheus loads
// the rules and evaluates each without an error, and each dashboard query runs without one
// (an empty answer is fine: there is no GPU here).
// Skips (77) without a prometheus binary (apt install prometheus).
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Stack, freePort, skip, waitFor } from './browser/stack.mjs';
import { dashboardQueries, metricNames, pageFamilies, ruleExprs, runnable, undeclared } from '../dist/dist_queries.mjs';

const kJob = 'prom-e2e';
const kRanks = 4;
const prom = ['/usr/bin/prometheus', process.env.PROMETHEUS].find((p) => p && fs.existsSync(p));
if (!prom) skip('no prometheus binary (apt install prometheus)');
const promtool = path.join(path.dirname(prom), 'promtool');

const stack = new Stack();
let failed = false;
try {
  // A webhook nobody listens on (loopback port 1): the notify counters are on the page too, for
  // promtool to check.
  const base = await stack.startCollector(['--webhook', 'http://127.0.0.1:1/hook']);
  await stack.startAgent('node-a');
  stack.startSim(['--job', kJob, '--ranks', String(kRanks), '--steps', '100000', '--step-ms', '20']);
  const promPort = await freePort();
  const config = path.join(stack.dir, 'prometheus.yml');
  const root = process.env.TRAINSCOPE_SOURCE_ROOT;
  const rulesFile = path.join(root, 'dist', 'prometheus', 'trainscope-rules.yml');
  const dashboard = JSON.parse(fs.readFileSync(path.join(root, 'dist', 'grafana', 'trainscope-dashboard.json'), 'utf8'));
  fs.writeFileSync(config, [
    'global:', '  scrape_interval: 1s', '  evaluation_interval: 1s',
    'rule_files:', `  - ${JSON.stringify(rulesFile)}`,
    'scrape_configs:', '  - job_name: trainscope', '    static_configs:',
    `      - targets: ['127.0.0.1:${stack.httpPort}']`, ''].join('\n'));
  stack.run('prometheus', [prom, `--config.file=${config}`, `--web.listen-address=127.0.0.1:${promPort}`,
    `--storage.tsdb.path=${path.join(stack.dir, 'tsdb')}`]);
  const query = async (q) => {
    const r = await fetch(`http://127.0.0.1:${promPort}/api/v1/query?query=${encodeURIComponent(q)}`);
    const j = await r.json();
    if (j.status !== 'success') throw new Error(JSON.stringify(j));
    return j.data.result;
  };
  let series = [];
  await waitFor(async () => {
    series = await query(`trainscope_step_last_duration_seconds{training_job="${kJob}"}`);
    return series.length === kRanks;
  }, 45000, `prometheus to hold ${kRanks} step-time series\n` + stack.log('prometheus').slice(-2000));
  const ranks = series.map((s) => Number(s.metric.rank)).sort((a, b) => a - b);
  console.log('ranks with a step-time series: ' + ranks.join(','));
  if (ranks.join(',') !== [...Array(kRanks).keys()].join(',')) throw new Error('ranks ' + ranks);
  for (const s of series) {
    const v = Number(s.value[1]);
    if (!(v > 0.005 && v < 1)) throw new Error(`rank ${s.metric.rank} step time ${v} s is implausible`);
    if (s.metric.job !== 'trainscope') throw new Error('scrape job label: ' + JSON.stringify(s.metric));
  }
  const hist = await query(`sum by (rank) (trainscope_step_duration_seconds_count{training_job="${kJob}"})`);
  if (hist.length !== kRanks) throw new Error('histogram series per rank: ' + hist.length);
  const up = await query('up{job="trainscope"}');
  if (!up.length || up[0].value[1] !== '1') throw new Error('scrape target not up: ' + JSON.stringify(up));
  // The page as Prometheus's own linter reads it: every problem it names fails the test.
  const page = await (await fetch(`${base}/metrics`)).text();
  if (!page.includes('# TYPE trainscope_notify_dropped_total counter')) {
    throw new Error('no notify counters on the page with --webhook');
  }
  const lint = spawnSync(promtool, ['check', 'metrics'], { input: page, encoding: 'utf8' });
  if (lint.error) throw lint.error;
  const findings = (lint.stdout + lint.stderr).trim();
  if (lint.status !== 0 || findings) {
    throw new Error(`promtool check metrics (exit ${lint.status}):\n${findings}`);
  }
  console.log(`promtool check metrics: clean (${page.split('\n').length} lines)`);

  // Prometheus loaded the shipped rules and has evaluated each without an error.
  const rules = ruleExprs(fs.readFileSync(rulesFile, 'utf8'));
  let loaded = [];
  await waitFor(async () => {
    const r = await (await fetch(`http://127.0.0.1:${promPort}/api/v1/rules`)).json();
    loaded = r.data.groups.flatMap((g) => g.rules);
    return loaded.length > 0 && loaded.every((x) => x.lastEvaluation && !x.lastEvaluation.startsWith('0001'));
  }, 15000, 'prometheus to load and evaluate the rules\n' + stack.log('prometheus').slice(-2000));
  if (loaded.length !== rules.length) throw new Error(`prometheus loaded ${loaded.length} rules, the file holds ${rules.length}`);
  const unhealthy = loaded.filter((x) => x.health !== 'ok');
  if (unhealthy.length) {
    throw new Error('rules failing: ' + unhealthy.map((x) => `${x.name}: ${x.lastError}`).join('; '));
  }
  console.log(`prometheus evaluates all ${loaded.length} rules: health ok`);
  // The rules (as Prometheus parsed them) and the dashboard name only families this page
  // declares: a GPU family is declared, empty, without GPUs; a histogram's series add _bucket,
  // _sum and _count.
  const queries = dashboardQueries(dashboard);
  const used = metricNames([...loaded.map((r) => r.query), ...queries.map((q) => q.expr)]);
  const missing = undeclared(used, pageFamilies(page));
  if (missing.length) throw new Error(`not on the collector's /metrics: ${missing.join(', ')}`);
  console.log(`rules and dashboard (${queries.length} queries) use ${used.size} metrics, all on the page`);
  // Every dashboard query (template variables and Grafana's intervals filled in) runs, once
  // Prometheus holds enough scrapes for a rate over 1m to have a value.
  await waitFor(async () => (await query('rate(trainscope_ingest_items_stored_total[1m])')).length > 0,
    15000, 'two scrapes of the ingest counters');
  const empty = [];
  for (const q of queries) {
    let result;
    try {
      result = await query(runnable(q.expr, kJob));
    } catch (e) {
      throw new Error(`dashboard query of "${q.where}" fails: ${q.expr}\n${e.message}`);
    }
    if (!result.length) empty.push(q.where);
  }
  console.log(`dashboard: ${queries.length} queries run; empty here: ${empty.join(", ") || "none"}`);
  console.log('PASS (base ' + base + ')');
} catch (e) {
  failed = true;
  console.error('FAIL: ' + (e.stack || e));
  for (const n of ['collector', 'prometheus', 'simtrain']) console.error(`--- ${n} ---\n` + stack.log(n).slice(-2000));
} finally {
  stack.cleanup();
}
process.exit(failed ? 1 : 0);
