// The dashboard: hash routes (#/ jobs, #/jobs/JOB, #/jobs/JOB/anomalies/ID,
// #/jobs/JOB/captures, #/jobs/JOB/captures/ID), state kept current by the live feed, pages
// rendered from the REST API once and then updated by deltas.
import { get, enc, request } from './api.js';
import { LiveFeed } from './live.js';
import { Heatmap, heatmapFromRows, heatmapFromCompact, legendGradient } from './heatmap.js';
import { Timeline, timelineFromTrace } from './timeline.js';

const state = {
  jobs: new Map(),       // job -> job JSON (API shape)
  nodes: new Map(),      // node -> node JSON
  anomalies: new Map(),  // id -> anomaly JSON
  captures: new Map(),   // id -> capture JSON (docs/CAPTURE.md)
  stepMs: new Map(),     // job -> latest step's median step time (ms)
  listeners: new Set(),  // called with each live message after state is updated
};

const app = document.getElementById('app');
const el = (tag, attrs = {}, ...children) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(e.dataset, v);
    else e.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
};
const ms = (ns) => (ns / 1e6).toFixed(1);
const jobHref = (job) => '#/jobs/' + enc(job);
const anomalyHref = (a) => jobHref(a.job) + '/anomalies/' + enc(a.id);
const capturesHref = (job) => jobHref(job) + '/captures';
const captureHref = (job, id) => capturesHref(job) + '/' + enc(id);

function openAnomalies(job) {
  let n = 0;
  for (const a of state.anomalies.values()) if (a.job === job && a.state === 'open') n++;
  return n;
}

// running / ended / stale from the API; "hung" when a hang anomaly is open for the job.
function jobStatus(j) {
  for (const a of state.anomalies.values()) {
    if (a.job === j.job && a.kind === 'hang' && a.state === 'open') return 'hung';
  }
  return j.state;
}

// ---- live feed -------------------------------------------------------------------------
function applyLive(msg) {
  if (msg.type === 'snapshot') {
    state.jobs.clear();
    state.nodes.clear();
  }
  for (const j of msg.jobs || []) state.jobs.set(j.job, j);
  for (const n of msg.nodes || []) state.nodes.set(n.node, n);
  for (const a of msg.anomalies || []) state.anomalies.set(a.id, a);
  for (const c of msg.captures || []) state.captures.set(c.id, c);
  if (msg.type === 'capture' && msg.capture) state.captures.set(msg.capture.id, msg.capture);
  for (const [job, rows] of Object.entries(msg.summary || {})) {
    if (rows.length) state.stepMs.set(job, rows[rows.length - 1].median_ns / 1e6);
  }
  if (msg.type === 'snapshot') {
    // Current step time of each job: its latest summary row, fetched once per snapshot.
    for (const j of state.jobs.values()) {
      if (j.latest_step < 0) continue;
      get(`/api/v1/jobs/${enc(j.job)}/summary?from=${Math.max(0, j.latest_step - 1)}`)
        .then((r) => {
          if (r.steps.length) state.stepMs.set(j.job, r.steps[r.steps.length - 1].median_ns / 1e6);
          for (const f of state.listeners) f({ type: 'stepms' });
        }).catch(() => {});
    }
  }
  for (const f of state.listeners) f(msg);
}

// One REST read at start, so the pages have data even before (or without) the WebSocket.
Promise.all([get('/api/v1/jobs'), get('/api/v1/nodes')]).then(([j, n]) => {
  if (state.jobs.size) return;  // the live snapshot came first
  applyLive({ type: 'snapshot', jobs: j.jobs, nodes: n.nodes, anomalies: [] });
}).catch((e) => console.warn('initial load', e));

const conn = document.getElementById('conn');
new LiveFeed(applyLive, (s) => {
  conn.dataset.state = s;
  conn.textContent = s === 'open' ? 'live' : s === 'closed' ? 'reconnecting…' : 'connecting…';
});

// ---- sortable table ----------------------------------------------------------------------
// columns: [{key, label, num, get(row) -> sort value, render(row) -> node/text}]
function sortableTable(columns, rows, initialKey, initialDesc = false) {
  let key = initialKey, desc = initialDesc;
  const table = el('table');
  const draw = () => {
    const col = columns.find((c) => c.key === key) || columns[0];
    const sorted = [...rows].sort((a, b) => {
      const x = col.get(a), y = col.get(b);
      const c = x < y ? -1 : x > y ? 1 : 0;
      return desc ? -c : c;
    });
    table.replaceChildren(
      el('thead', {}, el('tr', {}, columns.map((c) => el('th', {
        class: `sortable ${c.num ? 'num' : ''} ${c.key === key ? (desc ? 'sorted-desc' : 'sorted-asc') : ''}`,
        dataset: { key: c.key },
        onclick: () => { if (key === c.key) desc = !desc; else { key = c.key; desc = false; } draw(); },
      }, c.label)))),
      el('tbody', {}, sorted.map((r) => el('tr', {}, columns.map((c) =>
        el('td', { class: c.num ? 'num' : '' }, c.render ? c.render(r) : c.get(r)))))));
  };
  draw();
  table.update = (newRows) => { rows = newRows; draw(); };
  return table;
}

