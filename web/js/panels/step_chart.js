// Job page panel: step time over the run (median and max across ranks) with the job's
// anomalies marked where they began. The latest steps load first (the page is usable with
// them), the rest of the run afterwards; a drag selects a step range (onSelect(from, to)).
import { get, enc } from '../api.js';
import { el } from '../dom.js';
import { jobAnomalies, state } from '../state.js';

// Steps read on first load; older ones follow in the background (the whole-run summary is
// the slowest query of a long job).
const kRecentSteps = 1000;

export class StepChart {
  constructor(job, onSelect) {
    this.job = job;
    this.onSelect = onSelect;
    this.box = el('div', { id: 'step-chart' });
    this.section = el('section', { class: 'panel' },
      el('h2', {}, 'Step time (median and max across ranks, ms); anomalies marked where they began — drag to zoom, the heatmap follows'),
      this.box);
    this.summary = { x: [], med: [], max: [] };
    this.chart = null;
    this.olderFrom = 0;  // the first step loadRecent read; loadOlder reads the steps before it
  }

  drawMarkers(u) {
    const ctx = u.ctx;
    const scale = window.devicePixelRatio || 1;
    ctx.save();
    for (const a of jobAnomalies(this.job)) {
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
      ctx.font = `${11 * scale}px sans-serif`;
      ctx.fillText(a.kind, x + 4, u.bbox.top + 12 * scale);
    }
    ctx.restore();
  }

  data() { return [this.summary.x, this.summary.med, this.summary.max]; }

  draw() {
    if (this.chart) { this.chart.setData(this.data()); return; }
    this.chart = new uPlot({
      width: Math.max(400, this.box.clientWidth || 900), height: 260,
      scales: { x: { time: false } },
      axes: [{ stroke: '#8a94a0', grid: { stroke: '#262d36' }, label: 'step' },
             { stroke: '#8a94a0', grid: { stroke: '#262d36' }, label: 'ms' }],
      series: [{ label: 'step' },
               { label: 'median', stroke: '#5fb3ff', width: 1.5 },
               { label: 'max', stroke: '#ff9f43', width: 1 }],
      hooks: {
        draw: [(u) => this.drawMarkers(u)],
        setSelect: [(u) => {
          if (u.select.width < 4) return;
          const a = Math.round(u.posToVal(u.select.left, 'x'));
          const b = Math.round(u.posToVal(u.select.left + u.select.width, 'x'));
          this.onSelect(Math.max(0, a), b);
        }],
      },
    }, this.data(), this.box);
  }

  append(rows) {
    const s = this.summary;
    for (const r of rows) {
      const last = s.x.length ? s.x[s.x.length - 1] : -1;
      const y1 = r.median_ns / 1e6, y2 = r.max_ns / 1e6;
      if (r.step > last) { s.x.push(r.step); s.med.push(y1); s.max.push(y2); }
      else {
        // A step seen before (it was still arriving): replace it.
        const i = s.x.lastIndexOf(r.step);
        if (i >= 0) { s.med[i] = y1; s.max[i] = y2; }
      }
    }
  }

  async loadRecent() {
    const jr = state.jobs.get(this.job);
    const from = Math.max(0, (jr ? jr.latest_step : 0) - kRecentSteps + 1);
    const r = await get(`/api/v1/jobs/${enc(this.job)}/summary?from=${from}&limit=100000`);
    this.summary = { x: [], med: [], max: [] };
    this.append(r.steps);
    this.draw();
    this.olderFrom = from;
  }

  // The steps before loadRecent's, page by page; false when the page was left meanwhile.
  async loadOlder(alive) {
    const before = this.olderFrom;
    const older = { x: [], med: [], max: [] };
    let from = 0;
    for (;;) {
      const r = await get(`/api/v1/jobs/${enc(this.job)}/summary?from=${from}&to=${before - 1}&limit=100000`);
      for (const row of r.steps) {
        older.x.push(row.step); older.med.push(row.median_ns / 1e6); older.max.push(row.max_ns / 1e6);
      }
      if (!r.truncated || !r.steps.length || !alive()) break;
      from = r.steps[r.steps.length - 1].step + 1;
    }
    if (!alive()) return false;
    const s = this.summary;
    this.summary = { x: older.x.concat(s.x), med: older.med.concat(s.med), max: older.max.concat(s.max) };
    this.draw();
    return true;
  }

  // New summary rows from the live feed; the view follows unless the user has a selection.
  live(rows) {
    if (!this.chart) return false;
    this.append(rows);
    this.chart.setData(this.data(), !this.chart.select || this.chart.select.width === 0);
    return true;
  }

  redraw() { if (this.chart) this.chart.redraw(); }
}
