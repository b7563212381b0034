// The settings panel's fields (every sampling and speculative parameter the server takes, the system prompt,
// tools) and the request body they make. A field left empty is not sent: the server's default applies.
// Pure: no DOM; tests/webui/ checks the bodies under Node.

// kind: number | int | text | select | lines (one entry per line) | json
export const SAMPLING = [
  { key: 'temperature', label: 'Temperature', kind: 'number', min: 0, max: 5, step: 0.05 },
  { key: 'top_k', label: 'Top-k', kind: 'int', min: 0 },
  { key: 'top_p', label: 'Top-p', kind: 'number', min: 0, max: 1, step: 0.01 },
  { key: 'min_p', label: 'Min-p', kind: 'number', min: 0, max: 1, step: 0.01 },
  { key: 'typical_p', label: 'Typical-p', kind: 'number', min: 0, max: 1, step: 0.01 },
  { key: 'repeat_penalty', label: 'Repeat penalty', kind: 'number', min: 0, max: 10, step: 0.05 },
  { key: 'repeat_last_n', label: 'Repeat last n', kind: 'int', min: -1 },
  { key: 'presence_penalty', label: 'Presence penalty', kind: 'number', min: -2, max: 2, step: 0.1 },
  { key: 'frequency_penalty', label: 'Frequency penalty', kind: 'number', min: -2, max: 2, step: 0.1 },
  { key: 'samplers', label: 'Sampler order', kind: 'text', placeholder: 'top_k;typ_p;top_p;min_p;temperature' },
  { key: 'seed', label: 'Seed', kind: 'int', min: -1 },
  { key: 'max_tokens', label: 'Max tokens', kind: 'int', min: 1 },
  { key: 'stop', label: 'Stop strings (one per line)', kind: 'lines' },
];

export const SPECULATIVE = [
  { key: 'type', label: 'Proposers', kind: 'select',
    options: ['', 'draft', 'ngram', 'suffix', 'self', 'draft,ngram', 'draft,ngram,suffix', 'ngram,suffix', 'none'] },
  { key: 'n_max', label: 'Draft max', kind: 'int', min: 0, max: 256 },
  { key: 'n_min', label: 'Draft min', kind: 'int', min: 0, max: 256 },
  { key: 'p_min', label: 'Draft p-min', kind: 'number', min: 0, max: 1, step: 0.05 },
  { key: 'adaptive', label: 'Adaptive draft length', kind: 'select', options: ['', 'true', 'false'] },
  { key: 'tree', label: 'Token trees', kind: 'select', options: ['', 'auto', 'off'] },
  { key: 'tree_width', label: 'Tree width', kind: 'int', min: 1, max: 64 },
  { key: 'tree_nodes', label: 'Tree nodes', kind: 'int', min: 1, max: 1024 },
  { key: 'latency', label: 'Latency', kind: 'select', options: ['', 'throughput', 'steady'] },
];

const KEY = 'tandem.settings.v1';

export function defaultSettings() {
  return { system: '', tools: '', sampling: {}, speculative: {}, theme: 'auto', showOrigins: false };
}

export function loadSettings(storage) {
  try {
    return { ...defaultSettings(), ...JSON.parse(storage.getItem(KEY) || '{}') };
  } catch {
    return defaultSettings();
  }
}

export function saveSettings(storage, s) { storage.setItem(KEY, JSON.stringify(s)); }

// A field's text as the value the request carries; undefined when empty. Throws Error for a bad value.
export function fieldValue(f, raw) {
  const t = String(raw ?? '').trim();
  if (t === '') return undefined;
  switch (f.kind) {
    case 'number':
    case 'int': {
      const v = Number(t);
      if (!Number.isFinite(v) || (f.kind === 'int' && !Number.isInteger(v))) throw new Error(`${f.label}: "${t}" is not ${f.kind === 'int' ? 'a whole number' : 'a number'}`);
      if ((f.min !== undefined && v < f.min) || (f.max !== undefined && v > f.max)) throw new Error(`${f.label}: ${v} is outside ${f.min ?? '-∞'}..${f.max ?? '∞'}`);
      return v;
    }
    case 'lines': {
      const lines = String(raw).split('\n').filter((l) => l !== '');
      return lines.length ? lines : undefined;
    }
    case 'select':
      return t === 'true' ? true : t === 'false' ? false : t;
    default:
      return t;
  }
}

// The tools setting: a JSON array of OpenAI tools, or nothing. Throws Error when it is not.
export function parseTools(text) {
  const t = String(text || '').trim();
  if (!t) return undefined;
  let v;
  try { v = JSON.parse(t); } catch (e) { throw new Error(`Tools: not JSON (${e.message})`); }
  if (!Array.isArray(v) || v.some((x) => !x || x.type !== 'function' || !x.function || !x.function.name))
    throw new Error('Tools: a JSON array of {"type": "function", "function": {"name": ...}} objects');
  return v;
}

// The API's message of a stored message: a user message carries its attached files after its text.
export function apiMessage(m) {
  if (m.role === 'assistant') {
    const o = { role: 'assistant', content: m.content };
    if (m.toolCalls && m.toolCalls.length)
      o.tool_calls = m.toolCalls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } }));
    return o;
  }
  let content = m.content;
  for (const a of m.attachments || []) content += `\n\n--- ${a.name} ---\n${a.text}`;
  return { role: m.role, content };
}

// The body of POST /v1/chat/completions for this conversation's messages under these settings.
export function buildRequest(settings, messages) {
  const body = { messages: [], stream: true, stream_options: { include_usage: true }, timings_per_token: true, token_origins: true };
  if (settings.system && settings.system.trim()) body.messages.push({ role: 'system', content: settings.system });
  for (const m of messages) body.messages.push(apiMessage(m));
  for (const f of SAMPLING) {
    const v = fieldValue(f, settings.sampling[f.key]);
    if (v !== undefined) body[f.key] = v;
  }
  const spec = {};
  for (const f of SPECULATIVE) {
    const v = fieldValue(f, settings.speculative[f.key]);
    if (v !== undefined) spec[f.key] = v;
  }
  if (Object.keys(spec).length) body.speculative = spec;
  const tools = parseTools(settings.tools);
  if (tools) body.tools = tools;
  return body;
}