// ---- jobs page ---------------------------------------------------------------------------
function jobsPage() {
  const wrap = el('section', { class: 'panel' });
  app.replaceChildren(el('h1', {}, 'Jobs'), wrap);
  const columns = [
    { key: 'job', label: 'job', get: (j) => j.job, render: (j) => el('a', { href: jobHref(j.job) }, j.job) },
    { key: 'status', label: 'status', get: jobStatus,
      render: (j) => el('span', { class: 'state-' + jobStatus(j) }, jobStatus(j)) },
    { key: 'world', label: 'world size', num: true, get: (j) => j.world_size },
    { key: 'reporting', label: 'ranks reporting', num: true, get: (j) => j.ranks_seen - j.ranks_ended,
      render: (j) => `${j.ranks_seen - j.ranks_ended} / ${j.world_size}` },
    { key: 'step', label: 'latest step', num: true, get: (j) => j.latest_step },
    { key: 'steptime', label: 'step time (ms)', num: true, get: (j) => state.stepMs.get(j.job) ?? -1,
      render: (j) => (state.stepMs.has(j.job) ? state.stepMs.get(j.job).toFixed(1) : '') },
    { key: 'anomalies', label: 'open anomalies', num: true, get: (j) => openAnomalies(j.job) },
    { key: 'seen', label: 'last report', get: (j) => j.last_seen_ns,
      render: (j) => new Date(j.last_seen_ns / 1e6).toLocaleTimeString() },
  ];
  const rows = () => [...state.jobs.values()];
  const table = sortableTable(columns, rows(), 'seen', true);
  table.id = 'jobs-table';
  wrap.append(state.jobs.size ? table : el('p', { class: 'muted', id: 'no-jobs' }, 'No jobs yet.'), );
  const listener = () => {
    if (!wrap.contains(table)) wrap.replaceChildren(table);
    table.update(rows());
  };
  state.listeners.add(listener);
  return () => state.listeners.delete(listener);
}

// ---- job page ----------------------------------------------------------------------------
// The heatmap's window when following: at most this many rank x step cells.
const kMaxHeatmapRows = 100000;
// A typed range is cut to these (the collector's /heatmap allows 10,000 steps).
const kMaxHeatmapSteps = 10000;
const kMaxHeatmapCells = 2000000;
// Steps the heatmap shows when following the latest data.
const kFollowSteps = 250;

