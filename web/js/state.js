// What the dashboard knows about the collector, kept current by the live feed (one WebSocket,
// reconnected by LiveFeed). Pages read `state` and subscribe() to be told of each message
// after state was updated.
import { get, enc } from './api.js';
import { LiveFeed } from './live.js';

export const state = {
  jobs: new Map(),       // job -> job JSON (API shape)
  nodes: new Map(),      // node -> node JSON
  anomalies: new Map(),  // id -> anomaly JSON
  captures: new Map(),   // id -> capture JSON (docs/CAPTURE.md)
  stepMs: new Map(),     // job -> latest step's median step time (ms)
};
const listeners = new Set();

// Calls f(msg) after each live message is applied; returns the function that unsubscribes.
export function subscribe(f) {
  listeners.add(f);
  return () => listeners.delete(f);
}
const notify = (msg) => { for (const f of listeners) f(msg); };

export const jobAnomalies = (job) => [...state.anomalies.values()].filter((a) => a.job === job);

export function openAnomalies(job) {
  let n = 0;
  for (const a of state.anomalies.values()) if (a.job === job && a.state === 'open') n++;
  return n;
}

// running / ended / stale from the API; "hung" when a hang anomaly is open for the job.
export function jobStatus(j) {
  for (const a of state.anomalies.values()) {
    if (a.job === j.job && a.kind === 'hang' && a.state === 'open') return 'hung';
  }
  return j.state;
}

// Keeps a capture the API returned unless the live feed already holds a newer one.
export function rememberCapture(c) {
  const known = state.captures.get(c.id);
  if (!known || known.updated_ns <= c.updated_ns) state.captures.set(c.id, c);
}

function applyLive(msg) {
  if (msg.type === 'snapshot') {
    state.jobs.clear();
    state.nodes.clear();
  }
  for (const j of msg.jobs || []) state.jobs.set(j.job, j);
  for (const n of msg.nodes || []) state.nodes.set(n.node, n);
  for (const a of msg.anomalies || []) state.anomalies.set(a.id, a);
  for (const c of msg.captures || []) state.captures.set(c.id, c);
  if (msg.type === 'capture' && msg.capture) state.captures.set(msg.capture.id, msg.capture);
  for (const [job, rows] of Object.entries(msg.summary || {})) {
    if (rows.length) state.stepMs.set(job, rows[rows.length - 1].median_ns / 1e6);
  }
  if (msg.type === 'snapshot') {
    // Current step time of each job: its latest summary row, fetched once per snapshot.
    for (const j of state.jobs.values()) {
      if (j.latest_step < 0) continue;
      get(`/api/v1/jobs/${enc(j.job)}/summary?from=${Math.max(0, j.latest_step - 1)}`)
        .then((r) => {
          if (r.steps.length) state.stepMs.set(j.job, r.steps[r.steps.length - 1].median_ns / 1e6);
          notify({ type: 'stepms' });
        }).catch(() => {});
    }
  }
  notify(msg);
}

// Starts the state: one REST read (so pages have data even before, or without, the WebSocket)
// and the live feed, whose connection state is shown in `connEl`.
export function startLive(connEl) {
  Promise.all([get('/api/v1/jobs'), get('/api/v1/nodes')]).then(([j, n]) => {
    if (state.jobs.size) return;  // the live snapshot came first
    applyLive({ type: 'snapshot', jobs: j.jobs, nodes: n.nodes, anomalies: [] });
  }).catch((e) => console.warn('initial load', e));
  new LiveFeed(applyLive, (s) => {
    connEl.dataset.state = s;
    connEl.textContent = s === 'open' ? 'live' : s === 'closed' ? 'reconnecting…' : 'connecting…';
  });
}
