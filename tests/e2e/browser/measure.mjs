// Dashboard benchmark (prints numbers; not a test): (1) first load of a job page with
// RANKS x STEPS stored (default 64 x 10,000) until the page is usable (#app[data-ready]);
// (2) heatmap render of 1,024 ranks x 1,000 steps of synthetic data, in the page's own code;
// (3) the capture timeline's indexing and drawing of 300,000 synthetic events.
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

  // (3) The capture timeline with 300,000 events (16 ranks x 5 steps x 3,750 boxes).
  const tl = await page.evaluate(() => {
    const { Timeline, timelineFromTrace } = window.trainscope;
    const ev = [];
    for (let r = 0; r < 16; r++) {
      ev.push({ ph: 'M', name: 'process_name', pid: r, args: { name: `rank ${r} (n${r >> 3})` } });
      for (let s = 0; s < 5; s++) {
        const t0 = 1.7e15 + s * 100000;
        ev.push({ name: `ProfilerStep#${s}`, ph: 'X', cat: 'step', ts: t0, dur: 99000, pid: r, tid: 0 });
        for (let i = 0; i < 3750; i++) {
          const cat = i % 10 === 9 ? 'collective' : 'op';
          ev.push({ name: cat === 'op' ? 'aten::mm' : 'all_reduce', ph: 'X', cat, ts: t0 + i * 26, dur: 20, pid: r, tid: 1 + (i % 2) });
        }
      }
    }
    const t0 = performance.now();
    const data = timelineFromTrace({ traceEvents: ev });
    const t1 = performance.now();
    const cv = document.createElement('canvas');
    cv.className = 'timeline';
    cv.style.width = '1300px';
    document.getElementById('app').append(cv);
    const tlv = new Timeline(cv, null);
    tlv.data = data;
    tlv.set(data);
    const full = [], zoomed = [];
    for (let i = 0; i < 5; i++) { tlv.render(); full.push(+cv.dataset.renderMs); }
    tlv.view = { t0: data.t0 + 200000, t1: data.t0 + 210000 };
    for (let i = 0; i < 5; i++) { tlv.render(); zoomed.push(+cv.dataset.renderMs); }
    return { events: data.events, parse: t1 - t0, full, zoomed };
  });
  console.log(`timeline ${tl.events} events: indexed in ${tl.parse.toFixed(0)} ms; whole capture drawn in ${tl.full.join(', ')} ms; zoomed to 10 ms in ${tl.zoomed.join(', ')} ms`);
} finally {
  if (browser) await browser.close();
  stack.cleanup();
}
