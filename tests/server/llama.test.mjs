// llama-server compatibility (issue 11): its command line, its native endpoints and request fields, and the
// OpenAI SDK on the new request shapes.
import test from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { execFileSync } from 'node:child_process';
import Ajv from 'ajv';
import { startServer, STORIES, BIN, sharedFile, tmpDir, generateJson, sanitizerReport } from './helpers.mjs';

const post = async (base, p, body) => {
  const r = await fetch(base + p, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* SSE or empty */ }
  return { status: r.status, json, text };
};

async function done(srv) {
  const code = await srv.stop();
  assert.ok(!sanitizerReport(srv.stderr), srv.stderr.slice(-4000));
  assert.equal(code, 0, srv.stderr.slice(-2000));
}

test('a llama-server command line starts unchanged; sampling flags become the defaults; -c is shared by the slots', async () => {
  // the flags llama.cpp's own server tests pass on every launch, and a few more users type
  const srv = await startServer(['-m', STORIES, '--temp', '0', '--seed', '42', '--n-predict', '8', '--batch-size', '32',
    '--ubatch-size', '32', '--no-slots', '--offline', '--jinja', '-ngl', '99', '-fa', '--cont-batching', '--metrics',
    '--no-webui', '--verbose', '--ctx-size', '256', '-ctk', 'f16', '--no-mmap', '--reasoning-format', 'none']);
  try {
    // -ngl 99: the model on the GPU where there is one (lavapipe counts), else a warning and the CPU
    assert.match(srv.stderr, /target: GPU .* layers and the output|warning: target: no usable GPU/);
    // -n 8 is the default (not a cap, as in llama-server); --temp 0 makes it greedy: the same text as
    // `generate --temp 0 -n 8`
    const ref = generateJson(['-m', STORIES, '-p', 'Once upon a time', '-n', '8', '--temp', '0']);
    const r = await post(srv.base, '/completion', { prompt: 'Once upon a time' });
    assert.equal(r.status, 200);
    assert.equal(r.json.content, ref.text);
    assert.equal(r.json.tokens_predicted, 8);
    const longer = await post(srv.base, '/completion', { prompt: 'Once upon a time', n_predict: 20, ignore_eos: true });
    assert.equal(longer.json.tokens_predicted, 20, "a request's own n_predict wins over the server's -n");
    assert.equal((await fetch(srv.base + '/slots')).status, 501, '--no-slots');
    assert.equal((await fetch(srv.base + '/')).status, 404, '--no-webui');
    const m = await (await fetch(srv.base + '/metrics')).text();
    assert.match(m, /^llamacpp:tokens_predicted_total \d+/m, "llama-server's metric names");
    const props = await (await fetch(srv.base + '/props')).json();
    assert.equal(props.default_generation_settings.n_ctx, 256);
  } finally { await done(srv); }
});

test('flags that would mislead are refused with the reason', async () => {
  const { execFileSync } = await import('node:child_process');
  const { BIN } = await import('./helpers.mjs');
  for (const [args, needle] of [
    [['--lora', 'x.gguf'], /LoRA adapters and control vectors are not supported/],
    [['--json-schema', '{"type": "array", "uniqueItems": true}'], /'uniqueItems' is not supported/],
    [['--grammar', 'root ::= undefined_rule'], /rule 'undefined_rule' is not defined/],
    [['--rope-freq-base', '10000'], /RoPE overrides are not supported/],
    [['--model-url', 'https://example.com/m.gguf'], /does not download models/],
    [['--hf-repo', 'nobody/nothing', '--hf-file', 'x.gguf'], /does not download models.*not in the Hugging Face cache/],
    [['--chat-template', '{% if x %}never closed'], /chat template cannot be run: line 1: 'if' is not closed/],
    [['--no-jinja', '--chat-template', '{{ messages }}'], /not one tandem's built-in renderers recognise/],
  ]) {
    let out = '';
    try {
      execFileSync(BIN, ['serve', '-m', STORIES, '--port', '0', ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LLAMA_CACHE: tmpDir() }, timeout: 20000 });
    } catch (e) { out = String(e.stderr); assert.equal(e.status, 1, out); }
    assert.match(out, needle, args.join(' '));
  }
});

test('-hf finds a model llama.cpp already downloaded (Hugging Face cache layout)', async () => {
  const cache = path.join(tmpDir(), 'hf-cache');
  const snap = path.join(cache, 'models--ggml-org--models', 'snapshots', 'abc123', 'tinyllamas');
  fs.mkdirSync(snap, { recursive: true });
  const file = path.join(snap, 'stories260K.gguf');
  if (!fs.existsSync(file)) fs.symlinkSync(STORIES, file);
  fs.mkdirSync(path.join(cache, 'models--ggml-org--models', 'refs'), { recursive: true });
  fs.writeFileSync(path.join(cache, 'models--ggml-org--models', 'refs', 'main'), 'abc123\n');
  const srv = await startServer(['--hf-repo', 'ggml-org/models', '--hf-file', 'tinyllamas/stories260K.gguf'], { env: { LLAMA_CACHE: cache } });
  try {
    assert.match(srv.stderr, /using the cached file .*stories260K\.gguf/);
    assert.equal((await post(srv.base, '/completion', { prompt: 'Once', n_predict: 2 })).status, 200);
  } finally { await done(srv); }
});

test('native /completion: shape, streaming, probabilities, tokens, stop words', async () => {
  const srv = await startServer(['-m', STORIES, '-np', '2']);
  try {
    const body = { prompt: 'Once upon a time', n_predict: 12, temperature: 0, return_tokens: true, n_probs: 2 };
    const r = await post(srv.base, '/completion', body);
    assert.equal(r.status, 200);
    const j = r.json;
    for (const k of ['content', 'tokens', 'id_slot', 'stop', 'model', 'tokens_predicted', 'tokens_evaluated', 'generation_settings',
      'prompt', 'has_new_line', 'truncated', 'stop_type', 'stopping_word', 'tokens_cached', 'timings', 'completion_probabilities'])
      assert.ok(k in j, `missing ${k}`);
    assert.equal(j.stop, true);
    assert.equal(j.stop_type, 'limit');
    assert.equal(j.tokens.length, 12);
    assert.equal(j.completion_probabilities.length, 12);
    assert.equal(j.completion_probabilities[0].top_logprobs.length, 2);
    assert.equal(j.completion_probabilities[0].id, j.tokens[0]);
    assert.equal(j.generation_settings.temperature, 0);
    // /completions (no /v1) is the same native endpoint, as in llama-server
    const alias = await post(srv.base, '/completions', body);
    assert.equal(alias.json.content, j.content);
    // streaming: partial chunks with content, then a final object with stop: true; no [DONE]
    const s = await post(srv.base, '/completion', { ...body, stream: true, timings_per_token: true });
    const events = s.text.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));
    assert.ok(!events.includes('[DONE]'));
    const chunks = events.map((e) => JSON.parse(e));
    assert.equal(chunks.at(-1).stop, true);
    assert.equal(chunks.slice(0, -1).map((c) => c.content).join(''), j.content);
    // with n_probs, one chunk per token, each with that token's probabilities (llama-server's shape)
    assert.equal(chunks.length - 1, 12);
    assert.ok(chunks.slice(0, -1).every((c) => c.stop === false && 'timings' in c && c.completion_probabilities.length === 1));
    assert.deepEqual(chunks.slice(0, -1).map((c) => c.completion_probabilities[0].id), j.tokens);
    // without it, chunks carry text only when there is text
    const s2 = await post(srv.base, '/completion', { ...body, n_probs: 0, stream: true });
    const c2 = s2.text.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => JSON.parse(e.slice(6)));
    assert.equal(c2.slice(0, -1).map((c) => c.content).join(''), j.content);
    assert.ok(c2.slice(0, -1).every((c) => c.content.length > 0));
    // a stop word: the generation ends at the token that completes it, and counts only the tokens up to it
    const stopWord = j.content.split(' ')[3];
    const w = await post(srv.base, '/completion', { prompt: 'Once upon a time', n_predict: 30, temperature: 0, stop: [stopWord], return_tokens: true });
    assert.equal(w.json.stop_type, 'word');
    assert.equal(w.json.stopping_word, stopWord);
    assert.equal(w.json.content, j.content.slice(0, j.content.indexOf(stopWord)));
    assert.equal(w.json.tokens_predicted, w.json.tokens.length);
    assert.deepEqual(w.json.tokens, j.tokens.slice(0, w.json.tokens.length));
    assert.ok(w.json.tokens.length < 12);
    // llama-server's logit_bias forms: [[id, bias]] and text keys
    const banned = j.tokens[0];
    const b1 = await post(srv.base, '/completion', { prompt: 'Once upon a time', n_predict: 1, temperature: 0, logit_bias: [[banned, false]] });
    assert.notEqual(b1.json.content, j.content.slice(0, b1.json.content.length) || null);
    const word = j.content.split(' ')[1];
    const b2 = await post(srv.base, '/completion', { prompt: 'Once upon a time', n_predict: 12, temperature: 0, logit_bias: [[' ' + word, -100]] });
    assert.equal(b2.status, 200);
    assert.ok(!b2.json.content.includes(' ' + word + ' '), b2.json.content);
    // response_fields picks nested values
    const rf = await post(srv.base, '/completion', { prompt: 'Once', n_predict: 2, response_fields: ['content', 'generation_settings/n_predict'] });
    assert.deepEqual(Object.keys(rf.json).sort(), ['content', 'generation_settings/n_predict']);
    assert.equal(rf.json['generation_settings/n_predict'], 2);
    // several prompts: an array of results
    const many = await post(srv.base, '/completion', { prompt: ['Once upon a time', 'The little dog'], n_predict: 4, temperature: 0 });
    assert.ok(Array.isArray(many.json) && many.json.length === 2);
    assert.equal(many.json[0].content, j.content.slice(0, many.json[0].content.length));
  } finally { await done(srv); }
});

