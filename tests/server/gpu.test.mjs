// `tandem serve -ngl 99` on the first Vulkan device (in CI Mesa's lavapipe): the server's core routes with the model
// on the GPU, speculation there token-identical to plain decoding, and a lost device (fault injection,
// TANDEM_VK_LOSE_AFTER) answered 503 and ended with a non-zero exit, never a hang. Where no Vulkan device exists
// the tests skip and say so, unless TANDEM_REQUIRE_VULKAN=1 (scripts/test.sh sets it when lavapipe is installed).
import test from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { startServer, STORIES, BIN } from './helpers.mjs';

const devices = execFileSync(BIN, ['--list-devices'], { encoding: 'utf8' });
const hasGpu = /^\s+0: /m.test(devices);
const required = process.env.TANDEM_REQUIRE_VULKAN === '1';
const skip = !hasGpu && !required ? `no Vulkan device (${devices.trim().split('\n').pop()}): the GPU server tests are optional here` : false;

async function complete(base, prompt, n = 24) {
  const r = await fetch(base + '/completion', {
    method: 'POST',
    body: JSON.stringify({ prompt, n_predict: n, temperature: 0, cache_prompt: false }),
  });
  assert.equal(r.status, 200, await r.clone().text());
  const j = await r.json();
  drafted += j.timings?.draft_n ?? 0;
  return j.content;
}
let drafted = 0;

test('serve -ngl 99: the model on the GPU, the core routes, speculation identical to plain', { skip }, async () => {
  assert.ok(hasGpu, 'TANDEM_REQUIRE_VULKAN is set and no Vulkan device is listed');
  const plain = await startServer(['-m', STORIES, '-ngl', '99', '-np', '2']);
  const spec = await startServer(['-m', STORIES, '-md', STORIES, '-ngl', '99', '-ngld', '99', '--draft-max', '4', '--draft-min', '1', '--draft-p-min', '0']);
  try {
    assert.match(plain.stderr, /target: GPU .*5 of 5 layers/);
    assert.match(spec.stderr, /draft: GPU /);
    for (const p of ['Once upon a time', 'The little dog was sad because']) {
      const a = await complete(plain.base, p);
      drafted = 0;
      const b = await complete(spec.base, p);
      assert.ok(drafted > 0, 'the draft proposed nothing');
      assert.ok(a.length > 20, a);
      assert.equal(b, a, `speculative output differs for '${p}'`);
    }
    // two requests at once on two slots: one pass for both, each answer its own plain one
    const [x, y] = await Promise.all([complete(plain.base, 'Once upon a time'), complete(plain.base, 'Tom and Lily went to the park')]);
    assert.equal(x, await complete(plain.base, 'Once upon a time'));
    assert.equal(y, await complete(plain.base, 'Tom and Lily went to the park'));
    const chat = await fetch(plain.base + '/v1/chat/completions', {
      method: 'POST',
      body: JSON.stringify({ messages: [{ role: 'user', content: 'Hello' }], max_tokens: 8, stream: true }),
    });
    assert.equal(chat.status, 200);
    const text = await chat.text();
    assert.match(text, /data: \[DONE\]/);
  } finally {
    await plain.stop();
    await spec.stop();
  }
});

test('a lost GPU: the request is answered 503 and the server exits non-zero', { skip }, async () => {
  // the loss comes at the 30th pass (a warm-up, then the requests' prompts and tokens)
  const srv = await startServer(['-m', STORIES, '-ngl', '99'], { env: { TANDEM_VK_LOSE_AFTER: '30' } });
  try {
    let status = 200;
    for (let i = 0; i < 20 && status === 200; i++) {
      const r = await fetch(srv.base + '/completion', {
        method: 'POST',
        body: JSON.stringify({ prompt: 'Once upon a time', n_predict: 16, temperature: 0, cache_prompt: false }),
      });
      status = r.status;
      const body = await r.text();
      if (status !== 200) assert.match(body, /device .* was lost/);
    }
    assert.equal(status, 503);
    const { code } = await srv.exited();
    assert.notEqual(code, 0);
    assert.match(srv.stderr, /was lost: stopping/);
  } finally {
    await srv.stop();
  }
});
