// Robustness of the HTTP + JSON surface: random and mutated bodies, odd types and numbers, invalid UTF-8, deep
// nesting, huge headers, slow and vanishing clients. The server must answer 4xx (never 5xx), stay up, and
// (under ASan/UBSan in CI) report nothing.
import test from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startServer, STORIES, sanitizerReport } from './helpers.mjs';

function rng(seed) {
  let s = seed >>> 0;
  return () => { s ^= s << 13; s >>>= 0; s ^= s >> 17; s ^= s << 5; s >>>= 0; return s / 4294967296; };
}

const VALID = [
  { prompt: 'Once upon a time', max_tokens: 4, temperature: 0 },
  { messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, stream: true },
  { prompt: [1, 2, 3], max_tokens: 2, logprobs: 2, stop: ['a', 'b'], logit_bias: { '5': -100 } },
];

function mutate(obj, r) {
  const s = JSON.stringify(obj);
  const values = [null, -1, 1e308, -1e308, 0, 1.5, 'x', '', [], {}, true, 2 ** 53, '\u0000', '\ud800', [[[]]], { a: { b: {} } }];
  const o = JSON.parse(s);
  const keys = Object.keys(o).concat(['n', 'top_k', 'top_p', 'seed', 'speculative', 'samplers', 'stream_options', 'min_p', 'messages', 'prompt']);
  const k = keys[Math.floor(r() * keys.length)];
  o[k] = values[Math.floor(r() * values.length)];
  if (r() < 0.3) o.speculative = { n_max: Math.floor(r() * 300) - 10, type: ['draft', 'ngram', 'self', 'none', 'x'][Math.floor(r() * 5)] };
  return JSON.stringify(o);
}

function rawRequest(port, data, { slowMs = 0, hangUp = false } = {}) {
  return new Promise((resolve) => {
    const sock = net.connect(port, '127.0.0.1');
    let out = '';
    sock.on('data', (d) => { out += d.toString('latin1'); });
    sock.on('error', () => resolve(out));
    sock.on('close', () => resolve(out));
    sock.on('connect', async () => {
      if (slowMs) {
        for (const ch of data) { sock.write(ch); await new Promise((r) => setTimeout(r, slowMs)); if (sock.destroyed) return; }
      } else sock.write(data);
      if (hangUp) sock.destroy();
      else setTimeout(() => sock.end(), 2000);
    });
  });
}

test('fuzz: bodies, headers and clients', async () => {
  const srv = await startServer(['-m', STORIES, '--spec-type', 'ngram', '-np', '2']);
  let five = 0;
  try {
    const r = rng(12345);
    const endpoints = ['/v1/completions', '/v1/chat/completions', '/tokenize', '/detokenize'];
    for (let i = 0; i < 300; i++) {
      let body;
      const kind = i % 4;
      if (kind === 0) body = Buffer.from(Array.from({ length: Math.floor(r() * 200) }, () => Math.floor(r() * 256)));
      else if (kind === 1) body = mutate(VALID[i % VALID.length], r);
      else if (kind === 2) { const s = JSON.stringify(VALID[i % VALID.length]); const p = Math.floor(r() * s.length); body = s.slice(0, p) + String.fromCharCode(Math.floor(r() * 128)) + s.slice(p + 1); }
      else body = Buffer.concat([Buffer.from('{"prompt": "'), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('", "max_tokens": 2}')]);
      const res = await fetch(srv.base + endpoints[i % endpoints.length], { method: 'POST', body, headers: { 'Content-Type': 'application/json' } });
      await res.arrayBuffer();
      if (res.status >= 500) { five++; console.log('5xx for', String(body).slice(0, 200)); }
    }
    // Deep nesting and a body over the size limit.
    for (const body of ['['.repeat(100000) + ']'.repeat(100000), '{"prompt":"' + 'a'.repeat(2 << 20) + '"}']) {
      const res = await fetch(srv.base + '/v1/completions', { method: 'POST', body });
      await res.arrayBuffer();
      assert.ok(res.status === 400 || res.status === 413, `status ${res.status}`);
    }
    // Huge header, garbage request line, slow client, client that vanishes mid-request.
    const huge = await rawRequest(srv.port, `GET /health HTTP/1.1\r\nHost: localhost\r\nX-Big: ${'a'.repeat(100000)}\r\n\r\n`);
    assert.ok(!/^HTTP\/1\.1 5/.test(huge), huge.slice(0, 100));
    await rawRequest(srv.port, 'NONSENSE\r\n\r\n');
    await rawRequest(srv.port, 'POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n{"prom', { hangUp: true });
    const slow = rawRequest(srv.port, 'GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n', { slowMs: 20 });
    const stream = rawRequest(srv.port, 'POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 58\r\n\r\n{"prompt":"Once upon a time","max_tokens":500,"stream":true}', { hangUp: true });
    await Promise.all([slow, stream]);
    assert.equal(five, 0);
    const h = await fetch(srv.base + '/health');
    assert.equal(h.status, 200);
  } finally {
    const code = await srv.stop();
    assert.ok(!sanitizerReport(srv.stderr), srv.stderr.slice(-4000));
    assert.ok(code === 0 || code === 'SIGTERM', `server exit: ${code}`);
  }
});

