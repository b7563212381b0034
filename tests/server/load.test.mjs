// Load: 8 concurrent clients, 3 rounds of 80 requests mixing streaming, non-streaming, cancelled and malformed
// ones. Zero 5xx; every valid answer equals the expected temperature-0 text; afterwards /health is OK, every
// slot is free, nothing waits in the queue, and the server's memory does not grow from round to round.
import test from 'node:test';
import assert from 'node:assert/strict';
import { startServer, storiesDraft, STORIES, metrics, sanitizerReport } from './helpers.mjs';

const PROMPTS = ['Once upon a time', 'Tom and Lily went to the park', 'The little dog', 'One day, a girl named Sue'];
const CLIENTS = 8, PER_ROUND = 80, ROUNDS = 3;

async function complete(base, prompt, stream, signal) {
  const r = await fetch(base + '/v1/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, signal,
    body: JSON.stringify({ prompt, max_tokens: 24, temperature: 0, stream }),
  });
  if (!stream) return { status: r.status, text: r.status === 200 ? (await r.json()).choices[0].text : await r.text() };
  let text = '', buf = '';
  const dec = new TextDecoder();
  for await (const chunk of r.body) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i); buf = buf.slice(i + 2);
      if (ev === 'data: [DONE]') continue;
      const j = JSON.parse(ev.slice(6));
      text += j.choices[0]?.text ?? '';
    }
  }
  return { status: r.status, text };
}

test('load: concurrent mixed requests, no 5xx, no leaks', async () => {
  const srv = await startServer(['-m', STORIES, '-md', storiesDraft(), '-np', '4', '--queue-max', '64', '--metrics']);
  try {
    const expected = {};
    for (const p of PROMPTS) expected[p] = (await complete(srv.base, p, false)).text;
    const counts = { ok: 0, cancelled: 0, malformed: 0, five: 0, wrong: 0 };
    const rss = [];
    for (let round = 0; round < ROUNDS; round++) {
      let next = 0;
      const worker = async (w) => {
        while (next < PER_ROUND) {
          const i = next++;
          const kind = (i + w) % 7;
          const prompt = PROMPTS[i % PROMPTS.length];
          if (kind === 5) {  // malformed
            const bodies = ['{', '{"prompt": 5}', '{"prompt": "x", "max_tokens": -3}', '[]', '{"prompt":"x","temperature":"hot"}'];
            const r = await fetch(srv.base + '/v1/completions', { method: 'POST', body: bodies[i % bodies.length] });
            if (r.status >= 500) counts.five++;
            else if (r.status === 400) counts.malformed++;
            else counts.wrong++;
            await r.text();
          } else if (kind === 6) {  // cancelled mid-stream or before the answer
            const ac = new AbortController();
            setTimeout(() => ac.abort(), 2 + (i % 5));
            try { await complete(srv.base, prompt, i % 2 === 0, ac.signal); } catch { /* aborted */ }
            counts.cancelled++;
          } else {
            const r = await complete(srv.base, prompt, kind % 2 === 0);
            if (r.status >= 500) counts.five++;
            else if (r.status === 200 && r.text === expected[prompt]) counts.ok++;
            else counts.wrong++;
          }
        }
      };
      await Promise.all(Array.from({ length: CLIENTS }, (_, w) => worker(w)));
      await new Promise((r) => setTimeout(r, 300));  // cancelled generations finish their step
      rss.push(srv.rssKb());
    }
    console.log(`load: ${JSON.stringify(counts)}, RSS by round (KiB): ${rss.join(', ')}`);
    assert.equal(counts.five, 0);
    assert.equal(counts.wrong, 0);
    assert.ok(counts.ok + counts.cancelled + counts.malformed >= 200);
    assert.equal((await fetch(srv.base + '/health')).status, 200);
    const m = await metrics(srv.base);
    assert.equal(m.get('tandem_slots_busy'), 0);
    assert.equal(m.get('tandem_requests_deferred'), 0);
    if (process.env.TANDEM_SANITIZED === '1') {
      // ASan keeps freed memory in quarantine, so RSS grows by design; LeakSanitizer checks leaks at exit instead.
      console.log('load: RSS growth check not applicable under ASan (LeakSanitizer runs at exit)');
    } else {
      assert.ok(rss[ROUNDS - 1] - rss[0] < 16 * 1024, `RSS grew: ${rss.join(', ')} KiB`);
    }
  } finally {
    const code = await srv.stop();
    assert.ok(!sanitizerReport(srv.stderr), srv.stderr.slice(-4000));
    assert.ok(code === 0 || code === 'SIGTERM', `server exit: ${code}`);
  }
});