test('/props, /slots, /apply-template, /metrics without --metrics', async () => {
  const srv = await startServer(['-m', STORIES, '-np', '2', '--temp', '0.5']);
  try {
    const props = await (await fetch(srv.base + '/props')).json();
    assert.equal(props.total_slots, 2);
    assert.equal(props.default_generation_settings.params.temperature, 0.5);
    const meta = (await (await fetch(srv.base + '/v1/models')).json()).data[0].meta;
    assert.equal(props.default_generation_settings.n_ctx, Math.min(meta.n_ctx_train, 4096) / 2, "the model's context shared by 2 slots");
    assert.ok('chat_template' in props && 'build_info' in props);
    assert.equal((await post(srv.base, '/props', { n_ctx: 1 })).status, 501, 'POST /props needs --props');
    const slots = await (await fetch(srv.base + '/slots')).json();
    assert.equal(slots.length, 2);
    assert.equal(slots[0].is_processing, false);
    const t = await post(srv.base, '/apply-template', { messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }] });
    assert.equal(t.status, 200);
    assert.match(t.json.prompt, /Be brief\.[\s\S]*Hi/);
    assert.equal((await fetch(srv.base + '/metrics')).status, 501);
  } finally { await done(srv); }
});

test('OpenAI SDK: several prompts, refused fields, context errors, first streamed chunk', async () => {
  const srv = await startServer(['-m', STORIES, '-c', '64']);
  const client = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'none' });
  try {
    const r = await client.completions.create({ model: 'x', prompt: ['Once upon a time', 'The little dog'], max_tokens: 4, temperature: 0, n: 2 });
    assert.equal(r.choices.length, 4);
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2, 3]);
    assert.equal(r.choices[0].text, r.choices[1].text, 'temperature 0: both choices of a prompt agree');
    assert.ok(r.usage.prompt_tokens > 0 && 'prompt_tokens_details' in r.usage);
    for (const extra of [{ functions: [{ name: 'f', parameters: {} }] }]) {
      await assert.rejects(client.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2, ...extra }),
        (e) => e.status === 400 && /not supported by this server yet/.test(e.message));
    }
    await assert.rejects(client.completions.create({ model: 'x', prompt: 'a '.repeat(200), max_tokens: 2 }),
      (e) => e.status === 400 && e.error?.type === 'exceed_context_size_error' && /exceeds the available context size/.test(e.message));
    // multi-part content is joined with "\n", as llama-server
    const t = await post(srv.base, '/apply-template', { messages: [{ role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] }] });
    assert.match(t.json.prompt, /a\nb/);
    // streaming: the role chunk has content null; no chunk has empty text; logprobs come with the first text
    const stream = await client.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }], max_tokens: 6, temperature: 0, logprobs: true, stream: true, stream_options: { include_usage: true } });
    const chunks = [];
    for await (const c of stream) chunks.push(c);
    assert.equal(chunks[0].choices[0].delta.content, null);
    const texts = chunks.slice(1).filter((c) => c.choices[0]?.delta?.content !== undefined);
    assert.ok(texts.every((c) => c.choices[0].delta.content.length > 0));
    assert.ok(texts[0].choices[0].logprobs.content.length > 0);
    assert.ok(chunks.at(-1).usage && chunks.at(-1).timings);
    // llama-server's flat speculative keys are accepted
    const flat = await post(srv.base, '/v1/completions', { prompt: 'Once', max_tokens: 2, 'speculative.n_max': 4 });
    assert.equal(flat.status, 200);
  } finally { await done(srv); }
});

test('--context-shift: generation goes on past a full context; without it, it stops there', async () => {
  for (const shift of [false, true]) {
    const srv = await startServer(['-m', STORIES, '-c', '64', ...(shift ? ['--context-shift', '--keep', '1'] : [])]);
    try {
      const r = await post(srv.base, '/completion', { prompt: 'Once upon a time', n_predict: 150, ignore_eos: true, temperature: 0 });
      assert.equal(r.status, 200);
      if (shift) assert.equal(r.json.tokens_predicted, 150);
      else assert.ok(r.json.tokens_predicted < 64 && r.json.stop_type === 'limit', JSON.stringify(r.json.tokens_predicted));
    } finally { await done(srv); }
  }
});

test('return_progress: prompt_progress chunks while a long prompt is processed (native and OpenAI streams), then the same text', async () => {
  const srv = await startServer(['-m', STORIES, '--temp', '0', '-c', '1024', '--no-webui']);
  const events = (r) => r.text.split('\n\n').filter((e) => e.startsWith('data: ') && e !== 'data: [DONE]').map((e) => JSON.parse(e.slice(6)));
  try {
    const base = 'there was a little girl who lived by the sea. '.repeat(20);
    let k = 0;
    for (const [route, mk, textOf] of [
      ['/completion', (prompt) => ({ prompt, n_predict: 6, stream: true }), (c) => c.content || ''],
      ['/v1/chat/completions', (prompt) => ({ messages: [{ role: 'user', content: prompt }], max_tokens: 6, stream: true }),
        (c) => c.choices?.[0]?.delta?.content || ''],
    ]) {
      const prompt = `Story ${k++}: once upon a time ${base}`;  // a prompt of its own: nothing cached
      const withp = events(await post(srv.base, route, { ...mk(prompt), return_progress: true }));
      const prog = withp.filter((c) => c.prompt_progress).map((c) => c.prompt_progress);
      assert.ok(prog.length >= 2, `${route}: a long prompt is processed in several pieces (${prog.length} events)`);
      for (let i = 1; i < prog.length; i++) assert.ok(prog[i].processed > prog[i - 1].processed, JSON.stringify(prog));
      assert.equal(prog.at(-1).processed, prog.at(-1).total, 'the last event: the whole prompt');
      assert.ok(prog.every((p) => p.total > 200 && p.cache >= 0 && p.time_ms >= 0));
      const plain = events(await post(srv.base, route, mk(prompt)));  // (its prompt cached now: the same answer)
      assert.ok(plain.every((c) => !('prompt_progress' in c)), 'none unless asked');
      assert.equal(withp.map(textOf).join(''), plain.map(textOf).join(''), 'the same answer');
    }
  } finally { await done(srv); }
});

