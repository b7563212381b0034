// The suffix cache's memory under prompts of random tokens (issue 26, defect 9): every finished request is added
// to the server-wide cache (src/serve/engine.cpp), which keeps --spec-suffix-max-tokens tokens of documents; this
// checks whether its bigram index is bounded by the same number. Each request: /completion with a prompt of
// --len random token ids (from 3 .. --vocab-1), n_predict 1. The server's VmRSS is printed every --every requests.
//
//   node bench/rss-suffix-index.mjs [--requests 8000] [--len 400] [--vocab 512] [--clients 4] [--every 1000]
//        [--bin build/bin/tandem] [--model ../shared/models/stories260K.gguf] -- SERVE ARGS...
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

const argv = process.argv.slice(2);
const dash = argv.indexOf('--');
const own = dash < 0 ? argv : argv.slice(0, dash);
const serveArgs = dash < 0 ? [] : argv.slice(dash + 1);
const opt = (name, def) => { const i = own.indexOf('--' + name); return i < 0 ? def : own[i + 1]; };
const REQUESTS = Number(opt('requests', 8000)), LEN = Number(opt('len', 400)), VOCAB = Number(opt('vocab', 512));
const CLIENTS = Number(opt('clients', 4)), EVERY = Number(opt('every', 1000));
const BIN = path.resolve(opt('bin', 'build/bin/tandem'));
const MODEL = path.resolve(opt('model', '../shared/models/stories260K.gguf'));

let s = 12345;
const r = () => { s ^= s << 13; s >>>= 0; s ^= s >> 17; s ^= s << 5; s >>>= 0; return s / 4294967296; };
const rss = (pid) => Number(fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1]) / 1024;

const proc = spawn(BIN, ['serve', '--host', '127.0.0.1', '--port', '0', '-m', MODEL, ...serveArgs], { stdio: ['ignore', 'ignore', 'pipe'] });
let err = '';
const port = await new Promise((resolve, reject) => {
  proc.stderr.on('data', (d) => { err = (err + d).slice(-65536); const m = err.match(/listening on http:\/\/[^:]+:(\d+)/); if (m) resolve(Number(m[1])); });
  proc.on('exit', (c) => reject(new Error(`server exited ${c}: ${err}`)));
});
const base = `http://127.0.0.1:${port}`;
for (let i = 0; i < 100; i++) { try { if ((await fetch(base + '/health')).status === 200) break; } catch { /* not yet */ } await new Promise((res) => setTimeout(res, 100)); }
const label = serveArgs.join(' ') || 'default';
console.log(`${label}\trequests=0\ttokens_added=0\trss=${rss(proc.pid).toFixed(1)}MB`);
let next = 0, done = 0;
const status = {};
await Promise.all(Array.from({ length: CLIENTS }, async () => {
  while (next < REQUESTS) {
    next++;
    const prompt = Array.from({ length: LEN }, () => 3 + Math.floor(r() * (VOCAB - 3)));
    const res = await fetch(base + '/completion', { method: 'POST', body: JSON.stringify({ prompt, n_predict: 1, temperature: 0, cache_prompt: false }) });
    await res.arrayBuffer();
    status[res.status] = (status[res.status] || 0) + 1;
    if (++done % EVERY === 0) console.log(`${label}\trequests=${done}\ttokens_added=${done * (LEN + 1)}\trss=${rss(proc.pid).toFixed(1)}MB`);
  }
}));
console.log(`${label}\tstatus ${JSON.stringify(status)}`);
proc.kill('SIGTERM');
await new Promise((res) => proc.on('exit', res));
