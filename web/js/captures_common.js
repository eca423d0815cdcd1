// How captures are shown wherever they appear (job page anomalies, capture list, one capture):
// labels, state colours, per-rank progress boxes.
import { el } from './dom.js';
import { state } from './state.js';

// The link text for a capture id: its kind and state when known.
export const captureLabel = (id) => {
  const c = state.captures.get(id);
  return c ? `${c.kind} ${c.state}` : 'capture';
};

// The states as the JSON API names them (schema/capture_state.h on the collector's side):
// compared through these names, never as literals.
export const CaptureState = Object.freeze({ RUNNING: 'running', COMPLETE: 'complete', PARTIAL: 'partial', FAILED: 'failed' });
export const RankState = Object.freeze({ PENDING: 'pending', RECORDING: 'recording', UPLOADING: 'uploading', DONE: 'done', FAILED: 'failed' });

export const capState = (c) => (c.state === CaptureState.COMPLETE ? 'state-running' : c.state === CaptureState.RUNNING ? 'state-stale-soft' : c.state === CaptureState.FAILED ? 'state-stale' : 'state-ended');

// Per-rank progress: one small box per rank, coloured by its state.
export function rankProgress(c) {
  const done = (c.rank_status || []).filter((r) => r.state === RankState.DONE).length;
  return el('span', { class: 'progress', title: c.summary || '' },
    (c.rank_status || []).map((r) => el('span', { class: 'rank-box rs-' + r.state, title: `rank ${r.rank}: ${r.state}${r.detail ? ' — ' + r.detail : ''}` })),
    ` ${done} / ${(c.rank_status || []).length}`);
}

export function captureRanksText(c) {
  const r = c.ranks || [];
  return r.length > 8 ? `${r.slice(0, 8).join(', ')}, … (${r.length})` : r.join(', ');
}

export const traceSteps = (c) => `${c.start_step}–${c.start_step + c.steps - 1}`;
