// Job page panel: the nodes the job's ranks run on, with their agents' host metrics, and below
// them each node's GPUs as its latest sample has them (NVML through the agent; none without).
import { el, simpleTable } from '../dom.js';
import { isSet } from '../layout.js';
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

const kGpuHeaders = ['node', 'GPU', 'uuid', 'ranks', 'util %', 'memory used', 'power (W)', 'temp (°C)', 'SM clock (MHz)', 'throttling', 'throttled (s)', 'ECC uncorrected', 'NVLink errors'];

function gpuRow(n, g, rankList) {
  const num = (v) => el('td', { class: 'num' }, v === null || v === undefined ? '' : v);
  if (g.lost) {
    return el('tr', { class: 'gpu-lost' }, el('td', {}, n.node), num(g.index), el('td', {}, g.uuid),
      el('td', {}, rankList), el('td', { colspan: kGpuHeaders.length - 4 }, 'lost (off the bus)'));
  }
  const reasons = (g.clock_event_reasons || []).filter((r) => r !== 'gpu_idle').join(', ');
  return el('tr', g.throttling ? { class: 'gpu-throttled' } : {}, el('td', {}, n.node), num(g.index),
    el('td', {}, g.uuid), el('td', {}, rankList), num(g.utilization_pct),
    num(isSet(g.memory_used_bytes) ? (g.memory_used_bytes / 2 ** 30).toFixed(1) + ' GiB' : null),
    num(isSet(g.power_watts) ? g.power_watts.toFixed(0) : null), num(g.temperature_c),
    num(g.sm_clock_mhz), el('td', {}, g.throttling ? reasons : (g.throttling === false ? 'no' : '')),
    num(isSet(g.throttle_seconds) ? g.throttle_seconds.toFixed(1) : null),
    num(g.ecc_uncorrected), num(g.nvlink_errors));
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
    const gpuRows = [];
    for (const n of list) {
      for (const g of (n.latest_host && n.latest_host.gpus) || []) {
        const on = ranks.filter((r) => r.gpu_uuid && r.gpu_uuid === g.uuid).map((r) => r.rank);
        gpuRows.push(gpuRow(n, g, on.join(', ')));
      }
    }
    this.box.replaceChildren(simpleTable({}, kHeaders, list.map(nodeRow)),
      gpuRows.length ? el('h3', {}, 'GPUs') : null,
      gpuRows.length ? simpleTable({}, kGpuHeaders, gpuRows) : null);
  }
}
