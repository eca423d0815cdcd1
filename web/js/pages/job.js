// The job page (#/jobs/JOB, #/jobs/JOB/anomalies/ID): lays out the panels (panels/*.js), loads
// them in the order that makes the page usable soonest, and keeps them current from the live
// feed. The panels share only the job name, the rank list and how its rows are grouped (by
// rank, or by stage / replica / tp index when the job declared its parallel layout), which
// this page owns.
import { get, enc } from '../api.js';
import { el, capturesHref, showError } from '../dom.js';
import { groupingsFor } from '../layout.js';
import { state, subscribe, jobStatus, openAnomalies } from '../state.js';
import { AnomaliesPanel } from '../panels/anomalies_panel.js';
import { BandwidthPanel } from '../panels/bandwidth_panel.js';
import { HeatmapPanel } from '../panels/heatmap_panel.js';
import { NodesPanel } from '../panels/nodes_panel.js';
import { ParallelPanel } from '../panels/parallel_panel.js';
import { RanksPanel } from '../panels/ranks_panel.js';
import { StepChart } from '../panels/step_chart.js';

// Live refresh: summary rows arrive in each delta (every 500 ms while the job moves); the
// ranks table is re-read at most every kRefreshMs, the heatmap's window (up to 100,000 cells)
// at most every kHeatmapRefreshMs, one refresh in flight at a time.
const kRefreshMs = 1000, kHeatmapRefreshMs = 3000;

export function jobPage(app, job, anomalyId) {
  let alive = true;
  let ranks = [];
  const j = state.jobs.get(job);
  const status = el('span', { id: 'job-status', class: j ? 'state-' + jobStatus(j) : '' }, j ? jobStatus(j) : '');
  const meta = el('p', { class: 'muted', id: 'job-meta' });
  const heatmap = new HeatmapPanel(job, () => ranks);
  const chart = new StepChart(job, (from, to) => heatmap.show(from, to));
  const ranksPanel = new RanksPanel(job);
  const bandwidth = new BandwidthPanel(job);
  const anomalies = new AnomaliesPanel(job, anomalyId);
  const nodes = new NodesPanel();
  const parallel = new ParallelPanel(job);
  const groupBy = el('select', { id: 'group-by', onchange: () => { heatmap.setGroupBy(groupBy.value); ranksPanel.setGroupBy(groupBy.value); } });
  const groupBox = el('p', { class: 'controls', id: 'group-box', style: 'display:none' }, 'group ranks by ', groupBy);
  // The choices follow the layout the ranks declared; a pipeline job starts as stage x replica.
  const drawGrouping = () => {
    const choices = groupingsFor(ranks);
    const keys = choices.map((g) => g.key).join(',');
    if (groupBy.dataset.keys === keys) return;
    groupBy.dataset.keys = keys;
    groupBox.style.display = choices.length > 1 ? '' : 'none';
    const current = choices.some((g) => g.key === groupBy.value) ? groupBy.value : (choices.some((g) => g.key === 'pp') ? 'pp' : 'rank');
    groupBy.replaceChildren(...choices.map((g) => el('option', { value: g.key }, g.label)));
    groupBy.value = current;
    heatmap.setGroupBy(current);
    ranksPanel.setGroupBy(current);
  };
  app.replaceChildren(
    el('p', {}, el('a', { href: '#/' }, '← all jobs'), ' · ', el('a', { href: capturesHref(job), id: 'captures-link' }, 'captures')),
    el('h1', {}, 'Job ', el('span', { id: 'job-name' }, job), ' ', status), meta, groupBox,
    chart.section, heatmap.section, ranksPanel.ranksSection, parallel.section,
    el('div', { class: 'grid' }, bandwidth.section, ranksPanel.opsSection),
    anomalies.section, nodes.section);

  const drawMeta = () => {
    const jr = state.jobs.get(job);
    if (!jr) { meta.textContent = 'unknown job (not reported yet)'; return; }
    const st = jobStatus(jr);
    status.textContent = st;
    status.className = 'state-' + st;
    meta.textContent = `world size ${jr.world_size}, ${jr.ranks_seen - jr.ranks_ended} ranks reporting, latest step ${jr.latest_step}, ${openAnomalies(job)} open anomalies` +
      (jr.collector ? `, detection on collector ${jr.collector}` : '');
  };
  const loadRankList = async () => {
    ranks = (await get(`/api/v1/jobs/${enc(job)}/ranks`)).ranks;
    drawGrouping();
  };

  // First load: what makes the page usable first, then what is below the fold. The timings
  // land in app.dataset for the load benchmark.
  async function loadAll() {
    drawMeta();
    if (!state.jobs.get(job)) return;
    const t0 = performance.now();
    const timings = {};
    const timed = (name, p) => p.then(() => { timings[name] = Math.round(performance.now() - t0); });
    // The step chart needs no rank list: it starts at once, beside it.
    const summaryDone = timed('summary', chart.loadRecent());
    await timed('rank_list', loadRankList());
    nodes.draw(ranks);
    await Promise.all([timed('ranks', ranksPanel.load(ranks)), summaryDone,
      timed('heatmap', heatmap.load(null, null, true))]);
    anomalies.draw();
    nodes.draw(ranks);
    app.dataset.timings = JSON.stringify(timings);
    app.dataset.ready = '1';
    // Below the fold, and the collector answers one request at a time: after the rest.
    await timed('parallel', parallel.load(ranks));
    app.dataset.parallelReady = '1';
    await timed('bandwidth', bandwidth.load(ranks));
    app.dataset.timings = JSON.stringify(timings);
    if (chart.olderFrom > 0) {
      if (await chart.loadOlder(() => alive)) app.dataset.fullRun = '1';
      timings.whole_run = Math.round(performance.now() - t0);
      app.dataset.timings = JSON.stringify(timings);
    }
  }

  let refreshing = false, again = false, lastHeatmap = performance.now();
  async function refresh() {
    if (refreshing) { again = true; return; }
    refreshing = true;
    const started = performance.now();
    try {
      await loadRankList();
      await ranksPanel.load(ranks);
      if (heatmap.wantsRefresh() && started - lastHeatmap >= kHeatmapRefreshMs) {
        lastHeatmap = started;
        await heatmap.load(null, null, true);
        await parallel.load(ranks);
      }
    } catch (e) { console.warn(e); }
    // Spaced out: deltas come every half second, the tables need not.
    const wait = Math.max(0, kRefreshMs - (performance.now() - started));
    setTimeout(() => {
      refreshing = false;
      if (again && alive) { again = false; refresh(); }
    }, wait);
  }

  let loaded = false;
  const load = () => { loaded = true; loadAll().catch((e) => showError(app, e)); };
  const unsubscribe = subscribe((msg) => {
    if (!alive) return;
    if (msg.type === 'snapshot' && !loaded && state.jobs.get(job)) { load(); return; }
    if (msg.type === 'stepms') return;
    drawMeta();
    if ((msg.anomalies || []).some((a) => a.job === job)) { anomalies.draw(); chart.redraw(); }
    if ((msg.nodes || []).length) nodes.draw(ranks);
    const rows = (msg.summary || {})[job];
    if (rows && rows.length && chart.live(rows)) refresh();
  });
  if (state.jobs.get(job)) load();
  else drawMeta();
  return () => { alive = false; unsubscribe(); };
}
