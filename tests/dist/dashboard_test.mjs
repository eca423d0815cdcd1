// dist/grafana/trainscope-dashboard.json is a dashboard Grafana imports (schema 38, every panel on
// the templated Prometheus data source, the job and rank variables, panels inside the 24-column
// grid with unique ids), and the PromQL it and dist/prometheus/trainscope-rules.yml hold names
// only metrics the collector's source declares (string literals "trainscope_..." under
// collector/ and common/; families declared "histogram" add _bucket, _sum and _count).
// tests/e2e/prometheus_test.mjs checks the same names against a running collector's page.
// Usage: node dashboard_test.mjs (TRAINSCOPE_SOURCE_ROOT, default: the tree this file is in).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { dashboardQueries, metricNames, ruleExprs, undeclared } from './dist_queries.mjs';

const root = process.env.TRAINSCOPE_SOURCE_ROOT ||
  path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const failures = [];
const check = (cond, what) => { if (!cond) failures.push(what); };

// Names the collector's source declares.
function declaredNames() {
  const names = new Set();
  const histograms = new Set();
  for (const dir of ['collector', 'common']) {
    for (const f of fs.readdirSync(path.join(root, dir), { recursive: true })) {
      if (!/\.(cpp|h)$/.test(f)) continue;
      const text = fs.readFileSync(path.join(root, dir, f), 'utf8');
      for (const m of text.matchAll(/"(trainscope_[a-z0-9_]+)"/g)) names.add(m[1]);
      for (const m of text.matchAll(/"(trainscope_[a-z0-9_]+)",\s*"histogram"/g)) histograms.add(m[1]);
    }
  }
  return { names, histograms };
}

const dashboard = JSON.parse(fs.readFileSync(path.join(root, 'dist', 'grafana', 'trainscope-dashboard.json'), 'utf8'));
const kDs = '${DS_PROMETHEUS}';

// Importable: what Grafana's import needs, and nothing bound to one Grafana's data source.
check(dashboard.schemaVersion >= 36, `schemaVersion ${dashboard.schemaVersion}`);
check(dashboard.id === null, 'id must be null (Grafana assigns it on import)');
check(typeof dashboard.uid === 'string' && dashboard.uid.length > 0 && dashboard.uid.length <= 40, 'uid');
const vars = Object.fromEntries(dashboard.templating.list.map((v) => [v.name, v]));
check(vars.DS_PROMETHEUS && vars.DS_PROMETHEUS.type === 'datasource' && vars.DS_PROMETHEUS.query === 'prometheus',
  'a DS_PROMETHEUS variable of type datasource (prometheus)');
for (const name of ['training_job', 'rank']) {
  const v = vars[name];
  check(v && v.type === 'query' && /^label_values\(/.test(v.query.query) && v.datasource.uid === kDs,
    `variable ${name}: a label_values query on ${kDs}`);
}
const ids = new Set();
const walk = (panels) => {
  for (const p of panels || []) {
    check(!ids.has(p.id), `panel id ${p.id} used twice`);
    ids.add(p.id);
    const g = p.gridPos || {};
    check(g.x >= 0 && g.w > 0 && g.x + g.w <= 24 && g.h > 0 && g.y >= 0, `panel "${p.title}" gridPos ${JSON.stringify(g)}`);
    if (p.type !== 'row') {
      check(p.datasource && p.datasource.uid === kDs, `panel "${p.title}" data source ${JSON.stringify(p.datasource)}`);
      check((p.targets || []).length > 0, `panel "${p.title}" has no query`);
      for (const t of p.targets || []) check(t.datasource && t.datasource.uid === kDs, `panel "${p.title}" ${t.refId} data source`);
    }
    walk(p.panels);
  }
};
walk(dashboard.panels);

// Names: every one the dashboard and rules use is declared by the collector.
const queries = dashboardQueries(dashboard);
const rules = ruleExprs(fs.readFileSync(path.join(root, 'dist', 'prometheus', 'trainscope-rules.yml'), 'utf8'));
check(rules.length > 0 && rules.every((r) => r.expr), 'rules file: no expr found');
const used = metricNames([...queries.map((q) => q.expr), ...rules.map((r) => r.expr)]);
const { names, histograms } = declaredNames();
check(names.size > 50, `only ${names.size} names found in the collector's source`);
const missing = undeclared(used, names, histograms);
check(missing.length === 0, `not declared by the collector's source: ${missing.join(', ')}`);
// Each panel's queries name some metric (a typo'd name would name none that is declared).
for (const q of queries) check(metricNames([q.expr]).size > 0, `${q.where} names no trainscope_ metric: ${q.expr}`);

if (failures.length) {
  for (const f of failures) console.error('FAIL: ' + f);
  process.exit(1);
}
console.log(`PASS: ${ids.size} panels, ${queries.length} dashboard queries and ${rules.length} rules use ` +
  `${used.size} metrics, all declared by the collector (${names.size} names in its source)`);
