// More requests than slots + queue: the excess is answered 503 with Retry-After (never queued without bound),
// and the server recovers.
import test from 'node:test';
import assert from 'node:assert/strict';
import { startServer, STORIES, metrics } from './helpers.mjs';

test('a full queue answers 503 with Retry-After', async () => {
  // --context-shift: max_tokens is not clamped to stories260K's small context, so the first request really holds
  // the slot while the others arrive (a clamped one finished in a few milliseconds, and on a loaded machine the
  // later requests could each find a free place in turn).
  const srv = await startServer(['-m', STORIES, '-np', '1', '--queue-max', '1', '--metrics', '--context-shift']);
  try {
    // 2000 tokens hold the slot for seconds (the other requests are sent within milliseconds of it being busy); under
    // ASan, several times slower per token, 1500 hold it longer. (6000, before, took ~50 s of CI's test stage.)
    const sanitized = process.env.TANDEM_SANITIZED === '1' || process.env.TANDEM_SANITIZED === 'true';
    const body = JSON.stringify({ prompt: 'Once upon a time', max_tokens: sanitized ? 1500 : 2000, temperature: 0, ignore_eos: true });
    // The first request holds the slot before the others arrive (otherwise, on a slow build, it can still be the
    // one waiting in the queue when the rest come, and all of those find the queue full).
    const first = fetch(srv.base + '/v1/completions', { method: 'POST', body });
    for (let i = 0; i < 200 && (await metrics(srv.base)).get('tandem_slots_busy') !== 1; i++) await new Promise((r) => setTimeout(r, 25));
    const reqs = [first, ...Array.from({ length: 7 }, () => fetch(srv.base + '/v1/completions', { method: 'POST', body }))];
    const res = await Promise.all(reqs);
    const statuses = res.map((r) => r.status);
    await Promise.all(res.map((r) => r.text()));
    const busy = res.filter((r) => r.status === 503);
    assert.ok(busy.length >= 1, `statuses: ${statuses}`);
    for (const r of busy) assert.ok(Number(r.headers.get('retry-after')) >= 1);
    assert.ok(statuses.filter((s) => s === 200).length >= 2, `statuses: ${statuses}`);
    assert.ok(statuses.every((s) => s === 200 || s === 503), `statuses: ${statuses}`);
    // the slot is released just after its answer's last byte went out: give the inference thread a moment
    let busyNow = 1;
    for (let i = 0; i < 100 && busyNow !== 0; i++) {
      busyNow = (await metrics(srv.base)).get('tandem_slots_busy');
      if (busyNow !== 0) await new Promise((r) => setTimeout(r, 20));
    }
    assert.equal(busyNow, 0);
    assert.equal((await fetch(srv.base + '/health')).status, 200);
  } finally {
    await srv.stop();
  }
});
