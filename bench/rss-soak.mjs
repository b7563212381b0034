// RSS soak (issue 26, defect 9): N concurrent clients mix /v1/chat/completions, /v1/completions and /completion,
// with and without a grammar or a JSON schema, streaming and not, for a fixed time; the server's VmRSS is sampled
// every few seconds, during the load and for a short idle tail after it.
//
//   node bench/rss-soak.mjs [--clients 16] [--seconds 180] [--every 5] [--idle 10] [--think MS] [--seed 1] [--label NAME]
//        [--bin build/bin/tandem] [--model ../shared/models/stories260K.gguf] [--port P --pid PID] -- SERVE ARGS...
//
// Without --port the script starts `tandem serve --host 127.0.0.1 --port 0 -m MODEL SERVE ARGS...` itself
// (environment passed through, so MALLOC_ARENA_MAX=2 node bench/rss-soak.mjs ... applies to the server); with
// --port/--pid it drives a server started elsewhere (e.g. under heaptrack) and samples that pid.
// Prompts vary with the seed and the request number, and a quarter of the requests sample at temperature 0.8, so
// every request is a new sequence for the server-wide suffix cache. --think: a pause after each answer, per client. Prints one line per sample and a JSON summary.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

const argv = process.argv.slice(2);
const dash = argv.indexOf('--');
const own = dash < 0 ? argv : argv.slice(0, dash);
const serveArgs = dash < 0 ? [] : argv.slice(dash + 1);
const opt = (name, def) => { const i = own.indexOf('--' + name); return i < 0 ? def : own[i + 1]; };
const CLIENTS = Number(opt('clients', 16)), SECONDS = Number(opt('seconds', 180)), EVERY = Number(opt('every', 5));
const THINK = Number(opt('think', 0)), IDLE = Number(opt('idle', 10)), SEED = Number(opt('seed', 1)), LABEL = opt('label', serveArgs.join(' ') || 'default');
const BIN = path.resolve(opt('bin', 'build/bin/tandem'));
const MODEL = path.resolve(opt('model', '../shared/models/stories260K.gguf'));

function rng(seed) {
  let s = (seed >>> 0) || 1;
  return () => { s ^= s << 13; s >>>= 0; s ^= s >> 17; s ^= s << 5; s >>>= 0; return s / 4294967296; };
}
const pick = (r, a) => a[Math.floor(r() * a.length)];
const NAMES = ['Tom', 'Lily', 'Sue', 'Ben', 'Max', 'Mia', 'Sam', 'Anna', 'Tim', 'Zoe'];
const THINGS = ['dog', 'ball', 'tree', 'cake', 'boat', 'bird', 'car', 'box', 'sun', 'hat'];
const PLACES = ['park', 'sea', 'house', 'garden', 'school', 'forest', 'shop', 'farm'];
function prompt(r, n) {
  return `${pick(r, NAMES)} had a ${pick(r, THINGS)} number ${n}. One day ${pick(r, NAMES)} went to the ${pick(r, PLACES)}`;
}
const GRAMMAR = 'root ::= word (" " word){2,6} "."\nword ::= [a-z]{1,8}';
const SCHEMA = { type: 'object', properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer' }, ok: { type: 'boolean' } }, required: ['name', 'age'] };

// One request of kind k (0..17): endpoint x constraint x stream.
function request(r, k, n) {
  const endpoint = ['/v1/chat/completions', '/v1/completions', '/completion'][k % 3];
  const constraint = Math.floor(k / 3) % 3;  // 0 none, 1 grammar, 2 json_schema
  const stream = Math.floor(k / 9) % 2 === 1;
  const temperature = r() < 0.25 ? 0.8 : 0;
  const p = prompt(r, n);
  const body = { temperature, seed: n, stream };
  if (endpoint === '/v1/chat/completions') { body.messages = [{ role: 'user', content: p }]; body.max_tokens = 24; }
  else if (endpoint === '/v1/completions') { body.prompt = p; body.max_tokens = 24; }
  else { body.prompt = p; body.n_predict = 24; }
  if (constraint === 1) body.grammar = GRAMMAR;
  if (constraint === 2) {
    if (endpoint === '/completion') body.json_schema = SCHEMA;
    else body.response_format = { type: 'json_schema', json_schema: { name: 'x', schema: SCHEMA } };
  }
  return { endpoint, body: JSON.stringify(body), stream };
}

async function startServer() {
  const args = ['serve', '--host', '127.0.0.1', '--port', '0', '-m', MODEL, ...serveArgs];
  const proc = spawn(BIN, args, { stdio: ['ignore', 'ignore', 'pipe'], env: process.env });
  let stderr = '';
  const port = await new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('no start:\n' + stderr)), 60000);
    proc.stderr.on('data', (d) => {
      stderr += d; if (stderr.length > 1 << 20) stderr = stderr.slice(-(1 << 19));
      const m = stderr.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m) { clearTimeout(t); resolve(Number(m[1])); }
    });
    proc.on('exit', (c) => reject(new Error(`server exited ${c}:\n${stderr}`)));
  });
  return { proc, port, pid: proc.pid, stderr: () => stderr };
}

