// Inter-token latency of a streaming request while another client sends a long prompt, with the prompt
// processed all at once (--prefill-chunk 0, the behaviour before chunked prefill) and in pieces per round
// (--prefill-chunk N). Prints p50 / p99 / max of the gaps between streamed tokens of the first request while
// the second one's prompt is processed, and how long the second request took.
//
//   node bench/prefill_latency.mjs [MODEL.gguf] [PROMPT_TOKENS=2000] [CHUNK=64]
// Uses build/bin/tandem (TANDEM_BIN to override). The two configurations alternate (ABAB) to share the noise.
import { spawn } from 'node:child_process';
import path from 'node:path';

const BIN = process.env.TANDEM_BIN || path.resolve('build/bin/tandem');
const MODEL = process.argv[2] || path.resolve('../shared/models/synth-llama-spm-q8_0.gguf');
const N_PROMPT = Number(process.argv[3] || 2000);
const CHUNK = Number(process.argv[4] || 64);
const ROUNDS = Number(process.env.ROUNDS || 2);

async function start(chunk) {
  const proc = spawn(BIN, ['serve', '-m', MODEL, '--port', '0', '-np', '2', '-c', String(2 * (N_PROMPT + 600)),
    '--prefill-chunk', String(chunk)], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  const port = await new Promise((resolve, reject) => {
    proc.stderr.on('data', (d) => { err += d; const m = err.match(/listening on http:\/\/[^:]+:(\d+)/); if (m) resolve(Number(m[1])); });
    proc.on('exit', (c) => reject(new Error('server exited ' + c + '\n' + err)));
  });
  const base = `http://127.0.0.1:${port}`;
  for (;;) { try { if ((await fetch(base + '/health')).status === 200) break; } catch { /* loading */ } await new Promise((r) => setTimeout(r, 100)); }
  return { proc, base };
}

const quantile = (xs, q) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(q * s.length))]; };

async function measure(chunk) {
  const { proc, base } = await start(chunk);
  try {
    // warm-up
    await (await fetch(base + '/completion', { method: 'POST', body: JSON.stringify({ prompt: 'Once', n_predict: 4 }) })).text();
    const times = [];
    let longDone = null, longStart = null, longMs = null;
    const res = await fetch(base + '/v1/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 100000, ignore_eos: true, temperature: 0, stream: true }) });
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) { buf = buf.slice(i + 2); times.push(performance.now()); }
      if (times.length >= 30 && !longStart) {
        longStart = performance.now();
        const ids = Array.from({ length: N_PROMPT }, (_, k) => 100 + ((k * 7919) % 20000));
        longDone = fetch(base + '/v1/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify({ prompt: ids, max_tokens: 1 }) }).then(async (r) => { await r.text(); longMs = performance.now() - longStart; });
      }
      if (longMs !== null && times.length > 0 && performance.now() - longStart > longMs + 500) break;
    }
    await reader.cancel().catch(() => {});
    await longDone;
    const during = [];
    for (let k = 1; k < times.length; k++) if (times[k] >= longStart && times[k - 1] <= longStart + longMs) during.push(times[k] - times[k - 1]);
    return { p50: quantile(during, 0.5), p99: quantile(during, 0.99), max: Math.max(...during), n: during.length, longMs };
  } finally { proc.kill('SIGTERM'); await new Promise((r) => proc.on('exit', r)); }
}

console.log(`model ${path.basename(MODEL)}, second prompt ${N_PROMPT} tokens, chunk ${CHUNK}`);
for (let r = 0; r < ROUNDS; r++) {
  for (const chunk of [0, CHUNK]) {
    const m = await measure(chunk);
    console.log(`--prefill-chunk ${String(chunk).padEnd(4)} inter-token gap during the long prompt: p50 ${m.p50.toFixed(1)} ms, p99 ${m.p99.toFixed(1)} ms, max ${m.max.toFixed(1)} ms (${m.n} gaps); long request ${m.longMs.toFixed(0)} ms`);
  }
}
