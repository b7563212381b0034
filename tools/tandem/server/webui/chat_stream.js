// Reading a streamed chat completion: server-sent events cut from the byte stream, and the chunks of
// /v1/chat/completions put together into one message: content, reasoning, tool calls, each token's origin
// (the server's opt-in token_origins: draft / tree / target, the round and its proposer), the final timings and
// usage, and the per-round series the live chart draws. Pure: no DOM; tests/webui/ runs it under Node.

// Server-sent events: push() text as it arrives, get back the data of every event completed by it.
export class SseParser {
  constructor() { this.buf = ''; }
  push(text) {
    this.buf += text;
    const out = [];
    let m;
    while ((m = /\r?\n\r?\n/.exec(this.buf)) !== null) {
      const block = this.buf.slice(0, m.index);
      this.buf = this.buf.slice(m.index + m[0].length);
      const data = [];
      for (const line of block.split(/\r?\n/)) {
        if (line.startsWith('data:')) data.push(line.slice(line[5] === ' ' ? 6 : 5));
      }
      if (data.length) out.push(data.join('\n'));
    }
    return out;
  }
}

// The message an assistant is writing, from the chunks in order.
export class MessageBuilder {
  constructor() {
    this.content = '';
    this.reasoning = '';
    this.toolCalls = [];  // {id, name, arguments}
    this.origins = [];  // [text, origin, round, proposer|null] per token
    this.timings = null;
    this.usage = null;
    this.finish = null;
    this.error = null;
    this.rounds = [];  // {round, n, proposer, t}: tokens per round, and when the round's first token arrived
  }

  // One parsed chunk; `now` (ms) stamps the rounds it completes.
  apply(chunk, now = 0) {
    if (chunk.error) {
      this.error = typeof chunk.error === 'string' ? chunk.error : chunk.error.message || JSON.stringify(chunk.error);
      return;
    }
    const choice = chunk.choices && chunk.choices[0];
    if (choice) {
      const d = choice.delta || {};
      if (typeof d.content === 'string') this.content += d.content;
      if (typeof d.reasoning_content === 'string') this.reasoning += d.reasoning_content;
      for (const tc of d.tool_calls || []) {
        const i = tc.index ?? this.toolCalls.length;
        const call = this.toolCalls[i] || (this.toolCalls[i] = { id: '', name: '', arguments: '' });
        if (tc.id) call.id = tc.id;
        if (tc.function && tc.function.name) call.name += tc.function.name;
        if (tc.function && tc.function.arguments) call.arguments += tc.function.arguments;
      }
      if (choice.finish_reason) this.finish = choice.finish_reason;
    }
    for (const t of chunk.token_origins || []) {
      this.origins.push([t.text, t.origin, t.round, t.proposer ?? null]);
      const last = this.rounds[this.rounds.length - 1];
      if (last && last.round === t.round) last.n++;
      else this.rounds.push({ round: t.round, n: 1, proposer: t.proposer ?? null, t: now });
    }
    if (chunk.timings) this.timings = chunk.timings;
    if (chunk.usage) this.usage = chunk.usage;
  }
}

// What a message's origins say: tokens by origin, rounds, tokens per round, rounds and accepted drafts per
// proposer. The chain's acceptance rate and the tree alternatives taken come from the server's final timings
// (what was drafted and rejected, which the origins do not show).
export function specSummary(origins, timings) {
  const s = { tokens: origins.length, draft: 0, tree: 0, target: 0, rounds: 0, meanAccepted: 0, acceptRate: null, treeTaken: null, byProposer: {} };
  let lastRound = null;
  for (const [, origin, round, proposer] of origins) {
    s[origin] = (s[origin] || 0) + 1;
    if (round !== lastRound) {
      s.rounds++;
      lastRound = round;
      if (proposer) (s.byProposer[proposer] ||= { rounds: 0, accepted: 0 }).rounds++;
    }
    if (origin !== 'target' && proposer) (s.byProposer[proposer] ||= { rounds: 0, accepted: 0 }).accepted++;
  }
  s.meanAccepted = s.rounds ? s.tokens / s.rounds : 0;
  if (timings && timings.draft_n > 0) s.acceptRate = timings.draft_n_accepted / timings.draft_n;
  s.treeTaken = timings && timings.draft_tree_n > 0 ? [timings.draft_tree_n_accepted, timings.draft_tree_n] : null;
  return s;
}

// The chart's series: per round, its tokens and the tokens per second over the last `window` rounds.
export function roundSeries(rounds, window = 8) {
  return rounds.map((r, i) => {
    const from = Math.max(0, i - window);
    const dt = (r.t - rounds[from].t) / 1000;
    let n = 0;
    for (let j = from + 1; j <= i; j++) n += rounds[j].n;
    return { round: r.round, accepted: r.n, tps: dt > 0 ? n / dt : null, proposer: r.proposer };
  });
}
