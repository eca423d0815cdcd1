// A merged capture's timeline on a canvas (docs/CAPTURE.md's Chrome-trace JSON): one row per
// rank, inside it one lane per probe thread for operators and ranges and one for collectives;
// ProfilerStep#N spans are marked across the whole height. Wheel zooms around the cursor, drag
// pans. Built for a few hundred thousand events: each lane is sorted once, a frame draws only
// the visible slice (binary search), at most one box per pixel column per lane, and runs of
// narrow boxes as one fill.
const kLaneH = 14;       // css px per lane
const kRankGap = 6;      // css px between ranks
const kLabelW = 92;      // css px of the rank labels on the left
const kAxisH = 22;       // css px of the time axis on top
const kColors = { op: '#5fb3ff', range: '#5fd38d', collective: '#ff9f43', other: '#c678dd' };
const kRangeColors = { compute: '#5fd38d', data: '#ffc857', comm: '#ff9f43', other: '#8a94a0' };

// Lanes from the trace: [{rank, label, events: {ts, end, name, cat, color}[] sorted by ts}].
export function timelineFromTrace(trace) {
  const events = trace.traceEvents || [];
  const names = new Map();   // rank -> "rank R (node)"
  const byRank = new Map();  // rank -> {lanes: Map(key -> events), steps: []}
  let t0 = Infinity, t1 = -Infinity;
  const rankOf = (pid) => {
    if (!byRank.has(pid)) byRank.set(pid, { lanes: new Map(), steps: [] });
    return byRank.get(pid);
  };
  for (const e of events) {
    if (e.ph === 'M') {
      if (e.name === 'process_name' && e.args) names.set(e.pid, e.args.name);
      continue;
    }
    if (e.ph !== 'X' || typeof e.ts !== 'number') continue;
    const dur = Math.max(0, e.dur || 0);
    t0 = Math.min(t0, e.ts);
    t1 = Math.max(t1, e.ts + dur);
    const r = rankOf(e.pid);
    const ev = { ts: e.ts, end: e.ts + dur, name: e.name, cat: e.cat || 'other' };
    if (e.cat === 'step') {
      r.steps.push(ev);
      continue;
    }
    const key = e.cat === 'collective' ? 'collectives' : 'thread ' + (e.tid ?? 0);
    ev.color = e.cat === 'range' ? (kRangeColors[(e.args && e.args.kind) || 'other'] || kColors.range)
      : (kColors[e.cat] || kColors.other);
    if (!r.lanes.has(key)) r.lanes.set(key, []);
    r.lanes.get(key).push(ev);
  }
  const ranks = [...byRank.keys()].sort((a, b) => a - b);
  const rows = ranks.map((rank) => {
    const r = byRank.get(rank);
    const keys = [...r.lanes.keys()].sort((a, b) => (a === 'collectives') - (b === 'collectives') || a.localeCompare(b, undefined, { numeric: true }));
    const lanes = keys.map((k) => {
      const list = r.lanes.get(k).sort((a, b) => a.ts - b.ts);
      // Longest duration so far, so a search for the first box reaching a time can start early enough.
      let maxDur = 0;
      for (const ev of list) maxDur = Math.max(maxDur, ev.end - ev.ts);
      return { key: k, events: list, maxDur };
    });
    r.steps.sort((a, b) => a.ts - b.ts);
    return { rank, label: names.get(rank) || `rank ${rank}`, lanes, steps: r.steps };
  });
  let count = 0;
  for (const row of rows) for (const l of row.lanes) count += l.events.length;
  return { rows, t0: Number.isFinite(t0) ? t0 : 0, t1: Number.isFinite(t1) ? t1 : 1, events: count };
}

// First index whose ts >= t.
function lowerBound(list, t) {
  let lo = 0, hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (list[mid].ts < t) lo = mid + 1; else hi = mid;
  }
  return lo;
}

