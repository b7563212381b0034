// Fuzz classes of issue 26 against a `tandem serve` binary (meant for the ASan+UBSan build): chat templates,
// grammars, JSON schemas, the HTTP transport and request JSON. Each class draws N cases from a fixed seed (seed
// sets from tests/test_jinja.cpp, tests/test_grammar.cpp, tests/server/hardening.test.mjs, plus random ones and
// mutations), sends them one at a time and records per class: cases, the HTTP status histogram, server crashes,
// sanitizer reports (the server's stderr), hangs (no answer in --hang-ms) and 5xx answers. Every failing case is
// written to --out as a reproducer (the request, and the template file for template cases).
//
//   TANDEM_BIN=build-fuzz-asan/bin/tandem node bench/fuzz-classes.mjs [--n 500] [--seed 26] [--classes t,g,s,x,j]
//        [--n-templates N] [--model ../shared/models/stories260K.gguf] [--out /tmp/fuzz-classes] [--hang-ms 10000] [--dead-ms 60000]
//
// Template cases start one server per template (--chat-template-file): a template refused at start-up with a
// message is a pass ("start-refused"); then /apply-template and a chat completion (with tools) are sent. A second
// template server renders request-supplied values (chat_template_kwargs) through arithmetic, filters, loops,
// macros and tojson, which reaches the evaluator's bounds without a restart per case.
// Status "none": the server closed the connection without an answer (transport cases).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import zlib from 'node:zlib';

const argv = process.argv.slice(2);
const opt = (name, def) => { const i = argv.indexOf('--' + name); return i < 0 ? def : argv[i + 1]; };
const N = Number(opt('n', 500)), SEED = Number(opt('seed', 26)), HANG_MS = Number(opt('hang-ms', 10000));
const N_TEMPLATES = Number(opt('n-templates', N));  // template cases are slower (a server start per template)
const DEAD_MS = Number(opt('dead-ms', 60000));  // no answer at all in this time: a hang (slower than HANG_MS: 'slow')
const CLASSES = opt('classes', 't,g,s,x,j').split(',');
const BIN = path.resolve(process.env.TANDEM_BIN || opt('bin', 'build-fuzz-asan/bin/tandem'));
const MODEL = path.resolve(opt('model', '../shared/models/stories260K.gguf'));
const OUT = path.resolve(opt('out', '/tmp/fuzz-classes'));
fs.mkdirSync(OUT, { recursive: true });
const SAN_ENV = {
  ASAN_OPTIONS: 'detect_leaks=1:abort_on_error=1', UBSAN_OPTIONS: 'print_stacktrace=1:halt_on_error=1', ...process.env,
};
const SAN_RE = /ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|SUMMARY: UndefinedBehaviorSanitizer/;

function rng(seed) {
  let s = (seed >>> 0) || 1;
  return () => { s ^= s << 13; s >>>= 0; s ^= s >> 17; s ^= s << 5; s >>>= 0; return s / 4294967296; };
}
const R = rng(SEED);
const int = (n) => Math.floor(R() * n);
const pick = (a) => a[int(a.length)];
const chance = (p) => R() < p;
const rep = (s, n) => s.repeat(n);

// ---------------------------------------------------------------- servers
async function startServer(extra, label) {
  const args = ['serve', '--host', '127.0.0.1', '--port', '0', '-m', MODEL, '-t', '1', ...extra];
  const proc = spawn(BIN, args, { stdio: ['ignore', 'ignore', 'pipe'], env: SAN_ENV });
  const srv = { proc, label, args, tail: '', report: '', exited: null, t0: Date.now() };
  proc.stderr.on('data', (d) => {
    const s = d.toString('latin1');
    srv.tail = (srv.tail + s).slice(-16384);
    if (srv.report || SAN_RE.test(s)) srv.report = (srv.report + s).slice(0, 65536);
  });
  proc.on('exit', (code, sig) => { srv.exited = code ?? sig; });
  srv.port = await new Promise((resolve) => {
    const timer = setTimeout(() => resolve(-1), 60000);
    const check = () => {
      const m = srv.tail.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    };
    proc.stderr.on('data', check);
    proc.on('exit', () => { clearTimeout(timer); resolve(0); });
  });
  if (srv.port > 0) {
    srv.base = `http://127.0.0.1:${srv.port}`;
    // the server listens before it loads; a template it refuses ends it after "listening"
    for (let i = 0; i < 1200 && srv.exited === null; i++) {
      try { if ((await fetch(srv.base + '/health')).status === 200) break; } catch { /* not yet */ }
      await sleep(50);
    }
    await sleep(20);
    if (srv.exited !== null) srv.port = 0;
  }
  srv.startMs = Date.now() - srv.t0;
  return srv;
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function stopServer(srv) {
  if (srv.exited === null) {
    const done = new Promise((r) => srv.proc.on('exit', r));
    srv.proc.kill('SIGTERM');
    const t = setTimeout(() => srv.proc.kill('SIGKILL'), 20000);
    await done;
    clearTimeout(t);
  }
  return srv.exited;
}

async function post(srv, url, body, timeoutMs = DEAD_MS) {
  const ac = new AbortController();
  const t = setTimeout(() => ac.abort(), timeoutMs);
  const t0 = Date.now();
  try {
    const res = await fetch(srv.base + url, { method: 'POST', body: typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body), headers: { 'Content-Type': 'application/json' }, signal: ac.signal });
    const text = Buffer.from(await res.arrayBuffer()).toString('utf8');
    return { status: res.status, text, ms: Date.now() - t0 };
  } catch (e) {
    return { status: ac.signal.aborted ? 'hang' : 'neterr', text: String(e), ms: Date.now() - t0 };
  } finally { clearTimeout(t); }
}

// Raw bytes over TCP; half-closes after writing; resolves with the statuses of the answers (parsed loosely).
function raw(port, data, timeoutMs = DEAD_MS, endAfterMs = 1500) {
  return new Promise((resolve) => {
    const sock = net.connect(port, '127.0.0.1');
    let buf = Buffer.alloc(0), done = false;
    const t0 = Date.now();
    const finish = (hang) => {
      if (done) return; done = true; clearTimeout(timer); sock.destroy();
      const text = buf.toString('latin1');
      const statuses = [...text.matchAll(/(?:^|\r\n)HTTP\/1\.[01] (\d{3})/g)].map((m) => Number(m[1]));
      resolve({ status: hang ? 'hang' : statuses.length ? statuses : 'none', ms: Date.now() - t0, text: text.slice(0, 300) });
    };
    const timer = setTimeout(() => finish(true), timeoutMs);
    sock.on('data', (d) => { if (buf.length < 1 << 20) buf = Buffer.concat([buf, d]); });
    sock.on('error', () => finish(false));
    sock.on('close', () => finish(false));
    sock.on('connect', () => {
      const pieces = Array.isArray(data) ? data : [data];
      for (const p of pieces) sock.write(p);
      // half-closing at once makes the server cancel the request (it reads EOF as the client leaving): wait first
      setTimeout(() => { if (!sock.destroyed) sock.end(); }, endAfterMs);
    });
  });
}