function jobPage(job, anomalyId) {
  let alive = true;
  const j = state.jobs.get(job);
  const title = el('h1', {}, 'Job ', el('span', { id: 'job-name' }, job), ' ',
    el('span', { id: 'job-status', class: j ? 'state-' + jobStatus(j) : '' }, j ? jobStatus(j) : ''));
  const meta = el('p', { class: 'muted', id: 'job-meta' });
  const chartBox = el('div', { id: 'step-chart' });
  const hmCanvas = el('canvas', { class: 'heatmap', id: 'heatmap' });
  const hmWrap = el('div', { class: 'heatmap-wrap' }, hmCanvas, el('div', { class: 'heatmap-sel' }));
  const fromIn = el('input', { type: 'number', id: 'hm-from', min: '0' });
  const toIn = el('input', { type: 'number', id: 'hm-to', min: '0' });
  const hmInfo = el('span', { class: 'muted', id: 'hm-info' });
  const followBox = el('input', { type: 'checkbox', id: 'hm-follow', checked: '' });
  const ranksBox = el('div', { id: 'ranks' }, el('p', { class: 'muted' }, 'loading…'));
  const bwBox = el('div', { id: 'bandwidth-chart' });
  const opsBox = el('div', { id: 'top-ops' });
  const anomaliesBox = el('div', { id: 'anomalies' });
  const nodesBox = el('div', { id: 'nodes' });
  app.replaceChildren(
    el('p', {}, el('a', { href: '#/' }, '← all jobs'), ' · ', el('a', { href: capturesHref(job), id: 'captures-link' }, 'captures')), title, meta,
    el('section', { class: 'panel' }, el('h2', {}, 'Step time (median and max across ranks, ms); anomalies marked where they began — drag to zoom, the heatmap follows'), chartBox),
    el('section', { class: 'panel' },
      el('h2', {}, 'Compute time relative to the step\'s median, rank × step (a straggler is a bright row)'),
      el('div', { class: 'controls' }, 'steps', fromIn, '–', toIn,
        el('button', { id: 'hm-apply', onclick: () => loadHeatmap(+fromIn.value, +toIn.value, false) }, 'show'),
        el('button', { id: 'hm-latest', onclick: () => { followBox.checked = true; loadHeatmap(null, null, true); } }, 'latest'),
        el('label', {}, followBox, ' follow live'),
        el('span', {}, '0.9× ', el('span', { class: 'legend-bar', style: `background:${legendGradient()}` }), ' ≥1.6×'),
        hmInfo),
      hmWrap),
    el('section', { class: 'panel' }, el('h2', {}, 'Ranks (latest step; click a column to sort)'), ranksBox),
    el('div', { class: 'grid' },
      el('section', { class: 'panel' }, el('h2', {}, 'Collective bandwidth over time (rank 0\'s view, GB/s)'), bwBox),
      el('section', { class: 'panel' }, el('h2', {}, 'Top operators (latest step, summed over ranks)'), opsBox)),
    el('section', { class: 'panel' }, el('h2', {}, 'Anomalies'), anomaliesBox),
    el('section', { class: 'panel' }, el('h2', {}, 'Nodes'), nodesBox));

  const heatmap = new Heatmap(hmCanvas, (a, b) => { followBox.checked = false; loadHeatmap(a, b, false); });
  let ranks = [];
  let summary = { x: [], med: [], max: [] };
  let chart = null;
  let hm = { from: 0, to: -1, follow: true, loading: false };

  const markers = () => [...state.anomalies.values()].filter((a) => a.job === job);
  const drawMarkers = (u) => {
    const ctx = u.ctx;
    ctx.save();
    for (const a of markers()) {
      const x = u.valToPos(a.onset_step, 'x', true);
      if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
      ctx.strokeStyle = a.state === 'open' ? '#ff6b6b' : '#ffc857';
      ctx.lineWidth = 2;
      ctx.setLineDash([4, 3]);
      ctx.beginPath();
      ctx.moveTo(x, u.bbox.top);
      ctx.lineTo(x, u.bbox.top + u.bbox.height);
      ctx.stroke();
      ctx.fillStyle = ctx.strokeStyle;
      ctx.font = `${11 * (window.devicePixelRatio || 1)}px sans-serif`;
      ctx.fillText(a.kind, x + 4, u.bbox.top + 12 * (window.devicePixelRatio || 1));
    }
    ctx.restore();
  };

  function drawChart() {
    const data = [summary.x, summary.med, summary.max];
    if (chart) { chart.setData(data); return; }
    chart = new uPlot({
      width: Math.max(400, chartBox.clientWidth || 900), height: 260,
      scales: { x: { time: false } },
      axes: [{ stroke: '#8a94a0', grid: { stroke: '#262d36' }, label: 'step' },
             { stroke: '#8a94a0', grid: { stroke: '#262d36' }, label: 'ms' }],
      series: [{ label: 'step' },
               { label: 'median', stroke: '#5fb3ff', width: 1.5 },
               { label: 'max', stroke: '#ff9f43', width: 1 }],
      hooks: {
        draw: [drawMarkers],
        setSelect: [(u) => {
          if (u.select.width < 4) return;
          const a = Math.round(u.posToVal(u.select.left, 'x'));
          const b = Math.round(u.posToVal(u.select.left + u.select.width, 'x'));
          followBox.checked = false;
          loadHeatmap(Math.max(0, a), b, false);
        }],
      },
    }, data, chartBox);
  }

  function appendSummary(rows) {
    for (const r of rows) {
      const last = summary.x.length ? summary.x[summary.x.length - 1] : -1;
      const y1 = r.median_ns / 1e6, y2 = r.max_ns / 1e6;
      if (r.step > last) { summary.x.push(r.step); summary.med.push(y1); summary.max.push(y2); }
      else {
        // A step seen before (it was still arriving): replace it.
        const i = summary.x.lastIndexOf(r.step);
        if (i >= 0) { summary.med[i] = y1; summary.max[i] = y2; }
      }
    }
  }

  // The latest kRecentSteps first (the page is usable with them), then the rest of the run in
  // the background: the whole-run summary is the slowest query of a long job.
  const kRecentSteps = 1000;
  let olderFrom = 0;
  async function loadSummary() {
    const jr = state.jobs.get(job);
    const from = Math.max(0, (jr ? jr.latest_step : 0) - kRecentSteps + 1);
    const r = await get(`/api/v1/jobs/${enc(job)}/summary?from=${from}&limit=100000`);
    summary = { x: [], med: [], max: [] };
    appendSummary(r.steps);
    drawChart();
    olderFrom = from;  // loadAll reads the older steps once the page is usable
  }

  async function loadOlderSummary(before) {
    const older = { x: [], med: [], max: [] };
    let from = 0;
    for (;;) {
      const r = await get(`/api/v1/jobs/${enc(job)}/summary?from=${from}&to=${before - 1}&limit=100000`);
      for (const row of r.steps) {
        older.x.push(row.step); older.med.push(row.median_ns / 1e6); older.max.push(row.max_ns / 1e6);
      }
      if (!r.truncated || !r.steps.length || !alive) break;
      from = r.steps[r.steps.length - 1].step + 1;
    }
    if (!alive) return;
    summary = { x: older.x.concat(summary.x), med: older.med.concat(summary.med), max: older.max.concat(summary.max) };
    drawChart();
    app.dataset.fullRun = '1';
  }

  async function loadHeatmap(from, to, follow) {
    const jr = state.jobs.get(job);
    if (!jr || !ranks.length) return;
    // The latest window: 250 steps (fewer at thousands of ranks) keeps the first load fast;
    // zooming on the step chart or typing a range shows any other part of the run.
    const window = Math.max(10, Math.floor(kMaxHeatmapRows / Math.max(1, ranks.length)));
    if (follow || from === null) {
      to = jr.latest_step;
      from = Math.max(0, to - Math.min(window, kFollowSteps) + 1);
    }
    if (to < from) [from, to] = [to, from];
    hm = { from, to, follow, loading: true };
    fromIn.value = from; toIn.value = to;
    hmInfo.textContent = 'loading…';
    // The compact route: compute time only, ranks x steps in one array (a tenth of the
    // bytes of the /steps rows, and no per-row objects to parse).
    to = Math.min(to, from + Math.min(kMaxHeatmapSteps, Math.max(10, Math.floor(kMaxHeatmapCells / ranks.length))) - 1);
    hm.to = to; toIn.value = to;
    const t0 = performance.now();
    const r = await get(`/api/v1/jobs/${enc(job)}/heatmap?from=${from}&to=${to}`);
    const t1 = performance.now();
    heatmap.set(heatmapFromCompact(r));
    hm.loading = false;
    hmInfo.textContent = `${ranks.length} ranks × ${to - from + 1} steps; fetched in ${(t1 - t0).toFixed(0)} ms, drawn in ${hmCanvas.dataset.renderMs} ms; brightest row: rank ${hmCanvas.dataset.brightestRow} (${hmCanvas.dataset.brightestRatio}× median)`;
  }

  async function loadRankList() {
    ranks = (await get(`/api/v1/jobs/${enc(job)}/ranks`)).ranks;
  }

  async function loadRanks() {
    const jr = state.jobs.get(job);
    const latest = jr ? jr.latest_step : 0;
    // Each rank's newest row within the last two steps, with operators and collectives.
    const rows = await get(`/api/v1/jobs/${enc(job)}/steps?from=${Math.max(0, latest - 1)}&detail=1&limit=100000`);
    const byRank = new Map();
    for (const s of rows.steps) byRank.set(s.rank, s);
    const table = ranks.map((r) => {
      const s = byRank.get(r.rank);
      let top = null;
      for (const op of (s && s.ops) || []) if (!top || op.total_ns > top.total_ns) top = op;
      return { rank: r.rank, node: r.node || r.host, step: s ? s.step : r.latest_step,
               duration: s ? s.duration_ns : 0, compute: s ? s.compute_ns : 0,
               comm: s ? s.exposed_comm_ns : 0, data: s ? s.data_ns : 0,
               top: top ? top.name : '', topNs: top ? top.total_ns : 0, ended: r.ended };
    });
    const cols = [
      { key: 'rank', label: 'rank', num: true, get: (r) => r.rank },
      { key: 'node', label: 'node', get: (r) => r.node },
      { key: 'step', label: 'latest step', num: true, get: (r) => r.step },
      { key: 'duration', label: 'step (ms)', num: true, get: (r) => r.duration, render: (r) => ms(r.duration) },
      { key: 'compute', label: 'compute (ms)', num: true, get: (r) => r.compute, render: (r) => ms(r.compute) },
      { key: 'comm', label: 'exposed comm (ms)', num: true, get: (r) => r.comm, render: (r) => ms(r.comm) },
      { key: 'data', label: 'data wait (ms)', num: true, get: (r) => r.data, render: (r) => ms(r.data) },
      { key: 'top', label: 'top operator', get: (r) => r.top, render: (r) => r.top ? `${r.top} (${ms(r.topNs)} ms)` : '' },
    ];
    if (ranksBox.firstChild && ranksBox.firstChild.update) ranksBox.firstChild.update(table);
    else ranksBox.replaceChildren(sortableTable(cols, table, 'rank'));
    // Top operators summed over ranks.
    const ops = new Map();
    for (const s of byRank.values()) for (const op of s.ops || []) {
      const o = ops.get(op.name) || { name: op.name, total: 0, count: 0 };
      o.total += op.total_ns; o.count += op.count; ops.set(op.name, o);
    }
    const topOps = [...ops.values()].sort((a, b) => b.total - a.total).slice(0, 12);
    opsBox.replaceChildren(el('table', {},
      el('thead', {}, el('tr', {}, el('th', {}, 'operator'), el('th', { class: 'num' }, 'total (ms)'), el('th', { class: 'num' }, 'calls'))),
      el('tbody', {}, topOps.map((o) => el('tr', {}, el('td', {}, o.name), el('td', { class: 'num' }, ms(o.total)), el('td', { class: 'num' }, o.count))))));
    if (!topOps.length) opsBox.replaceChildren(el('p', { class: 'muted' }, 'No operator timings reported.'));
  }

  let bwChart = null;
  async function loadBandwidth() {
    const jr = state.jobs.get(job);
    if (!jr || jr.latest_step < 0 || !ranks.length) return;
    const r0 = ranks[0].rank;
    const from = Math.max(0, jr.latest_step - 1999);
    const r = await get(`/api/v1/jobs/${enc(job)}/steps?rank=${r0}&from=${from}&detail=1&limit=2000`);
    const opsSeen = new Set();
    for (const s of r.steps) for (const c of s.collectives) opsSeen.add(c.op);
    const opsList = [...opsSeen].sort();
    if (!opsList.length) { bwBox.replaceChildren(el('p', { class: 'muted' }, 'No collectives reported.')); return; }
    const x = r.steps.map((s) => s.step);
    const series = opsList.map((op) => r.steps.map((s) => {
      let bytes = 0, ns = 0;
      for (const c of s.collectives) if (c.op === op) { bytes += c.bytes * c.count; ns += c.total_ns; }
      return ns > 0 ? bytes / ns : null;  // bytes per ns = GB/s
    }));
    const colors = ['#5fb3ff', '#ff9f43', '#5fd38d', '#c678dd', '#ffc857', '#ff6b6b'];
    if (bwChart) bwChart.destroy();
    bwChart = new uPlot({
      width: Math.max(300, bwBox.clientWidth || 500), height: 220, scales: { x: { time: false } },
      axes: [{ stroke: '#8a94a0', grid: { stroke: '#262d36' } }, { stroke: '#8a94a0', grid: { stroke: '#262d36' } }],
      series: [{ label: 'step' }, ...opsList.map((op, i) => ({ label: op, stroke: colors[i % colors.length] }))],
    }, [x, ...series], bwBox);
  }

  function drawAnomalies() {
    const list = markers().sort((a, b) => b.detected_ns - a.detected_ns);
    if (!list.length) { anomaliesBox.replaceChildren(el('p', { class: 'muted' }, 'None detected.')); return; }
    anomaliesBox.replaceChildren(el('table', {},
      el('thead', {}, el('tr', {}, ['kind', 'state', 'ranks', 'nodes', 'onset step', 'size', 'summary', 'evidence', 'capture'].map((h) => el('th', {}, h)))),
      el('tbody', {}, list.map((a) => el('tr', { class: 'anomaly' + (a.id === anomalyId ? ' selected' : ''), id: 'anomaly-' + a.id, dataset: { id: a.id } },
        el('td', {}, el('a', { href: anomalyHref(a) }, a.kind)),
        el('td', { class: a.state === 'open' ? 'state-stale' : 'state-ended' }, a.state),
        el('td', {}, (a.ranks || []).join(', ')),
        el('td', {}, (a.nodes || []).join(', ')),
        el('td', { class: 'num' }, a.onset_step),
        el('td', { class: 'num' }, `${Number(a.magnitude).toFixed(2)}×`),
        el('td', { class: 'evidence' }, a.summary || ''),
        el('td', { class: 'evidence' }, Object.entries(a.evidence || {}).map(([k, v]) => `${k}=${Number(v).toPrecision(4)}`).join(' ')),
        el('td', {}, a.capture_id ? el('a', { href: captureHref(a.job, a.capture_id), class: 'capture-link' }, captureLabel(a.capture_id)) : ''))))));
    if (anomalyId) {
      const row = document.getElementById('anomaly-' + anomalyId);
      if (row) row.scrollIntoView({ block: 'center' });
    }
  }

  function drawNodes() {
    const used = new Set(ranks.map((r) => r.node || r.host));
    const list = [...state.nodes.values()].filter((n) => used.has(n.node) || used.has(n.host));
    if (!list.length) { nodesBox.replaceChildren(el('p', { class: 'muted' }, 'No agent reports for this job\'s nodes.')); return; }
    nodesBox.replaceChildren(el('table', {},
      el('thead', {}, el('tr', {}, ['node', 'host', 'ranks', 'last seen (s ago)', 'CPU %', 'load1', 'memory available', 'clock offset (ms)', 'spool'].map((h) => el('th', {}, h)))),
      el('tbody', {}, list.map((n) => {
        const h = n.latest_host || {};
        return el('tr', {}, el('td', {}, n.node), el('td', {}, n.host), el('td', { class: 'num' }, n.ranks),
          el('td', { class: 'num' }, n.last_seen_age_s), el('td', { class: 'num' }, h.cpu_percent !== undefined ? h.cpu_percent.toFixed(0) : ''),
          el('td', { class: 'num' }, h.load1 !== undefined ? h.load1.toFixed(2) : ''),
          el('td', { class: 'num' }, h.mem_available_bytes ? (h.mem_available_bytes / 2 ** 30).toFixed(1) + ' GiB' : ''),
          el('td', { class: 'num' }, (n.clock_offset_ns / 1e6).toFixed(2)),
          el('td', { class: 'num' }, n.spool_bytes));
      }))));
  }

  function drawMeta() {
    const jr = state.jobs.get(job);
    if (!jr) { meta.textContent = 'unknown job (not reported yet)'; return; }
    const st = jobStatus(jr);
    title.querySelector('#job-status').textContent = st;
    title.querySelector('#job-status').className = 'state-' + st;
    meta.textContent = `world size ${jr.world_size}, ${jr.ranks_seen - jr.ranks_ended} ranks reporting, latest step ${jr.latest_step}, ${openAnomalies(job)} open anomalies`;
  }

  async function loadAll() {
    drawMeta();
    if (!state.jobs.get(job)) return;
    const t0 = performance.now();
    const timings = {};
    const timed = (name, p) => p.then(() => { timings[name] = Math.round(performance.now() - t0); });
    // The step chart needs no rank list: it starts at once, beside it.
    const summaryDone = timed('summary', loadSummary());
    await timed('rank_list', loadRankList());
    drawNodes();
    await Promise.all([timed('ranks', loadRanks()), summaryDone,
      timed('heatmap', loadHeatmap(null, null, true))]);
    drawAnomalies();
    drawNodes();
    app.dataset.timings = JSON.stringify(timings);
    app.dataset.ready = '1';
    // Below the fold, and the collector answers one request at a time: after the rest.
    await timed('bandwidth', loadBandwidth());
    app.dataset.timings = JSON.stringify(timings);
    if (olderFrom > 0) {
      await loadOlderSummary(olderFrom);
      timings.whole_run = Math.round(performance.now() - t0);
      app.dataset.timings = JSON.stringify(timings);
    }
  }

  // Live updates: summary rows arrive in the delta; ranks and the heatmap's tail are re-read
  // when the job moved, at most one refresh in flight.
  // The heatmap's window can be 100,000 cells: re-read it at most every kHeatmapRefreshMs.
  const kRefreshMs = 1000, kHeatmapRefreshMs = 3000;
  let refreshing = false, again = false, lastHeatmap = performance.now();
  async function refresh() {
    if (refreshing) { again = true; return; }
    refreshing = true;
    const started = performance.now();
    try {
      await loadRankList();
      await loadRanks();
      if (followBox.checked && !hm.loading && started - lastHeatmap >= kHeatmapRefreshMs) {
        lastHeatmap = started;
        await loadHeatmap(null, null, true);
      }
    } catch (e) { console.warn(e); }
    // Spaced out: deltas come every half second, the tables need not.
    const wait = Math.max(0, kRefreshMs - (performance.now() - started));
    setTimeout(() => {
      refreshing = false;
      if (again && alive) { again = false; refresh(); }
    }, wait);
  }
  let loaded = false;
  const listener = (msg) => {
    if (!alive) return;
    if (msg.type === 'snapshot' && !loaded && state.jobs.get(job)) { loaded = true; loadAll().catch(showError); return; }
    if (msg.type === 'stepms') return;
    drawMeta();
    if ((msg.anomalies || []).some((a) => a.job === job)) { drawAnomalies(); if (chart) chart.redraw(); }
    if ((msg.nodes || []).length) drawNodes();
    const rows = (msg.summary || {})[job];
    if (rows && rows.length && chart) {
      appendSummary(rows);
      chart.setData([summary.x, summary.med, summary.max], !chart.select || chart.select.width === 0);
      refresh();
    }
  };
  state.listeners.add(listener);
  if (state.jobs.get(job)) { loaded = true; loadAll().catch(showError); }
  else drawMeta();
  return () => { alive = false; state.listeners.delete(listener); };
}

