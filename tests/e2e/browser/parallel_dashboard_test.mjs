// Browser e2e of the parallel layout on the job page: a collector, an agent and a simulated
// tp2 x pp2 x dp2 pipeline job (stage 1 computing 1.5x longer, and one tp worker of stage 1
// 1.6x slower from step 40) in Debian's chromium. The page offers grouping by stage / replica / tp
// (stage first), the heatmap's rows follow it (order and labelled bands, checked against the
// topology API), the ranks table shows coordinates and bubble under one header row per group,
// the per-stage bubble chart draws one line per stage with the means the /parallel route
// gives, and the anomalies show where they are and their estimated gain, largest first.
// Screenshots go to $TRAINSCOPE_ARTIFACT_DIR.
import fs from 'node:fs';
import path from 'node:path';
import { Stack, chromiumPath, playwright, waitFor } from './stack.mjs';

const kJob = 'par-e2e';

const exe = chromiumPath();
const { chromium } = await playwright();
const artifacts = process.env.TRAINSCOPE_ARTIFACT_DIR || '.';
fs.mkdirSync(artifacts, { recursive: true });

// The order the page must show for grouping `by`, from the topology API's coordinates.
function expectedOrder(ranks, axes) {
  return [...ranks].sort((a, b) => {
    for (const x of axes) if (a.coords[x] !== b.coords[x]) return a.coords[x] - b.coords[x];
    return a.rank - b.rank;
  }).map((r) => r.rank).join(',');
}

