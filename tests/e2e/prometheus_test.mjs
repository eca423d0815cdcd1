// Prometheus e2e: Debian's prometheus scrapes the collector's /metrics every second while the
// simulator runs; its query API must then hold each rank's step-time series, and
// `promtool check metrics` must find nothing to say about the page (names, units, HELP).
// Skips (77) without a prometheus binary (apt install prometheus).
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Stack, freePort, skip, waitFor } from './browser/stack.mjs';

const kJob = 'prom-e2e';
const kRanks = 4;
const prom = ['/usr/bin/prometheus', process.env.PROMETHEUS].find((p) => p && fs.existsSync(p));
if (!prom) skip('no prometheus binary (apt install prometheus)');
const promtool = path.join(path.dirname(prom), 'promtool');

const stack = new Stack();
let failed = false;
try {
  const base = await stack.startCollector();
  await stack.startAgent('node-a');
  stack.startSim(['--job', kJob, '--ranks', String(kRanks), '--steps', '100000', '--step-ms', '20']);
  const promPort = await freePort();
  const config = path.join(stack.dir, 'prometheus.yml');
  fs.writeFileSync(config, [
    'global:', '  scrape_interval: 1s', '  evaluation_interval: 1s',
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
  const lint = spawnSync(promtool, ['check', 'metrics'], { input: page, encoding: 'utf8' });
  if (lint.error) throw lint.error;
  const findings = (lint.stdout + lint.stderr).trim();
  if (lint.status !== 0 || findings) {
    throw new Error(`promtool check metrics (exit ${lint.status}):\n${findings}`);
  }
  console.log(`promtool check metrics: clean (${page.split('\n').length} lines)`);
  console.log('PASS (base ' + base + ')');
} catch (e) {
  failed = true;
  console.error('FAIL: ' + (e.stack || e));
  for (const n of ['collector', 'prometheus', 'simtrain']) console.error(`--- ${n} ---\n` + stack.log(n).slice(-2000));
} finally {
  stack.cleanup();
}
process.exit(failed ? 1 : 0);