test('--embeddings: the OpenAI SDK (base64 and float), llama-server /embedding, pooling none, errors', async () => {
  const plain = await startServer(['-m', STORIES]);
  try {
    const r = await post(plain.base, '/v1/embeddings', { input: 'hello' });
    assert.equal(r.status, 501, 'embeddings need --embeddings');
    assert.match(r.json.error.message, /--embeddings/);
  } finally { await done(plain); }
  const srv = await startServer(['-m', STORIES, '--embeddings', '--pooling', 'mean', '-c', '256']);
  const client = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'none' });
  try {
    // the SDK asks for base64 and decodes it; the float form must be the same vectors
    const inputs = ['Once upon a time', 'The little dog ran', 'Once upon a time'];
    const e = await client.embeddings.create({ model: 'x', input: inputs });
    assert.equal(e.data.length, 3);
    const f = await client.embeddings.create({ model: 'x', input: inputs, encoding_format: 'float' });
    for (let i = 0; i < 3; i++) {
      assert.equal(e.data[i].index, i);
      assert.equal(e.data[i].embedding.length, 64);
      const norm = Math.hypot(...f.data[i].embedding);
      assert.ok(Math.abs(norm - 1) < 1e-4, `normalized: ${norm}`);
      for (let k = 0; k < 64; k++) assert.ok(Math.abs(e.data[i].embedding[k] - f.data[i].embedding[k]) < 1e-6);
    }
    assert.deepEqual(f.data[0].embedding, f.data[2].embedding, 'the same input gives the same vector');
    assert.notDeepEqual(f.data[0].embedding, f.data[1].embedding);
    assert.equal(e.usage.prompt_tokens, e.usage.total_tokens);
    // llama-server's native shape, embd_normalize -1 (none): the same direction, another length
    const n = await post(srv.base, '/embedding', { content: 'Once upon a time', embd_normalize: -1 });
    assert.equal(n.status, 200);
    const raw = n.json[0].embedding[0];
    const len = Math.hypot(...raw);
    assert.ok(Math.abs(len - 1) > 1e-3);
    for (let k = 0; k < 64; k++) assert.ok(Math.abs(raw[k] / len - f.data[0].embedding[k]) < 1e-4);
    const long = await post(srv.base, '/v1/embeddings', { input: 'This is a test '.repeat(200) });
    assert.equal(long.status, 400);
    assert.match(long.json.error.message, /too large/);
  } finally { await done(srv); }
  const none = await startServer(['-m', STORIES, '--embeddings', '--pooling', 'none']);
  try {
    const r = await post(none.base, '/embeddings', { input: 'hello hello hello' });
    assert.equal(r.status, 200);
    const ids = (await post(none.base, '/tokenize', { content: 'hello hello hello', add_special: true })).json.tokens;
    assert.equal(r.json[0].embedding.length, ids.length, 'one vector per token');
    assert.equal((await post(none.base, '/v1/embeddings', { input: 'hello' })).status, 400, '/v1 needs pooled vectors');
  } finally { await done(none); }
});

test('slots: id_slot, save, restore into another slot, erase (llama-server /slots/ID?action=...)', async () => {
  const dir = tmpDir();
  const srv = await startServer(['-m', STORIES, '-np', '2', '--slot-save-path', dir, '--temp', '0']);
  try {
    const first = await post(srv.base, '/completion', { prompt: 'Once upon a time, there was a little girl named Lily', id_slot: 1, n_predict: 8 });
    assert.equal(first.status, 200);
    assert.equal(first.json.id_slot, 1);
    const n1 = first.json.timings.prompt_n;
    const saved = await post(srv.base, '/slots/1?action=save', { filename: 'slot1.bin' });
    assert.equal(saved.status, 200, saved.text);
    assert.equal(saved.json.n_saved, first.json.tokens_evaluated + first.json.tokens_predicted - 1, "the last token is not in the cache yet");
    assert.ok(fs.statSync(path.join(dir, 'slot1.bin')).size === saved.json.n_written);
    const restored = await post(srv.base, '/slots/0?action=restore', { filename: 'slot1.bin' });
    assert.equal(restored.status, 200, restored.text);
    assert.equal(restored.json.n_restored, saved.json.n_saved);
    // slot 0 now holds slot 1's cache: a prompt sharing its start processes only the rest, with the same output
    const again = await post(srv.base, '/completion', { prompt: 'Once upon a time, there was a little girl named Lily', id_slot: 0, n_predict: 8 });
    assert.equal(again.json.id_slot, 0);
    assert.equal(again.json.content, first.json.content);
    assert.ok(again.json.timings.prompt_n <= 1 && again.json.timings.cache_n >= n1 - 1, JSON.stringify(again.json.timings));
    const erased = await post(srv.base, '/slots/0?action=erase', {});
    assert.equal(erased.json.n_erased, saved.json.n_saved);
    const cold = await post(srv.base, '/completion', { prompt: 'Once upon a time, there was a little girl named Lily', id_slot: 0, n_predict: 8 });
    assert.equal(cold.json.timings.prompt_n, n1);
    // bad names, unknown slots and files, a foreign file
    for (const name of ['../x.bin', '.hidden', 'a/b', '']) {
      const r = await post(srv.base, '/slots/0?action=save', { filename: name });
      assert.equal(r.status, 400, name);
    }
    assert.equal((await post(srv.base, '/slots/7?action=erase', {})).status, 400);
    assert.equal((await post(srv.base, '/slots/0?action=fly', {})).status, 400);
    assert.equal((await post(srv.base, '/slots/0?action=restore', { filename: 'none.bin' })).status, 400);
    fs.writeFileSync(path.join(dir, 'junk.bin'), 'not a state file');
    const junk = await post(srv.base, '/slots/0?action=restore', { filename: 'junk.bin' });
    assert.equal(junk.status, 400);
    assert.match(junk.json.error.message, /not a tandem state file/);
    assert.equal((await post(srv.base, '/completion', { prompt: 'x', id_slot: 5 })).status, 400);
  } finally { await done(srv); }
  const noDir = await startServer(['-m', STORIES]);
  try {
    const r = await post(noDir.base, '/slots/0?action=save', { filename: 'a.bin' });
    assert.equal(r.status, 501);
    assert.match(r.json.error.message, /--slot-save-path/);
  } finally { await done(noDir); }
});