// The tool and structured-output surfaces at random: chat tools and tool_choice, lazy grammars, Responses input
// items and tools, Anthropic thinking and tool blocks, each valid body mutated. Every answer is below 500.
test('fuzz: tools, lazy grammars, Responses items, Anthropic blocks', async () => {
  const fs = await import('node:fs');
  const os = await import('node:os');
  const path = await import('node:path');
  const tfile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'tandem-fuzz-')), 'hermes.jinja');
  fs.writeFileSync(tfile, '{% if tools %}Tools: {{ tools | tojson }}\nCall with <tool_call>{"name": ..., "arguments": ...}</tool_call>\n{% endif %}' +
    '{% for m in messages %}{{ m.role }}: {{ m.content }}{% for c in m.tool_calls or [] %}<tool_call>{{ c.function | tojson }}</tool_call>{% endfor %}\n{% endfor %}assistant:');
  const srv = await startServer(['-m', STORIES, '--chat-template-file', tfile, '--spec-type', 'ngram', '-np', '2']);
  const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] } } }];
  const bodies = [
    ['/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], tools, tool_choice: 'auto', max_tokens: 8 }],
    ['/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], tools, tool_choice: 'required', max_tokens: 30, stream: true }],
    ['/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{"a": 1}' } }] },
      { role: 'tool', tool_call_id: 'c', content: '2' }], tools, max_tokens: 4 }],
    ['/completion', { prompt: 'Once upon a time', n_predict: 16, grammar: 'root ::= " the" [a-z ]*', grammar_lazy: true, grammar_triggers: [{ type: 1, value: ' the' }] }],
    ['/v1/responses', { input: [{ role: 'user', content: 'x' }, { type: 'function_call', call_id: 'c', name: 'f', arguments: '{}' },
      { type: 'function_call_output', call_id: 'c', output: 'ok' }], tools: [{ type: 'function', name: 'f', parameters: {} }], max_output_tokens: 8, stream: true }],
    ['/v1/messages', { max_tokens: 8, thinking: { type: 'enabled', budget_tokens: 10 }, tools: [{ name: 'f', input_schema: { type: 'object' } }],
      messages: [{ role: 'user', content: 'x' }, { role: 'assistant', content: [{ type: 'thinking', thinking: 'hm' }, { type: 'tool_use', id: 't', name: 'f', input: {} }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't', content: 'r' }] }], stream: true }],
  ];
  const values = [null, -1, 0, 'x', '', [], {}, true, [[[]]], { type: 2, value: 'a' }, [{ type: 1 }], [{ type: 'function' }], '\ud800'];
  let five = 0, ok = 0;
  try {
    const r = rng(4242);
    for (let i = 0; i < 240; i++) {
      const [url, valid] = bodies[i % bodies.length];
      const o = JSON.parse(JSON.stringify(valid));
      const keys = Object.keys(o).concat(['tools', 'tool_choice', 'grammar_triggers', 'parallel_tool_calls', 'thinking', 'input', 'text']);
      if (r() < 0.6) o[keys[Math.floor(r() * keys.length)]] = values[Math.floor(r() * values.length)];
      // sometimes mutate one element deeper (a message, a tool, an item)
      for (const k of ['messages', 'input', 'tools']) {
        if (Array.isArray(o[k]) && o[k].length && r() < 0.5) {
          const e = o[k][Math.floor(r() * o[k].length)];
          if (e && typeof e === 'object') { const ek = Object.keys(e); if (ek.length) e[ek[Math.floor(r() * ek.length)]] = values[Math.floor(r() * values.length)]; }
        }
      }
      const res = await fetch(srv.base + url, { method: 'POST', body: JSON.stringify(o), headers: { 'Content-Type': 'application/json' } });
      await res.arrayBuffer();
      if (res.status >= 500) { five++; console.log('5xx for', url, JSON.stringify(o).slice(0, 300)); }
      if (res.status === 200) ok++;
    }
    assert.equal(five, 0);
    assert.ok(ok > 40, `only ${ok} mutated requests were valid: the fuzz does not reach generation`);
    assert.equal((await fetch(srv.base + '/health')).status, 200);
  } finally {
    const code = await srv.stop();
    assert.ok(!sanitizerReport(srv.stderr), srv.stderr.slice(-4000));
    assert.ok(code === 0 || code === 'SIGTERM', `server exit: ${code}`);
  }
});

