// The chat page's stream reading, conversation store and settings (tools/tandem/server/webui/chat_stream.js,
// store.js, settings.js), under Node.
import test from 'node:test';
import assert from 'node:assert/strict';
import { MessageBuilder, SseParser, roundSeries, specSummary } from '../../tools/tandem/server/webui/chat_stream.js';
import { ConversationStore, StoreError, titleFrom } from '../../tools/tandem/server/webui/store.js';
import { SAMPLING, SPECULATIVE, buildRequest, defaultSettings, fieldValue, parseTools } from '../../tools/tandem/server/webui/settings.js';

class MemStorage {
  constructor() { this.m = new Map(); this.limit = Infinity; }
  getItem(k) { return this.m.has(k) ? this.m.get(k) : null; }
  setItem(k, v) {
    if (v.length > this.limit) { const e = new Error('quota'); e.name = 'QuotaExceededError'; throw e; }
    this.m.set(k, String(v));
  }
  removeItem(k) { this.m.delete(k); }
}

test('SSE: events cut anywhere, CRLF, several data lines, comments', () => {
  const text = 'data: {"a":1}\n\n: keep-alive\n\ndata: x\ndata: y\r\n\r\ndata:[DONE]\n\n';
  for (let cut = 1; cut < text.length; cut++) {
    const p = new SseParser();
    const got = [...p.push(text.slice(0, cut)), ...p.push(text.slice(cut))];
    assert.deepEqual(got, ['{"a":1}', 'x\ny', '[DONE]'], `cut at ${cut}`);
  }
});

test('a message from chunks: content, reasoning, tool calls, origins grouped by round, timings', () => {
  const b = new MessageBuilder();
  b.apply({ choices: [{ delta: { reasoning_content: 'think' } }], token_origins: [{ text: '<think>', origin: 'target', round: 1, proposer: null }] }, 0);
  b.apply({ choices: [{ delta: { content: 'Hel' } }], token_origins: [{ text: 'Hel', origin: 'draft', round: 2, proposer: 'draft' }] }, 10);
  b.apply({ choices: [{ delta: { content: 'lo' } }], token_origins: [{ text: 'lo', origin: 'target', round: 2, proposer: 'draft' }] }, 12);
  b.apply({ choices: [{ delta: { tool_calls: [{ index: 0, id: 'call_1', function: { name: 'get', arguments: '{"a"' } }] } }] }, 20);
  b.apply({ choices: [{ delta: { tool_calls: [{ index: 0, function: { arguments: ':1}' } }] }, finish_reason: 'tool_calls' }], timings: { draft_n: 4, draft_n_accepted: 3 } }, 30);
  assert.equal(b.content, 'Hello');
  assert.equal(b.reasoning, 'think');
  assert.deepEqual(b.toolCalls, [{ id: 'call_1', name: 'get', arguments: '{"a":1}' }]);
  assert.equal(b.finish, 'tool_calls');
  assert.deepEqual(b.rounds, [{ round: 1, n: 1, proposer: null, t: 0 }, { round: 2, n: 2, proposer: 'draft', t: 10 }]);
  const s = specSummary(b.origins, b.timings);
  assert.deepEqual([s.tokens, s.draft, s.tree, s.target, s.rounds, s.meanAccepted, s.acceptRate, s.treeTaken], [3, 1, 0, 2, 2, 1.5, 0.75, null]);
  assert.deepEqual(specSummary([], { draft_n: 0, draft_tree_n: 8, draft_tree_n_accepted: 2 }).treeTaken, [2, 8]);
  assert.deepEqual(s.byProposer, { draft: { rounds: 1, accepted: 1 } });
  const e = new MessageBuilder();
  e.apply({ error: { message: 'bad', code: 400 } });
  assert.equal(e.error, 'bad');
});

test('round series: tokens per round and tokens/s over the rounds before', () => {
  const s = roundSeries([{ round: 1, n: 1, t: 0 }, { round: 2, n: 3, t: 100 }, { round: 3, n: 2, t: 200 }], 8);
  assert.deepEqual(s.map((r) => r.accepted), [1, 3, 2]);
  assert.equal(s[0].tps, null);
  assert.equal(s[1].tps, 30);
  assert.equal(s[2].tps, 25);
});

test('store: create, save, list newest first, rename, delete', () => {
  let t = 1000;
  const st = new ConversationStore(new MemStorage(), () => t++);
  const a = st.create('first');
  const b = st.create('second');
  assert.deepEqual(st.list().map((c) => c.title), ['second', 'first']);
  st.save({ ...a, messages: [{ role: 'user', content: 'hi' }] });
  assert.deepEqual(st.list().map((c) => c.title), ['first', 'second']);
  assert.equal(st.get(a.id).messages[0].content, 'hi');
  st.rename(b.id, '  renamed ');
  assert.equal(st.get(b.id).title, 'renamed');
  assert.throws(() => st.rename(b.id, '   '), StoreError);
  st.remove(a.id);
  assert.deepEqual(st.list().map((c) => c.id), [b.id]);
});

