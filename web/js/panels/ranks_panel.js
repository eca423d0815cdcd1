// Job page panels from each rank's latest step: the ranks table (sortable) and the top
// operators summed over ranks.
import { get, enc } from '../api.js';
import { el, ms, sortableTable } from '../dom.js';
import { state } from '../state.js';

const kTopOps = 12;

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

// One table row per rank: its newest step row `s` (may be missing) and its rank entry `r`.
function rankRow(r, s) {
  let top = null;
  for (const op of (s && s.ops) || []) if (!top || op.total_ns > top.total_ns) top = op;
  return { rank: r.rank, node: r.node || r.host, step: s ? s.step : r.latest_step,
           duration: s ? s.duration_ns : 0, compute: s ? s.compute_ns : 0,
           comm: s ? s.exposed_comm_ns : 0, data: s ? s.data_ns : 0,
           top: top ? top.name : '', topNs: top ? top.total_ns : 0, ended: r.ended };
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
    this.ranksSection = el('section', { class: 'panel' }, el('h2', {}, 'Ranks (latest step; click a column to sort)'), this.ranksBox);
    this.opsSection = el('section', { class: 'panel' }, el('h2', {}, 'Top operators (latest step, summed over ranks)'), this.opsBox);
  }

  async load(ranks) {
    const jr = state.jobs.get(this.job);
    const latest = jr ? jr.latest_step : 0;
    // Each rank's newest row within the last two steps, with operators and collectives.
    const rows = await get(`/api/v1/jobs/${enc(this.job)}/steps?from=${Math.max(0, latest - 1)}&detail=1&limit=100000`);
    const byRank = new Map();
    for (const s of rows.steps) byRank.set(s.rank, s);
    const table = ranks.map((r) => rankRow(r, byRank.get(r.rank)));
    if (this.table) this.table.update(table);
    else this.ranksBox.replaceChildren(this.table = sortableTable(columns, table, 'rank'));
    const top = topOperators(byRank.values());
    if (!top.length) { this.opsBox.replaceChildren(el('p', { class: 'muted' }, 'No operator timings reported.')); return; }
    this.opsBox.replaceChildren(el('table', {},
      el('thead', {}, el('tr', {}, el('th', {}, 'operator'), el('th', { class: 'num' }, 'total (ms)'), el('th', { class: 'num' }, 'calls'))),
      el('tbody', {}, top.map((o) => el('tr', {}, el('td', {}, o.name), el('td', { class: 'num' }, ms(o.total)), el('td', { class: 'num' }, o.count))))));
  }
}
