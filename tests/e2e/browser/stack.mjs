// Starts a trainscope collector, one agent and the simulator as child processes for the
// browser tests, on free loopback ports in a temp dir; every child is killed when the test
// process exits. Binaries come from the environment meson sets (TRAINSCOPE_*_BIN).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

export const SKIP = 77;
const children = new Set();

function killAll() {
  for (const c of children) { try { c.kill('SIGKILL'); } catch (e) { /* already gone */ } }
}
process.on('exit', killAll);
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => { killAll(); process.exit(1); });

export function skip(why) {
  console.log('SKIP: ' + why);
  process.exit(SKIP);
}

export function binary(envName) {
  const p = process.env[envName];
  if (!p) skip(`${envName} is not set (run through meson test)`);
  try { fs.accessSync(p, fs.constants.X_OK); } catch (e) { skip(`${p} is not built`); }
  return p;
}

export function chromiumPath() {
  for (const p of [process.env.CHROMIUM, '/usr/bin/chromium', '/usr/bin/chromium-browser']) {
    if (p && fs.existsSync(p)) return p;
  }
  skip('no chromium (apt install chromium)');
}

export async function playwright() {
  try {
    return await import('playwright-core');
  } catch (e) {
    skip('playwright-core is not installed (npm ci in tests/e2e/browser)');
  }
}

function anyFreePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); });
    s.on('error', reject);
  });
}

// A loopback port free now and not handed out before by this process: the kernel may give a
// just-closed port out again, so two calls in a row could return the same one (a collector's
// HTTP port then collided with its own ingest port).
const handedOut = new Set();
export async function freePort() {
  for (;;) {
    const p = await anyFreePort();
    if (!handedOut.has(p)) {
      handedOut.add(p);
      return p;
    }
  }
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function waitFor(pred, timeoutMs, what) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    try { if (await pred()) return; } catch (e) { /* not yet */ }
    if (Date.now() > end) throw new Error('timed out waiting for ' + what);
    await sleep(100);
  }
}

export class Stack {
  constructor() {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'trainscope-browser-'));
    this.procs = {};
  }

  run(name, argv) {
    const log = fs.openSync(path.join(this.dir, name + '.log'), 'a');
    const child = spawn(argv[0], argv.slice(1), { stdio: ['ignore', log, log] });
    children.add(child);
    child.on('exit', () => children.delete(child));
    this.procs[name] = child;
    return child;
  }

  log(name) {
    try { return fs.readFileSync(path.join(this.dir, name + '.log'), 'utf8'); } catch (e) { return ''; }
  }

  async startCollector(extra = []) {
    if (!this.httpPort) {
      this.httpPort = await freePort();
      this.ingestPort = await freePort();
    }
    const ready = path.join(this.dir, 'collector.ready');
    fs.rmSync(ready, { force: true });
    this.run('collector', [binary('TRAINSCOPE_COLLECTOR_BIN'), '--data-dir', path.join(this.dir, 'data'),
      '--ingest', `tcp://127.0.0.1:${this.ingestPort}`, '--http', `127.0.0.1:${this.httpPort}`,
      '--web-root', path.join(process.env.TRAINSCOPE_SOURCE_ROOT, 'web'), '--ready-file', ready, ...extra]);
    await waitFor(() => fs.existsSync(ready), 15000, 'the collector ready file\n' + this.log('collector'));
    return `http://127.0.0.1:${this.httpPort}`;
  }

  async stopCollector() {
    const c = this.procs.collector;
    const done = new Promise((r) => c.once('exit', r));
    c.kill('SIGTERM');
    await done;
  }

  async startAgent(node = 'node-a') {
    this.agentEndpoint = `ipc://${this.dir}/${node}.sock`;
    this.run('agent-' + node, [binary('TRAINSCOPE_AGENT_BIN'), '--collector', `tcp://127.0.0.1:${this.ingestPort}`,
      '--endpoint', this.agentEndpoint, '--node', node, '--spool-dir', path.join(this.dir, 'spool-' + node)]);
    await waitFor(() => fs.existsSync(`${this.dir}/${node}.sock`), 10000, 'the agent socket');
  }

  startSim(args) {
    return this.run('simtrain', [binary('TRAINSCOPE_SIMTRAIN_BIN'), '--agent', this.agentEndpoint, '--quiet', ...args]);
  }

  // A test's failure: FAIL with the error, then the tail of each named process's log.
  reportFailure(e, names) {
    console.error('FAIL: ' + (e.stack || e));
    for (const n of names) console.error(`--- ${n} log tail ---\n` + this.log(n).slice(-2000));
  }

  // The end of a test: closes its browser (if it opened one), cleans up, exits 0 or 1.
  async finish(browser, failed) {
    if (browser) await browser.close();
    this.cleanup();
    process.exit(failed ? 1 : 0);
  }

  cleanup() {
    killAll();
    if (!process.env.TRAINSCOPE_TEST_KEEP) fs.rmSync(this.dir, { recursive: true, force: true });
    else console.log('kept ' + this.dir);
  }
}
