// Shared helpers of the server tests: where the binary and the models are, starting and stopping a server.
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

export const BIN = process.env.TANDEM_BIN || path.resolve('build/bin/tandem');
export const SHARED = process.env.TANDEM_SHARED_DIR || path.resolve(path.dirname(new URL(import.meta.url).pathname), '../../../shared');

export function sharedFile(rel) {
  const p = path.join(SHARED, rel);
  if (!fs.existsSync(p)) throw new Error(`required shared file is missing: ${p} (set TANDEM_SHARED_DIR)`);
  return p;
}

if (!fs.existsSync(BIN)) throw new Error(`tandem binary not found at ${BIN} (set TANDEM_BIN)`);

export const STORIES = sharedFile('models/stories260K.gguf');

let tmp;
export function tmpDir() {
  if (!tmp) tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tandem-server-test-'));
  return tmp;
}

// A Q4_0 draft of stories260K, made with `tandem quantize`.
export function storiesDraft() {
  const out = path.join(tmpDir(), 'stories-q4_0.gguf');
  if (!fs.existsSync(out)) execFileSync(BIN, ['quantize', STORIES, out, 'Q4_0'], { stdio: 'ignore' });
  return out;
}

// Starts `tandem serve` on a free loopback port; resolves once /health answers 200.
// `shell`: a sh script run instead of the binary, with $0 = the binary and "$@" = the serve arguments (to pass
// arguments Node cannot, e.g. file names that are not UTF-8).
export async function startServer(args, { env = {}, shell = null } = {}) {
  const argv = ['serve', '--host', '127.0.0.1', '--port', '0', ...args];
  const proc = shell ? spawn('sh', ['-c', shell, BIN, ...argv], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } })
    : spawn(BIN, argv, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  let stderr = '';
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('server did not start:\n' + stderr)), 30000);
    proc.stderr.on('data', (d) => {
      stderr += d.toString();
      const m = stderr.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    proc.on('exit', (code) => reject(new Error(`server exited with ${code}:\n${stderr}`)));
  });
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 300; i++) {
    try {
      const r = await fetch(base + '/health');
      if (r.status === 200) break;
    } catch { /* not yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    proc, port, base,
    get stderr() { return stderr; },
    async stop() {
      if (proc.exitCode !== null || proc.signalCode !== null) return proc.exitCode ?? proc.signalCode;
      const exited = new Promise((resolve) => proc.on('exit', (code, sig) => resolve(code ?? sig)));
      proc.kill('SIGTERM');
      return await exited;
    },
    // Resolves with { code, ms } once the process exits.
    exited() {
      const t0 = Date.now();
      if (proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve({ code: proc.exitCode ?? proc.signalCode, ms: 0 });
      return new Promise((resolve) => proc.on('exit', (code, sig) => resolve({ code: code ?? sig, ms: Date.now() - t0 })));
    },
    rssKb() {
      const s = fs.readFileSync(`/proc/${proc.pid}/status`, 'utf8');
      return Number(s.match(/VmRSS:\s+(\d+)/)[1]);
    },
  };
}

// `tandem generate --json` on the same model, for comparisons.
export function generateJson(args) {
  const out = execFileSync(BIN, ['generate', ...args, '--json'], { stdio: ['ignore', 'pipe', 'ignore'] });
  return JSON.parse(out.toString().split('\n')[0]);
}

export async function metrics(base, headers = {}) {
  const text = await (await fetch(base + '/metrics', { headers })).text();
  const get = (name) => Number((text.match(new RegExp(`^${name} (\\S+)$`, 'm')) || [])[1]);
  return { text, get };
}

// Raw HTTP over one TCP connection: writes `data` (string or Buffer, or an array of pieces written `gapMs`
// apart), collects what comes back until the server closes or `timeoutMs` passes. Resolves with
// { text, ms, error } (ms: time to the first byte of the answer).
export function rawExchange(port, data, { timeoutMs = 5000, gapMs = 0, endAfterMs = null } = {}) {
  return new Promise((resolve) => {
    const sock = net.connect(port, '127.0.0.1');
    const t0 = Date.now();
    let text = '', first = null, error = null, done = false;
    const finish = () => { if (!done) { done = true; clearTimeout(timer); sock.destroy(); resolve({ text, ms: first, error }); } };
    const timer = setTimeout(finish, timeoutMs);
    sock.on('data', (d) => { if (first === null) first = Date.now() - t0; text += d.toString('latin1'); });
    sock.on('error', (e) => { error = e.code || String(e); finish(); });
    sock.on('close', finish);
    sock.on('connect', async () => {
      const pieces = Array.isArray(data) ? data : [data];
      for (const p of pieces) {
        if (sock.destroyed) return;
        sock.write(p);
        if (gapMs) await new Promise((r) => setTimeout(r, gapMs));
      }
      if (endAfterMs !== null) setTimeout(() => sock.end(), endAfterMs);
    });
  });
}

// Responses in a raw HTTP text: [{ status, headers, body }] (Content-Length and chunked bodies).
export function parseResponses(text) {
  const out = [];
  let rest = text;
  while (rest.startsWith('HTTP/1.')) {
    const he = rest.indexOf('\r\n\r\n');
    if (he < 0) break;
    const lines = rest.slice(0, he).split('\r\n');
    const status = Number(lines[0].split(' ')[1]);
    const headers = {};
    for (const l of lines.slice(1)) { const i = l.indexOf(':'); headers[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim(); }
    rest = rest.slice(he + 4);
    let body = '';
    if (headers['transfer-encoding'] === 'chunked') {
      for (;;) {
        const le = rest.indexOf('\r\n');
        const n = parseInt(rest.slice(0, le), 16);
        rest = rest.slice(le + 2);
        if (!n) { rest = rest.slice(2); break; }
        body += rest.slice(0, n);
        rest = rest.slice(n + 2);
      }
    } else {
      const n = Number(headers['content-length'] || 0);
      body = rest.slice(0, n);
      rest = rest.slice(n);
    }
    out.push({ status, headers, body });
  }
  return out;
}

export function sanitizerReport(text) {
  return /ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:/.test(text);
}