test('/infill: a code vocabulary with FIM tokens gets llama-server native answers; others a 501 that says why', async () => {
  const dir = tmpDir();
  const model = path.join(dir, 'coder.gguf');
  execFileSync(BIN, ['synth', model, '--shape', 'tiny-test', '--vocab', sharedFile('tokenizer-tests/ggml-vocab-starcoder.gguf')]);
  const srv = await startServer(['-m', model, '--temp', '0']);
  try {
    const body = { input_prefix: 'def add(a, b):\n    ', input_suffix: '\n\nprint(add(1, 2))\n', prompt: 'return', n_predict: 6,
      input_extra: [{ filename: 'util.py', text: 'X = 1\n' }], return_tokens: true };
    const r = await post(srv.base, '/infill', body);
    assert.equal(r.status, 200, r.text);
    assert.equal(typeof r.json.content, 'string');
    assert.ok(r.json.tokens_evaluated > 10 && r.json.tokens_predicted >= 1);
    // the prompt ends with the FIM middle token
    const ids = (await post(srv.base, '/tokenize', { content: '<fim_middle>', parse_special: true })).json.tokens;
    assert.equal(ids.length, 1);
    assert.equal((await post(srv.base, '/infill', { ...body, input_extra: 'x' })).status, 400);
    const s = await post(srv.base, '/infill', { ...body, stream: true });
    assert.ok(s.text.includes('"stop":true'));
  } finally { await done(srv); }
  const plain = await startServer(['-m', STORIES]);
  try {
    const r = await post(plain.base, '/infill', { input_prefix: 'a', input_suffix: 'b' });
    assert.equal(r.status, 501);
    assert.match(r.json.error.message, /FIM prefix/);
  } finally { await done(plain); }
});

test('Anthropic SDK: /v1/messages (plain and streamed), count_tokens, stop sequences, errors in Anthropic shape', async () => {
  const srv = await startServer(['-m', STORIES, '--temp', '0']);
  const client = new Anthropic({ baseURL: srv.base, apiKey: 'none', maxRetries: 0 });
  try {
    const req = { model: 'x', max_tokens: 16, system: 'You tell stories.', messages: [{ role: 'user', content: 'Once upon a time' }] };
    const m = await client.messages.create(req);
    assert.equal(m.type, 'message');
    assert.equal(m.role, 'assistant');
    assert.equal(m.content[0].type, 'text');
    assert.equal(m.stop_reason, 'max_tokens');
    assert.equal(m.usage.output_tokens, 16);
    assert.ok(m.usage.input_tokens + m.usage.cache_read_input_tokens > 5);
    assert.ok(!('timings' in m));
    // the same as the OpenAI chat endpoint at temperature 0
    const oai = await post(srv.base, '/v1/chat/completions', { max_tokens: 16, temperature: 0,
      messages: [{ role: 'system', content: 'You tell stories.' }, { role: 'user', content: 'Once upon a time' }] });
    assert.equal(m.content[0].text, oai.json.choices[0].message.content);
    // streamed: the SDK's event sequence gives the same text
    const stream = await client.messages.create({ ...req, stream: true });
    const types = [];
    let text = '';
    for await (const e of stream) {
      types.push(e.type);
      if (e.type === 'content_block_delta') text += e.delta.text;
      if (e.type === 'message_delta') assert.equal(e.usage.output_tokens, 16);
    }
    assert.equal(text, m.content[0].text);
    assert.deepEqual([types[0], types[1], types.at(-3), types.at(-2), types.at(-1)],
      ['message_start', 'content_block_start', 'content_block_stop', 'message_delta', 'message_stop']);
    // stop sequences end the message there
    const word = m.content[0].text.trim().split(' ')[2];
    const s = await client.messages.create({ ...req, max_tokens: 40, stop_sequences: [word] });
    assert.equal(s.stop_reason, 'stop_sequence');
    assert.equal(s.stop_sequence, word);
    assert.equal(s.content[0].text, m.content[0].text.slice(0, m.content[0].text.indexOf(word)));
    const n = await client.messages.countTokens({ model: 'x', system: 'You tell stories.', messages: [{ role: 'user', content: 'Once upon a time' }] });
    assert.equal(n.input_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens);
    // errors: Anthropic's shape, 4xx
    await assert.rejects(client.messages.create({ model: 'x', max_tokens: 5, messages: [] }),
      (e) => e.status === 400 && e.error?.type === 'error' && /at least one message/.test(e.error.error.message));
    await assert.rejects(client.messages.create({ model: 'x', max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AA==' } }] }] }),
      (e) => e.status === 400 && /image input is not supported/.test(e.error.error.message));
    await assert.rejects(client.messages.create({ ...req, messages: [{ role: 'assistant', content: [{ type: 'tool_result', tool_use_id: 'x', content: 'r' }] }] }),
      (e) => e.status === 400 && /tool_result block belongs in a user message/.test(e.error.error.message));
  } finally { await done(srv); }
});

test('OpenAI SDK: the Responses API (plain and streamed), instructions, refused fields', async () => {
  const srv = await startServer(['-m', STORIES, '--temp', '0']);
  const client = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'none', maxRetries: 0 });
  try {
    const input = [{ role: 'system', content: 'Book' }, { role: 'user', content: 'What is the best book' }];
    const r = await client.responses.create({ model: 'x', input, max_output_tokens: 8 });
    assert.ok(r.id.startsWith('resp_'));
    assert.ok(r.output[0].id.startsWith('msg_'));
    assert.equal(r.status, 'incomplete');
    assert.equal(r.incomplete_details.reason, 'max_output_tokens');
    assert.equal(r.usage.output_tokens, 8);
    const chat = await post(srv.base, '/v1/chat/completions', { messages: input, max_tokens: 8, temperature: 0 });
    assert.equal(r.output_text, chat.json.choices[0].message.content, 'the same pipeline as chat');
    // instructions are the system message; a plain string input is the user message
    const r2 = await client.responses.create({ model: 'x', instructions: 'Book', input: 'What is the best book', max_output_tokens: 8 });
    assert.equal(r2.output_text, r.output_text);
    // streamed: the event order the SDK expects, ids consistent, deltas add up to the final text
    const stream = await client.responses.create({ model: 'x', input, max_output_tokens: 8, stream: true });
    const types = [];
    let text = '';
    let final = null;
    let msgId = '';
    for await (const e of stream) {
      types.push(e.type);
      if (e.type === 'response.output_item.added') msgId = e.item.id;
      if (e.type === 'response.output_text.delta') { assert.equal(e.item_id, msgId); text += e.delta; }
      if (e.type === 'response.incomplete' || e.type === 'response.completed') final = e.response;
    }
    assert.deepEqual(types.slice(0, 4), ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
    assert.deepEqual(types.slice(-4), ['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.incomplete']);
    assert.equal(text, r.output_text);
    assert.equal(final.output_text, r.output_text);
    await assert.rejects(client.responses.create({ model: 'x', input: 'x', previous_response_id: r.id }),
      (e) => e.status === 400 && /previous_response_id/.test(e.message));
  } finally { await done(srv); }
});

test('--host with several addresses listens on each, on one port (IPv6 part optional: skipped when ::1 is unavailable)', async (t) => {
  const net = await import('node:net');
  const v6 = await new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen(0, '::1', () => s.close(() => resolve(true)));
  });
  if (!v6) { t.skip('IPv6 loopback is unavailable on this machine'); return; }
  const srv = await startServer(['-m', STORIES, '--host', '127.0.0.1,::1', '--api-key', 'k']);
  try {
    const port = new URL(srv.base).port;
    for (const host of ['127.0.0.1', '[::1]']) {
      const h = await fetch(`http://${host}:${port}/health`);
      assert.equal(h.status, 200, host);
      const r = await fetch(`http://${host}:${port}/v1/completions`, { method: 'POST', headers: { Authorization: 'Bearer k', 'Content-Type': 'application/json' },
        body: JSON.stringify({ prompt: 'Once', max_tokens: 2 }) });
      assert.equal(r.status, 200, host);
    }
  } finally { await done(srv); }
});