// The transport classes of issue 12 at random: chunked bodies (random chunk sizes, some with bad sizes or cut
// short), gzip/deflate bodies (valid, truncated, bombs), unknown encodings, header counts around the limit,
// pipelined requests with wrong lengths. Every answer must be below 500; the server must stay up.
test('fuzz: transport (chunked, gzip, header counts, pipelining)', async () => {
  const srv = await startServer(['-m', STORIES, '-np', '2', '--max-body', '200000']);
  const { rawExchange, parseResponses } = await import('./helpers.mjs');
  const zlib = await import('node:zlib');
  let five = 0, answered = 0;
  try {
    const r = rng(777);
    const pick = (a) => a[Math.floor(r() * a.length)];
    const head = (extra) => 'POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n' + extra + '\r\n';
    // The exchanges are drawn first (one seeded sequence), then sent 12 at a time: each one waits up to 1.5 s for
    // the server to give up on a cut body, which one at a time would make this test a minute of waiting.
    const exchanges = [];
    for (let i = 0; i < 120; i++) {
      const json = Buffer.from(mutate(VALID[i % VALID.length], r));
      let data;
      switch (i % 5) {
        case 0: {  // chunked, random chunk sizes; sometimes a bad size line or no terminator
          const parts = [head('Transfer-Encoding: chunked\r\n')];
          let off = 0;
          while (off < json.length) {
            const n = 1 + Math.floor(r() * 40);
            const piece = json.subarray(off, off + n);
            parts.push((r() < 0.05 ? 'zz' : piece.length.toString(16)) + '\r\n', piece, '\r\n');
            off += n;
          }
          if (r() < 0.8) parts.push('0\r\n\r\n');
          data = Buffer.concat(parts.map((p) => Buffer.from(p)));
          break;
        }
        case 1: {  // gzip / deflate: valid, truncated, or a bomb
          const kind = pick(['gzip', 'deflate', 'gzip']);
          let body = kind === 'gzip' ? zlib.gzipSync(json) : zlib.deflateSync(json);
          if (r() < 0.3) body = body.subarray(0, Math.floor(r() * body.length));
          if (r() < 0.15) body = zlib.gzipSync(Buffer.alloc((1 + Math.floor(r() * 8)) << 20));
          data = Buffer.concat([Buffer.from(head(`Content-Encoding: ${kind}\r\nContent-Length: ${body.length}\r\n`)), body]);
          break;
        }
        case 2: {  // odd encodings
          const enc = pick(['br', 'compress', 'identity', 'gzip, gzip', 'GZIP', '']);
          data = Buffer.concat([Buffer.from(head(`Content-Encoding: ${enc}\r\nContent-Length: ${json.length}\r\n`)), json]);
          break;
        }
        case 3: {  // header counts around the limit
          const n = 90 + Math.floor(r() * 30);
          const hs = Array.from({ length: n }, (_, k) => `X-${k}: ${'v'.repeat(Math.floor(r() * 50))}\r\n`).join('');
          data = Buffer.from(`GET /health HTTP/1.1\r\nHost: localhost\r\n${hs}\r\n`);
          break;
        }
        default: {  // two pipelined requests, the first with a Content-Length off by a little
          const len = Math.max(0, json.length + Math.floor(r() * 5) - 2);
          data = Buffer.concat([Buffer.from(head(`Content-Length: ${len}\r\n`)), json,
            Buffer.from('GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n')]);
        }
      }
      exchanges.push(data);
    }
    for (let i = 0; i < exchanges.length; i += 12) {
      const batch = await Promise.all(exchanges.slice(i, i + 12).map((data) => rawExchange(srv.port, data, { timeoutMs: 3000, endAfterMs: 1500 })));
      for (const ex of batch) {
        for (const res of parseResponses(ex.text)) {
          answered++;
          if (res.status >= 500) { five++; console.log('5xx', res.status, res.body.slice(0, 200)); }
        }
      }
    }
    assert.equal(five, 0);
    assert.ok(answered > 60, `only ${answered} answers`);
    assert.equal((await fetch(srv.base + '/health')).status, 200);
  } finally {
    const code = await srv.stop();
    assert.ok(!sanitizerReport(srv.stderr), srv.stderr.slice(-4000));
    assert.equal(code, 0, `server exit: ${code}`);
  }
});