export class Timeline {
  // `info` (optional) is an element that shows what is under the cursor.
  constructor(canvas, info) {
    this.canvas = canvas;
    this.info = info;
    this.data = null;
    this.view = { t0: 0, t1: 1 };
    this.pending = false;
    let drag = null;
    canvas.addEventListener('wheel', (ev) => {
      if (!this.data) return;
      ev.preventDefault();
      const t = this.timeAt(ev.offsetX);
      const f = Math.exp(Math.sign(ev.deltaY) * Math.min(Math.abs(ev.deltaY), 200) / 300);
      this.setView(t - (t - this.view.t0) * f, t + (this.view.t1 - t) * f);
    }, { passive: false });
    canvas.addEventListener('mousedown', (ev) => { drag = { x: ev.clientX, t0: this.view.t0, t1: this.view.t1 }; });
    window.addEventListener('mouseup', () => { drag = null; });
    window.addEventListener('mousemove', (ev) => {
      if (!drag || !this.data) return;
      const dt = (ev.clientX - drag.x) / this.plotW() * (drag.t1 - drag.t0);
      this.setView(drag.t0 - dt, drag.t1 - dt);
    });
    canvas.addEventListener('mousemove', (ev) => { if (!drag) this.hover(ev.offsetX, ev.offsetY); });
    canvas.addEventListener('dblclick', () => this.reset());
  }

  set(data) {
    this.data = data;
    let lanes = 0;
    for (const r of data.rows) lanes += Math.max(1, r.lanes.length);
    this.canvas.style.height = `${kAxisH + lanes * kLaneH + data.rows.length * kRankGap + 4}px`;
    this.reset();
  }

  reset() {
    if (!this.data) return;
    const pad = (this.data.t1 - this.data.t0) * 0.01 || 1;
    this.setView(this.data.t0 - pad, this.data.t1 + pad);
  }

  plotW() { return Math.max(1, this.canvas.clientWidth - kLabelW); }
  timeAt(x) { return this.view.t0 + (x - kLabelW) / this.plotW() * (this.view.t1 - this.view.t0); }

