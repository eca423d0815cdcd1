// The 'web / eslint' test: lints the dashboard's modules with the pinned ESLint in this folder's
// node_modules (tools/dev/deps.sh installs it for tests). Exits 77 (skipped) when it is absent.
import { dirname, join, resolve } from 'node:path';
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
process.exit(files > 0 && problems === 0 ? 0 : 1);
