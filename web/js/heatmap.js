// A rank x step heatmap on a <canvas>: each cell is a rank's compute time in a step relative
// to that step's median across ranks, so a straggler is one bright row. One pixel per cell in
// an offscreen image, scaled up without smoothing: 1,024 ranks x 1,000 steps is one
// putImageData and one drawImage.

// Colour of a ratio: <= 1 dark blue, rising through purple and orange to white at >= 1.6.
const kLut = (() => {
  const lut = new Uint8ClampedArray(256 * 4);
  const stops = [[0, [8, 12, 40]], [0.35, [40, 30, 110]], [0.55, [150, 40, 120]],
                 [0.75, [240, 110, 40]], [1, [255, 250, 220]]];
  for (let i = 0; i < 256; i++) {
    const t = i / 255;
    let k = 0;
    while (k < stops.length - 2 && t > stops[k + 1][0]) k++;
    const [t0, c0] = stops[k];
    const [t1, c1] = stops[k + 1];
    const f = Math.min(1, Math.max(0, (t - t0) / (t1 - t0)));
    for (let c = 0; c < 3; c++) lut[i * 4 + c] = c0[c] + (c1[c] - c0[c]) * f;
    lut[i * 4 + 3] = 255;
  }
  return lut;
})();

// ratio 0.9 -> 0, 1.6 -> 255.
export function ratioIndex(ratio) {
  const i = Math.round(((ratio - 0.9) / 0.7) * 255);
  return i < 0 ? 0 : i > 255 ? 255 : i;
}

export function legendGradient() {
  const parts = [];
  for (let i = 0; i <= 255; i += 51) {
    parts.push(`rgb(${kLut[i * 4]},${kLut[i * 4 + 1]},${kLut[i * 4 + 2]})`);
  }
  return `linear-gradient(to right, ${parts.join(',')})`;
}

// Median of the positive values among a[0..n) (0 if none), by quickselect: O(n) per step
// instead of a sort, which is most of the render time at 1,024 ranks. Reorders `a`.
function median(a, n) {
  let k = 0;
  for (let i = 0; i < n; i++) if (a[i] > 0) a[k++] = a[i];
  if (k === 0) return 0;
  const want = k >> 1;
  let lo = 0, hi = k - 1;
  while (lo < hi) {
    const pivot = a[(lo + hi) >> 1];
    let i = lo, j = hi;
    while (i <= j) {
      while (a[i] < pivot) i++;
      while (a[j] > pivot) j--;
      if (i <= j) { const t = a[i]; a[i] = a[j]; a[j] = t; i++; j--; }
    }
    if (want <= j) hi = j;
    else if (want >= i) lo = i;
    else break;
  }
  return a[want];
}

// Separating lines between groups of rows (groups: [{label, start, count}] in row order, from
// layout.js groupRanks) and each group's label at its top left, over the cells.
function drawGroups(ctx, d, cv, dpr) {
  if (!d.groups || d.groups.length < 2) return;
  ctx.font = `${Math.round(11 * dpr)}px sans-serif`;
  ctx.textBaseline = 'top';
  for (const g of d.groups) {
    const y = Math.round((g.start / d.ranks) * cv.height);
    if (g.start > 0) {
      ctx.fillStyle = '#e8eef5';
      ctx.fillRect(0, y - Math.floor(dpr), cv.width, Math.max(1, Math.round(dpr)));
    }
    const w = ctx.measureText(g.label).width + 6 * dpr;
    ctx.fillStyle = 'rgba(0,0,0,0.65)';
    ctx.fillRect(2 * dpr, y + 2 * dpr, w, 14 * dpr);
    ctx.fillStyle = '#e8eef5';
    ctx.fillText(g.label, 5 * dpr, y + 3 * dpr);
  }
}

