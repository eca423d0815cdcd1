// How captures are shown wherever they appear (job page anomalies, capture list, one capture):
// labels, state colours, per-rank progress boxes.
import { el } from './dom.js';
import { state } from './state.js';

// The link text for a capture id: its kind and state when known.
export const captureLabel = (id) => {
  const c = state.captures.get(id);
  return c ? `${c.kind} ${c.state}` : 'capture';
};

export const capState = (c) => (c.state === 'complete' ? 'state-running' : c.state === 'running' ? 'state-stale-soft' : c.state === 'failed' ? 'state-stale' : 'state-ended');

// Per-rank progress: one small box per rank, coloured by its state.
export function rankProgress(c) {
  const done = (c.rank_status || []).filter((r) => r.state === 'done').length;
  return el('span', { class: 'progress', title: c.summary || '' },
    (c.rank_status || []).map((r) => el('span', { class: 'rank-box rs-' + r.state, title: `rank ${r.rank}: ${r.state}${r.detail ? ' — ' + r.detail : ''}` })),
    ` ${done} / ${(c.rank_status || []).length}`);
}

export function captureRanksText(c) {
  const r = c.ranks || [];
  return r.length > 8 ? `${r.slice(0, 8).join(', ')}, … (${r.length})` : r.join(', ');
}

export const traceSteps = (c) => `${c.start_step}–${c.start_step + c.steps - 1}`;