  setView(t0, t1) {
    const min = 1;  // 1 µs: no zooming into nothing
    if (t1 - t0 < min) { const c = (t0 + t1) / 2; t0 = c - min / 2; t1 = c + min / 2; }
    this.view = { t0, t1 };
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => { this.pending = false; this.render(); });
  }

  // Row geometry in css px: [{row, y, h, lanes: [{lane, y}]}].
  layout() {
    const out = [];
    let y = kAxisH;
    for (const row of this.data.rows) {
      const lanes = row.lanes.map((lane, i) => ({ lane, y: y + i * kLaneH }));
      const h = Math.max(1, row.lanes.length) * kLaneH;
      out.push({ row, y, h, lanes });
      y += h + kRankGap;
    }
    return out;
  }

  render() {
    const started = performance.now();
    const cv = this.canvas;
    const dpr = window.devicePixelRatio || 1;
    const W = cv.clientWidth, H = cv.clientHeight;
    if (cv.width !== Math.round(W * dpr) || cv.height !== Math.round(H * dpr)) {
      cv.width = Math.round(W * dpr);
      cv.height = Math.round(H * dpr);
    }
    const ctx = cv.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = '#0d1014';
    ctx.fillRect(0, 0, W, H);
    if (!this.data) return;
    const { t0, t1 } = this.view;
    const pw = this.plotW();
    const scale = pw / (t1 - t0);
    const xOf = (t) => kLabelW + (t - t0) * scale;
    const rows = this.layout();
    let drawn = 0, stepMarks = 0;
    const stepLabels = [];
    // Steps: alternating shading across each rank's rows, and a labelled line at each start.
    ctx.font = '10px sans-serif';
    for (const { row, y, h } of rows) {
      for (let i = lowerBound(row.steps, t0 - 1e12); i < row.steps.length; i++) {
        const s = row.steps[i];
        if (s.end < t0) continue;
        if (s.ts > t1) break;
        const x0 = Math.max(kLabelW, xOf(s.ts)), x1 = Math.min(W, xOf(s.end));
        ctx.fillStyle = i % 2 ? '#161b22' : '#1b222b';
        ctx.fillRect(x0, y, Math.max(1, x1 - x0), h);
        ctx.fillStyle = '#ffc857';
        ctx.fillRect(xOf(s.ts), y, 1, h);
        if (x1 - x0 > 80) stepLabels.push([s.name, x0 + 3, y + h - 3]);
        stepMarks++;
      }
    }
    // Boxes: per lane, the visible slice; boxes under a pixel wide share one column, and runs
    // of narrow boxes of one colour are filled as one rectangle (a dense lane is a few hundred
    // fills, not one per event).
    for (const { lanes } of rows) {
      for (const { lane, y } of lanes) {
        const list = lane.events;
        let i = lowerBound(list, t0 - lane.maxDur);
        let lastPx = -1;
        let run = null;  // [x0, x1, colour] of narrow boxes not filled yet
        const flush = () => {
          if (!run) return;
          ctx.fillStyle = run[2];
          ctx.fillRect(run[0], y + 1, run[1] - run[0], kLaneH - 2);
          run = null;
        };
        for (; i < list.length; i++) {
          const e = list[i];
          if (e.ts > t1) break;
          if (e.end < t0) continue;
          const x0 = xOf(e.ts), x1 = xOf(e.end);
          if (x1 - x0 < 1) {
            const px = Math.floor(x0);
            if (px === lastPx) continue;
            lastPx = px;
          }
          const bx = Math.max(kLabelW, x0);
          const bw = Math.max(1, Math.min(W, x1) - bx);
          drawn++;
          if (bw < 3) {
            if (run && run[2] === e.color && bx <= run[1] + 1) run[1] = Math.max(run[1], bx + bw);
            else { flush(); run = [bx, bx + bw, e.color]; }
            continue;
          }
          flush();
          ctx.fillStyle = e.color;
          ctx.fillRect(bx, y + 1, bw, kLaneH - 2);
          if (bw > 40) {
            ctx.fillStyle = '#0d1014';
            ctx.save();
            ctx.beginPath();
            ctx.rect(bx, y, bw, kLaneH);
            ctx.clip();
            ctx.fillText(e.name, bx + 2, y + kLaneH - 4);
            ctx.restore();
          }
        }
        flush();
      }
    }
    ctx.font = '10px sans-serif';
    for (const [name, x, y] of stepLabels) {
      ctx.fillStyle = '#000a';
      ctx.fillRect(x - 2, y - 9, ctx.measureText(name).width + 4, 11);
      ctx.fillStyle = '#ffc857';
      ctx.fillText(name, x, y);
    }
    // Labels and axis drawn last, over anything that ran into them.
    ctx.fillStyle = '#111418';
    ctx.fillRect(0, 0, kLabelW, H);
    ctx.fillRect(0, 0, W, kAxisH);
    ctx.fillStyle = '#d8dde3';
    ctx.font = '11px sans-serif';
    for (const { row, y, lanes } of rows) {
      ctx.fillText(row.label, 4, y + 11);
      ctx.fillStyle = '#8a94a0';
      ctx.font = '9px sans-serif';
      for (const { lane, y: ly } of lanes.slice(1)) ctx.fillText(lane.key, 8, ly + 10);
      ctx.fillStyle = '#d8dde3';
      ctx.font = '11px sans-serif';
    }
    const span = t1 - t0;  // µs
    const tick = 10 ** Math.floor(Math.log10(span / 6));
    const unit = tick >= 1000 ? 1000 : 1;
    ctx.fillStyle = '#8a94a0';
    for (let t = Math.ceil((t0 - this.data.t0) / tick) * tick; t <= t1 - this.data.t0; t += tick) {
      const x = xOf(this.data.t0 + t);
      if (x < kLabelW) continue;
      ctx.fillRect(x, kAxisH - 5, 1, 5);
      ctx.fillText(`${(t / unit).toFixed(tick / unit >= 1 ? 0 : 1)} ${unit === 1000 ? 'ms' : 'µs'}`, x + 2, kAxisH - 8);
    }
    cv.dataset.ranks = String(this.data.rows.length);
    cv.dataset.events = String(this.data.events);
    cv.dataset.drawn = String(drawn);
    cv.dataset.stepMarks = String(stepMarks);
    cv.dataset.rows = JSON.stringify(rows.map((r) => [r.row.rank, r.y, r.h]));
    cv.dataset.viewUs = String(t1 - t0);
    cv.dataset.renderMs = (performance.now() - started).toFixed(1);
  }

  hover(x, y) {
    if (!this.info || !this.data || x < kLabelW) return;
    const t = this.timeAt(x);
    const tol = 2 / this.plotW() * (this.view.t1 - this.view.t0);
    for (const { row, lanes } of this.layout()) {
      for (const { lane, y: ly } of lanes) {
        if (y < ly || y >= ly + kLaneH) continue;
        const list = lane.events;
        let best = null;
        for (let i = lowerBound(list, t - lane.maxDur - tol); i < list.length && list[i].ts <= t + tol; i++) {
          if (list[i].end + tol >= t) best = list[i];
        }
        this.info.textContent = best
          ? `${row.label}, ${lane.key}: ${best.name} (${best.cat}), ${((best.end - best.ts) / 1000).toFixed(3)} ms at +${((best.ts - this.data.t0) / 1000).toFixed(3)} ms`
          : `${row.label}, ${lane.key}`;
        return;
      }
    }
  }
}
