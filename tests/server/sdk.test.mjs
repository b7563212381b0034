// The official OpenAI Node SDK against `tandem serve` (stories260K with a Q4_0 draft).
import test from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, storiesDraft, STORIES, generateJson, metrics } from './helpers.mjs';

const KEY = 'test-key-123';
let srv, client;

test.before(async () => {
  srv = await startServer(['-m', STORIES, '-md', storiesDraft(), '--api-key', KEY, '--alias', 'stories', '-np', '2', '--metrics']);
  client = new OpenAI({ baseURL: srv.base + '/v1', apiKey: KEY, maxRetries: 0 });
});
test.after(async () => { await srv.stop(); });

test('models.list', async () => {
  const list = await client.models.list();
  assert.equal(list.data.length, 1);
  assert.equal(list.data[0].id, 'stories');
  assert.equal(list.data[0].meta.n_vocab, 512);
});

test('chat, streaming and not, give the same text', async () => {
  const req = { model: 'stories', messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 40, temperature: 0 };
  const r = await client.chat.completions.create(req);
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.ok(r.choices[0].message.content.length > 0);
  assert.equal(r.usage.completion_tokens, 40);
  assert.ok(['length', 'stop'].includes(r.choices[0].finish_reason));
  const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let text = '', usage = null, chunks = 0;
  for await (const c of stream) {
    chunks++;
    assert.equal(c.object, 'chat.completion.chunk');
    if (c.usage) usage = c.usage;
    if (c.choices.length && c.choices[0].delta.content) text += c.choices[0].delta.content;
  }
  assert.ok(chunks > 2);
  assert.equal(text, r.choices[0].message.content);
  assert.equal(usage.completion_tokens, 40);
});

test('completions, streaming and not', async () => {
  const req = { model: 'stories', prompt: 'Once upon a time', max_tokens: 32, temperature: 0 };
  const r = await client.completions.create(req);
  assert.equal(r.object, 'text_completion');
  const stream = await client.completions.create({ ...req, stream: true });
  let text = '';
  for await (const c of stream) text += c.choices[0]?.text ?? '';
  assert.equal(text, r.choices[0].text);
  assert.ok(r.choices[0].text.startsWith(', there was a little girl named Lily.'), r.choices[0].text);
});

test('temperature 0: identical with and without speculation, and to tandem generate', async () => {
  const prompt = 'Tom and Lily went to the park';
  const base = { model: 'stories', prompt, max_tokens: 64, temperature: 0 };
  const plain = await client.completions.create({ ...base, speculative: { type: 'none' } });
  const spec = await client.completions.create({ ...base, speculative: { type: 'draft', n_max: 8, n_min: 1, p_min: 0, adaptive: false } });
  const ngram = await client.completions.create({ ...base, speculative: { type: 'ngram' } });
  const gen = generateJson(['-m', STORIES, '-p', prompt, '-n', '64', '--temp', '0']);
  assert.equal(spec.choices[0].text, plain.choices[0].text);
  assert.equal(ngram.choices[0].text, plain.choices[0].text);
  assert.equal(plain.choices[0].text, gen.text);
  assert.ok(spec.timings.draft_n > 0, 'the draft was used');
  assert.ok(spec.timings.draft_n_accepted > 0);
  const m = await metrics(srv.base, { Authorization: `Bearer ${KEY}` });
  assert.ok(m.get('tandem_spec_decode_num_draft_tokens') > 0);
});

test('logprobs are the target model\'s true probabilities, also for drafted tokens', async () => {
  const r = await client.chat.completions.create({
    model: 'stories', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 16, temperature: 0,
    logprobs: true, top_logprobs: 3, speculative: { n_max: 4, p_min: 0, adaptive: false },
  });
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, 16);
  for (const e of lp) {
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs.length, 3);
    assert.ok(e.top_logprobs[0].logprob >= e.logprob - 1e-6);
  }
  assert.ok(lp.some((e) => e.logprob < -1e-4), 'not all reported as probability 1.0');
  assert.ok(r.timings.draft_n_accepted > 0);
});

test('stop strings are never emitted, even in part', async () => {
  const full = await client.completions.create({ model: 'stories', prompt: 'Once upon a time', max_tokens: 40, temperature: 0 });
  const text = full.choices[0].text;
  const stop = text.slice(20, 26);
  for (const stream of [false, true]) {
    const req = { model: 'stories', prompt: 'Once upon a time', max_tokens: 40, temperature: 0, stop: [stop], stream };
    let got = '';
    if (stream) { for await (const c of await client.completions.create(req)) got += c.choices[0]?.text ?? ''; }
    else { const r = await client.completions.create(req); got = r.choices[0].text; assert.equal(r.choices[0].finish_reason, 'stop'); }
    assert.equal(got, text.slice(0, text.indexOf(stop)));
  }
});

