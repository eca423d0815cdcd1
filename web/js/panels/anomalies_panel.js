// Job page panel: the job's anomalies, the one whose fix would save the most step time first
// (evidence.estimated_gain; those without one after, newest first), with their place in the
// parallel layout (labels.coords, labels.stage), evidence and capture; the one named in the URL
// (#/jobs/JOB/anomalies/ID) highlighted and scrolled to.
import { el, anomalyHref, captureHref, simpleTable } from '../dom.js';
import { captureLabel } from '../captures_common.js';
import { anomalyGain, byGain, coordLabel, pct } from '../layout.js';
import { jobAnomalies } from '../state.js';

const kHeaders = ['kind', 'state', 'ranks', 'where', 'est. gain %', 'nodes', 'onset step', 'size', 'summary', 'evidence', 'capture'];

// Where in the layout: the coordinates the detector named ({"pp": 0, "dp": 1}), else the stage.
function whereOf(a) {
  const labels = a.labels || {};
  if (labels.coords && typeof labels.coords === 'object') return coordLabel(labels.coords);
  return labels.stage !== undefined ? `stage ${labels.stage}` : '';
}

// "ended": the job ended while the anomaly was open (nothing resolved it); says at which step.
function stateTitle(a) {
  if (a.state === 'ended') return `open when its job ended at step ${a.ended_step}`;
  if (a.state === 'resolved') return `back to normal at step ${a.resolved_step}`;
  return 'open';
}

function anomalyRow(a, selected) {
  return el('tr', { class: 'anomaly' + (selected ? ' selected' : ''), id: 'anomaly-' + a.id, dataset: { id: a.id } },
    el('td', {}, el('a', { href: anomalyHref(a) }, a.kind)),
    el('td', { class: a.state === 'open' ? 'state-stale' : 'state-ended', title: stateTitle(a) }, a.state),
    el('td', {}, (a.ranks || []).join(', ')),
    el('td', { class: 'where' }, whereOf(a)),
    el('td', { class: 'num gain' }, pct(anomalyGain(a))),
    el('td', {}, (a.nodes || []).join(', ')),
    el('td', { class: 'num' }, a.onset_step),
    el('td', { class: 'num' }, `${Number(a.magnitude).toFixed(2)}×`),
    el('td', { class: 'evidence' }, a.summary || ''),
    el('td', { class: 'evidence' }, Object.entries(a.evidence || {}).map(([k, v]) => `${k}=${Number(v).toPrecision(4)}`).join(' ')),
    el('td', {}, a.capture_id ? el('a', { href: captureHref(a.job, a.capture_id), class: 'capture-link' }, captureLabel(a.capture_id)) : ''));
}

export class AnomaliesPanel {
  constructor(job, selectedId) {
    this.job = job;
    this.selectedId = selectedId;
    this.box = el('div', { id: 'anomalies' });
    this.section = el('section', { class: 'panel' }, el('h2', {}, 'Anomalies'), this.box);
  }

  draw() {
    const list = jobAnomalies(this.job).sort(byGain);
    if (!list.length) { this.box.replaceChildren(el('p', { class: 'muted' }, 'None detected.')); return; }
    this.box.replaceChildren(simpleTable({}, kHeaders, list.map((a) => anomalyRow(a, a.id === this.selectedId))));
    if (this.selectedId) {
      const row = document.getElementById('anomaly-' + this.selectedId);
      if (row) row.scrollIntoView({ block: 'center' });
    }
  }
}