// ---------------------------------------------------------------- bookkeeping
const results = {};
function rec(cls) {
  if (!results[cls]) results[cls] = { cases: 0, statuses: {}, crashes: 0, sanitizer: 0, hangs: 0, slow: 0, five: 0, failures: [], maxMs: 0 };
  return results[cls];
}
let failId = 0;
function fail(cls, kind, detail, repro) {
  const r = rec(cls);
  const f = path.join(OUT, `${cls}-${++failId}-${kind}.json`);
  fs.writeFileSync(f, JSON.stringify({ kind, detail, ...repro }, null, 1));
  r.failures.push({ kind, file: f, detail: String(detail).slice(0, 300) });
  console.log(`FAIL ${cls} ${kind}: ${String(detail).slice(0, 200)} -> ${f}`);
}
// After a case: the server's health (crash, sanitizer report, responsiveness). Returns the server to use next.
async function checkServer(cls, srv, repro, restart) {
  await sleep(0);
  if (srv.report) {
    rec(cls).sanitizer++;
    fail(cls, 'sanitizer', srv.report.slice(0, 30000), repro);
    srv.report = '';
  }
  if (srv.exited !== null) {
    rec(cls).crashes++;
    fail(cls, 'crash', `exit ${srv.exited}: ${srv.tail.slice(-3000)}`, repro);
    return restart();
  }
  return srv;
}
function count(cls, status, ms, repro) {
  const r = rec(cls);
  if (ms > HANG_MS && status !== 'hang') { r.slow = (r.slow || 0) + 1; fail(cls, 'slow', `answered ${JSON.stringify(status)} after ${ms} ms`, repro || {}); }
  for (const s of Array.isArray(status) ? status : [status]) r.statuses[s] = (r.statuses[s] || 0) + 1;
  r.maxMs = Math.max(r.maxMs, ms || 0);
}
// A case that did not answer in time: the server may still be busy; wait for /health before the next case.
async function afterHang(cls, srv, repro, restart) {
  rec(cls).hangs++;
  fail(cls, 'hang', `no answer in ${DEAD_MS} ms`, repro);
  for (let i = 0; i < 60; i++) {
    const h = await post(srv, '/tokenize', { content: 'x' }, 2000).catch(() => null);
    if (h && h.status === 200) return srv;
    if (srv.exited !== null) break;
  }
  await stopServer(srv);
  return restart();
}

// ---------------------------------------------------------------- class: chat templates
const INT_EDGES = ['0', '1', '-1', '2', '9223372036854775807', '(-9223372036854775807 - 1)', '-9223372036854775807', '4294967296',
  '1e308', '-1e308', '(1e308 * 10)', '0.0', '-0.0', '0.5', '3037000500', '10**6', '10**18', '10**400', '2**63', '-(2**63)'];
