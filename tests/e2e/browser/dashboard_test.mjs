// Browser e2e: a collector, an agent and the simulator with an injected straggler (rank 5);
// Debian's chromium, driven by playwright-core, opens the dashboard. The job appears live on
// the jobs page, its page shows the straggler as the heatmap's brightest row (by the data
// attribute and by the canvas pixels), deep links load, and the live feed reconnects after
// the collector restarts. Captures: "Capture now" on the job's captures page completes, its
// timeline renders (every rank's row has boxes, wheel zooms, drag pans), the merged and
// per-rank downloads answer, the straggler's anomaly links to its automatic capture, and a
// capture's deep link loads. Screenshots go to $TRAINSCOPE_ARTIFACT_DIR.
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
// Probes write capture files here and the agent ships only files from under it.
process.env.TRAINSCOPE_CAPTURE_DIR = path.join(stack.dir, 'captures');
fs.mkdirSync(process.env.TRAINSCOPE_CAPTURE_DIR, { recursive: true });
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
  // Every rank shows its own latest figures, also one whose reports arrive late (ranks 0 and 5
  // record the automatic capture meanwhile): none reads as zero compute.
  const computes = await page.evaluate(() => {
    const col = [...document.querySelectorAll('#ranks th')].findIndex((t) => t.dataset.key === 'compute');
    return [...document.querySelectorAll('#ranks tbody tr')].map((r) => Number(r.children[col].textContent));
  });
  if (computes.length !== kRanks || computes.some((c) => !(c > 0))) {
    throw new Error(`ranks table compute column: ${computes.join(', ')}`);
  }
  const chartPoints = await page.evaluate(() => document.querySelectorAll('#step-chart canvas').length);
  if (chartPoints === 0) throw new Error('no step-time chart');
  await page.screenshot({ path: path.join(artifacts, 'dashboard-job.png'), fullPage: true });

  // Captures: "Capture now" on two ranks the automatic capture (straggler 5 and reference 0)
  // does not use, then its timeline.
  await page.click('#captures-link');
  await page.waitForSelector('#capture-form');
  await page.fill('#cap-ranks', '2,3');
  await page.fill('#cap-steps', '3');
  await page.fill('#cap-history', '2');
  await page.fill('#cap-start-in', '60');  // steps are 20 ms: the command needs time to reach the ranks
  await page.click('#capture-now');
  await page.waitForFunction(() => /#\/jobs\/.+\/captures\/cap-/.test(location.hash), null, { timeout: 10000 });
  const capId = decodeURIComponent(await page.evaluate(() => location.hash.split('/').pop()));
  console.log('capture started: ' + capId);
  await page.waitForSelector('#capture-state[data-state="complete"]', { timeout: 60000 });
  await page.waitForSelector('#app[data-timeline-ready="1"]', { timeout: 30000 });
  const tl = await page.evaluate(() => {
    const cv = document.getElementById('timeline');
    const ctx = cv.getContext('2d');
    const dpr = window.devicePixelRatio || 1;
    const img = ctx.getImageData(0, 0, cv.width, cv.height).data;
    // Coloured pixels (boxes: blue, green, orange, ...) in each rank's band, right of the labels.
    const bands = JSON.parse(cv.dataset.rows).map(([rank, y, h]) => {
      let coloured = 0;
      for (let py = Math.round(y * dpr); py < Math.round((y + h) * dpr); py++) {
        for (let px = Math.round(100 * dpr); px < cv.width; px++) {
          const o = (py * cv.width + px) * 4;
          const r = img[o], g = img[o + 1], b = img[o + 2];
          if (Math.max(r, g, b) - Math.min(r, g, b) > 60) coloured++;
        }
      }
      return { rank, coloured };
    });
    return { bands, events: +cv.dataset.events, steps: +cv.dataset.stepMarks, view: +cv.dataset.viewUs, info: document.getElementById('timeline-info').textContent };
  });
  console.log('timeline: ' + JSON.stringify(tl));
  if (tl.bands.map((b) => b.rank).join(',') !== '2,3') throw new Error('timeline rows are not ranks 2 and 3');
  if (tl.bands.some((b) => b.coloured < 200)) throw new Error('a rank row of the timeline has no boxes');
  // 3 steps + 2 of history on each of two ranks.
  if (tl.steps < 2 * 5) throw new Error(`timeline marks ${tl.steps} steps, expected at least 10`);
  await page.screenshot({ path: path.join(artifacts, 'dashboard-capture.png'), fullPage: true });
  // Wheel zooms in around the cursor; drag pans.
  const box = await page.locator('#timeline').boundingBox();
  await page.mouse.move(box.x + box.width / 2, box.y + 40);
  for (let i = 0; i < 5; i++) await page.mouse.wheel(0, -300);
  await waitFor(async () => +(await page.getAttribute('#timeline', 'data-view-us')) < tl.view / 4, 5000, 'the timeline to zoom in');
  const zoomedTo = await page.getAttribute('#timeline', 'data-view-us');
  const drawnZoomed = await page.getAttribute('#timeline', 'data-drawn');
  await page.mouse.down();
  await page.mouse.move(box.x + box.width / 2 + 300, box.y + 40, { steps: 5 });
  await page.mouse.up();
  await page.waitForTimeout(200);
  console.log(`zoomed to ${(+zoomedTo / 1000).toFixed(2)} ms of ${(tl.view / 1000).toFixed(2)} ms (boxes drawn ${drawnZoomed} of ${tl.events}); panned, drawn ${await page.getAttribute('#timeline', 'data-drawn')}`);
  await page.screenshot({ path: path.join(artifacts, 'dashboard-capture-zoomed.png'), fullPage: true });
  // Downloads: the merged trace and each rank's file.
  for (const sel of ['#trace-download', '.rank-download']) {
    const href = await page.locator(sel).first().getAttribute('href');
    const res = await fetch(base + href);
    const body = await res.json();
    if (res.status !== 200 || !Array.isArray(body.traceEvents)) throw new Error(`download ${href}: HTTP ${res.status}`);
  }
  if ((await page.locator('.rank-download').count()) !== 2) throw new Error('not one download per rank');
  // The list shows it, with every rank done.
  await page.goto(`${base}/#/jobs/${encodeURIComponent(kJob)}/captures`);
  await page.waitForSelector(`#captures-table tr[data-id="${capId}"][data-state="complete"]`, { timeout: 10000 });
  // The straggler's anomaly links to its automatic capture.
  await page.goto(`${base}/#/jobs/${encodeURIComponent(kJob)}`);
  await page.waitForSelector('#app[data-ready="1"]', { timeout: 20000 });
  await page.locator('tr.anomaly .capture-link').first().waitFor({ timeout: 30000 });
  const autoHref = await page.locator('tr.anomaly .capture-link').first().getAttribute('href');
  console.log('anomaly links to its capture: ' + autoHref);
  // A capture's deep link, in a fresh page.
  const capPage = await browser.newPage({ viewport: { width: 1200, height: 900 } });
  await capPage.goto(`${base}/#/jobs/${encodeURIComponent(kJob)}/captures/${encodeURIComponent(capId)}`);
  await capPage.waitForSelector('#app[data-timeline-ready="1"]', { timeout: 20000 });
  await capPage.close();

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
  stack.reportFailure(e, ['collector', 'agent-node-a', 'simtrain']);
} finally {
  await stack.finish(browser, failed);
}
