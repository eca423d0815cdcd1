// Job page panel: the parallel layout's figures over the latest steps, from the compact
// /parallel route: the pipeline bubble of each stage over time (one line per stage), and the
// window's means of the bubble per stage, communication overlap, MFU/HFU and all-to-all share
// (those the job reports). Says so when the job reports none of them.
import { get, enc } from '../api.js';
import { el } from '../dom.js';
import { pct } from '../layout.js';
import { state } from '../state.js';

// Steps shown, and at most this many rank x step cells (each is a stored detail to parse).
const kSteps = 500;
const kMaxCells = 100000;
const kColors = ['#5fb3ff', '#ff9f43', '#5fd38d', '#c678dd', '#ffc857', '#ff6b6b', '#4dd0e1', '#f48fb1'];

const mean = (xs) => {
  const v = xs.filter((x) => x !== null && x !== undefined);
  return v.length ? v.reduce((a, b) => a + b, 0) / v.length : null;
};

export class ParallelPanel {
  constructor(job) {
    this.job = job;
    this.box = el('div', { id: 'stage-bubble-chart' });
    this.info = el('p', { class: 'muted', id: 'parallel-info' });
    this.chart = null;
    this.section = el('section', { class: 'panel', id: 'parallel' },
      el('h2', {}, 'Pipeline bubble per stage (% of step time idle waiting on pipeline peers)'), this.info, this.box);
  }

  async load(ranks) {
    const jr = state.jobs.get(this.job);
    if (!jr || jr.latest_step < 0 || !ranks.length) return;
    const steps = Math.max(1, Math.min(kSteps, Math.floor(kMaxCells / ranks.length)));
    const from = Math.max(0, jr.latest_step - steps + 1);
    const r = await get(`/api/v1/jobs/${enc(this.job)}/parallel?from=${from}&to=${jr.latest_step}`);
    this.draw(r);
  }

  draw(r) {
    const S = r.to - r.from + 1;
    const stages = r.stages.filter((s) => s.bubble_ratio.some((v) => v !== null));
    const stageMeans = stages.map((s) => [s.stage, mean(s.bubble_ratio)]);
    this.section.dataset.stages = String(stages.length);
    this.section.dataset.stageBubble = JSON.stringify(Object.fromEntries(stageMeans));
    const parts = stageMeans.map(([stage, m]) => `stage ${stage} ${pct(m)}%`);
    for (const [key, label] of [['comm_overlap_ratio', 'comm overlap'], ['mfu', 'MFU'], ['hfu', 'HFU'], ['all_to_all_share', 'all-to-all share']]) {
      const m = mean(r[key]);
      this.section.dataset[key] = m === null ? '' : m.toFixed(4);
      if (m !== null) parts.push(`${label} ${pct(m)}%`);
    }
    this.info.textContent = parts.length
      ? `Means over steps ${r.from}–${r.to}: ` + (stageMeans.length ? 'bubble ' : '') + parts.join(', ')
      : 'No pipeline stages, overlap, FLOPs or all-to-all reported.';
    if (this.chart) { this.chart.destroy(); this.chart = null; }
    if (!stages.length) { this.box.replaceChildren(); return; }
    const x = Array.from({ length: S }, (_, i) => r.from + i);
    this.chart = new uPlot({
      width: Math.max(300, this.box.clientWidth || 500), height: 220, scales: { x: { time: false } },
      axes: [{ stroke: '#8a94a0', grid: { stroke: '#262d36' } }, { stroke: '#8a94a0', grid: { stroke: '#262d36' } }],
      series: [{ label: 'step' }, ...stages.map((s, i) => ({ label: `stage ${s.stage}`, stroke: kColors[i % kColors.length], spanGaps: true }))],
    }, [x, ...stages.map((s) => s.bubble_ratio.map((v) => (v === null ? null : 100 * v)))], this.box);
  }
}