const BINOPS = ['%', '//', '/', '**', '*', '+', '-'];
function hostileTemplates() {
  const t = [
    '{{ messages' + rep('.x', 10000) + ' }}',
    '{{ 1' + rep(' + 1', 20000) + ' }}',
    "{{ 'a'" + rep(' | trim', 20000) + ' }}',
    '{{ f' + rep('()', 20000) + ' }}',
    "{% set ns = namespace(d=none) %}{% for i in range(100000) %}{% set ns.d = {'a': ns.d} %}{% endfor %}{{ ns.d | tojson }}",
    '{% set ns = namespace(d=[]) %}{% for i in range(1000) %}{% set ns.d = [ns.d] %}{% endfor %}{{ ns.d }}',
    '{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(1000) %}{% endfor %}{% endfor %}{% endfor %}',
    '{{ range(1000000) | length }}',
    '{% macro m(n) %}{% if n > 0 %}{{ m(n - 1) }}{{ m(n - 1) }}{% endif %}{% endmacro %}{{ m(45) }}',
    "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
    "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    "{% set ns = namespace(l=range(1000)|list) %}{% for i in range(30) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | join(',') }}",
    "{{ 'a\nb' | indent(1500000000) }}",
    '{{ messages | tojson(indent=1000000000) }}',
    "{% for i in range(100000) %}{{ '" + rep('0123456789', 100) + "' }}{% endfor %}",
    '{{ (-9223372036854775807 - 1) % -1 }}', '{{ (-9223372036854775807 - 1) // -1 }}', '{{ 9223372036854775807 + 1 }}',
    '{{ -(-9223372036854775807 - 1) }}', '{{ 3037000500 * 3037000500 }}', '{{ (-9223372036854775807 - 1) | abs }}',
    '{{ 1 % 0 }}', '{{ 1 // 0 }}', '{{ 1 / 0 }}', '{{ 0 ** -1 }}', '{{ 2 ** 100000 }}', '{{ 10 ** 400 }}', '{{ (1e308 * 10) | int }}',
    "{{ 'nan' | float | int }}", "{{ range(0, 10, 0) | list }}", "{{ range(-9223372036854775807 - 1, 9223372036854775807) | length }}",
    "{{ 'abc'[::0] }}", "{{ 'abc'[-9223372036854775807 - 1:] }}", "{{ 'abc'[9223372036854775807] }}", "{{ [1,2][(-9223372036854775807 - 1)] }}",
    "{{ 'x' * 9223372036854775807 }}", "{{ 'x' * -1 }}", "{{ [1] * 1000000000 }}", "{{ 'a' | center(2000000000) }}",
    "{{ 1.5 | round(-9223372036854775807 - 1) }}", "{{ 1.5 | round(400) }}", "{{ '%s' | format(1) }}",
    '{%- raw %}' + rep('{{', 1000), '{% if %}', '{{', '{% for %}{% endfor %}', '{% macro %}', rep('{% if 1 %}', 5000) + rep('{% endif %}', 5000),
    rep('(', 5000) + rep(')', 5000), '{{ ' + rep('[', 5000) + rep(']', 5000) + ' }}', '{{ ' + rep('{"a":', 3000) + '1' + rep('}', 3000) + ' }}',
    '{{ ' + rep('not ', 20000) + 'true }}', '{{ ' + rep('-', 20000) + '1 }}',
    "{% macro r(v, d) %}{% if v is mapping %}{% for k in v %}{{ r(v[k], d + 1) }}{% endfor %}{% else %}{{ d }}{% endif %}{% endmacro %}{{ r(messages, 0) }}",
    '{% macro a() %}{{ a() }}{% endmacro %}{{ a() }}', '{% macro a(x) %}{{ caller() }}{% endmacro %}{% call a(1) %}{{ a(2) }}{% endcall %}',
    "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(',') * 100000000 }}",
    '{% for m in messages %}{% for m2 in messages %}{% for m3 in messages %}{{ m3.content }}{% endfor %}{% endfor %}{% endfor %}',
    '{{ tools | tojson }}{{ messages | tojson(indent=2) }}', "{{ raise_exception('boom') }}", '{{ strftime_now(' + rep('"%Y"', 1) + ') }}',
    "{{ '\\u0000\\ud800' }}", "{{ '" + '\u0000' + "' }}", '{{ x.__class__ }}', '{{ none.a.b.c }}', '{{ messages[0]["content"][0:-1:-1] }}',
  ];
  return t;
}
function randomTemplate() {
  const k = int(8);
  if (k === 0) {  // arithmetic on edges
    const n = 1 + int(4);
    let e = pick(INT_EDGES);
    for (let i = 0; i < n; i++) e = `(${e} ${pick(BINOPS)} ${pick(INT_EDGES)})`;
    return `{{ ${e} }}{{ ${e} | ${pick(['abs', 'int', 'float', 'round', 'string', 'length'])} }}`;
  }
  if (k === 1) {  // long chains near the parser's bound
    const n = pick([100, 500, 599, 600, 601, 1000, 50000]);
    return `{{ ${pick(['messages', '1', "'a'", 'x'])}${rep(pick([' + 1', ' ~ "a"', ' | trim', '.x', '[0]', ' or 1', ' and 0', ' is defined']), n)} }}`;
  }
  if (k === 2) {  // nesting near the depth bound
    const n = pick([50, 99, 100, 101, 199, 200, 201, 1000]);
    const [o, c] = pick([['(', ')'], ['[', ']'], ['{% if 1 %}', '{% endif %}'], ['{% for i in [1] %}', '{% endfor %}'], ['{"a":', '}']]);
    return o.startsWith('{%') ? rep(o, n) + 'x' + rep(c, n) : `{{ ${rep(o, n)}1${rep(c, n)} }}`;
  }
  if (k === 3) {  // loops
    const d = 1 + int(4), n = pick(['10', '1000', '10**6', '100000', 'messages|length']);
    let body = pick(['{{ i }}', '.', "{{ 'x' * 1000 }}", '{% set ns.s = ns.s ~ "ab" %}']);
    for (let i = 0; i < d; i++) body = `{% for i in range(${n}) %}${body}{% endfor %}`;
    return "{% set ns = namespace(s='') %}" + body;
  }
  if (k === 4) {  // recursion
    const fan = 1 + int(3), depth = pick([10, 45, 100, 1000, 100000]);
    return `{% macro m(n) %}{% if n > 0 %}${rep('{{ m(n - 1) }}', fan)}{% endif %}{% endmacro %}{{ m(${depth}) }}`;
  }
  if (k === 5) {  // growth
    const it = pick([10, 20, 31, 32, 40, 64]);
    const [init, step] = pick([["s='ab'", 'ns.s = ns.s + ns.s'], ["s='ab'", 'ns.s = ns.s ~ ns.s'], ['s=[1,2]', 'ns.s = ns.s + ns.s'], ["s={'a':1}", "ns.s = {'a': ns.s, 'b': ns.s}"]]);
    return `{% set ns = namespace(${init}) %}{% for i in range(${it}) %}{% set ${step} %}{% endfor %}{{ ns.s | ${pick(['length', 'tojson', 'string', 'list'])} }}`;
  }
  if (k === 6) {  // filters with hostile arguments
    return `{{ ${pick(["'a\\nb'", 'messages', "'abc'", '[1,2,3]', '{"a":[1]}'])} | ${pick(['indent', 'center', 'round', 'tojson(indent=', 'join', 'replace("a", ', 'truncate', 'wordwrap', 'batch', 'slice'])}${pick(INT_EDGES)}) }}`.replace('((', '(').replace('=(', '=');
  }
  // mutations of a real template
  const base = '{% for m in messages %}{{ "<|im_start|>" + m.role + "\\n" + m.content + "<|im_end|>\\n" }}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\\n{% endif %}';
  let s = base;
  for (let i = 0, n = 1 + int(6); i < n; i++) {
    const p = int(s.length);
    const op = int(3);
    if (op === 0) s = s.slice(0, p) + pick(['{', '}', '%', '(', ')', '[', ']', '|', '.', '"', "'", '~', '-', ' ', '\\', '\u0000', '\u00ff', 'endfor', 'if ', '{{', '}}', '{%', '%}', '{#']) + s.slice(p);
    else if (op === 1) s = s.slice(0, p) + s.slice(p + 1 + int(5));
    else { const q = int(s.length); s = s.slice(0, p) + s.slice(Math.min(p, q), Math.max(p, q)) + s.slice(p); }
  }
  return s;
}
const KW_TEMPLATE = `{%- for m in messages %}{{ m.role }}: {{ m.content }}
{% endfor -%}
{%- set k = kw if kw is defined else {} -%}
{%- if k.op == 'bin' %}{{ k.a % k.b }}|{{ k.a // k.b }}|{{ k.a / k.b }}|{{ k.a * k.b }}|{{ k.a + k.b }}|{{ k.a - k.b }}|{{ k.a ** k.b }}
{%- elif k.op == 'range' %}{{ range(k.a) | length }}
{%- elif k.op == 'range3' %}{{ range(k.a, k.b, k.c) | list | length }}
{%- elif k.op == 'strmul' %}{{ (k.s * k.a) | length }}
{%- elif k.op == 'indent' %}{{ k.s | indent(k.a) }}
{%- elif k.op == 'tojson' %}{{ k.v | tojson }}
{%- elif k.op == 'tojson_indent' %}{{ k.v | tojson(indent=k.a) }}
{%- elif k.op == 'slice' %}{{ k.s[k.a:k.b:k.c] }}{{ k.v[k.a:k.b] }}
{%- elif k.op == 'index' %}{{ k.s[k.a] }}{{ k.v[k.a] }}
{%- elif k.op == 'join' %}{{ k.v | join(k.s) }}
{%- elif k.op == 'loop' %}{% for i in range(k.a) %}{% for j in range(k.b) %}.{% endfor %}{% endfor %}
{%- elif k.op == 'replace' %}{{ k.s | replace(k.t, k.u) }}
{%- elif k.op == 'round' %}{{ k.a | round(k.b) }}{{ k.a | int }}{{ k.a | float }}{{ k.a | abs }}
{%- elif k.op == 'conv' %}{{ k.s | int }}{{ k.s | float }}{{ k.s | length }}{{ k.s | upper }}{{ k.s | title }}
{%- elif k.op == 'split' %}{{ k.s.split(k.t) | length }}{{ k.s.split(k.t, k.a) | length }}
{%- elif k.op == 'dict' %}{{ k.v | dictsort }}{% for a, b in k.v.items() %}{{ a }}={{ b }}{% endfor %}{{ k.v.keys() | list }}
{%- elif k.op == 'macro' %}{% macro m(n) %}{% if n > 0 %}{{ m(n - 1) }}{{ m(n - 1) }}{% endif %}{% endmacro %}{{ m(k.a) }}
{%- elif k.op == 'recurse' %}{% macro r(v, d) %}{% if v is mapping %}{% for kk in v %}{{ r(v[kk], d + 1) }}{% endfor %}{% elif v is iterable and v is not string %}{% for x in v %}{{ r(x, d + 1) }}{% endfor %}{% else %}{{ d }}{% endif %}{% endmacro %}{{ r(k.v, 0) }}
{%- elif k.op == 'grow' %}{% set ns = namespace(s=k.s) %}{% for i in range(k.a) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}
{%- elif k.op == 'sort' %}{{ k.v | sort | list }}{{ k.v | unique | list }}{{ k.v | reverse | list }}{{ k.v | first }}{{ k.v | last }}
{%- elif k.op == 'attr' %}{{ k.v | map(attribute=k.s) | list }}{{ k.v | selectattr(k.s) | list }}
{%- elif k.op == 'tools' %}{{ tools | tojson }}{% for t in tools or [] %}{{ t.function.parameters | tojson(indent=k.a) }}{% endfor %}
{%- endif -%}
{%- if add_generation_prompt %}assistant:{% endif %}`;
function deepValue(depth, kind) {
  let v = kind === 'list' ? 1 : { a: 1 };
  for (let i = 0; i < depth; i++) v = kind === 'list' ? [v] : { a: v };
  return v;
}
function randomValue(d = 0) {
  const k = int(d > 3 ? 5 : 9);
  if (k === 0) return pick([0, 1, -1, 2 ** 53, -(2 ** 53), 2 ** 63, 1e308, -1e308, 0.5, 1e-308, 4294967296, 9223372036854775807, -9223372036854775808]);
  if (k === 1) return pick(['', 'a', '\u0000', 'ab\ncd', 'x'.repeat(int(10000)), '\ud83d\ude00', '{{ 1 }}', '%s%d', '-1', '1e400', 'nan', 'inf']);
  if (k === 2) return pick([true, false, null]);
  if (k === 3) return deepValue(pick([10, 100, 199, 200, 201, 1000, 2000]), pick(['list', 'dict']));
  if (k === 4) return Array.from({ length: pick([0, 1, 10, 1000, 100000]) }, (_, i) => i);
  if (k < 7) return Array.from({ length: 1 + int(4) }, () => randomValue(d + 1));
  return Object.fromEntries(Array.from({ length: 1 + int(4) }, (_, i) => [pick(['a', 'b', 'role', 'content', '', '__x', 'function']) + i, randomValue(d + 1)]));
}
function kwCase() {
  const ops = ['bin', 'range', 'range3', 'strmul', 'indent', 'tojson', 'tojson_indent', 'slice', 'index', 'join', 'loop', 'replace', 'round', 'conv', 'split', 'dict', 'macro', 'recurse', 'grow', 'sort', 'attr', 'tools'];
  const num = () => pick([0, 1, -1, 2, 3, 7, 45, 100, 1000, 1e6, 1e9, 2 ** 31, 2 ** 32, 2 ** 53, 2 ** 63, -(2 ** 63), 1e308, -1e308, 0.5, -0.5, 1e-300, 30, 40, 64]);
  const kw = { op: pick(ops), a: chance(0.85) ? num() : randomValue(), b: chance(0.85) ? num() : randomValue(), c: chance(0.85) ? num() : randomValue(),
    s: chance(0.7) ? pick(['', 'ab', 'a\nb', 'x'.repeat(1000), '12', '-9223372036854775809', '1e999', 'nan', ' ']) : randomValue(),
    t: pick(['', 'a', 'b', 'ab', '\n']), u: pick(['', 'xx', 'x'.repeat(100000)]), v: randomValue() };
  const messages = chance(0.8) ? [{ role: 'user', content: pick(['hi', '', 'x'.repeat(5000)]) }]
    : Array.from({ length: pick([2, 50, 2000]) }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: 'm' + i }));
  const body = { messages, chat_template_kwargs: { kw } };
  if (kw.op === 'tools') body.tools = [{ type: 'function', function: { name: 'f', parameters: chance(0.5) ? deepValue(pick([50, 199, 201, 1000]), 'dict') : randomValue() } }];
  return body;
}

