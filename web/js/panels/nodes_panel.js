// Job page panel: the nodes the job's ranks run on, with their agents' host metrics.
import { el, simpleTable } from '../dom.js';
import { state } from '../state.js';

const kHeaders = ['node', 'host', 'ranks', 'last seen (s ago)', 'CPU %', 'load1', 'memory available', 'clock offset (ms)', 'spool'];

function nodeRow(n) {
  const h = n.latest_host || {};
  const num = (v) => el('td', { class: 'num' }, v);
  return el('tr', {}, el('td', {}, n.node), el('td', {}, n.host), num(n.ranks),
    num(n.last_seen_age_s), num(h.cpu_percent !== undefined ? h.cpu_percent.toFixed(0) : ''),
    num(h.load1 !== undefined ? h.load1.toFixed(2) : ''),
    num(h.mem_available_bytes ? (h.mem_available_bytes / 2 ** 30).toFixed(1) + ' GiB' : ''),
    num((n.clock_offset_ns / 1e6).toFixed(2)),
    num(n.spool_bytes));
}

export class NodesPanel {
  constructor() {
    this.box = el('div', { id: 'nodes' });
    this.section = el('section', { class: 'panel' }, el('h2', {}, 'Nodes'), this.box);
  }

  draw(ranks) {
    const used = new Set(ranks.map((r) => r.node || r.host));
    const list = [...state.nodes.values()].filter((n) => used.has(n.node) || used.has(n.host));
    if (!list.length) { this.box.replaceChildren(el('p', { class: 'muted' }, 'No agent reports for this job\'s nodes.')); return; }
    this.box.replaceChildren(simpleTable({}, kHeaders, list.map(nodeRow)));
  }
}