function rssKb(pid) {
  const s = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  return { rss: Number(s.match(/VmRSS:\s+(\d+)/)[1]), threads: Number(s.match(/Threads:\s+(\d+)/)[1]) };
}

async function main() {
  let srv;
  if (opt('port')) srv = { port: Number(opt('port')), pid: Number(opt('pid')), proc: null };
  else srv = await startServer();
  const base = `http://127.0.0.1:${srv.port}`;
  for (let i = 0; i < 300; i++) {
    try { if ((await fetch(base + '/health')).status === 200) break; } catch { /* not yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  const status = {}, kinds = {};
  let sent = 0, errors = 0;
  const t0 = Date.now(), tEnd = t0 + SECONDS * 1000;
  const samples = [];
  const sample = (phase) => {
    const { rss, threads } = rssKb(srv.pid);
    const s = { t: Math.round((Date.now() - t0) / 1000), phase, rss_kb: rss, threads, requests: sent };
    samples.push(s);
    console.log(`${LABEL}\tt=${s.t}s\t${phase}\trss=${(rss / 1024).toFixed(1)}MB\tthreads=${threads}\treq=${sent}`);
  };
  sample('start');
  const timer = setInterval(() => sample('load'), EVERY * 1000);
  let counter = 0;
  const client = async (w) => {
    const r = rng(SEED * 1000003 + w * 7919 + 1);
    while (Date.now() < tEnd) {
      const n = counter++;
      const k = Math.floor(r() * 18);
      const q = request(r, k, n);
      try {
        const res = await fetch(base + q.endpoint, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: q.body });
        await res.arrayBuffer();  // streaming or not: read the whole answer
        status[res.status] = (status[res.status] || 0) + 1;
        const key = `${q.endpoint}${q.stream ? '+stream' : ''}${q.body.includes('"grammar"') ? '+grammar' : q.body.includes('schema') ? '+schema' : ''}`;
        kinds[key] = (kinds[key] || 0) + 1;
      } catch (e) { errors++; }
      sent++;
      if (THINK) await new Promise((res) => setTimeout(res, THINK));
    }
  };
  await Promise.all(Array.from({ length: CLIENTS }, (_, w) => client(w)));
  clearInterval(timer);
  sample('end');
  for (let s = EVERY; s <= IDLE; s += EVERY) { await new Promise((r) => setTimeout(r, EVERY * 1000)); sample('idle'); }
  const load = samples.filter((s) => s.phase !== 'idle');
  const half = load.filter((s) => s.t >= SECONDS / 2);
  const summary = {
    label: LABEL, clients: CLIENTS, seconds: SECONDS, requests: sent, errors, status,
    rss_mb: { start: load[0].rss_kb / 1024, mid: half[0]?.rss_kb / 1024, end: load[load.length - 1].rss_kb / 1024,
      after_idle: samples[samples.length - 1].rss_kb / 1024, max: Math.max(...samples.map((s) => s.rss_kb)) / 1024 },
    threads_end: load[load.length - 1].threads, kinds,
  };
  console.log('SUMMARY ' + JSON.stringify(summary));
  if (srv.proc) {
    srv.proc.kill('SIGTERM');
    await new Promise((r) => srv.proc.on('exit', r));
    const err = srv.stderr();
    if (/ERROR: AddressSanitizer|runtime error:/.test(err)) console.log('SANITIZER REPORT:\n' + err.slice(-4000));
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