const stack = new Stack();
let browser;
let failed = false;
try {
  const base = await stack.startCollector();
  await stack.startAgent('node-a');
  const sim = stack.startSim(['--job', kJob, '--parallel', 'tp=2,pp=2,dp=2', '--microbatches', '4',
    '--steps', '100000', '--step-ms', '20', '--inject', 'stage:pp=1,factor=1.5',
    '--inject', 'worker:dp=1,pp=1,factor=1.6,from=40']);
  const api = async (p) => (await fetch(base + p)).json();
  await waitFor(async () => (await api(`/api/v1/jobs/${kJob}/topology`)).ranks_declared === 8, 20000,
    'all 8 ranks to declare their groups');
  const topo = await api(`/api/v1/jobs/${kJob}/topology`);
  console.log('layout: ' + JSON.stringify(topo.layout));
  // Both faults found, then the job stops: the page is checked against data that no longer
  // moves (the newest step's rows would otherwise still be arriving between page and API).
  await waitFor(async () => {
    const list = (await api(`/api/v1/jobs/${kJob}/anomalies`)).anomalies;
    return list.filter((a) => a.evidence.estimated_gain !== undefined).length >= 2;
  }, 90000, 'two anomalies with an estimated gain');
  sim.kill('SIGTERM');
  await new Promise((r) => sim.once('exit', r));
  await new Promise((r) => setTimeout(r, 1500));  // the agent's last batch

  browser = await chromium.launch({ executablePath: exe, args: ['--no-sandbox', '--disable-gpu'] });
  const page = await browser.newPage({ viewport: { width: 1400, height: 1800 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(`${base}/#/jobs/${encodeURIComponent(kJob)}`);
  await page.waitForSelector('#app[data-ready="1"]', { timeout: 30000 });

  // Grouping: offered, stage by default, and the heatmap's rows follow it.
  await page.waitForSelector('#group-box:not([style*="none"])', { timeout: 10000 });
  const choices = await page.$$eval('#group-by option', (os) => os.map((o) => o.value));
  if (choices.join(',') !== 'rank,pp,dp,tp') throw new Error('grouping choices: ' + choices);
  if ((await page.inputValue('#group-by')) !== 'pp') throw new Error('a pipeline job does not start grouped by stage');
  const cases = [['pp', ['pp', 'dp', 'tp'], 'stage'], ['dp', ['dp', 'pp', 'tp'], 'replica'], ['tp', ['tp', 'pp', 'dp'], 'tp']];
  for (const [by, axes, name] of cases) {
    await page.selectOption('#group-by', by);
    const order = await page.getAttribute('#heatmap', 'data-row-order');
    const groups = JSON.parse(await page.getAttribute('#heatmap', 'data-groups'));
    console.log(`grouped by ${by}: rows ${order}, bands ${JSON.stringify(groups)}`);
    if (order !== expectedOrder(topo.ranks, axes)) throw new Error(`heatmap rows by ${by}: ${order}`);
    if (JSON.stringify(groups) !== JSON.stringify([[`${name} 0`, 4], [`${name} 1`, 4]])) throw new Error(`bands by ${by}: ${JSON.stringify(groups)}`);
    const headers = await page.$$eval('#ranks tr.group-row', (rs) => rs.map((r) => r.textContent));
    if (headers.length !== 2 || !headers[0].startsWith(`${name} 0 — 4 ranks`)) throw new Error(`ranks table groups by ${by}: ${headers}`);
  }
  await page.selectOption('#group-by', 'pp');
  for (const key of ['pp', 'dp', 'tp', 'bubble', 'overlap']) {
    if (!(await page.locator(`#ranks th[data-key="${key}"]`).count())) throw new Error(`ranks table has no ${key} column`);
  }
  await page.selectOption('#group-by', 'rank');
  if ((await page.getAttribute('#heatmap', 'data-groups')) !== '[]') throw new Error('rank order still shows bands');
  await page.selectOption('#group-by', 'pp');

  // The per-stage bubble chart: one line per stage, the means the API gives for its window.
  await page.waitForSelector('#app[data-parallel-ready="1"]', { timeout: 30000 });
  const sec = await page.$eval('#parallel', (s) => ({ ...s.dataset, info: document.getElementById('parallel-info').textContent,
    series: document.querySelectorAll('#stage-bubble-chart .u-series').length }));
  console.log('bubble panel: ' + JSON.stringify(sec));
  if (sec.stages !== '2') throw new Error('bubble chart stages: ' + sec.stages);
  const shown = JSON.parse(sec.stageBubble);
  const m = /steps (\d+)–(\d+)/.exec(sec.info);
  const p = await api(`/api/v1/jobs/${kJob}/parallel?from=${m[1]}&to=${m[2]}`);
  for (const s of p.stages) {
    const v = s.bubble_ratio.filter((x) => x !== null);
    const want = v.reduce((a, b) => a + b, 0) / v.length;
    if (!(Math.abs(shown[s.stage] - want) < 1e-9) || !(want > 0 && want < 1)) throw new Error(`stage ${s.stage} bubble ${shown[s.stage]}, API ${want}`);
  }
  await page.screenshot({ path: path.join(artifacts, 'dashboard-parallel.png'), fullPage: true });

  // Anomalies: where they are and their estimated gain, the largest gain first.
  const rows = await page.$$eval('#anomalies tr.anomaly', (rs) => rs.map((r) => ({
    kind: r.querySelector('td a').textContent, where: r.querySelector('td.where').textContent,
    gain: r.querySelector('td.gain').textContent })));
  console.log('anomalies: ' + JSON.stringify(rows));
  const gains = rows.map((r) => (r.gain === '' ? -1 : Number(r.gain)));
  if (gains.some((g, i) => i > 0 && g > gains[i - 1])) throw new Error('anomalies not sorted by gain: ' + gains);
  const stage = rows.find((r) => r.kind === 'stage_imbalance');
  if (!stage || stage.where !== 'pp1' || !(Number(stage.gain) > 0)) throw new Error('stage_imbalance row: ' + JSON.stringify(stage));
  const worker = rows.find((r) => r.kind === 'straggler');
  if (worker && worker.where !== 'pp1 dp1') throw new Error('straggler row: ' + JSON.stringify(worker));
  await page.screenshot({ path: path.join(artifacts, 'dashboard-parallel-anomalies.png'), fullPage: true });
  if (errors.length) throw new Error('page errors: ' + errors.join('; '));
  console.log('PASS');
} catch (e) {
  failed = true;
  stack.reportFailure(e, ['collector', 'agent-node-a', 'simtrain']);
} finally {
  await stack.finish(browser, failed);
}