// ---- captures ----------------------------------------------------------------------------
const captureLabel = (c) => {
  const c2 = state.captures.get(c);
  return c2 ? `${c2.kind} ${c2.state}` : 'capture';
};
const capState = (c) => (c.state === 'complete' ? 'state-running' : c.state === 'running' ? 'state-stale-soft' : c.state === 'failed' ? 'state-stale' : 'state-ended');
const fmtTime = (ns) => (ns ? new Date(ns / 1e6).toLocaleTimeString() : '');
const kib = (b) => (b >= 1 << 20 ? (b / (1 << 20)).toFixed(1) + ' MiB' : (b / 1024).toFixed(1) + ' KiB');

// Per-rank progress: one small box per rank, coloured by its state.
function rankProgress(c) {
  const done = (c.rank_status || []).filter((r) => r.state === 'done').length;
  return el('span', { class: 'progress', title: c.summary || '' },
    (c.rank_status || []).map((r) => el('span', { class: 'rank-box rs-' + r.state, title: `rank ${r.rank}: ${r.state}${r.detail ? ' — ' + r.detail : ''}` })),
    ` ${done} / ${(c.rank_status || []).length}`);
}

function captureRanksText(c) {
  const r = c.ranks || [];
  return r.length > 8 ? `${r.slice(0, 8).join(', ')}, … (${r.length})` : r.join(', ');
}