test('Jinja chat templates: the file is executed (tools, chat_template_kwargs, raise_exception), BOS not doubled', async () => {
  const dir = tmpDir();
  const file = path.join(dir, 't.jinja');
  fs.writeFileSync(file, [
    '{{ bos_token }}{% if tools %}TOOLS:{{ tools | map(attribute="function.name") | join(",") }}\n{% endif %}',
    '{% for m in messages %}{% if m.role == "tool" %}{{ raise_exception("no tool messages here") }}{% endif %}',
    '[{{ m.role | upper }}] {{ m.content | trim }}\n{% endfor %}',
    '{% if add_generation_prompt %}[ASSISTANT]{% if enable_thinking is defined and not enable_thinking %} /no_think{% endif %}{% endif %}',
  ].join(''));
  const srv = await startServer(['-m', STORIES, '--chat-template-file', file, '--chat-template-kwargs', '{"enable_thinking": true}']);
  try {
    const msgs = [{ role: 'system', content: ' Be brief. ' }, { role: 'user', content: 'Hi' }];
    const t = await post(srv.base, '/apply-template', { messages: msgs, tools: [{ type: 'function', function: { name: 'f', parameters: {} } }] });
    assert.equal(t.status, 200, t.text);
    assert.equal(t.json.prompt, 'TOOLS:f\n[SYSTEM] Be brief.\n[USER] Hi\n[ASSISTANT]', 'the BOS text is left to the tokenizer');
    const off = await post(srv.base, '/apply-template', { messages: msgs, chat_template_kwargs: { enable_thinking: false } });
    assert.ok(off.json.prompt.endsWith('[ASSISTANT] /no_think'), off.json.prompt);
    // a chat request is tokenized from exactly that prompt, with one BOS
    const ids = (await post(srv.base, '/tokenize', { content: '[SYSTEM] Be brief.\n[USER] Hi\n[ASSISTANT]', add_special: true, parse_special: true })).json.tokens;
    const r = await post(srv.base, '/v1/chat/completions', { messages: msgs, max_tokens: 1 });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.usage.prompt_tokens, ids.length);
    const bad = await post(srv.base, '/v1/chat/completions', { messages: [...msgs, { role: 'tool', content: 'x' }], max_tokens: 1 });
    assert.equal(bad.status, 400);
    assert.match(bad.json.error.message, /no tool messages here/);
    const props = await (await fetch(srv.base + '/props')).json();
    assert.equal(props.chat_template_name, 'jinja');
    assert.match(props.chat_template, /raise_exception/);
  } finally { await done(srv); }
});

test('reasoning: <think> text goes to reasoning_content (plain and streamed); --reasoning-format none keeps it; --reasoning off sets enable_thinking', async () => {
  const dir = tmpDir();
  const file = path.join(dir, 'think.jinja');
  // a template that opens the thinking block itself, as DeepSeek-R1 does; the model's text then starts inside it
  fs.writeFileSync(file, '{% for m in messages %}{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<think>\n{% endif %}');
  const srv = await startServer(['-m', STORIES, '--chat-template-file', file, '--temp', '0']);
  try {
    const msgs = [{ role: 'user', content: 'Once upon a time' }];
    const plain = await post(srv.base, '/completion', { prompt: 'Once upon a time\n<think>\n', n_predict: 24 });
    const r = await post(srv.base, '/v1/chat/completions', { messages: msgs, max_tokens: 24 });
    assert.equal(r.status, 200, r.text);
    const m = r.json.choices[0].message;
    // stories260K never writes </think>: everything it wrote is reasoning
    assert.equal(m.reasoning_content, plain.json.content);
    assert.equal(m.content, '');
    const s = await post(srv.base, '/v1/chat/completions', { messages: msgs, max_tokens: 24, stream: true });
    const chunks = s.text.split('\n\n').filter((e) => e.startsWith('data: {')).map((e) => JSON.parse(e.slice(6)));
    assert.equal(chunks.map((c) => c.choices[0].delta.reasoning_content ?? '').join(''), plain.json.content);
    assert.equal(chunks.map((c) => c.choices[0].delta.content ?? '').join(''), '');
    const none = await post(srv.base, '/v1/chat/completions', { messages: msgs, max_tokens: 24, reasoning_format: 'none' });
    assert.equal(none.json.choices[0].message.content, plain.json.content);
    assert.ok(!('reasoning_content' in none.json.choices[0].message));
    assert.equal((await post(srv.base, '/v1/chat/completions', { messages: msgs, reasoning_format: 'thoughts' })).status, 400);
    // Anthropic: a thinking block (empty signature), plain and streamed; Responses: a reasoning item
    const anth = new Anthropic({ baseURL: srv.base, apiKey: 'none', maxRetries: 0 });
    const am = await anth.messages.create({ model: 'x', max_tokens: 24, messages: msgs });
    assert.deepEqual(am.content[0], { type: 'thinking', thinking: plain.json.content, signature: '' });
    const as = await anth.messages.stream({ model: 'x', max_tokens: 24, messages: msgs }).finalMessage();
    assert.deepEqual(as.content, am.content);
    const client = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'none', maxRetries: 0 });
    const rr = await client.responses.create({ model: 'x', input: msgs, max_output_tokens: 24 });
    assert.equal(rr.output[0].type, 'reasoning');
    assert.equal(rr.output[0].content[0].text, plain.json.content);
    const rs = await client.responses.create({ model: 'x', input: msgs, max_output_tokens: 24, stream: true });
    let rtext = '';
    for await (const e of rs) if (e.type === 'response.reasoning_text.delta') rtext += e.delta;
    assert.equal(rtext, plain.json.content);
  } finally { await done(srv); }
  const tfile = path.join(dir, 'flag.jinja');
  fs.writeFileSync(tfile, '{{ messages[0].content }}{% if enable_thinking is defined and not enable_thinking %}/no_think{% endif %}');
  const off = await startServer(['-m', STORIES, '--chat-template-file', tfile, '--reasoning', 'off']);
  try {
    const t = await post(off.base, '/apply-template', { messages: [{ role: 'user', content: 'x' }] });
    assert.equal(t.json.prompt, 'x/no_think');
  } finally { await done(off); }
});