test('token trees: per-request speculative.tree, alternatives in timings and /metrics, the same greedy text; inter-token latency', async () => {
  // --spec-tree-min-gain 0: every alternative the caps allow is verified, so trees run whatever the timings.
  const srv = await startServer(['-m', STORIES, '-md', storiesDraft(), '-np', '2', '--metrics', '--spec-tree-min-gain', '0']);
  try {
    const ask = async (tree) => {
      const r = await fetch(srv.base + '/completion', {
        method: 'POST',
        body: JSON.stringify({ prompt: 'Lily and Ben went to the', n_predict: 48, temperature: 0, speculative: { tree, n_max: 4, p_min: 0 } }),
      });
      return { status: r.status, json: await r.json() };
    };
    const [on, off] = await Promise.all([ask('auto'), ask(false)]);  // both slots in the same passes
    assert.equal(on.status, 200);
    assert.equal(off.status, 200);
    assert.equal(on.json.content, off.json.content);
    assert.ok(on.json.timings.draft_tree_n > 0, JSON.stringify(on.json.timings));
    assert.equal(off.json.timings.draft_tree_n, 0);
    const bad = await ask('sometimes');
    assert.equal(bad.status, 400);
    assert.match(bad.json.error.message, /speculative.tree/);
    const m = await metrics(srv.base);
    assert.equal(m.get('tandem_spec_decode_num_tree_tokens'), on.json.timings.draft_tree_n);
    // inter-token latency: percentiles per request in timings, and over recent requests in /metrics
    const t = on.json.timings;
    assert.ok(t.itl_p50_ms > 0 && t.itl_p50_ms <= t.itl_p90_ms && t.itl_p90_ms <= t.itl_p99_ms && t.itl_p99_ms <= t.itl_max_ms, JSON.stringify(t));
    assert.ok(m.get('tandem_inter_token_latency_ms_count') > 0);
    assert.match(m.text, /^tandem_inter_token_latency_ms\{quantile="0.99"\} \S+$/m);
    // a list of proposers, chosen per round: the same text, statistics per proposer
    const list = await fetch(srv.base + '/completion', { method: 'POST', body: JSON.stringify({ prompt: 'Lily and Ben went to the', n_predict: 48, temperature: 0, speculative: { type: ['draft', 'ngram', 'suffix'] } }) });
    const lj = await list.json();
    assert.equal(lj.content, off.json.content);
    for (const p of ['draft', 'ngram', 'suffix']) assert.equal(typeof lj.timings[`draft_${p}_rounds`], 'number');
    assert.ok(Object.values(lj.timings).every((v) => typeof v === 'number'));  // llama-server's timings: numbers only
    assert.equal(on.json.timings.draft_ngram_rounds, undefined);  // one proposer: no per-proposer keys
    assert.match((await metrics(srv.base)).text, /^tandem_spec_decode_proposer_rounds\{proposer="draft"\} \d+$/m);
    // steady latency: the same greedy text
    const steady = await fetch(srv.base + '/completion', { method: 'POST', body: JSON.stringify({ prompt: 'Lily and Ben went to the', n_predict: 48, temperature: 0, speculative: { latency: 'steady' } }) });
    assert.equal((await steady.json()).content, off.json.content);
    const badLatency = await fetch(srv.base + '/completion', { method: 'POST', body: JSON.stringify({ prompt: 'x', speculative: { latency: 'fast' } }) });
    assert.equal(badLatency.status, 400);
  } finally {
    await srv.stop();
    assert.ok(!sanitizerReport(srv.stderr), srv.stderr.slice(-4000));
  }
});