function capturesPage(job) {
  let alive = true;
  const err = el('p', { class: 'state-stale', id: 'capture-error' });
  const ranksIn = el('input', { id: 'cap-ranks', placeholder: 'all', title: 'ranks: "all", "0,3,5-7"' });
  const stepsIn = el('input', { id: 'cap-steps', type: 'number', min: '1', max: '1000', value: '5' });
  const histIn = el('input', { id: 'cap-history', type: 'number', min: '0', max: '1000', value: '4' });
  const startIn = el('input', { id: 'cap-start-in', type: 'number', min: '1', placeholder: '2', title: 'steps from the job\'s latest step to the first recorded one (fast steps need more: the command must reach every rank first)' });
  const kindIn = el('select', { id: 'cap-kind' }, el('option', { value: 'trace' }, 'trace'), el('option', { value: 'stacks' }, 'stacks'));
  const button = el('button', { id: 'capture-now', type: 'submit' }, 'Capture now');
  const form = el('form', { class: 'controls', id: 'capture-form' },
    'ranks', ranksIn, 'steps', stepsIn, 'history', histIn, 'start in (steps)', startIn, 'kind', kindIn, button);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    err.textContent = '';
    const body = { kind: kindIn.value };
    if (ranksIn.value.trim()) body.ranks = ranksIn.value.trim();
    if (kindIn.value === 'trace') {
      body.steps = Number(stepsIn.value);
      body.history = Number(histIn.value);
      const j = state.jobs.get(job);
      if (startIn.value && j && j.latest_step >= 0) body.start_step = j.latest_step + Number(startIn.value);
    }
    button.disabled = true;
    try {
      const c = await request('POST', `/api/v1/jobs/${enc(job)}/captures`, body);
      state.captures.set(c.id, c);
      location.hash = captureHref(job, c.id);
    } catch (e) {
      err.textContent = e.message;
    } finally {
      button.disabled = false;
    }
  });
  const listBox = el('div', { id: 'captures' }, el('p', { class: 'muted' }, 'loading…'));
  app.replaceChildren(
    el('p', {}, el('a', { href: jobHref(job) }, '← job ' + job)),
    el('h1', {}, 'Captures of ', el('span', { id: 'job-name' }, job)),
    el('section', { class: 'panel' }, el('h2', {}, 'Capture now (steps from the job\'s next step; history: steps before it from the flight recorder)'), form, err),
    el('section', { class: 'panel' }, el('h2', {}, 'Captures (live)'), listBox));
  const draw = () => {
    const list = [...state.captures.values()].filter((c) => c.job === job).sort((a, b) => b.created_ns - a.created_ns);
    if (!list.length) { listBox.replaceChildren(el('p', { class: 'muted', id: 'no-captures' }, 'No captures yet.')); return; }
    listBox.replaceChildren(el('table', { id: 'captures-table' },
      el('thead', {}, el('tr', {}, ['capture', 'kind', 'state', 'reason', 'ranks', 'steps', 'progress', 'created'].map((h) => el('th', {}, h)))),
      el('tbody', {}, list.map((c) => el('tr', { dataset: { id: c.id, state: c.state } },
        el('td', {}, el('a', { href: captureHref(job, c.id) }, c.id)),
        el('td', {}, c.kind),
        el('td', { class: capState(c) }, c.state),
        el('td', {}, c.anomaly_id ? el('a', { href: anomalyHref({ job, id: c.anomaly_id }) }, c.reason) : c.reason),
        el('td', {}, captureRanksText(c)),
        el('td', { class: 'num' }, c.kind === 'trace' ? `${c.start_step}–${c.start_step + c.steps - 1} (+${c.history} before)` : ''),
        el('td', {}, rankProgress(c)),
        el('td', {}, fmtTime(c.created_ns)))))));
  };
  get(`/api/v1/jobs/${enc(job)}/captures`).then((r) => {
    for (const c of r.captures || []) if (!state.captures.has(c.id) || state.captures.get(c.id).updated_ns <= c.updated_ns) state.captures.set(c.id, c);
    if (alive) { draw(); app.dataset.ready = '1'; }
  }).catch((e) => { if (alive) { draw(); err.textContent = e.message; } });
  const listener = (msg) => { if (alive && (msg.type === 'capture' || msg.type === 'snapshot')) draw(); };
  state.listeners.add(listener);
  return () => { alive = false; state.listeners.delete(listener); };
}