async function classTemplates(n) {
  const cls = 'templates';
  const nStatic = Math.min(n, Math.max(20, Math.floor(n * 0.3)));
  const seeds = hostileTemplates();
  const chat = { messages: [{ role: 'system', content: 'sys' }, { role: 'user', content: 'hi' }], max_tokens: 2,
    tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { a: { type: 'integer' } } } } }] };
  for (let i = 0; i < nStatic; i++) {
    const tmpl = i < seeds.length ? seeds[i] : randomTemplate();
    const file = path.join(OUT, 'tmpl-current.jinja');
    fs.writeFileSync(file, tmpl);
    rec(cls).cases++;
    const repro = { template: tmpl.length > 200000 ? tmpl.slice(0, 200000) + '...(cut)' : tmpl, template_length: tmpl.length, server: ['--chat-template-file', 'FILE'] };
    const t0 = Date.now();
    const srv = await startServer(['--chat-template-file', file], cls);
    if (srv.port === 0 || srv.port === -1) {
      const ms = Date.now() - t0;
      count(cls, srv.port === -1 ? 'start-hang' : 'start-refused', ms);
      if (srv.port === -1) { rec(cls).hangs++; fail(cls, 'hang', 'start-up took > 60 s', repro); await stopServer(srv); continue; }
      if (srv.report) { rec(cls).sanitizer++; fail(cls, 'sanitizer', srv.report.slice(0, 30000), repro); }
      else if (!/error/.test(srv.tail) || (typeof srv.exited !== 'number') || srv.exited > 2) { rec(cls).crashes++; fail(cls, 'crash', `start-up: exit ${srv.exited}: ${srv.tail.slice(-2000)}`, repro); }
      if (ms > HANG_MS) { rec(cls).hangs++; fail(cls, 'hang', `start-up refusal took ${ms} ms`, repro); }
      continue;
    }
    if (srv.startMs > HANG_MS) { rec(cls).hangs++; fail(cls, 'hang', `start-up took ${srv.startMs} ms`, repro); }
    for (const [url, body] of [['/apply-template', { messages: chat.messages }], ['/v1/chat/completions', chat], ['/v1/chat/completions', { ...chat, stream: true }]]) {
      const r = await post(srv, url, body);
      count(cls, r.status, r.ms, { ...repro, url, body });
      if (r.status === 'hang') { rec(cls).hangs++; fail(cls, 'hang', `${url}: no answer in ${DEAD_MS} ms`, { ...repro, url, body }); break; }
      if (r.ms > HANG_MS) break;  // a render that runs to its step bound: once is enough
      if (typeof r.status === 'number' && r.status >= 500 && r.status !== 501) { rec(cls).five++; fail(cls, '5xx', `${url} ${r.status} ${r.text.slice(0, 200)}`, { ...repro, url, body }); }
      if (srv.exited !== null) break;
    }
    await stopServer(srv);
    if (srv.report) { rec(cls).sanitizer++; fail(cls, 'sanitizer', srv.report.slice(0, 30000), repro); }
    if (srv.exited !== 0 && srv.exited !== 'SIGTERM') { rec(cls).crashes++; fail(cls, 'crash', `exit ${srv.exited}: ${srv.tail.slice(-2000)}`, repro); }
  }
  // request-driven values through one template
  const file = path.join(OUT, 'tmpl-kwargs.jinja');
  fs.writeFileSync(file, KW_TEMPLATE);
  const restart = () => startServer(['--chat-template-file', file], cls);
  let srv = await restart();
  for (let i = nStatic; i < n; i++) {
    const body = kwCase();
    const url = chance(0.7) ? '/apply-template' : '/v1/chat/completions';
    if (url !== '/apply-template') body.max_tokens = 2;
    rec(cls).cases++;
    const repro = { server: ['--chat-template-file', file], template: KW_TEMPLATE, url, body };
    const r = await post(srv, url, body);
    count(cls, r.status, r.ms, repro);
    if (r.status === 'hang') { srv = await afterHang(cls, srv, repro, restart); continue; }
    if (typeof r.status === 'number' && r.status >= 500 && r.status !== 501) { rec(cls).five++; fail(cls, '5xx', `${r.status} ${r.text.slice(0, 200)}`, repro); }
    srv = await checkServer(cls, srv, repro, restart);
  }
  await finish(cls, srv);
}

async function finish(cls, srv) {
  const code = await stopServer(srv);
  if (srv.report) { rec(cls).sanitizer++; fail(cls, 'sanitizer', srv.report.slice(0, 30000), { note: 'reported at exit (e.g. LeakSanitizer)' }); }
  if (code !== 0) { rec(cls).crashes++; fail(cls, 'crash', `exit at stop: ${code}: ${srv.tail.slice(-2000)}`, {}); }
}