test('store: export then import into another browser; bad files refused with the reason; a full storage says so', () => {
  const from = new ConversationStore(new MemStorage());
  const c = from.create('chat');
  from.save({ ...c, messages: [{ role: 'user', content: 'q' }, { role: 'assistant', content: 'a', origins: [['a', 'draft', 1, 'draft']] }] });
  const to = new ConversationStore(new MemStorage());
  assert.equal(to.importJson(from.exportJson()), 1);
  assert.deepEqual(to.list()[0].messages, from.list()[0].messages);
  assert.equal(to.importJson(from.exportJson()), 1, 'importing twice keeps both');
  assert.equal(new Set(to.list().map((x) => x.id)).size, 2, 'the second copy gets its own id');
  assert.throws(() => to.importJson('{'), /not a JSON file/);
  assert.throws(() => to.importJson('{"x":1}'), /no "conversations" list/);
  assert.throws(() => to.importJson('[{"messages":[{"role":"robot","content":"x"}]}]'), /message 1: needs a role/);
  const small = new MemStorage();
  small.limit = 200;
  const full = new ConversationStore(small);
  const f = full.create('x');
  assert.throws(() => full.save({ ...f, messages: [{ role: 'user', content: 'y'.repeat(500) }] }), /storage is full/);
  const damaged = new MemStorage();
  damaged.setItem('tandem.conversations.v1', '{not json');
  assert.deepEqual(new ConversationStore(damaged).list(), []);
  assert.equal(titleFrom('  A question\nmore'), 'A question');
  assert.equal(titleFrom('x'.repeat(60)).length, 48);
});

test('settings make the request: set fields sent with their types, empty ones left to the server', () => {
  const s = defaultSettings();
  let body = buildRequest(s, [{ role: 'user', content: 'hi', attachments: [{ name: 'a.txt', text: 'file text' }] }]);
  assert.deepEqual(body, {
    messages: [{ role: 'user', content: 'hi\n\n--- a.txt ---\nfile text' }], stream: true,
    stream_options: { include_usage: true }, timings_per_token: true, token_origins: true,
  });
  s.system = 'Be brief.';
  s.sampling = { temperature: '0.3', top_k: '40', seed: '7', stop: 'END\n\nSTOP', samplers: 'top_k;temperature', max_tokens: '' };
  s.speculative = { n_max: '6', tree: 'off', adaptive: 'false', type: 'draft,ngram', p_min: '0.5' };
  s.tools = '[{"type":"function","function":{"name":"f","parameters":{}}}]';
  body = buildRequest(s, [{ role: 'user', content: 'q' }, { role: 'assistant', content: '', toolCalls: [{ id: 'c', name: 'f', arguments: '{}' }] }]);
  assert.deepEqual(body.messages[0], { role: 'system', content: 'Be brief.' });
  assert.deepEqual(body.messages[2], { role: 'assistant', content: '', tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }] });
  assert.equal(body.temperature, 0.3);
  assert.equal(body.top_k, 40);
  assert.equal(body.seed, 7);
  assert.deepEqual(body.stop, ['END', 'STOP']);
  assert.equal(body.samplers, 'top_k;temperature');
  assert.equal('max_tokens' in body, false);
  assert.deepEqual(body.speculative, { type: 'draft,ngram', n_max: 6, p_min: 0.5, adaptive: false, tree: 'off' });
  assert.equal(body.tools[0].function.name, 'f');
});

test('settings: bad values are refused with the field named', () => {
  const f = (k) => [...SAMPLING, ...SPECULATIVE].find((x) => x.key === k);
  assert.throws(() => fieldValue(f('top_k'), '1.5'), /Top-k: "1.5" is not a whole number/);
  assert.throws(() => fieldValue(f('top_p'), '2'), /Top-p: 2 is outside 0..1/);
  assert.throws(() => fieldValue(f('temperature'), 'hot'), /Temperature: "hot" is not a number/);
  assert.throws(() => parseTools('{"type":"function"}'), /Tools: a JSON array/);
  assert.throws(() => parseTools('[oops'), /Tools: not JSON/);
  const s = defaultSettings();
  s.sampling = { top_p: '7' };
  assert.throws(() => buildRequest(s, []), /Top-p/);
});

test('store: an import keeps each optional field only in the shape the page reads (issue 49: they threw when opened)', () => {
  const to = new ConversationStore(new MemStorage());
  const bad = [{
    title: { x: 1 },
    messages: [{ role: 'user', content: 'q', attachments: 'abc' },
      { role: 'assistant', content: 'a', origins: [5, null], timings: { predicted_per_second: 'abc', predicted_n: 3 },
        toolCalls: 5, rounds: [null], reasoning: 7, extra: { evil: true } },
      { role: 'assistant', content: 'b', origins: [['b', 'draft', 1, null]], rounds: [{ round: 1, n: 1, proposer: null, t: 0 }],
        toolCalls: [{ id: 'c', name: 'f', arguments: '{}' }, { name: 5 }], attachments: [{ name: 'a.txt', text: 't' }, null] }],
  }];
  assert.equal(to.importJson(JSON.stringify(bad)), 1);
  const c = to.list()[0];
  assert.equal(c.title, 'Imported chat');
  assert.deepEqual(c.messages[0], { role: 'user', content: 'q' });
  assert.deepEqual(c.messages[1], { role: 'assistant', content: 'a', timings: { predicted_n: 3 } });
  assert.deepEqual(c.messages[2].origins, [['b', 'draft', 1, null]]);
  assert.deepEqual(c.messages[2].rounds, [{ round: 1, n: 1, proposer: null, t: 0 }]);
  assert.deepEqual(c.messages[2].toolCalls, [{ id: 'c', name: 'f', arguments: '{}' }]);
  assert.deepEqual(c.messages[2].attachments, [{ name: 'a.txt', text: 't' }]);
  assert.doesNotThrow(() => specSummary(c.messages[2].origins, c.messages[2].timings));
});
