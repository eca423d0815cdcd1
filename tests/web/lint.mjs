// The 'web / eslint' test: lints the dashboard's modules with the pinned ESLint in this folder's
// node_modules (tools/dev/deps.sh installs it for tests). Exits 77 (skipped) when it is absent.
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const root = process.env.TRAINSCOPE_SOURCE_ROOT || resolve(here, '../..');
let ESLint;
try {
  ({ ESLint } = await import('eslint'));
} catch {
  console.log('SKIP: eslint is not installed (cd tests/web && npm ci)');
  process.exit(77);
}
const eslint = new ESLint({ cwd: root, overrideConfigFile: join(here, 'eslint.config.mjs') });
const results = await eslint.lintFiles(['web/js/**/*.js']);
const formatter = await eslint.loadFormatter('stylish');
const text = await formatter.format(results);
const files = results.length;
const problems = results.reduce((n, r) => n + r.errorCount + r.warningCount, 0);
if (text) console.log(text);
console.log(`eslint: ${files} files, ${problems} problems`);

// index.html preloads every module (else the browser discovers them one import level at a
// time); a module added without its <link rel="modulepreload"> is a problem too.
const web = join(root, 'web');
const html = readFileSync(join(web, 'index.html'), 'utf8');
const listed = new Set([...html.matchAll(/<link rel="modulepreload" href="([^"]+)">/g)].map((m) => m[1]));
const modules = readdirSync(join(web, 'js'), { recursive: true })
  .filter((f) => f.endsWith('.js')).map((f) => relative(web, join(web, 'js', f)));
const missing = modules.filter((m) => m !== 'js/app.js' && !listed.has(m));
const stale = [...listed].filter((m) => !modules.includes(m));
for (const m of missing) console.log(`web/index.html: no <link rel="modulepreload" href="${m}">`);
for (const m of stale) console.log(`web/index.html: preloads ${m}, which does not exist`);
process.exit(files > 0 && problems === 0 && !missing.length && !stale.length ? 0 : 1);