test('structured output: GBNF grammar and JSON mode, the same greedy text with and without speculation', async () => {
  const word = 'root ::= "The answer is " ("yes" | "no") "."';
  const plain = await startServer(['-m', STORIES, '--temp', '0']);
  const spec = await startServer(['-m', STORIES, '--temp', '0', '--spec-type', 'self', '--draft-layers', '2', '--draft-min', '1', '--draft-p-min', '0']);
  try {
    const outs = [];
    for (const srv of [plain, spec]) {
      const client = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'none', maxRetries: 0 });
      const r = await client.completions.create({ model: 'x', prompt: 'Once upon a time', max_tokens: 20, grammar: word });
      assert.match(r.choices[0].text, /^The answer is (yes|no)\.$/);
      assert.equal(r.choices[0].finish_reason, 'stop', 'the grammar is complete: only end-of-generation is left');
      const j = await client.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'Give me JSON' }], max_tokens: 60,
        response_format: { type: 'json_object' } });
      const text = j.choices[0].message.content;
      if (j.choices[0].finish_reason === 'stop') assert.doesNotThrow(() => JSON.parse(text), text);
      assert.ok(text.startsWith('{'), text);
      const n = await post(srv.base, '/completion', { prompt: 'Lily said', n_predict: 40, grammar: 'root ::= [a-z ]{5,30} "!"' });
      assert.match(n.json.content, /^[a-z ]{5,30}!?$/);
      // a lazy grammar (llama-server's grammar_lazy): free text until the trigger word, the grammar from it on
      const lazy = await post(srv.base, '/completion', { prompt: 'Once upon a time', n_predict: 80, grammar: 'root ::= " the" [a-df-z ,.]{3,40}',
        grammar_lazy: true, grammar_triggers: [{ type: 1, value: ' the' }] });
      assert.equal(lazy.status, 200, JSON.stringify(lazy.json));
      const at = lazy.json.content.indexOf(' the');
      assert.ok(at > 0, lazy.json.content);
      assert.match(lazy.json.content.slice(at), /^ the[a-df-z ,.]{3,40}$/, lazy.json.content);
      assert.equal(lazy.json.stop_type, 'eos', 'the grammar is complete: only end-of-generation is left');
      const noTrig = await post(srv.base, '/completion', { prompt: 'x', grammar: 'root ::= "a"', grammar_lazy: true });
      assert.equal(noTrig.status, 400);
      assert.match(noTrig.json.error.message, /grammar_triggers/);
      // pattern triggers (types 2 and 3): the grammar from the first capture group of the first match
      const pat = await post(srv.base, '/completion', { prompt: 'Once upon a time', n_predict: 80, grammar: 'root ::= "," [a-df-z ,.]{3,40}',
        grammar_lazy: true, grammar_triggers: [{ type: 2, value: '(,)' }] });
      assert.equal(pat.status, 200, JSON.stringify(pat.json));
      assert.match(pat.json.content, /^[^,]*,[a-df-z ,.]{3,40}$/, pat.json.content);
      const full = await post(srv.base, '/completion', { prompt: 'Once upon a time', n_predict: 80, grammar: 'root ::= "," [a-df-z ,.]{3,40}',
        grammar_lazy: true, grammar_triggers: [{ type: 3, value: '[^,]*(,)[\\s\\S]*' }] });
      assert.equal(full.json.content, pat.json.content);
      const badPat = await post(srv.base, '/completion', { prompt: 'x', grammar: 'root ::= "a"', grammar_lazy: true, grammar_triggers: [{ type: 2, value: '(a' }] });
      assert.equal(badPat.status, 400);
      assert.match(badPat.json.error.message, /trigger pattern '\(a'/);
      outs.push([r.choices[0].text, text, n.json.content, lazy.json.content, pat.json.content]);
      const deep = await post(srv.base, '/completion', { prompt: 'x', grammar: 'root ::= ' + '('.repeat(300) + '"a"' + ')'.repeat(300) });
      assert.equal(deep.status, 400);
      assert.match(deep.json.error.message, /nested more than 50 deep/);
      const bad = await post(srv.base, '/completion', { prompt: 'x', grammar: 'root ::= foo' });
      assert.equal(bad.status, 400);
      assert.match(bad.json.error.message, /rule 'foo' is not defined/);
      // structured outputs: a JSON schema, the answer checked by a real validator (ajv)
      const schema = { type: 'object', properties: { name: { type: 'string', minLength: 1, maxLength: 12 }, age: { type: 'integer' },
        pets: { type: 'array', items: { enum: ['cat', 'dog'] }, maxItems: 3 } }, required: ['name', 'age', 'pets'], additionalProperties: false };
      const so = await client.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'Describe Lily' }], max_tokens: 120,
        response_format: { type: 'json_schema', json_schema: { name: 'person', schema, strict: true } } });
      assert.equal(so.choices[0].finish_reason, 'stop', so.choices[0].message.content);
      const doc = JSON.parse(so.choices[0].message.content);
      const validate = new Ajv().compile(schema);
      assert.ok(validate(doc), JSON.stringify(validate.errors) + ' ' + so.choices[0].message.content);
      const js = await post(srv.base, '/completion', { prompt: 'x', n_predict: 40, json_schema: { type: 'array', items: { type: 'boolean' }, minItems: 2, maxItems: 2 } });
      assert.ok(new Ajv().validate({ type: 'array', items: { type: 'boolean' }, minItems: 2, maxItems: 2 }, JSON.parse(js.json.content)), js.json.content);
      outs.push([so.choices[0].message.content, js.json.content]);
      const refused = await post(srv.base, '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }],
        response_format: { type: 'json_schema', json_schema: { schema: { type: 'string', pattern: '^(a)\\1' } } } });
      assert.equal(refused.status, 400);
      assert.match(refused.json.error.message, /backreference/);
    }
    assert.deepEqual(outs.slice(2), outs.slice(0, 2), 'speculation does not change constrained greedy output');
  } finally { await done(plain); await done(spec); }
});

// Two greedy servers with the chat template `file`: without speculation, and with self-speculation (2 layers,
// every round drafting), for tests that want the same answers from both.
async function greedyServerPair(file) {
  const plain = await startServer(['-m', STORIES, '--temp', '0', '--chat-template-file', file]);
  const spec = await startServer(['-m', STORIES, '--temp', '0', '--chat-template-file', file, '--spec-type', 'self', '--draft-layers', '2',
    '--draft-min', '1', '--draft-p-min', '0']);
  return [plain, spec];
}