// ---------------------------------------------------------------- class: grammars
function chainGrammar(depth, alternatives) {
  let g = 'root ::= c0\n';
  for (let i = 0; i < depth; i++) g += `c${i} ::= c${i + 1} "q"\n`;
  g += `c${depth} ::= [a-z ]{30} "N"`;
  for (let a = 1; a < alternatives; a++) g += ' | [a-z ]{30} "N"';
  return g + '\n';
}
function nullableChain(rules, alts, refs) {
  let g = 'root ::= big\nbig ::= ';
  for (let a = 0; a < alts; a++) { if (a) g += ' | '; g += rep('n0 ', refs) + '"x"'; }
  g += '\n';
  for (let i = 0; i < rules; i++) g += `n${i} ::= n${i + 1}\n`;
  return g + `n${rules} ::= ""\n`;
}
const GRAMMAR_SEEDS = [
  'root ::= ' + rep('(', 200) + '"a"' + rep(')', 200), 'root ::= "a"{0,100000}', 'root ::= "x" root "y" | ""', 'root ::= "x" root | ""',
  'root ::= [a-z]{0,1000}', 'root ::= [^\\x00-\\U0010FFFF]', 'root ::= ""', 'root ::= .', 'root ::= [\\uD800-\\uDFFF]', 'root ::= "\\xF4\\xB4"',
  'root ::= [a-z ]+ "."', 'root ::= ("yes" | "no") "!"', 'root ::= object\nobject ::= "{" ws (pair ("," ws pair)*)? "}"\npair ::= "\\"" [a-z]+ "\\":" ws value\nvalue ::= [0-9]+ | "true" | object\nws ::= [ \\t\\n]*',
  'root ::= a\na ::= b\nb ::= a', 'root ::= root "a"', 'root ::= [a-z]{5,3}', 'root ::= [z-a]', 'root ::= "a"{4294967296}', 'root ::= "a"{1,99999999999999999999}',
  'root ::= x\nx ::= ' + Array.from({ length: 2000 }, (_, i) => `"w${i}"`).join(' | '), 'root ::= (((("a")*)*)*)*', 'root ::= ("a"? "b"?)*', 'root ::= ("" | "")*',
  'root ::= [\\x00]', 'root ::= "\\u0000"', 'root ::= "\\U0010FFFF" | "\\U00110000"', 'root ::= [' + rep('a-b', 5000) + ']', 'root ::= "' + rep('\\\\', 5000) + '"',
];
function gbnfTerm(r, depth, names) {
  const k = int(depth > 3 ? 3 : 6);
  if (k === 0) return '"' + Array.from({ length: int(4) }, () => pick(['a', 'b', ' ', '\\n', '\\"', '\\\\', '\\x41', '\\u00e9', '\\U0001F600', 'é', 'q'])).join('') + '"';
  if (k === 1) { const neg = chance(0.3) ? '^' : ''; return `[${neg}${Array.from({ length: 1 + int(3) }, () => pick(['a-z', '0-9', ' ', '\\x00-\\x7f', '\\u0100-\\uffff', 'A', '\\]', '\\n', '\\U00010000-\\U0010FFFF', '-'])).join('')}]`; }
  if (k === 2) return pick(names);
  if (k === 3) return '.';
  return '(' + gbnfExpr(r, depth + 1, names) + ')';
}
function gbnfExpr(r, depth, names) {
  const alts = [];
  for (let a = 0, na = 1 + int(3); a < na; a++) {
    const seq = [];
    for (let s = 0, ns = 1 + int(4); s < ns; s++) {
      let t = gbnfTerm(r, depth, names);
      if (chance(0.3)) t += pick(['*', '+', '?', `{${int(5)}}`, `{${int(3)},${3 + int(5)}}`, `{${int(4)},}`, '{0,1000}', '{1000}']);
      seq.push(t);
    }
    alts.push(seq.join(' '));
  }
  return alts.join(' | ');
}
function randomGrammar() {
  const n = 1 + int(6);
  const names = Array.from({ length: n }, (_, i) => i ? `r${i}` : 'root');
  return names.map((nm) => `${nm} ::= ${gbnfExpr(R, 0, names)}`).join('\n') + '\n';
}
function mutateText(s, alphabet) {
  for (let i = 0, n = 1 + int(5); i < n; i++) {
    const p = int(s.length + 1), op = int(4);
    if (op === 0) s = s.slice(0, p) + pick(alphabet) + s.slice(p);
    else if (op === 1) s = s.slice(0, p) + s.slice(p + 1 + int(4));
    else if (op === 2) { const q = p + int(20); s = s.slice(0, q) + s.slice(p, q) + s.slice(q); }
    else s = s.slice(0, p) + String.fromCharCode(int(256)) + s.slice(p + 1);
  }
  return s;
}
const GBNF_ALPHA = ['"', '[', ']', '(', ')', '|', '*', '+', '?', '{', '}', ',', '::=', '\\', '^', '-', '.', '\n', ' ', 'root', 'x', '\\x', '\\u', '\\U', '0', '9', '#', '\u00ff'];
async function classGrammars(n) {
  const cls = 'grammars';
  const restart = () => startServer(['-np', '1'], cls);
  let srv = await restart();
  const heavy = [chainGrammar(500, 4000), chainGrammar(500, 500), chainGrammar(2000, 10), nullableChain(19000, 40, 2500), nullableChain(100, 4, 100000)];
  for (let i = 0; i < n; i++) {
    let grammar;
    if (i < heavy.length) grammar = heavy[i];
    else if (i < heavy.length + GRAMMAR_SEEDS.length) grammar = GRAMMAR_SEEDS[i - heavy.length];
    else grammar = chance(0.5) ? randomGrammar() : mutateText(chance(0.5) ? pick(GRAMMAR_SEEDS) : randomGrammar(), GBNF_ALPHA);
    const body = { prompt: pick(['Once upon a time', '', 'x', '{"a":']), n_predict: pick([1, 4, 8, 16]), grammar, temperature: pick([0, 0.8, 2]), seed: i };
    if (chance(0.15)) body.ignore_eos = true;
    if (chance(0.15)) body.speculative = { type: pick(['ngram', 'suffix', 'none']), n_max: pick([2, 8]) };
    if (chance(0.15)) {
      body.grammar_lazy = true;
      body.grammar_triggers = Array.from({ length: 1 + int(3) }, () => ({ type: pick([0, 1, 2, 3, 4, -1]),
        value: pick([' the', 'a', '', '<tool_call>', '(a+)+$', '((a|b)*)*c', '.*'.repeat(100), '[', '(?=x)', '\\', 'a{1,100000}', '(' .repeat(500) + 'a' + ')'.repeat(500)]), token: pick([undefined, 1, -1, 100000]) }));
    }
    const url = chance(0.8) ? '/completion' : '/v1/completions';
    if (url === '/v1/completions') { body.max_tokens = body.n_predict; delete body.n_predict; }
    if (chance(0.2)) body.stream = true;
    rec(cls).cases++;
    const repro = { url, body };
    const r = await post(srv, url, body);
    count(cls, r.status, r.ms, repro);
    if (r.status === 'hang') { srv = await afterHang(cls, srv, repro, restart); continue; }
    if (typeof r.status === 'number' && r.status >= 500 && r.status !== 501) { rec(cls).five++; fail(cls, '5xx', `${r.status} ${r.text.slice(0, 200)}`, repro); }
    srv = await checkServer(cls, srv, repro, restart);
  }
  await finish(cls, srv);
}

// ---------------------------------------------------------------- class: JSON schemas
const PATTERNS = ['^[a-z]+$', '(a+)+$', '((a|b)*)*c', '^(a|aa)+$', '(.*){1000}', 'a{1,100000}', '[', '(?=x)a', '\\d{3}-\\d{4}', '^\\p{L}+$', '(a{1,100}){1,100}',
  '^(([a-z])+.)+[A-Z]([a-z])+$', '\\', '.*.*.*.*.*.*.*.*=.*', '(?<n>a)\\k<n>', '[^\\x00-\\x{10FFFF}]', '^$', '|||', '(((((((((a)))))))))*', 'a**', '\\u0000', '^[\\uD800]$'];
