// Job page panels from each rank's latest step: the ranks table (sortable; with the job's
// parallel layout, its coordinates, pipeline bubble, communication overlap, MFU and all-to-all
// share, and grouped by stage, replica or tp index) and the top operators summed over ranks.
import { get, enc } from '../api.js';
import { el, ms, sortableTable } from '../dom.js';
import { groupRanks, isSet, kGroupings, layoutAxes, pct } from '../layout.js';
import { state } from '../state.js';

const kTopOps = 12;
const kLaggingFetches = 32;

const columns = [
  { key: 'rank', label: 'rank', num: true, get: (r) => r.rank },
  { key: 'node', label: 'node', get: (r) => r.node },
  { key: 'step', label: 'latest step', num: true, get: (r) => r.step },
  { key: 'duration', label: 'step (ms)', num: true, get: (r) => r.duration, render: (r) => ms(r.duration) },
  { key: 'compute', label: 'compute (ms)', num: true, get: (r) => r.compute, render: (r) => ms(r.compute) },
  { key: 'comm', label: 'exposed comm (ms)', num: true, get: (r) => r.comm, render: (r) => ms(r.comm) },
  { key: 'data', label: 'data wait (ms)', num: true, get: (r) => r.data, render: (r) => ms(r.data) },
  { key: 'top', label: 'top operator', get: (r) => r.top, render: (r) => r.top ? `${r.top} (${ms(r.topNs)} ms)` : '' },
];

// Columns of the parallel layout: one per axis some rank has, and one per figure some rank's
// latest step has (a flat data-parallel job gets none of them).
const kFigures = [
  { key: 'bubble', label: 'bubble %', field: 'bubble_ratio' },
  { key: 'overlap', label: 'comm overlap %', field: 'comm_overlap_ratio' },
  { key: 'mfu', label: 'MFU %', field: 'mfu' },
  { key: 'hfu', label: 'HFU %', field: 'hfu' },
  { key: 'a2a', label: 'all-to-all %', field: 'all_to_all_share' },
];
const orNeg = (x) => (x === null || x === undefined ? -1 : x);

// The rank's GPU (ranks listing `gpu`: its latest NVML reading), for jobs whose ranks name one.
const kGpuColumns = [
  { key: 'gpuClock', label: 'GPU SM clock (MHz)', num: true, get: (r) => orNeg(r.gpuClock), render: (r) => (r.gpuClock === null ? '' : r.gpuClock) },
  { key: 'gpuTemp', label: 'GPU temp (°C)', num: true, get: (r) => orNeg(r.gpuTemp), render: (r) => (r.gpuTemp === null ? '' : r.gpuTemp) },
  { key: 'gpuThrottle', label: 'GPU throttled', get: (r) => r.gpuThrottle, render: (r) => r.gpuThrottle },
];

function columnsFor(ranks, table) {
  const axes = layoutAxes(ranks).map((a) => ({ key: a, label: a, num: true,
    get: (r) => orNeg(r.coords[a]), render: (r) => (r.coords[a] === undefined ? '' : r.coords[a]) }));
  const figures = kFigures.filter((f) => table.some((r) => r[f.key] !== null && r[f.key] !== undefined))
    .map((f) => ({ key: f.key, label: f.label, num: true, get: (r) => orNeg(r[f.key]), render: (r) => pct(r[f.key]) }));
  const gpu = table.some((r) => r.hasGpu) ? kGpuColumns : [];
  return [columns[0], ...axes, ...columns.slice(1, -1), ...figures, ...gpu, columns[columns.length - 1]];
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[s.length >> 1] : 0;
};

// A group's header: its size, median step time, and its bubble where its ranks have one.
function groupSummary(rows) {
  const bubbles = rows.map((r) => r.bubble).filter((b) => b !== null && b !== undefined);
  const bubble = bubbles.length ? `, bubble ${pct(bubbles.reduce((a, b) => a + b, 0) / bubbles.length)}%` : '';
  return `${rows.length} ranks, median step ${ms(median(rows.map((r) => r.duration)))} ms${bubble}`;
}

// One table row per rank: its newest step row `s` (may be missing) and its rank entry `r`.
function rankRow(r, s) {
  let top = null;
  for (const op of (s && s.ops) || []) if (!top || op.total_ns > top.total_ns) top = op;
  const row = { rank: r.rank, node: r.node || r.host, step: s ? s.step : r.latest_step,
                duration: s ? s.duration_ns : 0, compute: s ? s.compute_ns : 0,
                comm: s ? s.exposed_comm_ns : 0, data: s ? s.data_ns : 0,
                top: top ? top.name : '', topNs: top ? top.total_ns : 0, ended: r.ended, coords: r.coords || {} };
  for (const f of kFigures) row[f.key] = s && s[f.field] !== undefined ? s[f.field] : null;
  const g = r.gpu || null;
  row.hasGpu = g !== null;
  row.gpuClock = g && isSet(g.sm_clock_mhz) ? g.sm_clock_mhz : null;
  row.gpuTemp = g && isSet(g.temperature_c) ? g.temperature_c : null;
  row.gpuThrottle = !g ? '' : g.lost ? 'lost' : g.throttling ? 'yes' : g.throttling === false ? 'no' : '';
  return row;
}

