// The parallel layout on the dashboard: ranks' coordinates (the ranks listing's "coords",
// from the groups the job declared), the orders that group them by pipeline stage,
// data-parallel replica or tensor-parallel index, labels, and the anomalies' estimated gain.
// Pure functions; any page or panel may use them.

// The axes in the order the API lists them.
export const kAxes = ['pp', 'dp', 'tp', 'cp', 'ep'];

// What the rows can be grouped by; `order` sorts within the grouping (a stage grouping reads
// as a stage x replica grid: stage by stage, replica by replica, tp ranks next to each other).
export const kGroupings = [
  { key: 'rank', label: 'rank' },
  { key: 'pp', label: 'stage (pp)', name: 'stage', order: ['pp', 'dp', 'cp', 'ep', 'tp'] },
  { key: 'dp', label: 'replica (dp)', name: 'replica', order: ['dp', 'pp', 'cp', 'ep', 'tp'] },
  { key: 'tp', label: 'tensor-parallel index (tp)', name: 'tp', order: ['tp', 'pp', 'dp', 'cp', 'ep'] },
];

// The axes some rank of `ranks` has a coordinate along, in kAxes order.
export function layoutAxes(ranks) {
  const seen = new Set();
  for (const r of ranks) for (const a of Object.keys(r.coords || {})) seen.add(a);
  return kAxes.filter((a) => seen.has(a));
}

// The groupings that make sense for `ranks`: 'rank' always, each axis someone has.
export function groupingsFor(ranks) {
  const axes = new Set(layoutAxes(ranks));
  return kGroupings.filter((g) => g.key === 'rank' || axes.has(g.key));
}

// "pp0 dp1 tp0" (the axes present), "" without coordinates.
export function coordLabel(coords) {
  return kAxes.filter((a) => coords && coords[a] !== undefined).map((a) => a + coords[a]).join(' ');
}

const coordOf = (r, axis) => (r.coords && r.coords[axis] !== undefined ? r.coords[axis] : Infinity);

// Orders `ranks` (entries with .rank and .coords) for grouping `by`: returns {order: indices
// into ranks, groups: [{label, start, count}]} where groups are the runs of equal coordinate
// along `by` in that order. By 'rank' (or an unknown key): rank order, no groups.
export function groupRanks(ranks, by) {
  const g = kGroupings.find((x) => x.key === by);
  const order = ranks.map((_, i) => i);
  const axes = g && g.order ? g.order : [];
  order.sort((i, j) => {
    for (const a of axes) {
      const d = coordOf(ranks[i], a) - coordOf(ranks[j], a);
      if (d !== 0 && !Number.isNaN(d)) return d;
    }
    return ranks[i].rank - ranks[j].rank;
  });
  if (!axes.length) return { order, groups: [] };
  const groups = [];
  for (let k = 0; k < order.length; k++) {
    const v = coordOf(ranks[order[k]], by);
    const last = groups[groups.length - 1];
    if (last && last.value === v) { last.count++; continue; }
    groups.push({ value: v, label: v === Infinity ? 'no coordinates' : `${g.name} ${v}`, start: k, count: 1 });
  }
  return { order, groups };
}

// The fraction of step time fixing the anomaly's cause would save (evidence.estimated_gain),
// or null where the detector gave none.
export function anomalyGain(a) {
  const g = a.evidence ? a.evidence.estimated_gain : undefined;
  return typeof g === 'number' && Number.isFinite(g) ? g : null;
}

// Largest estimated gain first (the problem most worth fixing); those without one after, newest
// first among equals.
export function byGain(a, b) {
  const ga = anomalyGain(a), gb = anomalyGain(b);
  if (ga !== gb) {
    if (ga === null) return 1;
    if (gb === null) return -1;
    return gb - ga;
  }
  return b.detected_ns - a.detected_ns;
}

// Whether an API field holds a value (absent and null both mean none).
export const isSet = (x) => x !== null && x !== undefined;

// A ratio as a percentage with one decimal, '' for null/undefined.
export const pct = (x) => (x === null || x === undefined ? '' : (100 * x).toFixed(1));
