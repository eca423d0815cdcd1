// Job page panel: collective bandwidth over time, per operation, from rank 0's view (the
// first rank of the job's list), over the latest 2,000 steps.
import { get, enc } from '../api.js';
import { el } from '../dom.js';
import { state } from '../state.js';

const kSteps = 2000;
const kColors = ['#5fb3ff', '#ff9f43', '#5fd38d', '#c678dd', '#ffc857', '#ff6b6b'];

export class BandwidthPanel {
  constructor(job) {
    this.job = job;
    this.box = el('div', { id: 'bandwidth-chart' });
    this.chart = null;
    this.section = el('section', { class: 'panel' }, el('h2', {}, 'Collective bandwidth over time (rank 0\'s view, GB/s)'), this.box);
  }

  async load(ranks) {
    const jr = state.jobs.get(this.job);
    if (!jr || jr.latest_step < 0 || !ranks.length) return;
    const from = Math.max(0, jr.latest_step - kSteps + 1);
    const r = await get(`/api/v1/jobs/${enc(this.job)}/steps?rank=${ranks[0].rank}&from=${from}&detail=1&limit=${kSteps}`);
    const opsSeen = new Set();
    for (const s of r.steps) for (const c of s.collectives) opsSeen.add(c.op);
    const opsList = [...opsSeen].sort();
    if (!opsList.length) { this.box.replaceChildren(el('p', { class: 'muted' }, 'No collectives reported.')); return; }
    const x = r.steps.map((s) => s.step);
    const series = opsList.map((op) => r.steps.map((s) => {
      let bytes = 0, ns = 0;
      for (const c of s.collectives) if (c.op === op) { bytes += c.bytes * c.count; ns += c.total_ns; }
      return ns > 0 ? bytes / ns : null;  // bytes per ns = GB/s
    }));
    if (this.chart) this.chart.destroy();
    this.chart = new uPlot({
      width: Math.max(300, this.box.clientWidth || 500), height: 220, scales: { x: { time: false } },
      axes: [{ stroke: '#8a94a0', grid: { stroke: '#262d36' } }, { stroke: '#8a94a0', grid: { stroke: '#262d36' } }],
      series: [{ label: 'step' }, ...opsList.map((op, i) => ({ label: op, stroke: kColors[i % kColors.length] }))],
    }, [x, ...series], this.box);
  }
}
