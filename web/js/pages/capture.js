// One capture (#/jobs/JOB/captures/ID): its state and per-rank files, live while it runs,
// then the merged trace's timeline (or, for a stacks capture, each rank's threads and frames).
import { get, enc } from '../api.js';
import { el, fmtTime, kib, jobHref, anomalyHref, capturesHref, simpleTable } from '../dom.js';
import { CaptureState, RankState, capState, rankProgress, traceSteps } from '../captures_common.js';
import { state, subscribe, rememberCapture } from '../state.js';
import { Timeline, timelineFromTrace } from '../timeline.js';

const kRankHeaders = ['rank', 'node', 'state', 'steps', 'size', 'detail', 'file'];
const kHint = 'wheel: zoom · drag: pan · double-click: whole capture';

// A stacks capture: each rank's threads with their Python and native frames.
function stacksView(merged) {
  return el('div', { id: 'stacks' }, (merged.ranks || []).map((r) => el('details', { open: '' },
    el('summary', {}, `rank ${r.rank} (${r.node || ''}): ${(r.threads || []).length} threads`),
    (r.threads || []).map((t) => el('div', { class: 'thread' },
      el('b', {}, `${t.name || ''} [${t.tid}] ${t.state || ''}`), t.error ? el('span', { class: 'state-stale' }, ' ' + t.error) : '',
      el('pre', {}, [...(t.python || []).map((f) => `py  ${f.function} (${f.file}:${f.line})`),
        ...(t.native || []).map((f) => `    ${f.function || f.address}${f.offset ? '+' + f.offset : ''}  ${f.module || ''}`)].join('\n')))))));
}

function rankRow(id, r) {
  return el('tr', { dataset: { rank: r.rank, state: r.state } },
    el('td', { class: 'num' }, r.rank), el('td', {}, r.node),
    el('td', { class: 'rs-text-' + r.state }, r.state),
    el('td', { class: 'num' }, r.first_step >= 0 ? `${r.first_step}–${r.last_step}` : ''),
    el('td', { class: 'num' }, r.bytes ? kib(r.bytes) + (r.truncated ? ' (cut)' : '') : ''),
    el('td', { class: 'evidence' }, r.detail || ''),
    el('td', {}, r.state === RankState.DONE ? el('a', { href: `/api/v1/captures/${enc(id)}/ranks/${r.rank}`, download: `${id}-rank-${r.rank}.json`, class: 'rank-download' }, 'download') : ''));
}

function headline(job, c) {
  return el('p', {}, el('span', { id: 'capture-state', class: capState(c), dataset: { state: c.state } }, c.state), ' — ', c.summary || '', ' — ', c.kind,
    c.kind === 'trace' ? `, steps ${traceSteps(c)} with ${c.history} before` : '',
    ', reason: ', c.anomaly_id ? el('a', { href: anomalyHref({ job, id: c.anomaly_id }) }, c.reason) : c.reason,
    `, created ${fmtTime(c.created_ns)}`, c.finished_ns ? `, finished ${fmtTime(c.finished_ns)}` : '');
}

function downloadLink(id, c, finished) {
  if (finished) {
    return el('a', { href: `/api/v1/captures/${enc(id)}/trace`, download: `${id}.json`, id: 'trace-download' },
      `download the merged trace${c.trace_bytes ? ' (' + kib(c.trace_bytes) + ' compressed)' : ''}`);
  }
  return el('span', { class: 'muted' }, c.state === CaptureState.FAILED ? 'No merged trace: every rank failed.' : 'The merged trace is written when every rank is done or failed.');
}

export function capturePage(app, job, id) {
  let alive = true;
  const head = el('div', { id: 'capture-head' }, el('p', { class: 'muted' }, 'loading…'));
  const ranksBox = el('div', { id: 'capture-ranks' });
  const downloads = el('p', { id: 'capture-downloads' });
  const tlInfo = el('span', { class: 'muted', id: 'timeline-info' }, kHint);
  const canvas = el('canvas', { class: 'timeline', id: 'timeline' });
  const tlStatus = (cls, text) => el('p', { class: cls, id: 'timeline-status' }, text);
  const tlBox = el('div', { id: 'timeline-box' }, tlStatus('muted', 'The timeline shows once the capture has finished.'));
  app.replaceChildren(
    el('p', {}, el('a', { href: jobHref(job) }, '← job ' + job), ' · ', el('a', { href: capturesHref(job) }, 'all captures')),
    el('h1', {}, 'Capture ', el('span', { id: 'capture-id' }, id)), head,
    el('section', { class: 'panel' }, el('h2', {}, 'Ranks'), ranksBox, downloads),
    el('section', { class: 'panel' }, el('h2', {}, 'Timeline (merged, collector clock)'), tlBox));
  const timeline = new Timeline(canvas, tlInfo);
  let loadedTrace = false;

  async function loadTrace(c) {
    if (loadedTrace) return;
    loadedTrace = true;
    tlBox.replaceChildren(tlStatus('muted', 'loading the merged trace…'));
    const t0 = performance.now();
    const res = await fetch(`/api/v1/captures/${enc(id)}/trace`);
    if (!res.ok) {
      let msg = `HTTP ${res.status}`;
      try { msg = (await res.json()).error || msg; } catch { /* not JSON */ }
      tlBox.replaceChildren(tlStatus('state-stale', 'No merged trace: ' + msg));
      return;
    }
    const trace = await res.json();
    if (!alive) return;
    if (c.kind === 'stacks') {
      tlBox.replaceChildren(stacksView(trace));
      app.dataset.timelineReady = '1';
      return;
    }
    const data = timelineFromTrace(trace);
    const t1 = performance.now();
    tlBox.replaceChildren(el('div', { class: 'controls' }, tlInfo), canvas);
    timeline.set(data);
    requestAnimationFrame(() => requestAnimationFrame(() => {
      if (!alive) return;
      tlInfo.textContent = `${data.rows.length} ranks, ${data.events} events; loaded in ${(t1 - t0).toFixed(0)} ms, drawn in ${canvas.dataset.renderMs} ms — ${kHint}`;
      app.dataset.timelineReady = '1';
    }));
  }

  function draw(c) {
    head.replaceChildren(headline(job, c), el('p', {}, rankProgress(c)));
    ranksBox.replaceChildren(simpleTable({}, kRankHeaders, (c.rank_status || []).map((r) => rankRow(id, r))));
    const finished = c.state === CaptureState.COMPLETE || c.state === CaptureState.PARTIAL;
    downloads.replaceChildren(downloadLink(id, c, finished));
    if (finished) loadTrace(c).catch((e) => tlBox.replaceChildren(tlStatus('state-stale', 'Timeline: ' + e.message)));
    app.dataset.ready = '1';
  }

  const known = state.captures.get(id);
  if (known) draw(known);
  get(`/api/v1/captures/${enc(id)}`).then((c) => {
    rememberCapture(c);
    if (alive) draw(state.captures.get(id));
  }).catch((e) => { if (alive && !known) head.replaceChildren(el('p', { class: 'state-stale' }, e.message)); });
  const unsubscribe = subscribe((msg) => {
    if (!alive) return;
    if ((msg.type === 'capture' && msg.capture.id === id) || (msg.type === 'snapshot' && state.captures.has(id))) draw(state.captures.get(id));
  });
  const onResize = () => timeline.setView(timeline.view.t0, timeline.view.t1);
  window.addEventListener('resize', onResize);
  return () => { alive = false; unsubscribe(); window.removeEventListener('resize', onResize); };
}
