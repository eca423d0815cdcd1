// Job page panel: the rank × step heatmap of compute time relative to each step's median, with
// its range controls; rows in rank order or grouped by the job's parallel layout (setGroupBy). Follows the latest steps ("follow live") until the user picks a range,
// by typing it, zooming on the heatmap or selecting on the step chart (show()).
import { get, enc } from '../api.js';
import { el } from '../dom.js';
import { Heatmap, heatmapFromCompact, legendGradient, withRowOrder } from '../heatmap.js';
import { coordLabel, groupRanks } from '../layout.js';
import { state } from '../state.js';

// The heatmap's window when following: at most this many rank x step cells.
const kMaxHeatmapRows = 100000;
// A typed range is cut to these (the collector's /heatmap allows 10,000 steps).
const kMaxHeatmapSteps = 10000;
const kMaxHeatmapCells = 2000000;
// Steps the heatmap shows when following the latest data.
const kFollowSteps = 250;

export class HeatmapPanel {
  // ranks() -> the job's current rank list (the rows).
  constructor(job, ranks) {
    this.job = job;
    this.ranks = ranks;
    this.canvas = el('canvas', { class: 'heatmap', id: 'heatmap' });
    this.fromIn = el('input', { type: 'number', id: 'hm-from', min: '0' });
    this.toIn = el('input', { type: 'number', id: 'hm-to', min: '0' });
    this.info = el('span', { class: 'muted', id: 'hm-info' });
    this.followBox = el('input', { type: 'checkbox', id: 'hm-follow', checked: '' });
    this.view = { from: 0, to: -1, follow: true, loading: false };
    this.groupBy = 'rank';
    this.raw = null;  // the last response, in rank order
    this.section = el('section', { class: 'panel' },
      el('h2', {}, 'Compute time relative to the step\'s median, rank × step (a straggler is a bright row)'),
      el('div', { class: 'controls' }, 'steps', this.fromIn, '–', this.toIn,
        el('button', { id: 'hm-apply', onclick: () => this.load(+this.fromIn.value, +this.toIn.value, false) }, 'show'),
        el('button', { id: 'hm-latest', onclick: () => { this.followBox.checked = true; this.load(null, null, true); } }, 'latest'),
        el('label', {}, this.followBox, ' follow live'),
        el('span', {}, '0.9× ', el('span', { class: 'legend-bar', style: `background:${legendGradient()}` }), ' ≥1.6×'),
        this.info),
      el('div', { class: 'heatmap-wrap' }, this.canvas, el('div', { class: 'heatmap-sel' })));
    // After the layout: the heatmap draws its selection in the canvas's wrapper.
    this.heatmap = new Heatmap(this.canvas, (a, b) => this.show(a, b));
  }

  // Shows steps from..to and stops following.
  show(from, to) {
    this.followBox.checked = false;
    this.load(from, to, false);
  }

  // Rows grouped by 'rank' (none), 'pp', 'dp' or 'tp' (layout.js kGroupings); redraws.
  setGroupBy(by) {
    this.groupBy = by;
    if (this.raw) this.draw();
  }

  draw() {
    const byId = new Map(this.ranks().map((r) => [r.rank, r]));
    const entries = this.raw.rankIds.map((id) => byId.get(id) || { rank: id });
    const { order, groups } = groupRanks(entries, this.groupBy);
    const labels = entries.map((e) => coordLabel(e.coords));
    this.heatmap.set(withRowOrder(this.raw, order, groups, labels));
  }

  // Whether a live refresh should re-read the latest window now.
  wantsRefresh() { return this.followBox.checked && !this.view.loading; }

  async load(from, to, follow) {
    const jr = state.jobs.get(this.job);
    const rankCount = this.ranks().length;
    if (!jr || !rankCount) return;
    // The latest window: 250 steps (fewer at thousands of ranks) keeps the first load fast;
    // zooming on the step chart or typing a range shows any other part of the run.
    const windowSteps = Math.max(10, Math.floor(kMaxHeatmapRows / rankCount));
    if (follow || from === null) {
      to = jr.latest_step;
      from = Math.max(0, to - Math.min(windowSteps, kFollowSteps) + 1);
    }
    if (to < from) [from, to] = [to, from];
    // A typed range is cut to what the /heatmap route serves at this many ranks.
    to = Math.min(to, from + Math.min(kMaxHeatmapSteps, Math.max(10, Math.floor(kMaxHeatmapCells / rankCount))) - 1);
    this.view = { from, to, follow, loading: true };
    this.fromIn.value = from;
    this.toIn.value = to;
    this.info.textContent = 'loading…';
    // The compact route: compute time only, ranks x steps in one array (a tenth of the
    // bytes of the /steps rows, and no per-row objects to parse).
    const t0 = performance.now();
    const r = await get(`/api/v1/jobs/${enc(this.job)}/heatmap?from=${from}&to=${to}`);
    const t1 = performance.now();
    this.raw = heatmapFromCompact(r);
    this.draw();
    this.view.loading = false;
    const d = this.canvas.dataset;
    this.info.textContent = `${rankCount} ranks × ${to - from + 1} steps; fetched in ${(t1 - t0).toFixed(0)} ms, drawn in ${d.renderMs} ms; brightest row: rank ${d.brightestRow} (${d.brightestRatio}× median)`;
  }
}