function capturePage(job, id) {
  let alive = true;
  const head = el('div', { id: 'capture-head' }, el('p', { class: 'muted' }, 'loading…'));
  const ranksBox = el('div', { id: 'capture-ranks' });
  const downloads = el('p', { id: 'capture-downloads' });
  const tlInfo = el('span', { class: 'muted', id: 'timeline-info' }, 'wheel: zoom · drag: pan · double-click: whole capture');
  const canvas = el('canvas', { class: 'timeline', id: 'timeline' });
  const tlBox = el('div', { id: 'timeline-box' }, el('p', { class: 'muted', id: 'timeline-status' }, 'The timeline shows once the capture has finished.'));
  app.replaceChildren(
    el('p', {}, el('a', { href: jobHref(job) }, '← job ' + job), ' · ', el('a', { href: capturesHref(job) }, 'all captures')),
    el('h1', {}, 'Capture ', el('span', { id: 'capture-id' }, id)), head,
    el('section', { class: 'panel' }, el('h2', {}, 'Ranks'), ranksBox, downloads),
    el('section', { class: 'panel' }, el('h2', {}, 'Timeline (merged, collector clock)'), tlBox));
  const timeline = new Timeline(canvas, tlInfo);
  let loadedTrace = false;

  async function loadTrace(c) {
    if (loadedTrace) return;
    loadedTrace = true;
    tlBox.replaceChildren(el('p', { class: 'muted', id: 'timeline-status' }, 'loading the merged trace…'));
    const t0 = performance.now();
    const res = await fetch(`/api/v1/captures/${enc(id)}/trace`);
    if (!res.ok) {
      let msg = `HTTP ${res.status}`;
      try { msg = (await res.json()).error || msg; } catch (e) { /* not JSON */ }
      tlBox.replaceChildren(el('p', { class: 'state-stale', id: 'timeline-status' }, 'No merged trace: ' + msg));
      return;
    }
    const trace = await res.json();
    if (!alive) return;
    if (c.kind === 'stacks') {
      tlBox.replaceChildren(stacksView(trace));
      app.dataset.timelineReady = '1';
      return;
    }
    const data = timelineFromTrace(trace);
    const t1 = performance.now();
    tlBox.replaceChildren(el('div', { class: 'controls' }, tlInfo), canvas);
    timeline.set(data);
    requestAnimationFrame(() => requestAnimationFrame(() => {
      if (!alive) return;
      tlInfo.textContent = `${data.rows.length} ranks, ${data.events} events; loaded in ${(t1 - t0).toFixed(0)} ms, drawn in ${canvas.dataset.renderMs} ms — wheel: zoom · drag: pan · double-click: whole capture`;
      app.dataset.timelineReady = '1';
    }));
  }

  function draw(c) {
    head.replaceChildren(
      el('p', {}, el('span', { id: 'capture-state', class: capState(c), dataset: { state: c.state } }, c.state), ' — ', c.summary || '', ' — ', c.kind,
        c.kind === 'trace' ? `, steps ${c.start_step}–${c.start_step + c.steps - 1} with ${c.history} before` : '',
        ', reason: ', c.anomaly_id ? el('a', { href: anomalyHref({ job, id: c.anomaly_id }) }, c.reason) : c.reason,
        `, created ${fmtTime(c.created_ns)}`, c.finished_ns ? `, finished ${fmtTime(c.finished_ns)}` : ''),
      el('p', {}, rankProgress(c)));
    ranksBox.replaceChildren(el('table', {},
      el('thead', {}, el('tr', {}, ['rank', 'node', 'state', 'steps', 'size', 'detail', 'file'].map((h) => el('th', {}, h)))),
      el('tbody', {}, (c.rank_status || []).map((r) => el('tr', { dataset: { rank: r.rank, state: r.state } },
        el('td', { class: 'num' }, r.rank), el('td', {}, r.node),
        el('td', { class: 'rs-text-' + r.state }, r.state),
        el('td', { class: 'num' }, r.first_step >= 0 ? `${r.first_step}–${r.last_step}` : ''),
        el('td', { class: 'num' }, r.bytes ? kib(r.bytes) + (r.truncated ? ' (cut)' : '') : ''),
        el('td', { class: 'evidence' }, r.detail || ''),
        el('td', {}, r.state === 'done' ? el('a', { href: `/api/v1/captures/${enc(id)}/ranks/${r.rank}`, download: `${id}-rank-${r.rank}.json`, class: 'rank-download' }, 'download') : ''))))));
    const finished = c.state === 'complete' || c.state === 'partial';
    downloads.replaceChildren(finished
      ? el('a', { href: `/api/v1/captures/${enc(id)}/trace`, download: `${id}.json`, id: 'trace-download' },
        `download the merged trace${c.trace_bytes ? ' (' + kib(c.trace_bytes) + ' compressed)' : ''}`)
      : el('span', { class: 'muted' }, c.state === 'failed' ? 'No merged trace: every rank failed.' : 'The merged trace is written when every rank is done or failed.'));
    if (finished) loadTrace(c).catch((e) => tlBox.replaceChildren(el('p', { class: 'state-stale', id: 'timeline-status' }, 'Timeline: ' + e.message)));
    app.dataset.ready = '1';
  }

  const known = state.captures.get(id);
  if (known) draw(known);
  get(`/api/v1/captures/${enc(id)}`).then((c) => {
    const now = state.captures.get(id);
    if (!now || now.updated_ns <= c.updated_ns) state.captures.set(id, c);
    if (alive) draw(state.captures.get(id));
  }).catch((e) => { if (alive && !known) head.replaceChildren(el('p', { class: 'state-stale' }, e.message)); });
  const listener = (msg) => {
    if (!alive) return;
    if ((msg.type === 'capture' && msg.capture.id === id) || (msg.type === 'snapshot' && state.captures.has(id))) draw(state.captures.get(id));
  };
  state.listeners.add(listener);
  const onResize = () => timeline.setView(timeline.view.t0, timeline.view.t1);
  window.addEventListener('resize', onResize);
  return () => { alive = false; state.listeners.delete(listener); window.removeEventListener('resize', onResize); };
}

