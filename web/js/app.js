// The dashboard: starts the live state (state.js) and routes the URL's hash to a page:
// #/ jobs, #/jobs/JOB (and /anomalies/ID), #/jobs/JOB/captures, #/jobs/JOB/captures/ID.
// Each page renders from the REST API once, then follows the live feed; it returns the
// function that tears it down when the route changes.
import { Heatmap, heatmapFromRows } from './heatmap.js';
import { state, startLive } from './state.js';
import { Timeline, timelineFromTrace } from './timeline.js';
import { capturePage } from './pages/capture.js';
import { capturesPage } from './pages/captures.js';
import { jobPage } from './pages/job.js';
import { jobsPage } from './pages/jobs.js';

const app = document.getElementById('app');
startLive(document.getElementById('conn'));

let leave = null;
function route() {
  if (leave) leave();
  delete app.dataset.ready;
  const parts = location.hash.replace(/^#\/?/, '').split('/').filter((p) => p.length).map(decodeURIComponent);
  if (parts[0] === 'jobs' && parts.length >= 3 && parts[2] === 'captures') {
    leave = parts.length >= 4 ? capturePage(app, parts[1], parts[3]) : capturesPage(app, parts[1]);
  } else if (parts[0] === 'jobs' && parts.length >= 2) {
    leave = jobPage(app, parts[1], parts[2] === 'anomalies' ? parts[3] : null);
  } else {
    leave = jobsPage(app);
  }
}
window.addEventListener('hashchange', route);
route();
// For tests and the load benchmark (tests/e2e/browser, tools/bench/dashboard_load_bench).
window.trainscope = { state, Heatmap, heatmapFromRows, Timeline, timelineFromTrace };
