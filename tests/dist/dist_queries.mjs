// The PromQL the shipped files hold (dist/prometheus rules, dist/grafana dashboard) and the
// trainscope_* metric names in it, for tests/dist/dist_test.mjs (against the names the collector's
// source declares) and tests/e2e/prometheus_test.mjs (against a running collector's /metrics).

// A metric name: not the tail of a longer identifier, nor part of a recording rule's name
// (level:metric:operation, whose parts are joined by ':').
const kName = /(?<![A-Za-z0-9_:])trainscope_[a-z0-9_]+(?![A-Za-z0-9_:])/g;
const kHistogramSuffixes = ['_bucket', '_sum', '_count'];

// Every query of a Grafana dashboard: panel targets (rows' nested panels too) and the template
// variables' queries, each as {where, expr}.
export function dashboardQueries(dashboard) {
  const out = [];
  const walk = (panels) => {
    for (const p of panels || []) {
      for (const t of p.targets || []) {
        if (t.expr) out.push({ where: `panel "${p.title}" ${t.refId}`, expr: t.expr });
      }
      walk(p.panels);
    }
  };
  walk(dashboard.panels);
  for (const v of (dashboard.templating && dashboard.templating.list) || []) {
    if (v.type !== 'query') continue;
    const q = typeof v.query === 'string' ? v.query : v.query && v.query.query;
    if (q) out.push({ where: `variable ${v.name}`, expr: q });
  }
  return out;
}

// The `expr:` of each rule in a rules file as Prometheus writes them (a one-line value or a
// block scalar `|`), each as {where, expr}. Not a YAML parser: enough for this file's shape,
// and the e2e test checks the count against what Prometheus itself loaded.
export function ruleExprs(yamlText) {
  const out = [];
  const lines = yamlText.split('\n');
  let name = '';
  for (let i = 0; i < lines.length; ++i) {
    const named = lines[i].match(/^\s*-\s*(alert|record):\s*(\S+)/);
    if (named) name = named[2];
    const m = lines[i].match(/^(\s*)expr:\s*(.*)$/);
    if (!m) continue;
    if (!/^[|>]/.test(m[2])) {
      out.push({ where: name, expr: m[2].replace(/^(['"])(.*)\1$/, '$2') });
      continue;
    }
    const body = [];
    while (i + 1 < lines.length && (lines[i + 1].trim() === '' || lines[i + 1].match(/^\s*/)[0].length > m[1].length)) {
      body.push(lines[++i].trim());
    }
    out.push({ where: name, expr: body.join('\n').trim() });
  }
  return out;
}

// The trainscope_* names the expressions use.
export function metricNames(exprs) {
  const names = new Set();
  for (const e of exprs) for (const m of e.matchAll(kName)) names.add(m[0]);
  return names;
}

// The families a /metrics page declares (# HELP / # TYPE), with the series names a histogram
// family adds.
export function pageFamilies(page) {
  const families = new Set();
  for (const line of page.split('\n')) {
    const m = line.match(/^# (HELP|TYPE) (\S+)(?: (\S+))?/);
    if (!m) continue;
    families.add(m[2]);
    if (m[1] === 'TYPE' && m[3] === 'histogram') for (const s of kHistogramSuffixes) families.add(m[2] + s);
  }
  return families;
}

// The names of `used` that `declared` lacks, sorted. A histogram series (_bucket/_sum/_count)
// counts as declared when `histograms` holds its family.
export function undeclared(used, declared, histograms = new Set()) {
  const ok = (n) => declared.has(n) ||
    kHistogramSuffixes.some((s) => n.endsWith(s) && histograms.has(n.slice(0, -s.length)));
  return [...used].filter((n) => !ok(n)).sort();
}

// A dashboard query as Prometheus can run it: Grafana's interval variables become 1m, the
// template variables a regex matching all (or the given job), and label_values(SELECTOR, label)
// its selector.
export function runnable(expr, job = '.*') {
  return expr
    .replace(/^\s*label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$/s, '$1')
    .replace(/\$\{?__(rate_interval|interval|range)\}?/g, '1m')
    .replace(/\$\{?training_job\}?/g, job)
    .replace(/\$\{?[A-Za-z_][A-Za-z0-9_]*\}?/g, '.*');
}