// A stacks capture: each rank's threads with their Python and native frames.
function stacksView(merged) {
  return el('div', { id: 'stacks' }, (merged.ranks || []).map((r) => el('details', { open: '' },
    el('summary', {}, `rank ${r.rank} (${r.node || ''}): ${(r.threads || []).length} threads`),
    (r.threads || []).map((t) => el('div', { class: 'thread' },
      el('b', {}, `${t.name || ''} [${t.tid}] ${t.state || ''}`), t.error ? el('span', { class: 'state-stale' }, ' ' + t.error) : '',
      el('pre', {}, [...(t.python || []).map((f) => `py  ${f.function} (${f.file}:${f.line})`),
        ...(t.native || []).map((f) => `    ${f.function || f.address}${f.offset ? '+' + f.offset : ''}  ${f.module || ''}`)].join('\n')))))));
}

function showError(e) {
  app.append(el('p', { class: 'state-stale' }, 'Error: ' + e.message));
}

// ---- router ------------------------------------------------------------------------------
let leave = null;
function route() {
  if (leave) leave();
  delete app.dataset.ready;
  const parts = location.hash.replace(/^#\/?/, '').split('/').filter((p) => p.length).map(decodeURIComponent);
  if (parts[0] === 'jobs' && parts.length >= 3 && parts[2] === 'captures') {
    leave = parts.length >= 4 ? capturePage(parts[1], parts[3]) : capturesPage(parts[1]);
  } else if (parts[0] === 'jobs' && parts.length >= 2) {
    leave = jobPage(parts[1], parts[2] === 'anomalies' ? parts[3] : null);
  } else {
    leave = jobsPage();
  }
}
window.addEventListener('hashchange', route);
route();
window.trainscope = { state, Heatmap, heatmapFromRows, Timeline, timelineFromTrace };