test('tool calls: OpenAI and Anthropic SDKs, tool_choice required/named/none, streamed deltas, the same calls with speculation', async () => {
  // a Hermes-style template (the <tool_call> format of Qwen 2.5/3 and Hermes), written here so the test needs no download
  const file = path.join(tmpDir(), 'hermes.jinja');
  fs.writeFileSync(file, [
    '{% if tools %}<|im_start|>system\nTools: {% for t in tools %}{{ t.function.name }} {% endfor %}\n',
    'Call one with <tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>\n{% endif %}',
    '{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}',
    '{% for c in m.tool_calls or [] %}<tool_call>{{ c.function | tojson }}</tool_call>{% endfor %}<|im_end|>\n{% endfor %}',
    '{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}',
  ].join(''));
  const weather = { type: 'object', properties: { city: { type: 'string', minLength: 1, maxLength: 12 }, days: { type: 'integer', minimum: 1 } },
    required: ['city'], additionalProperties: false };
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather', parameters: { ...weather, properties: { city: weather.properties.city } } } },
    { type: 'function', function: { name: 'ping', parameters: { type: 'object', properties: {} } } }];
  const validate = new Ajv().compile(tools[0].function.parameters);
  const [plain, spec] = await greedyServerPair(file);
  try {
    const seen = [];
    for (const srv of [plain, spec]) {
      const client = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'none', maxRetries: 0 });
      const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
      const r = await client.chat.completions.create({ model: 'x', messages, tools, tool_choice: { type: 'function', function: { name: 'get_weather' } },
        parallel_tool_calls: false, max_tokens: 300 });
      const c = r.choices[0];
      assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c));
      assert.equal(c.message.content, null);
      assert.equal(c.message.tool_calls.length, 1);
      const call = c.message.tool_calls[0];
      assert.equal(call.type, 'function');
      assert.match(call.id, /^call_/);
      assert.equal(call.function.name, 'get_weather');
      const args = JSON.parse(call.function.arguments);
      assert.ok(validate(args), JSON.stringify(validate.errors) + ' ' + call.function.arguments);
      // streamed: the deltas add up to the same call
      const stream = await client.chat.completions.create({ model: 'x', messages, tools, tool_choice: { type: 'function', function: { name: 'get_weather' } },
        parallel_tool_calls: false, max_tokens: 300, stream: true });
      const acc = [];
      let finish = null, nArgDeltas = 0, firstId = null;
      for await (const chunk of stream) {
        const ch = chunk.choices[0];
        if (!ch) continue;
        for (const d of ch.delta?.tool_calls ?? []) {
          acc[d.index] ??= { name: '', arguments: '' };
          if (d.id) { assert.equal(firstId, null, 'the id comes with the first delta only'); firstId = d.id; }
          if (d.function?.name) acc[d.index].name += d.function.name;
          if (d.function?.arguments) { acc[d.index].arguments += d.function.arguments; nArgDeltas++; }
        }
        if (ch.finish_reason) finish = ch.finish_reason;
      }
      assert.equal(finish, 'tool_calls');
      assert.deepEqual(acc, [{ name: 'get_weather', arguments: call.function.arguments }]);
      // How many pieces depends on timing here: a delta carries the tokens generated since the last write (a
      // loaded machine, or a speculative round, gives several at once, and these arguments are short). That
      // arguments stream as they grow is checked deterministically in test_serve.cpp (ChatAnswerParser fed
      // 4 bytes at a time).
      assert.ok(nArgDeltas >= 1, 'the arguments stream');
      // required: some tool, with valid arguments
      const req = await client.chat.completions.create({ model: 'x', messages, tools, tool_choice: 'required', parallel_tool_calls: false, max_tokens: 300 });
      assert.ok(req.choices[0].message.tool_calls?.length >= 1, JSON.stringify(req.choices[0]));
      for (const tc of req.choices[0].message.tool_calls) assert.ok(['get_weather', 'ping'].includes(tc.function.name));
      // the call goes back with its result: the next turn renders both
      const next = await client.chat.completions.create({ model: 'x', max_tokens: 5, tools, messages: [...messages, c.message,
        { role: 'tool', tool_call_id: call.id, content: '{"temp": 21}' }] });
      assert.equal(next.choices[0].message.role, 'assistant');
      // none: the template does not see the tools and no call is parsed
      const none = await post(srv.base, '/apply-template', { messages, tools, tool_choice: 'none' });
      assert.ok(!none.json.prompt.includes('Tools:'), none.json.prompt);
      const bad = await post(srv.base, '/v1/chat/completions', { messages, tools, tool_choice: { type: 'function', function: { name: 'nope' } } });
      assert.equal(bad.status, 400);
      assert.match(bad.json.error.message, /'nope', which is not among the tools/);
      // Anthropic: tool_choice any gives a tool_use block (plain and streamed)
      const anth = new Anthropic({ baseURL: srv.base, apiKey: 'none', maxRetries: 0 });
      const atools = [{ name: 'get_weather', input_schema: tools[0].function.parameters }];
      const m = await anth.messages.create({ model: 'x', max_tokens: 300, tools: atools, tool_choice: { type: 'any', disable_parallel_tool_use: true }, messages });
      assert.equal(m.stop_reason, 'tool_use');
      const use = m.content.find((b) => b.type === 'tool_use');
      assert.equal(use.name, 'get_weather');
      assert.ok(validate(use.input), JSON.stringify(use.input));
      const ms = anth.messages.stream({ model: 'x', max_tokens: 300, tools: atools, tool_choice: { type: 'any', disable_parallel_tool_use: true }, messages });
      const fin = await ms.finalMessage();
      assert.equal(fin.stop_reason, 'tool_use');
      assert.deepEqual(fin.content.find((b) => b.type === 'tool_use').input, use.input);
      // Responses API: function tools, a function_call output item (plain and streamed), and the next turn with
      // the call and its output as input items
      const rtools = [{ type: 'function', name: 'get_weather', parameters: tools[0].function.parameters }, { type: 'web_search' }];
      const rr = await client.responses.create({ model: 'x', input: 'What is the weather in Paris?', tools: rtools,
        tool_choice: { type: 'function', name: 'get_weather' }, parallel_tool_calls: false, max_output_tokens: 300 });
      const fc = rr.output.find((o) => o.type === 'function_call');
      assert.ok(fc, JSON.stringify(rr.output));
      assert.equal(fc.name, 'get_weather');
      assert.match(fc.call_id, /^call_/);
      assert.ok(validate(JSON.parse(fc.arguments)), fc.arguments);
      const rs = await client.responses.create({ model: 'x', input: 'What is the weather in Paris?', tools: rtools,
        tool_choice: { type: 'function', name: 'get_weather' }, parallel_tool_calls: false, max_output_tokens: 300, stream: true });
      let argDelta = '', doneItem = null, rfinal = null;
      for await (const e of rs) {
        if (e.type === 'response.function_call_arguments.delta') argDelta += e.delta;
        if (e.type === 'response.output_item.done' && e.item.type === 'function_call') doneItem = e.item;
        if (e.type === 'response.completed') rfinal = e.response;
      }
      assert.equal(argDelta, fc.arguments);
      assert.equal(doneItem.arguments, fc.arguments);
      assert.deepEqual(rfinal.output.map((o) => o.type), rr.output.map((o) => o.type));
      const rnext = await client.responses.create({ model: 'x', tools: rtools, max_output_tokens: 5, input: [
        { role: 'user', content: 'What is the weather in Paris?' }, { type: 'function_call', call_id: fc.call_id, name: fc.name, arguments: fc.arguments },
        { type: 'function_call_output', call_id: fc.call_id, output: '{"temp": 21}' }] });
      assert.equal(rnext.status, 'incomplete');
      const applied = await post(srv.base, '/apply-template', { messages: [{ role: 'user', content: 'x' },
        { role: 'assistant', tool_calls: [{ id: fc.call_id, type: 'function', function: { name: fc.name, arguments: fc.arguments } }] }] });
      assert.ok(applied.json.prompt.includes('<tool_call>'), applied.json.prompt);
      seen.push([call.function.arguments, JSON.stringify(use.input), fc.arguments]);
    }
    assert.deepEqual(seen[1], seen[0], 'speculation does not change a forced call at temperature 0');
    // a template that shows no tools: they are described in the system message, the answer is the generic JSON
    const generic = await startServer(['-m', STORIES, '--temp', '0']);
    try {
      const client = new OpenAI({ baseURL: generic.base + '/v1', apiKey: 'none', maxRetries: 0 });
      const r = await client.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'Hi' }], tools, tool_choice: 'required',
        parallel_tool_calls: false, max_tokens: 300 });
      assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(r.choices[0]));
      assert.equal(r.choices[0].message.tool_calls.length, 1);
    } finally { await done(generic); }
  } finally { await done(plain); await done(spec); }
});

test('tool calls in the XML (Qwen3-Coder) and NAME[ARGS] (Mistral Small 3.2) formats: a required call is valid, the same with speculation', async () => {
  const dir = tmpDir();
  const xml = path.join(dir, 'xml.jinja'), mistral = path.join(dir, 'mistral.jinja');
  fs.writeFileSync(xml, [
    '{% if tools %}<|im_start|>system\nTools: {% for t in tools %}{{ t.function.name }} {% endfor %}\n',
    'Call one with <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n</function>\n</tool_call><|im_end|>\n{% endif %}',
    '{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}',
    '{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}',
  ].join(''));
  fs.writeFileSync(mistral, [
    '{% for m in messages %}{% if m.role == "user" %}[INST]{{ m.content }}[/INST]{% else %}{{ m.content }}',
    '{% for c in m.tool_calls or [] %}[TOOL_CALLS]{{ c.function.name }}[ARGS]{{ c.function.arguments | tojson }}{% endfor %}</s>{% endif %}{% endfor %}',
  ].join(''));
  // (free-text string values are covered by the unit tests: this 260K-parameter model would write a story into one)
  const schema = { type: 'object', properties: { path: { type: 'string', enum: ['a.txt', 'notes/b.md'] }, lines: { type: 'integer' },
    mode: { type: 'string', enum: ['a', 'w'] } },
    required: ['path', 'lines'], additionalProperties: false };
  const tools = [{ type: 'function', function: { name: 'write_file', parameters: schema } }];
  const validate = new Ajv().compile(schema);
  for (const file of [xml, mistral]) {
    const [plain, spec] = await greedyServerPair(file);
    try {
      const seen = [];
      for (const srv of [plain, spec]) {
        const client = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'none', maxRetries: 0 });
        const r = await client.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'Write the file' }], tools,
          tool_choice: 'required', parallel_tool_calls: false, max_tokens: 200 });
        const c = r.choices[0];
        assert.equal(c.finish_reason, 'tool_calls', file + ': ' + JSON.stringify(c));
        assert.equal(c.message.tool_calls.length, 1);
        assert.equal(c.message.tool_calls[0].function.name, 'write_file');
        const args = JSON.parse(c.message.tool_calls[0].function.arguments);
        assert.ok(validate(args), file + ': ' + JSON.stringify(validate.errors) + ' ' + c.message.tool_calls[0].function.arguments);
        seen.push(c.message.tool_calls[0].function.arguments);
      }
      assert.equal(seen[1], seen[0], 'speculation does not change the greedy call');
    } finally { await done(plain); await done(spec); }
  }
});

