// Browser e2e: a collector, an agent and the simulator with an injected straggler (rank 5);
// Debian's chromium, driven by playwright-core, opens the dashboard. The job appears live on
// the jobs page, its page shows the straggler as the heatmap's brightest row (by the data
// attribute and by the canvas pixels), deep links load, and the live feed reconnects after
// the collector restarts. Screenshots go to $TRAINSCOPE_ARTIFACT_DIR.
import fs from 'node:fs';
import path from 'node:path';
import { Stack, chromiumPath, playwright, waitFor } from './stack.mjs';

const kJob = 'dash-e2e';
const kStraggler = 5;
const kRanks = 16;

const exe = chromiumPath();
const { chromium } = await playwright();
const artifacts = process.env.TRAINSCOPE_ARTIFACT_DIR || '.';
fs.mkdirSync(artifacts, { recursive: true });

const stack = new Stack();
let browser;
let failed = false;
try {
  const base = await stack.startCollector();
  await stack.startAgent('node-a');
  const sim = stack.startSim(['--job', kJob, '--ranks', String(kRanks), '--steps', '100000',
    '--step-ms', '20', '--inject', `straggler:rank=${kStraggler},from=20,factor=1.6`]);
  browser = await chromium.launch({ executablePath: exe, args: ['--no-sandbox', '--disable-gpu'] });
  const page = await browser.newPage({ viewport: { width: 1400, height: 1500 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));

  // Jobs page: opened before the job reports, it must appear without a reload.
  await page.goto(base + '/#/');
  await page.waitForSelector('#conn[data-state="open"]', { timeout: 10000 });
  const jobLink = page.locator('#jobs-table a', { hasText: kJob });
  await jobLink.waitFor({ timeout: 20000 });
  await waitFor(async () => Number(await page.locator('#jobs-table tbody tr td:nth-child(5)').first().textContent()) > 60,
    30000, 'the latest step to pass 60 on the jobs page (live)');
  const row = await page.locator('#jobs-table tbody tr').first().innerText();
  console.log('jobs row: ' + row.replace(/\s+/g, ' '));
  if (!/running/.test(row) || !row.includes(`${kRanks} / ${kRanks}`)) throw new Error('jobs row is wrong: ' + row);
  await page.screenshot({ path: path.join(artifacts, 'dashboard-jobs.png') });

  // Job page: the heatmap's brightest row is the straggler.
  await jobLink.click();
  await page.waitForSelector('#app[data-ready="1"]', { timeout: 20000 });
  await waitFor(async () => (await page.getAttribute('#heatmap', 'data-brightest-row')) === String(kStraggler),
    20000, 'the heatmap to show rank 5 as its brightest row');
  // The pixels agree: the band of canvas rows for rank 5 is the brightest band.
  const bands = await page.evaluate((ranks) => {
    const cv = document.getElementById('heatmap');
    const ctx = cv.getContext('2d');
    const img = ctx.getImageData(0, 0, cv.width, cv.height).data;
    const out = new Array(ranks).fill(0);
    const counts = new Array(ranks).fill(0);
    for (let y = 0; y < cv.height; y++) {
      const band = Math.min(ranks - 1, Math.floor((y / cv.height) * ranks));
      for (let x = 0; x < cv.width; x += 2) {
        const o = (y * cv.width + x) * 4;
        out[band] += img[o] + img[o + 1] + img[o + 2];
        counts[band]++;
      }
    }
    return out.map((v, i) => v / counts[i]);
  }, kRanks);
  const brightest = bands.indexOf(Math.max(...bands));
  const others = bands.filter((_, i) => i !== kStraggler);
  console.log(`heatmap band brightness: straggler ${bands[kStraggler].toFixed(0)}, others max ${Math.max(...others).toFixed(0)}`);
  if (brightest !== kStraggler) throw new Error(`brightest pixel band is rank ${brightest}, not ${kStraggler}`);
  // The ranks table sorts by compute: the straggler first when descending.
  // Each click toggles the direction, and a live update may land between clicks on a loaded
  // machine; so click until the descending order shows (the straggler on top), a few times.
  let topRank = '';
  for (let attempt = 0; attempt < 6 && topRank !== String(kStraggler); attempt++) {
    await page.click('#ranks th[data-key="compute"]');
    await page.waitForTimeout(300);
    topRank = (await page.locator('#ranks tbody tr td:first-child').first().textContent()).trim();
  }
  if (topRank !== String(kStraggler)) throw new Error(`ranks sorted by compute start with ${topRank}`);
  const chartPoints = await page.evaluate(() => document.querySelectorAll('#step-chart canvas').length);
  if (chartPoints === 0) throw new Error('no step-time chart');
  await page.screenshot({ path: path.join(artifacts, 'dashboard-job.png'), fullPage: true });

  // Deep link, in a fresh page.
  const deep = await browser.newPage({ viewport: { width: 1200, height: 900 } });
  await deep.goto(`${base}/#/jobs/${encodeURIComponent(kJob)}`);
  await deep.waitForSelector('#app[data-ready="1"]', { timeout: 20000 });
  const name = await deep.textContent('#job-name');
  if (name !== kJob) throw new Error('deep link shows job ' + name);

  // The live feed reconnects by itself after the collector restarts.
  await stack.stopCollector();
  await page.waitForSelector('#conn[data-state="closed"]', { timeout: 10000 });
  await stack.startCollector();
  await page.waitForSelector('#conn[data-state="open"]', { timeout: 15000 });
  console.log('live feed reconnected after a collector restart');
  if (errors.length) throw new Error('page errors: ' + errors.join('; '));
  sim.kill('SIGTERM');
  console.log('PASS');
} catch (e) {
  failed = true;
  console.error('FAIL: ' + (e.stack || e));
  for (const n of ['collector', 'agent-node-a', 'simtrain']) console.error(`--- ${n} log tail ---\n` + stack.log(n).slice(-2000));
} finally {
  if (browser) await browser.close();
  stack.cleanup();
}
process.exit(failed ? 1 : 0);