test('wrong API key: 401 AuthenticationError', async () => {
  const bad = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.chat.completions.create({ model: 'stories', messages: [{ role: 'user', content: 'hi' }] }),
    (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
  const health = await fetch(srv.base + '/health');
  assert.equal(health.status, 200);  // /health and /v1/models stay open
});

test('bad requests: 400 BadRequestError with an OpenAI error object', async () => {
  const cases = [
    { model: 'stories', messages: [], max_tokens: 4 },
    { model: 'stories', messages: [{ role: 'wizard', content: 'hi' }] },
    { model: 'stories', messages: [{ role: 'user', content: 'hi' }], temperature: -1 },
    { model: 'stories', messages: [{ role: 'user', content: 'hi' }], max_tokens: 'many' },
    { model: 'stories', messages: [{ role: 'user', content: 'hi' }], n: 1000 },
    { model: 'stories', messages: [{ role: 'user', content: 'hi' }], logit_bias: { '99999': 1 } },
  ];
  for (const body of cases) {
    await assert.rejects(client.chat.completions.create(body), (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, `${JSON.stringify(body)} -> ${e}`);
      assert.equal(e.status, 400);
      assert.ok(e.error && typeof e.error.message === 'string');
      return true;
    });
  }
});

test('n > 1 and seeds', async () => {
  // Token-exact reproducibility needs a fixed draft length: with the adaptive controller (on by default) the
  // number of drafted tokens follows measured timings, which changes how the seeded random stream is consumed
  // (the samples keep the same distribution). This failed once under ASan with adaptive drafting.
  const body = { model: 'stories', messages: [{ role: 'user', content: 'Once' }], max_tokens: 8, n: 3, seed: 5, temperature: 1,
    speculative: { adaptive: false } };
  const r = await client.chat.completions.create(body);
  assert.equal(r.choices.length, 3);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  const again = await client.chat.completions.create(body);
  assert.deepEqual(again.choices.map((c) => c.message.content), r.choices.map((c) => c.message.content));
});

test('tokenize and detokenize', async () => {
  const h = { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' };
  const t = await (await fetch(srv.base + '/tokenize', { method: 'POST', headers: h, body: JSON.stringify({ content: 'Once upon a time' }) })).json();
  assert.deepEqual(t.tokens, [403, 407, 261, 378]);
  const d = await (await fetch(srv.base + '/detokenize', { method: 'POST', headers: h, body: JSON.stringify({ tokens: t.tokens }) })).json();
  assert.equal(d.content, 'Once upon a time');  // decode(encode(s)) == s
});

test('parallel tool calls cut by max_tokens: the whole calls, content null, finish_reason "length", streamed too', async () => {
  // the stories template shows no tools: the GENERIC format {"tool_calls": [...]}, forced by the grammar; ignore_eos
  // keeps the model calling until max_tokens cuts a call (about a token a byte: 40 cuts the first call, 80 and 100
  // the second)
  const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object',
    properties: { city: { type: 'string', enum: ['Paris', 'Oslo'] } }, required: ['city'] } } }];
  const base = { model: 'stories', messages: [{ role: 'user', content: 'Weather?' }], tools, tool_choice: 'required',
    temperature: 0, ignore_eos: true };
  let n_with_calls = 0;
  for (const max_tokens of [40, 80, 100]) {
    const r = await client.chat.completions.create({ ...base, max_tokens });
    const c = r.choices[0];
    const what = `max_tokens ${max_tokens}: ${JSON.stringify(c)}`;
    assert.equal(c.finish_reason, 'length', what);
    assert.equal(r.usage.completion_tokens, max_tokens, what);
    const calls = c.message.tool_calls ?? [];
    if (calls.length > 0) {
      n_with_calls++;
      assert.equal(c.message.content, null, what);
    } else {
      assert.equal(typeof c.message.content, 'string', what);  // cut inside the first call: no call, the text
    }
    for (const tc of calls) {
      assert.equal(tc.function.name, 'get_weather', what);
      assert.ok(['Paris', 'Oslo'].includes(JSON.parse(tc.function.arguments).city), what);
    }
    const stream = await client.chat.completions.create({ ...base, max_tokens, stream: true });
    const streamed = [];
    let content = '', finish = null;
    for await (const ch of stream) {
      const d = ch.choices[0]?.delta ?? {};
      if (d.content) content += d.content;
      for (const t of d.tool_calls ?? []) {
        if (t.id) streamed[t.index] = { name: t.function.name, arguments: '' };
        streamed[t.index].arguments += t.function.arguments;
      }
      if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
    }
    assert.equal(finish, 'length', what);
    if (calls.length > 0) assert.equal(content, '', what);
    assert.ok(streamed.length >= calls.length && streamed.length <= calls.length + 1, what);
    calls.forEach((tc, i) => assert.equal(streamed[i].arguments, tc.function.arguments, what));
  }
  assert.ok(n_with_calls >= 1, 'no limit left a whole call');
});