// Data: ranks (R), firstStep, steps (S), values: Float64Array(R * S) row-major by rank,
// compute ns, 0 for a missing cell; optional rankIds (the rank of each row), rowLabels (its
// coordinates, for the tooltip) and groups (bands drawn separated and labelled).
export class Heatmap {
  constructor(canvas, onSelect) {
    this.canvas = canvas;
    this.onSelect = onSelect;  // (fromStep, toStep) after a drag
    this.data = null;
    this.off = document.createElement('canvas');
    this.tip = document.createElement('div');
    this.tip.className = 'tip';
    document.body.appendChild(this.tip);
    this.sel = canvas.parentElement.querySelector('.heatmap-sel');
    this.installMouse();
  }

  set(data) {
    this.data = data;
    this.render();
  }

  // Returns milliseconds spent; also exposed as data-render-ms, and the row with the highest
  // mean ratio as data-brightest-row (what a test or a person looks for first).
  render() {
    const t0 = performance.now();
    const d = this.data;
    const cv = this.canvas;
    const dpr = window.devicePixelRatio || 1;
    cv.width = Math.max(1, Math.round(cv.clientWidth * dpr));
    cv.height = Math.max(1, Math.round(cv.clientHeight * dpr));
    const ctx = cv.getContext('2d');
    ctx.fillStyle = '#000';
    ctx.fillRect(0, 0, cv.width, cv.height);
    if (!d || d.ranks === 0 || d.steps === 0) {
      cv.dataset.brightestRow = '';
      return 0;
    }
    const R = d.ranks, S = d.steps, v = d.values;
    // Per-step median across ranks.
    const col = new Float64Array(R);
    const med = new Float64Array(S);
    for (let s = 0; s < S; s++) {
      for (let r = 0; r < R; r++) col[r] = v[r * S + s];
      med[s] = median(col, R);
    }
    this.off.width = S;
    this.off.height = R;
    const octx = this.off.getContext('2d');
    const img = octx.createImageData(S, R);
    const px = img.data;
    const rowSum = new Float64Array(R);
    const rowN = new Uint32Array(R);
    for (let r = 0; r < R; r++) {
      const base = r * S;
      for (let s = 0; s < S; s++) {
        const x = v[base + s];
        const o = (base + s) * 4;
        if (x <= 0 || med[s] <= 0) { px[o] = 30; px[o + 1] = 30; px[o + 2] = 30; px[o + 3] = 255; continue; }
        const ratio = x / med[s];
        rowSum[r] += ratio;
        rowN[r]++;
        const li = ratioIndex(ratio) * 4;
        px[o] = kLut[li]; px[o + 1] = kLut[li + 1]; px[o + 2] = kLut[li + 2]; px[o + 3] = 255;
      }
    }
    octx.putImageData(img, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(this.off, 0, 0, S, R, 0, 0, cv.width, cv.height);
    drawGroups(ctx, d, cv, dpr);
    let best = -1, bestMean = -Infinity;
    for (let r = 0; r < R; r++) {
      if (rowN[r] === 0) continue;
      const m = rowSum[r] / rowN[r];
      if (m > bestMean) { bestMean = m; best = r; }
    }
    this.rowMeans = { best, bestMean };
    this.medians = med;
    const ms = performance.now() - t0;
    cv.dataset.brightestRow = best >= 0 ? String(d.rankIds ? d.rankIds[best] : best) : '';
    cv.dataset.brightestRatio = bestMean.toFixed(3);
    cv.dataset.renderMs = ms.toFixed(1);
    cv.dataset.ranks = String(R);
    cv.dataset.steps = String(S);
    cv.dataset.firstStep = String(d.firstStep);
    cv.dataset.rowOrder = d.rankIds ? d.rankIds.join(',') : '';
    cv.dataset.groups = JSON.stringify((d.groups || []).map((g) => [g.label, g.count]));
    return ms;
  }

  cellAt(ev) {
    const d = this.data;
    if (!d) return null;
    const rect = this.canvas.getBoundingClientRect();
    const s = Math.floor(((ev.clientX - rect.left) / rect.width) * d.steps);
    const r = Math.floor(((ev.clientY - rect.top) / rect.height) * d.ranks);
    if (s < 0 || s >= d.steps || r < 0 || r >= d.ranks) return null;
    return { s, r };
  }

  installMouse() {
    let dragFrom = null;
    this.canvas.addEventListener('mousemove', (ev) => {
      const c = this.cellAt(ev);
      const d = this.data;
      if (dragFrom !== null && this.sel) {
        const rect = this.canvas.getBoundingClientRect();
        const x0 = Math.min(dragFrom, ev.clientX) - rect.left;
        const x1 = Math.max(dragFrom, ev.clientX) - rect.left;
        Object.assign(this.sel.style, { display: 'block', left: x0 + 'px', width: (x1 - x0) + 'px' });
      }
      if (!c) { this.tip.style.display = 'none'; return; }
      const x = d.values[c.r * d.steps + c.s];
      const m = this.medians ? this.medians[c.s] : 0;
      const rank = d.rankIds ? d.rankIds[c.r] : c.r;
      const where = d.rowLabels && d.rowLabels[c.r] ? ` (${d.rowLabels[c.r]})` : '';
      this.tip.textContent = `rank ${rank}${where}, step ${d.firstStep + c.s}: compute ${(x / 1e6).toFixed(2)} ms` +
        (m > 0 ? ` (${(x / m).toFixed(2)}x median)` : '');
      Object.assign(this.tip.style, { display: 'block', left: ev.clientX + 12 + 'px', top: ev.clientY + 12 + 'px' });
    });
    this.canvas.addEventListener('mouseleave', () => { this.tip.style.display = 'none'; });
    this.canvas.addEventListener('mousedown', (ev) => { dragFrom = ev.clientX; });
    window.addEventListener('mouseup', (ev) => {
      if (dragFrom === null) return;
      const d = this.data;
      const rect = this.canvas.getBoundingClientRect();
      const a = Math.min(dragFrom, ev.clientX), b = Math.max(dragFrom, ev.clientX);
      dragFrom = null;
      if (this.sel) this.sel.style.display = 'none';
      if (!d || b - a < 4) return;
      const s0 = Math.max(0, Math.floor(((a - rect.left) / rect.width) * d.steps));
      const s1 = Math.min(d.steps - 1, Math.floor(((b - rect.left) / rect.width) * d.steps));
      if (this.onSelect && s1 >= s0) this.onSelect(d.firstStep + s0, d.firstStep + s1);
    });
  }
}

// Builds heatmap data from /steps rows ({rank, step, compute_ns}).
export function heatmapFromRows(rows, rankIds, fromStep, toStep) {
  const index = new Map(rankIds.map((r, i) => [r, i]));
  const S = Math.max(0, toStep - fromStep + 1);
  const values = new Float64Array(rankIds.length * S);
  for (const row of rows) {
    const i = index.get(row.rank);
    const s = row.step - fromStep;
    if (i === undefined || s < 0 || s >= S) continue;
    values[i * S + s] = row.compute_ns;
  }
  return { ranks: rankIds.length, steps: S, firstStep: fromStep, values, rankIds };
}

// From GET /api/v1/jobs/{job}/heatmap: {"from","to","ranks":[ids],"compute_ns":[rank-major]}.
export function heatmapFromCompact(r) {
  const S = Math.max(0, r.to - r.from + 1);
  return { ranks: r.ranks.length, steps: S, firstStep: r.from, values: Float64Array.from(r.compute_ns), rankIds: r.ranks };
}

// The same heatmap data with its rows in another order: order[k] is the index of the row shown
// k-th; groups and rowLabels (one per original row) come along (see layout.js groupRanks).
export function withRowOrder(data, order, groups, rowLabels) {
  const S = data.steps;
  const values = new Float64Array(data.values.length);
  order.forEach((src, k) => values.set(data.values.subarray(src * S, (src + 1) * S), k * S));
  const ids = data.rankIds || order.map((_, i) => i);
  return { ...data, values, rankIds: order.map((i) => ids[i]), groups,
           rowLabels: rowLabels ? order.map((i) => rowLabels[i]) : null };
}