const FORMATS = ['date', 'time', 'date-time', 'uuid', 'email', 'hostname', 'ipv4', 'ipv6', 'duration', 'uri', 'regex', 'x-unknown', ''];
const NUMS = [0, 1, -1, 2, 1.5, 0.1, 1e-9, 100, 2 ** 31, 2 ** 32, 2 ** 53, 2 ** 63, 1e18, 1e308, -1e308, -(2 ** 63), '3', null, true, [], {}];
function randomSchema(d = 0) {
  const k = int(d > 4 ? 5 : 13);
  const s = {};
  switch (k) {
    case 0: s.type = 'string'; if (chance(0.5)) s.minLength = pick(NUMS); if (chance(0.5)) s.maxLength = pick(NUMS); if (chance(0.3)) s.pattern = pick(PATTERNS); if (chance(0.3)) s.format = pick(FORMATS); break;
    case 1: s.type = pick(['integer', 'number']); for (const kk of ['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'multipleOf']) if (chance(0.3)) s[kk] = pick(NUMS); break;
    case 2: s.type = pick(['boolean', 'null', ['string', 'null'], ['integer', 'string', 'boolean'], [], 'x']); break;
    case 3: s.enum = Array.from({ length: pick([0, 1, 3, 1000]) }, (_, i) => pick([i, 'v' + i, null, { a: i }, [i], 1.5])); break;
    case 4: s.const = randomValue(3); break;
    case 5: case 6: {
      s.type = 'object';
      const np = pick([0, 1, 3, 5, 50, 1000, 3000]);
      s.properties = Object.fromEntries(Array.from({ length: np }, (_, i) => ['p' + i + pick(['', '"', '\\', '\u0000', ' x', '\ud83d\ude00']), np > 10 ? { type: 'integer' } : randomSchema(d + 1)]));
      if (chance(0.6)) s.required = Object.keys(s.properties).filter(() => chance(0.5));
      if (chance(0.15)) s.required = pick(['a', 5, [5], ['missing'], null]);
      if (chance(0.3)) s.additionalProperties = chance(0.5) ? pick([true, false]) : randomSchema(d + 1);
      if (chance(0.1)) s.properties = pick([[], 'x', null]);
      if (chance(0.1)) { s.minProperties = pick(NUMS); s.maxProperties = pick(NUMS); }
      if (chance(0.1)) s.propertyNames = { pattern: pick(PATTERNS) };
      break;
    }
    case 7: case 8: {
      s.type = 'array';
      if (chance(0.8)) s.items = chance(0.1) ? pick([false, true, [], {}]) : randomSchema(d + 1);
      if (chance(0.2)) s.prefixItems = Array.from({ length: 1 + int(4) }, () => randomSchema(d + 1));
      if (chance(0.4)) s.minItems = pick(NUMS); if (chance(0.4)) s.maxItems = pick(NUMS);
      if (chance(0.1)) s.uniqueItems = true; if (chance(0.1)) s.contains = randomSchema(d + 1);
      break;
    }
    case 9: s[pick(['anyOf', 'oneOf', 'allOf'])] = Array.from({ length: pick([0, 1, 2, 3, 100]) }, () => randomSchema(d + 1)); break;
    case 10: s.$defs = { a: randomSchema(d + 1), b: { $ref: pick(['#/$defs/a', '#/$defs/b', '#', '#/$defs/c', 'http://x/y', '#/properties/0']) } }; s.$ref = pick(['#/$defs/a', '#/$defs/b', '#/$defs/missing', '#']); break;
    case 11: s.not = randomSchema(d + 1); break;
    default: s.type = 'object'; s.properties = { a: randomSchema(d + 1) }; s.$ref = '#';
  }
  return s;
}
function mutateSchema(s) {
  const o = JSON.parse(JSON.stringify(s));
  const keys = ['type', 'properties', 'items', 'required', 'minLength', 'maxLength', 'minItems', 'maxItems', 'pattern', 'enum', 'const', '$ref', 'anyOf', 'allOf', 'format', 'minimum', 'maximum', 'additionalProperties', 'prefixItems', 'multipleOf'];
  o[pick(keys)] = pick([null, -1, 1e308, 1.5, 'x', '', [], {}, true, 2 ** 32, [[]], { type: 'x' }, randomSchema(3)]);
  return o;
}
function deepSchema(depth, kind) {
  let s = { type: 'string' };
  for (let i = 0; i < depth; i++) s = kind === 'array' ? { type: 'array', items: s } : kind === 'anyOf' ? { anyOf: [s, { type: 'null' }] } : { type: 'object', properties: { a: s }, required: ['a'] };
  return s;
}
function manyProps(n, required) {
  return { type: 'object', properties: Object.fromEntries(Array.from({ length: n }, (_, i) => ['p' + i, { type: 'integer' }])), required: required ? Array.from({ length: n }, (_, i) => 'p' + i) : [] };
}
async function classSchemas(n) {
  const cls = 'schemas';
  const restart = () => startServer(['-np', '1'], cls);
  let srv = await restart();
  const seeds = [deepSchema(100, 'array'), deepSchema(64, 'object'), deepSchema(200, 'object'), deepSchema(1000, 'anyOf'), manyProps(3000, false), manyProps(6000, false),
    manyProps(3000, true), { type: 'string', minLength: 2 ** 32 }, { type: 'string', maxLength: 1e18 }, { type: 'string', minLength: 1.5 }, { type: 'object', required: 'a' },
    { type: 'object', properties: [] }, { type: 'integer', minimum: 0, maximum: 9 }, { type: 'integer', minimum: -(2 ** 63), maximum: 2 ** 63 }, { type: 'number', minimum: 0.5, exclusiveMaximum: 1e308 },
    { type: 'integer', multipleOf: 0 }, { type: 'integer', multipleOf: 1e-9 }, { type: 'string', pattern: '(a+)+$' }, { type: 'string', pattern: 'a{1,100000}' },
    { type: 'array', minItems: 1e9, items: { type: 'integer' } }, { type: 'array', maxItems: 2 ** 32, minItems: 2 ** 32 - 1 }, { $ref: '#' }, { $defs: { a: { $ref: '#/$defs/a' } }, $ref: '#/$defs/a' },
    { allOf: [manyProps(100, true), manyProps(100, false)] }, { enum: Array.from({ length: 10000 }, (_, i) => 'v' + i) }, { const: deepValue(500, 'dict') }, { type: 'string', format: 'email' },
    { anyOf: Array.from({ length: 2000 }, (_, i) => ({ const: i })) }, { type: 'object', additionalProperties: deepSchema(50, 'object') }, { prefixItems: [{ type: 'integer' }], items: false, type: 'array' }];
  for (let i = 0; i < n; i++) {
    const schema = i < seeds.length ? seeds[i] : chance(0.3) ? mutateSchema(randomSchema()) : randomSchema();
    const via = pick(['completion', 'completion', 'response_format', 'tool', 'v1-completions']);
    let url, body;
    if (via === 'completion') { url = '/completion'; body = { prompt: 'x', n_predict: pick([4, 8, 24]), json_schema: schema }; }
    else if (via === 'v1-completions') { url = '/v1/completions'; body = { prompt: 'x', max_tokens: 8, response_format: { type: 'json_schema', json_schema: { name: 'x', schema } } }; }
    else if (via === 'response_format') { url = '/v1/chat/completions'; body = { messages: [{ role: 'user', content: 'hi' }], max_tokens: 8, response_format: { type: 'json_schema', json_schema: { name: 'x', schema, strict: chance(0.5) } } }; }
    else { url = '/v1/chat/completions'; body = { messages: [{ role: 'user', content: 'hi' }], max_tokens: 16, tools: [{ type: 'function', function: { name: 'f', parameters: schema } }], tool_choice: pick(['required', 'auto', { type: 'function', function: { name: 'f' } }]) }; }
    body.temperature = pick([0, 1]);
    if (chance(0.2)) body.stream = true;
    if (chance(0.15)) body.speculative = { type: pick(['ngram', 'suffix']), n_max: 4 };
    const json = JSON.stringify(body);
    rec(cls).cases++;
    const repro = { url, body: json.length > 400000 ? json.slice(0, 400000) + '...(cut)' : body };
    const r = await post(srv, url, json);
    count(cls, r.status, r.ms, repro);
    if (r.status === 'hang') { srv = await afterHang(cls, srv, repro, restart); continue; }
    if (typeof r.status === 'number' && r.status >= 500 && r.status !== 501) { rec(cls).five++; fail(cls, '5xx', `${r.status} ${r.text.slice(0, 200)}`, repro); }
    srv = await checkServer(cls, srv, repro, restart);
  }
  await finish(cls, srv);
}

// ---------------------------------------------------------------- class: transport
function transportCase() {
  const body = JSON.stringify({ prompt: 'Once upon a time', max_tokens: 2, temperature: 0 });
  const line = (m = 'POST', p = '/v1/completions', v = 'HTTP/1.1') => `${m} ${p} ${v}\r\n`;
  const H = 'Host: localhost\r\nContent-Type: application/json\r\n';
  const k = int(14);
  switch (k) {
    case 0: return Buffer.from(Array.from({ length: int(400) }, () => int(256)));  // random bytes
    case 1: {  // a valid request, mutated
      let s = line() + H + `Content-Length: ${body.length}\r\n\r\n` + body;
      return Buffer.from(mutateText(s, ['\r', '\n', '\r\n', ':', ' ', '\u0000', '\t', 'Content-Length: 5\r\n', 'Transfer-Encoding: chunked\r\n', '\u00ff', 'HTTP/1.1', '%']), 'latin1');
    }
    case 2: return Buffer.from(pick(['NONSENSE\r\n\r\n', 'GET\r\n\r\n', 'GET / HTTP/9.9\r\n\r\n', 'GET /\r\n\r\n', 'GET / HTTP/1.1\r\n\r\n', ' / HTTP/1.1\r\nHost: x\r\n\r\n',
      'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', `GET /${'a'.repeat(100000)} HTTP/1.1\r\nHost: localhost\r\n\r\n`, 'GET http://localhost/health HTTP/1.1\r\nHost: localhost\r\n\r\n',
      'GET /%zz%00%ff/../../etc/passwd HTTP/1.1\r\nHost: localhost\r\n\r\n', `${'A'.repeat(10000)} / HTTP/1.1\r\nHost: localhost\r\n\r\n`, 'GET /health HTTP/1.0\r\n\r\n',
      'OPTIONS * HTTP/1.1\r\nHost: localhost\r\n\r\n', 'GET /health?' + 'a=b&'.repeat(20000) + ' HTTP/1.1\r\nHost: localhost\r\n\r\n', 'CONNECT localhost:80 HTTP/1.1\r\nHost: localhost\r\n\r\n']));
    case 3: {  // chunked with odd size lines
      const size = pick(['ffffffffffffffffffff', '-1', '0x10', '10 ', ' 10', '10;' + 'e'.repeat(70000), '1' + '0'.repeat(30), 'g', '', '8000000', '7fffffffffffffff', body.length.toString(16)]);
      return Buffer.from(line() + H + 'Transfer-Encoding: chunked\r\n\r\n' + `${size}\r\n${body}\r\n0\r\n` + pick(['\r\n', 'X-T: 1\r\n\r\n', 'X: ' + 'y'.repeat(100000) + '\r\n\r\n', '']));
    }
    case 4: {  // content-length oddities
      const cl = pick([['-1'], ['1e3'], ['0x20'], [String(body.length), String(body.length + 1)], ['99999999999999999999'], [''], [' ' + body.length], [String(body.length) + ', ' + body.length], ['18446744073709551616']]);
      const te = chance(0.3) ? 'Transfer-Encoding: chunked\r\n' : '';
      return Buffer.from(line() + H + te + cl.map((c) => `Content-Length: ${c}\r\n`).join('') + '\r\n' + body);
    }
    case 5: {  // header floods and oddities
      const n = pick([10, 99, 100, 101, 1000, 100000]);
      const hs = Array.from({ length: n }, (_, i) => `X-${i}: ${'v'.repeat(int(100))}\r\n`).join('');
      return Buffer.from(line('GET', '/health') + 'Host: localhost\r\n' + hs + '\r\n');
    }
    case 6: return Buffer.from(line('GET', '/health') + pick(['Host: localhost\r\nX-Big: ' + 'a'.repeat(pick([8000, 65536, 1 << 20])) + '\r\n', 'Host: localhost\r\nNoColon\r\n', 'Host: localhost\r\n folded\r\n',
      'Host: localhost\r\n: empty\r\n', 'Host: a\r\nHost: b\r\n', 'Host: ' + 'h'.repeat(70000) + '\r\n', 'Host: localhost\r\nX: \u0000\u0001\r\n', 'Host: localhost\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n']) + '\r\n', 'latin1');
    case 7: {  // compressed bodies
      const data = pick([zlib.gzipSync(body), zlib.deflateSync(body), zlib.gzipSync(body).subarray(0, 10), zlib.gzipSync(Buffer.alloc(8 << 20)), Buffer.from(Array.from({ length: 100 }, () => int(256))), Buffer.concat([zlib.gzipSync(body), zlib.gzipSync(body)])]);
      const enc = pick(['gzip', 'deflate', 'gzip, deflate', 'br', 'x-gzip', 'identity, gzip', '']);
      return Buffer.concat([Buffer.from(line() + H + `Content-Encoding: ${enc}\r\nContent-Length: ${data.length}\r\n\r\n`), data]);
    }
    case 8: {  // pipelining, some with bad lengths
      const parts = [];
      for (let i = 0, m = 1 + int(6); i < m; i++) {
        const len = chance(0.3) ? Math.max(0, body.length + int(7) - 3) : body.length;
        parts.push(chance(0.5) ? line('GET', '/health') + 'Host: localhost\r\n\r\n' : line() + H + `Content-Length: ${len}\r\n\r\n` + body);
      }
      return Buffer.from(parts.join(''));
    }
    case 9: return Buffer.from(line() + H + pick(['Expect: 100-continue\r\n', 'Expect: x\r\n', '']) + `Content-Length: ${body.length}\r\n\r\n` + body.slice(0, int(body.length)));  // cut body
    case 10: return Buffer.from(line(pick(['GET', 'PUT', 'DELETE', 'PATCH', 'HEAD', 'TRACE', 'post', 'P\u00d6ST']), pick(['/v1/completions', '/slots/0?action=save&filename=../../x', '/slots/-1?action=erase', '/slots/99999999999?action=restore', '/props', '/metrics', '/v1/models/../x', '/' + '%2e%2e/'.repeat(100)])) + H + `Content-Length: ${body.length}\r\n\r\n` + body, 'latin1');
    case 11: return Buffer.from(line() + H + `Authorization: Bearer ${'x'.repeat(int(100000))}\r\nOrigin: http://evil.example\r\nContent-Length: ${body.length}\r\n\r\n` + body);
    case 12: {  // body with invalid UTF-8 / NUL bytes
      const bad = Buffer.concat([Buffer.from('{"prompt": "'), Buffer.from(Array.from({ length: 1 + int(50) }, () => pick([0x00, 0xc0, 0xc3, 0xed, 0xa0, 0x80, 0xf4, 0x90, 0xff, 0x22, 0x5c]))), Buffer.from('", "max_tokens": 2}')]);
      return Buffer.concat([Buffer.from(line(pick(['POST']), pick(['/v1/completions', '/tokenize', '/v1/chat/completions', '/completion'])) + H + `Content-Length: ${bad.length}\r\n\r\n`), bad]);
    }
    default: {  // a streaming request that the client abandons after a few bytes
      const b = JSON.stringify({ prompt: 'Once upon a time', max_tokens: 200, stream: true });
      return [Buffer.from(line() + H + `Content-Length: ${b.length}\r\n\r\n` + b)];
    }
  }
}
async function classTransport(n) {
  const cls = 'transport';
  const args = ['-np', '2', '--max-body', '200000', '--timeout', '3'];
  const restart = () => startServer(args, cls);
  let srv = await restart();
  const cases = Array.from({ length: n }, () => transportCase());
  const BATCH = 10;  // each exchange may wait for the server's body timeout (3 s): 10 at a time
  for (let i = 0; i < n; i += BATCH) {
    const batch = cases.slice(i, i + BATCH);
    const repros = batch.map((data) => {
      const buf = Buffer.isBuffer(data) ? data : Buffer.concat(data);
      return { raw_base64: (buf.length > 300000 ? buf.subarray(0, 300000) : buf).toString('base64'), raw_length: buf.length, server: args };
    });
    const rs = await Promise.all(batch.map((data) => raw(srv.port, data)));
    let hung = false;
    rs.forEach((r, k) => {
      rec(cls).cases++;
      count(cls, r.status, r.ms, repros[k]);
      if (r.status === 'hang') hung = true;
      if (Array.isArray(r.status) && r.status.some((s) => s >= 500 && s !== 501)) { rec(cls).five++; fail(cls, '5xx', r.text, repros[k]); }
    });
    const repro = { batch: repros, note: 'one of these exchanges, sent at once' };
    if (hung) { srv = await afterHang(cls, srv, repro, restart); continue; }
    srv = await checkServer(cls, srv, repro, restart);
  }
  await finish(cls, srv);
}

// ---------------------------------------------------------------- class: request JSON
const ENDPOINTS = ['/v1/completions', '/v1/chat/completions', '/completion', '/completions', '/tokenize', '/detokenize', '/infill', '/v1/responses', '/v1/messages',
  '/v1/messages/count_tokens', '/apply-template', '/props', '/v1/embeddings', '/slots/0?action=erase', '/chat/completions'];
const VALID = [
  { prompt: 'Once upon a time', max_tokens: 4, temperature: 0 }, { messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, stream: true },
  { prompt: [1, 2, 3], max_tokens: 2, logprobs: 2, stop: ['a', 'b'], logit_bias: { 5: -100 } }, { prompt: 'x', n_predict: 4, n_probs: 3, samplers: ['top_k', 'temperature'], mirostat: 2 },
  { input_prefix: 'def f(', input_suffix: ')', prompt: '', n_predict: 4 }, { input: 'hi', max_output_tokens: 4 }, { model: 'x', max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }] },
  { content: 'hello', add_special: true, with_pieces: true }, { tokens: [1, 2, 3, 100000, -1] },
];
function mutateBody(o, d = 0) {
  const values = [null, -1, 1e308, -1e308, 0, 1.5, 'x', '', [], {}, true, 2 ** 53, 2 ** 64, '\u0000', '\ud800', [[[]]], { a: { b: {} } }, 'x'.repeat(100000), Array(10000).fill(1), -0, 1e-320];
  const keys = Object.keys(o).concat(['n', 'n_predict', 'max_tokens', 'top_k', 'top_p', 'min_p', 'seed', 'speculative', 'samplers', 'stream_options', 'messages', 'prompt', 'stop', 'logit_bias',
    'n_probs', 'logprobs', 'top_logprobs', 'repeat_last_n', 'n_keep', 'id_slot', 'cache_prompt', 'response_fields', 'dry_multiplier', 'dry_sequence_breakers', 'xtc_probability', 'typical_p',
    'mirostat', 'tokens', 'content', 'input', 'reasoning_format', 'return_tokens', 't_max_predict_ms', 'n_cmpl', 'lora', 'post_sampling_probs', 'timings_per_token', 'n_indent']);
  for (let i = 0, m = 1 + int(3); i < m; i++) {
    const k = pick(keys);
    o[k] = chance(0.8) ? pick(values) : randomValue();
  }
  if (chance(0.2)) o.speculative = { n_max: int(300) - 10, n_min: int(50) - 5, p_min: pick([-1, 0, 0.5, 2, 'x']), type: pick(['draft', 'ngram', 'self', 'none', 'suffix', 'x', ['ngram', 'suffix'], []]), tree: pick([true, false, 'auto', 'x']) };
  return o;
}
async function classJson(n) {
  const cls = 'json';
  const restart = () => startServer(['-np', '2', '--spec-type', 'ngram', '--slot-save-path', OUT], cls);
  let srv = await restart();
  for (let i = 0; i < n; i++) {
    const url = pick(ENDPOINTS);
    let body;
    const k = int(4);
    if (k === 0) body = Buffer.from(Array.from({ length: int(200) }, () => int(256)));
    else if (k === 1) { const s = JSON.stringify(pick(VALID)); const p = int(s.length); body = s.slice(0, p) + String.fromCharCode(int(128)) + s.slice(p + 1); }
    else if (k === 2 && chance(0.2)) body = pick(['['.repeat(100000) + ']'.repeat(100000), '{"a":'.repeat(50000) + '1' + '}'.repeat(50000), '"' + '\\u0000'.repeat(100000) + '"', '1e99999', '-', '{"prompt":"\\ud800\\udc00\\udfff"}']);
    else { try { body = JSON.stringify(mutateBody(JSON.parse(JSON.stringify(pick(VALID))))); } catch { body = '{"prompt": 1}'; } }
    rec(cls).cases++;
    const repro = { url, body: Buffer.isBuffer(body) ? { base64: body.toString('base64') } : body.length > 300000 ? body.slice(0, 300000) + '...(cut)' : body };
    const r = await post(srv, url, body);
    count(cls, r.status, r.ms, repro);
    if (r.status === 'hang') { srv = await afterHang(cls, srv, repro, restart); continue; }
    if (typeof r.status === 'number' && r.status >= 500 && r.status !== 501) { rec(cls).five++; fail(cls, '5xx', `${r.status} ${r.text.slice(0, 200)}`, repro); }
    srv = await checkServer(cls, srv, repro, restart);
  }
  await finish(cls, srv);
}

