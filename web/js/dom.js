// Small DOM and formatting helpers shared by every page: element builder, number and time
// formats, the dashboard's hash links, and the sortable table.
import { enc } from './api.js';

// el('tag', {class, dataset, onclick, attr...}, ...children): children may be nodes, text,
// arrays of either, or null/undefined (skipped).
export const el = (tag, attrs = {}, ...children) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(e.dataset, v);
    else e.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
};

export const ms = (ns) => (ns / 1e6).toFixed(1);
export const fmtTime = (ns) => (ns ? new Date(ns / 1e6).toLocaleTimeString() : '');
export const kib = (b) => (b >= 1 << 20 ? (b / (1 << 20)).toFixed(1) + ' MiB' : (b / 1024).toFixed(1) + ' KiB');

export const jobHref = (job) => '#/jobs/' + enc(job);
export const anomalyHref = (a) => jobHref(a.job) + '/anomalies/' + enc(a.id);
export const capturesHref = (job) => jobHref(job) + '/captures';
export const captureHref = (job, id) => capturesHref(job) + '/' + enc(id);

// A table of `rows` that sorts by a clicked column (click again: reverse).
// columns: [{key, label, num, get(row) -> sort value, render(row) -> node/text}]
// The returned table has update(newRows), which keeps the current sort, and setGrouping(g):
// g = {of(row) -> {key (number, sorts the groups), label}, summary(rows of a group) -> text}
// keeps the rows of a group together under a header row (sorted within it); null: no groups.
// onSort(key, desc), when given, hears each click's new order, so a caller that rebuilds the
// table (its columns changed) can start the new one in the order the user chose.
export function sortableTable(columns, rows, initialKey, initialDesc = false, onSort = null) {
  let key = initialKey, desc = initialDesc, grouping = null;
  const table = el('table');
  const bodyRows = (sorted) => {
    if (!grouping) return sorted.map((r) => dataRow(columns, r));
    const groups = new Map();
    for (const r of sorted) {
      const g = grouping.of(r);
      if (!groups.has(g.key)) groups.set(g.key, { label: g.label, rows: [] });
      groups.get(g.key).rows.push(r);
    }
    return [...groups.entries()].sort((a, b) => a[0] - b[0]).flatMap(([, g]) => [
      el('tr', { class: 'group-row' }, el('td', { colspan: String(columns.length) },
        el('strong', {}, g.label), ' — ', grouping.summary(g.rows))),
      ...g.rows.map((r) => dataRow(columns, r))]);
  };
  const draw = () => {
    const col = columns.find((c) => c.key === key) || columns[0];
    const sorted = [...rows].sort((a, b) => {
      const x = col.get(a), y = col.get(b);
      const c = x < y ? -1 : x > y ? 1 : 0;
      return desc ? -c : c;
    });
    table.replaceChildren(
      el('thead', {}, el('tr', {}, columns.map((c) => el('th', {
        class: `sortable ${c.num ? 'num' : ''} ${c.key === key ? (desc ? 'sorted-desc' : 'sorted-asc') : ''}`,
        dataset: { key: c.key },
        onclick: () => {
          if (key === c.key) desc = !desc; else { key = c.key; desc = false; }
          if (onSort) onSort(key, desc);
          draw();
        },
      }, c.label)))),
      el('tbody', {}, bodyRows(sorted)));
  };
  draw();
  table.update = (newRows) => { rows = newRows; draw(); };
  table.setGrouping = (g) => { grouping = g; draw(); };
  return table;
}

function dataRow(columns, r) {
  return el('tr', {}, columns.map((c) => el('td', { class: c.num ? 'num' : '' }, c.render ? c.render(r) : c.get(r))));
}

// A plain table: a header row of labels over the given <tr> rows.
export function simpleTable(attrs, headers, rows) {
  return el('table', attrs,
    el('thead', {}, el('tr', {}, headers.map((h) => el('th', {}, h)))),
    el('tbody', {}, rows));
}

export function showError(app, e) {
  app.append(el('p', { class: 'state-stale' }, 'Error: ' + e.message));
}
