// The captures page (#/jobs/JOB/captures): the "Capture now" form and every capture of the
// job, live, with per-rank progress.
import { get, enc, request } from '../api.js';
import { el, fmtTime, jobHref, anomalyHref, captureHref, simpleTable } from '../dom.js';
import { capState, captureRanksText, rankProgress, traceSteps } from '../captures_common.js';
import { state, subscribe, rememberCapture } from '../state.js';

const kHeaders = ['capture', 'kind', 'state', 'reason', 'ranks', 'steps', 'progress', 'created'];

// The form; on success the page moves to the new capture, on error shows it in `err`.
function captureForm(job, err) {
  const ranksIn = el('input', { id: 'cap-ranks', placeholder: 'all', title: 'ranks: "all", "0,3,5-7"' });
  const stepsIn = el('input', { id: 'cap-steps', type: 'number', min: '1', max: '1000', value: '5' });
  const histIn = el('input', { id: 'cap-history', type: 'number', min: '0', max: '1000', value: '4' });
  const startIn = el('input', { id: 'cap-start-in', type: 'number', min: '1', placeholder: '2', title: 'steps from the job\'s latest step to the first recorded one (fast steps need more: the command must reach every rank first)' });
  const kindIn = el('select', { id: 'cap-kind' }, el('option', { value: 'trace' }, 'trace'), el('option', { value: 'stacks' }, 'stacks'));
  const button = el('button', { id: 'capture-now', type: 'submit' }, 'Capture now');
  const form = el('form', { class: 'controls', id: 'capture-form' },
    'ranks', ranksIn, 'steps', stepsIn, 'history', histIn, 'start in (steps)', startIn, 'kind', kindIn, button);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    err.textContent = '';
    const body = { kind: kindIn.value };
    if (ranksIn.value.trim()) body.ranks = ranksIn.value.trim();
    if (kindIn.value === 'trace') {
      body.steps = Number(stepsIn.value);
      body.history = Number(histIn.value);
      const j = state.jobs.get(job);
      if (startIn.value && j && j.latest_step >= 0) body.start_step = j.latest_step + Number(startIn.value);
    }
    button.disabled = true;
    try {
      const c = await request('POST', `/api/v1/jobs/${enc(job)}/captures`, body);
      state.captures.set(c.id, c);
      location.hash = captureHref(job, c.id);
    } catch (e) {
      err.textContent = e.message;
    } finally {
      button.disabled = false;
    }
  });
  return form;
}

function captureRow(job, c) {
  return el('tr', { dataset: { id: c.id, state: c.state } },
    el('td', {}, el('a', { href: captureHref(job, c.id) }, c.id)),
    el('td', {}, c.kind),
    el('td', { class: capState(c) }, c.state),
    el('td', {}, c.anomaly_id ? el('a', { href: anomalyHref({ job, id: c.anomaly_id }) }, c.reason) : c.reason),
    el('td', {}, captureRanksText(c)),
    el('td', { class: 'num' }, c.kind === 'trace' ? `${traceSteps(c)} (+${c.history} before)` : ''),
    el('td', {}, rankProgress(c)),
    el('td', {}, fmtTime(c.created_ns)));
}

export function capturesPage(app, job) {
  let alive = true;
  const err = el('p', { class: 'state-stale', id: 'capture-error' });
  const listBox = el('div', { id: 'captures' }, el('p', { class: 'muted' }, 'loading…'));
  app.replaceChildren(
    el('p', {}, el('a', { href: jobHref(job) }, '← job ' + job)),
    el('h1', {}, 'Captures of ', el('span', { id: 'job-name' }, job)),
    el('section', { class: 'panel' }, el('h2', {}, 'Capture now (steps from the job\'s next step; history: steps before it from the flight recorder)'), captureForm(job, err), err),
    el('section', { class: 'panel' }, el('h2', {}, 'Captures (live)'), listBox));
  const draw = () => {
    const list = [...state.captures.values()].filter((c) => c.job === job).sort((a, b) => b.created_ns - a.created_ns);
    if (!list.length) { listBox.replaceChildren(el('p', { class: 'muted', id: 'no-captures' }, 'No captures yet.')); return; }
    listBox.replaceChildren(simpleTable({ id: 'captures-table' }, kHeaders, list.map((c) => captureRow(job, c))));
  };
  get(`/api/v1/jobs/${enc(job)}/captures`).then((r) => {
    for (const c of r.captures || []) rememberCapture(c);
    if (alive) { draw(); app.dataset.ready = '1'; }
  }).catch((e) => { if (alive) { draw(); err.textContent = e.message; } });
  const unsubscribe = subscribe((msg) => { if (alive && (msg.type === 'capture' || msg.type === 'snapshot')) draw(); });
  return () => { alive = false; unsubscribe(); };
}