function topOperators(steps) {
  const ops = new Map();
  for (const s of steps) for (const op of s.ops || []) {
    const o = ops.get(op.name) || { name: op.name, total: 0, count: 0 };
    o.total += op.total_ns; o.count += op.count; ops.set(op.name, o);
  }
  return [...ops.values()].sort((a, b) => b.total - a.total).slice(0, kTopOps);
}

export class RanksPanel {
  constructor(job) {
    this.job = job;
    this.ranksBox = el('div', { id: 'ranks' }, el('p', { class: 'muted' }, 'loading…'));
    this.opsBox = el('div', { id: 'top-ops' });
    this.table = null;
    this.columnKeys = '';
    // The order the user chose, kept when the table is rebuilt because its columns changed.
    this.sort = { key: 'rank', desc: false };
    this.groupBy = 'rank';
    this.ranksSection = el('section', { class: 'panel' }, el('h2', {}, 'Ranks (latest step; click a column to sort)'), this.ranksBox);
    this.opsSection = el('section', { class: 'panel' }, el('h2', {}, 'Top operators (latest step, summed over ranks)'), this.opsBox);
  }

  // Rows grouped by 'rank' (none), 'pp', 'dp' or 'tp': each group under a header row.
  setGroupBy(by) {
    this.groupBy = by;
    this.applyGrouping();
  }

  applyGrouping() {
    if (!this.table) return;
    const g = kGroupings.find((x) => x.key === this.groupBy);
    if (!g || !g.order) { this.table.setGrouping(null); return; }
    this.table.setGrouping({
      of: (r) => {
        const group = groupRanks([r], this.groupBy).groups[0];
        return { key: group.value, label: group.label };
      },
      summary: groupSummary,
    });
  }

  // A rank whose reports arrive later than the others' (recording a capture, a slow agent)
  // has no row in the last two steps: its own latest row, fetched alone, so that it reads as
  // behind rather than as zeros. At most kLaggingFetches ranks a refresh.
  async addLagging(ranks, byRank) {
    const lagging = ranks.filter((r) => !byRank.has(r.rank) && r.latest_step >= 0).slice(0, kLaggingFetches);
    const found = await Promise.all(lagging.map((r) => get(`/api/v1/jobs/${enc(this.job)}/steps?rank=${r.rank}` +
      `&from=${r.latest_step}&to=${r.latest_step}&detail=1&limit=1`).catch(() => null)));
    for (const res of found) for (const s of (res && res.steps) || []) byRank.set(s.rank, s);
  }

  async load(ranks) {
    const jr = state.jobs.get(this.job);
    const latest = jr ? jr.latest_step : 0;
    // Each rank's newest row within the last two steps, with operators and collectives.
    const rows = await get(`/api/v1/jobs/${enc(this.job)}/steps?from=${Math.max(0, latest - 1)}&detail=1&limit=100000`);
    const byRank = new Map();
    for (const s of rows.steps) byRank.set(s.rank, s);
    await this.addLagging(ranks, byRank);
    const table = ranks.map((r) => rankRow(r, byRank.get(r.rank)));
    // The columns follow what the job reports (a layout declared late adds its columns).
    const cols = columnsFor(ranks, table);
    const keys = cols.map((c) => c.key).join(',');
    if (this.table && keys === this.columnKeys) this.table.update(table);
    else {
      this.columnKeys = keys;
      this.table = sortableTable(cols, table, this.sort.key, this.sort.desc,
        (key, desc) => { this.sort = { key, desc }; });
      this.ranksBox.replaceChildren(this.table);
      this.applyGrouping();
    }
    const top = topOperators(byRank.values());
    if (!top.length) { this.opsBox.replaceChildren(el('p', { class: 'muted' }, 'No operator timings reported.')); return; }
    this.opsBox.replaceChildren(el('table', {},
      el('thead', {}, el('tr', {}, el('th', {}, 'operator'), el('th', { class: 'num' }, 'total (ms)'), el('th', { class: 'num' }, 'calls'))),
      el('tbody', {}, top.map((o) => el('tr', {}, el('td', {}, o.name), el('td', { class: 'num' }, ms(o.total)), el('td', { class: 'num' }, o.count))))));
  }
}
