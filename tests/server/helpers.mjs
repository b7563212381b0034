// Shared helpers of the server tests: where the binary and the models are, starting and stopping a server.
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
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
export async function startServer(args, { env = {} } = {}) {
  const proc = spawn(BIN, ['serve', '--host', '127.0.0.1', '--port', '0', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env },
  });
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
      if (proc.exitCode !== null) return proc.exitCode;
      proc.kill('SIGTERM');
      return await new Promise((resolve) => proc.on('exit', (code, sig) => resolve(code ?? sig)));
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

export function sanitizerReport(text) {
  return /ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:/.test(text);
}