test('a grammar that outgrows the matcher while generating is the request\'s fault: 400, and the server goes on', async () => {
  const srv = await startServer(['-m', STORIES, '-c', '4096']);
  try {
    const r = await post(srv.base, '/completion', { prompt: 'x', n_predict: 2100, grammar: 'root ::= "(" root ")"' });
    assert.equal(r.status, 400, r.text);
    assert.match(r.json.error.message, /nested more than 2000 deep/);
    const ok = await post(srv.base, '/completion', { prompt: 'x', n_predict: 2 });
    assert.equal(ok.status, 200);
  } finally { await done(srv); }
});

// Issue 26, defects 1, 4 and 7: each grammar used to take the engine (11 s and 625 MB for 4 tokens, a stack
// overflow, invalid UTF-8, eight "</s>"). Now the first mask is computed on the request's thread: a 400 naming
// the bound, while another client's completion goes on.
test('grammars past the matcher\'s bounds are a 400 before the engine; a grammar never leaves its rules', async () => {
  const srv = await startServer(['-m', STORIES, '-np', '2']);
  try {
    const chain = (depth, alts) => {
      let g = 'root ::= c0\n';
      for (let i = 0; i < depth; i++) g += `c${i} ::= c${i + 1} "q"\n`;
      return g + `c${depth} ::= ` + Array(alts).fill('[a-z ]{30} "N"').join(' | ') + '\n';
    };
    let nullable = 'root ::= big\nbig ::= ' + Array(40).fill('n0 '.repeat(2500) + '"x"').join(' | ') + '\n';
    for (let i = 0; i < 19000; i++) nullable += `n${i} ::= n${i + 1}\n`;
    nullable += 'n19000 ::= ""\n';
    const other = post(srv.base, '/completion', { prompt: 'Once upon a time', n_predict: 12, temperature: 0 });
    const cases = [
      [chain(500, 4000), /the bound is 262144/],
      [chain(500, 500), /16777216 rule-position steps/],
      [nullable, /rule positions visited for one character/],
      ['root ::= [^\\x00-\\U0010FFFF]', /no token can continue/],
    ];
    for (const [grammar, re] of cases) {
      const r = await post(srv.base, '/completion', { prompt: 'x', n_predict: 4, grammar });
      assert.equal(r.status, 400, r.text);
      assert.match(r.json.error.message, re);
    }
    const o = await other;
    assert.equal(o.status, 200, o.text);
    assert.equal(o.json.tokens_predicted, 12);
    // a finished grammar ends the answer even under ignore_eos (which bans the end-of-generation tokens otherwise)
    const empty = await post(srv.base, '/completion', { prompt: 'x', n_predict: 8, grammar: 'root ::= ""', ignore_eos: true });
    assert.equal(empty.status, 200, empty.text);
    assert.equal(empty.json.content, '');
    assert.equal(empty.json.tokens_predicted, 0);
    assert.equal(empty.json.stop_type, 'eos');
    const word = await post(srv.base, '/completion', { prompt: 'x', n_predict: 30, temperature: 0, grammar: 'root ::= [a-z ]{1,20} "."', ignore_eos: true });
    assert.equal(word.status, 200, word.text);
    assert.match(word.json.content, /^[a-z ]{1,20}\.$/);
    const free = await post(srv.base, '/completion', { prompt: 'x', n_predict: 40, temperature: 0, ignore_eos: true });
    assert.equal(free.json.tokens_predicted, 40);
    assert.doesNotMatch(free.json.content, /<\/s>/);
  } finally { await done(srv); }
});

test('--path DIR serves another web UI\'s files at / as llama-server: never a file outside DIR, open without the key, the API beside it', async () => {
  const dir = fs.mkdtempSync(path.join(tmpDir(), 'ui-'));
  fs.mkdirSync(path.join(dir, '_app', 'immutable'), { recursive: true });
  fs.writeFileSync(path.join(dir, 'index.html'), '<!doctype html><title>other ui</title>');
  fs.writeFileSync(path.join(dir, '_app', 'version.json'), '{"version":"1"}');
  fs.writeFileSync(path.join(dir, '_app', 'immutable', 'app.js'), 'export const a = 1;');
  fs.writeFileSync(path.join(dir, 'a b.css'), 'body{}');
  const outside = path.join(tmpDir(), 'outside-secret.txt');
  fs.writeFileSync(outside, 'secret');
  fs.symlinkSync(outside, path.join(dir, 'link.txt'));
  const srv = await startServer(['-m', STORIES, '--path', dir, '--api-key', 'k']);
  try {
    const get = async (p, headers = {}) => {
      const r = await fetch(srv.base + p, { headers });
      return { status: r.status, type: r.headers.get('content-type'), text: await r.text() };
    };
    let r = await get('/');
    assert.equal(r.status, 200);
    assert.match(r.text, /other ui/);
    assert.match(r.type, /^text\/html/);
    r = await get('/_app/immutable/app.js');
    assert.equal(r.status, 200, 'a UI\'s scripts load without the key');
    assert.match(r.type, /^text\/javascript/);
    r = await get('/_app/version.json');
    assert.deepEqual([r.status, r.type], [200, 'application/json']);
    assert.equal((await get('/a%20b.css')).status, 200, 'the path is percent-decoded');
    // fetch() normalizes "..": raw requests over a socket keep them
    const raw = async (p) => {
      const net = await import('node:net');
      return new Promise((resolve, reject) => {
        const s = net.connect(srv.port, '127.0.0.1', () => s.write(`GET ${p} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n`));
        let data = '';
        s.on('data', (d) => { data += d; });
        s.on('end', () => resolve(data));
        s.on('error', reject);
      });
    };
    for (const p of ['/../outside-secret.txt', '/_app/../../outside-secret.txt', '/%2e%2e/outside-secret.txt',
      '/_app/%2E%2E/%2e%2e/outside-secret.txt', '/link.txt', '/_app/..%2f..%2foutside-secret.txt', '/index.html%00.js']) {
      const answer = await raw(p);
      assert.doesNotMatch(answer, /secret(?!-)/, `${p} must not reach a file outside --path`);
      assert.match(answer, /^HTTP\/1\.1 (401|404)/, `${p}: ${answer.slice(0, 80)}`);
    }
    // the API is beside the files, with its key
    assert.equal((await get('/health')).status, 200);
    assert.equal((await get('/props')).status, 401);
    assert.equal((await get('/props', { Authorization: 'Bearer k' })).status, 200);
    assert.equal((await get('/webui/app.js')).status, 404, 'the built-in page is replaced, not added');
  } finally { await done(srv); }
  // a directory that is not there: an error naming it, exit 1 (llama-server: "static assets path not found")
  let failed = null;
  try { execFileSync(BIN, ['serve', '-m', STORIES, '--port', '0', '--path', path.join(dir, 'missing')], { stdio: 'pipe' }); } catch (e) { failed = e; }
  assert.ok(failed, 'serve with a missing --path must fail');
  assert.equal(failed.status, 1);
  assert.match(failed.stderr.toString(), /--path .*missing: static assets path not found/);
});
