// Dashboard benchmark (prints numbers; not a test): (1) first load of a job page with
// RANKS x STEPS stored (default 64 x 10,000) until the page is usable (#app[data-ready]);
// (2) heatmap render of 1,024 ranks x 1,000 steps of synthetic data, in the page's own code.
// Usage (binaries from a build dir):
//   TRAINSCOPE_COLLECTOR_BIN=... TRAINSCOPE_AGENT_BIN=... TRAINSCOPE_SIMTRAIN_BIN=...
//   TRAINSCOPE_SOURCE_ROOT=/work/main node measure.mjs [RANKS] [STEPS]
// or against a server that already holds the job (tools/bench/dashboard_load_bench --browser
// runs it so): TRAINSCOPE_BENCH_URL=http://127.0.0.1:PORT TRAINSCOPE_BENCH_JOB=bench node
// measure.mjs RANKS STEPS
import { Stack, chromiumPath, playwright, waitFor } from './stack.mjs';

const ranks = Number(process.argv[2] || 64);
const steps = Number(process.argv[3] || 10000);
const job = process.env.TRAINSCOPE_BENCH_JOB || 'bench';
const given = process.env.TRAINSCOPE_BENCH_URL;
const exe = chromiumPath();
const { chromium } = await playwright();
const stack = new Stack();
let browser;
try {
  const base = given || await stack.startCollector();
  if (!given) {
    await stack.startAgent('node-a');
    const t0 = Date.now();
    const sim = stack.startSim(['--job', job, '--ranks', String(ranks), '--steps', String(steps), '--fast',
      '--inject', 'straggler:rank=3,from=100,factor=1.5']);
    await new Promise((r) => sim.once('exit', r));
    await waitFor(async () => {
      const j = await (await fetch(base + '/api/v1/jobs')).json();
      return j.jobs.length && j.jobs[0].step_rows >= ranks * steps;
    }, 600000, 'all rows stored');
    console.log(`stored ${ranks} x ${steps} = ${ranks * steps} step rows in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  }

  browser = await chromium.launch({ executablePath: exe, args: ['--no-sandbox', '--disable-gpu'] });
  const loads = [];
  for (let i = 0; i < 5; i++) {
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    const start = Date.now();
    await page.goto(`${base}/#/jobs/${job}`);
    await page.waitForSelector('#app[data-ready="1"]', { timeout: 60000 });
    loads.push(Date.now() - start);
    const info = await page.textContent('#hm-info');
    await page.waitForSelector('#app[data-full-run="1"]', { timeout: 60000 });
    await page.waitForFunction(() => JSON.parse(document.getElementById('app').dataset.timings).whole_run);
    console.log('heatmap: ' + info + '; parts done at (ms): ' + await page.getAttribute('#app', 'data-timings'));
    await page.close();
  }
  console.log(`first load to usable (job page, ${ranks} x ${steps}; latest 1000 steps charted, whole run follows): ${loads.join(', ')} ms`);

  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  await page.goto(`${base}/#/`);
  await page.waitForFunction(() => window.trainscope);
  const times = await page.evaluate(() => {
    const { Heatmap } = window.trainscope;
    const wrap = document.createElement('div');
    wrap.className = 'heatmap-wrap';
    wrap.innerHTML = '<canvas class="heatmap" style="width:1300px;height:600px"></canvas><div class="heatmap-sel"></div>';
    document.getElementById('app').append(wrap);
    const R = 1024, S = 1000;
    const values = new Float64Array(R * S);
    for (let r = 0; r < R; r++) for (let s = 0; s < S; s++) {
      values[r * S + s] = 1e8 * (1 + 0.05 * Math.random()) * (r === 777 ? 1.4 : 1);
    }
    const hm = new Heatmap(wrap.querySelector('canvas'), null);
    const out = [];
    for (let i = 0; i < 5; i++) {
      hm.data = { ranks: R, steps: S, firstStep: 0, values };
      out.push(hm.render());
    }
    return { out, brightest: wrap.querySelector('canvas').dataset.brightestRow };
  });
  console.log(`heatmap render 1024 x 1000: ${times.out.map((t) => t.toFixed(1)).join(', ')} ms (brightest row ${times.brightest})`);
} finally {
  if (browser) await browser.close();
  stack.cleanup();
}
