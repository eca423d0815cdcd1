// The jobs page (#/): every job the collector knows, live, sortable.
import { el, jobHref, sortableTable } from '../dom.js';
import { state, subscribe, jobStatus, openAnomalies } from '../state.js';

export function jobsPage(app) {
  const wrap = el('section', { class: 'panel' });
  app.replaceChildren(el('h1', {}, 'Jobs'), wrap);
  const columns = [
    { key: 'job', label: 'job', get: (j) => j.job, render: (j) => el('a', { href: jobHref(j.job) }, j.job) },
    { key: 'status', label: 'status', get: jobStatus,
      render: (j) => el('span', { class: 'state-' + jobStatus(j) }, jobStatus(j)) },
    { key: 'world', label: 'world size', num: true, get: (j) => j.world_size },
    { key: 'reporting', label: 'ranks reporting', num: true, get: (j) => j.ranks_seen - j.ranks_ended,
      render: (j) => `${j.ranks_seen - j.ranks_ended} / ${j.world_size}` },
    { key: 'step', label: 'latest step', num: true, get: (j) => j.latest_step },
    { key: 'steptime', label: 'step time (ms)', num: true, get: (j) => state.stepMs.get(j.job) ?? -1,
      render: (j) => (state.stepMs.has(j.job) ? state.stepMs.get(j.job).toFixed(1) : '') },
    { key: 'anomalies', label: 'open anomalies', num: true, get: (j) => openAnomalies(j.job) },
    { key: 'seen', label: 'last report', get: (j) => j.last_seen_ns,
      render: (j) => new Date(j.last_seen_ns / 1e6).toLocaleTimeString() },
  ];
  // Several collectors on one store: which one runs each job's detection (null on SQLite).
  if ([...state.jobs.values()].some((j) => j.collector)) {
    columns.splice(2, 0, { key: 'collector', label: 'collector', get: (j) => j.collector || '' });
  }
  const rows = () => [...state.jobs.values()];
  const table = sortableTable(columns, rows(), 'seen', true);
  table.id = 'jobs-table';
  wrap.append(state.jobs.size ? table : el('p', { class: 'muted', id: 'no-jobs' }, 'No jobs yet.'));
  return subscribe(() => {
    if (!wrap.contains(table)) wrap.replaceChildren(table);
    table.update(rows());
  });
}