// ---------------------------------------------------------------- main
const RUN = { t: classTemplates, g: classGrammars, s: classSchemas, x: classTransport, j: classJson };
const names = { t: 'templates', g: 'grammars', s: 'schemas', x: 'transport', j: 'json' };
const t0 = Date.now();
for (const c of CLASSES) {
  const tc = Date.now();
  await RUN[c](c === 't' ? N_TEMPLATES : N);
  const r = rec(names[c]);
  r.seconds = Math.round((Date.now() - tc) / 1000);
  console.log(`${names[c]}: ${r.cases} cases in ${r.seconds} s, statuses ${JSON.stringify(r.statuses)}, crashes ${r.crashes}, sanitizer ${r.sanitizer}, hangs ${r.hangs}, slow ${r.slow}, 5xx ${r.five}, slowest ${r.maxMs} ms`);
}
console.log('| class | cases | statuses | crashes | sanitizer reports | hangs (none in ' + DEAD_MS / 1000 + ' s) | slow (> ' + HANG_MS / 1000 + ' s) | 5xx | slowest answer |');
console.log('|---|---|---|---|---|---|---|---|---|');
for (const [cls, r] of Object.entries(results))
  console.log(`| ${cls} | ${r.cases} | ${Object.entries(r.statuses).map(([k, v]) => `${k}: ${v}`).join(', ')} | ${r.crashes} | ${r.sanitizer} | ${r.hangs} | ${r.slow} | ${r.five} | ${(r.maxMs / 1000).toFixed(1)} s |`);
fs.writeFileSync(path.join(OUT, 'summary.json'), JSON.stringify(results, null, 1));
console.log(`total ${Math.round((Date.now() - t0) / 1000)} s; failures written to ${OUT}`);
const anyFail = Object.values(results).some((r) => r.failures.length);
process.exit(anyFail ? 1 : 0);
