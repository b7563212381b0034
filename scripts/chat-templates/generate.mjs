// Makes tandem's expected chat-template renderings (tests/data/chat-templates/): every template of a directory
// (llama.cpp's models/templates, see scripts/fetch-chat-templates.sh) rendered with @huggingface/jinja, the
// interpreter transformers.js uses, over a fixed set of conversations, with add_generation_prompt both ways.
//
//   cd scripts/chat-templates && npm ci && node generate.mjs TEMPLATES_DIR ../../tests/data/chat-templates
//
// Output: conversations.json (the inputs) and one <template>.json per template: its length and FNV-1a hash (the
// test checks it renders the same file) and, per case, the rendered text or the error @huggingface/jinja gave
// (the C++ test requires byte-identical text where there is one). strftime_now sees a fixed clock:
// 2026-01-15 10:30 local time.
import fs from 'node:fs';
import path from 'node:path';
import { Template } from '@huggingface/jinja';

const RealDate = Date;
globalThis.Date = class extends RealDate {
  constructor(...a) { super(...(a.length ? a : [2026, 0, 15, 10, 30, 0])); }
  static now() { return new RealDate(2026, 0, 15, 10, 30, 0).getTime(); }
};

const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Get the current weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', description: 'City name' }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } }, required: ['city'] },
  },
};
const search = {
  type: 'function',
  function: { name: 'search', description: 'Search the web', parameters: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] } },
};
const call = { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: { city: 'Paris', unit: 'celsius' } } };

// name -> { messages, tools? }
const conversations = {
  user: { messages: [{ role: 'user', content: 'Hello!' }] },
  system_user: { messages: [{ role: 'system', content: 'You are a helpful assistant.' }, { role: 'user', content: 'What is 2 + 2?' }] },
  multi_turn: {
    messages: [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: 'Hello! How can I help?' },
      { role: 'user', content: 'Tell me a joke.' },
    ],
  },
  tools_defined: { messages: [{ role: 'user', content: "What's the weather in Paris?" }], tools: [weather, search] },
  tool_call_and_result: {
    messages: [
      { role: 'user', content: "What's the weather in Paris?" },
      { role: 'assistant', content: '', tool_calls: [call] },
      { role: 'tool', tool_call_id: 'call_1', name: 'get_weather', content: '{"temperature": 21, "sky": "clear"}' },
    ],
    tools: [weather],
  },
  reasoning: {
    messages: [
      { role: 'user', content: 'Is 17 prime?' },
      { role: 'assistant', content: 'Yes, 17 is prime.', reasoning_content: 'Check divisors up to 4: 2, 3 do not divide 17.' },
      { role: 'user', content: 'And 21?' },
    ],
  },
  unicode: {
    messages: [
      { role: 'system', content: 'Réponds en français 🇫🇷.' },
      { role: 'user', content: 'Ça va ? 你好，世界！ Привет — "quotes" & <tags>\ttab' },
    ],
  },
};

const [, , templatesDir, outDir] = process.argv;
if (!templatesDir || !outDir) {
  console.error('usage: node generate.mjs TEMPLATES_DIR OUT_DIR');
  process.exit(2);
}

function fnv1a64(bytes) {
  let h = 0xcbf29ce484222325n;
  for (const b of bytes) h = BigInt.asUintN(64, (h ^ BigInt(b)) * 0x100000001b3n);
  return h.toString(16).padStart(16, '0');
}

fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, 'conversations.json'), JSON.stringify(conversations, null, 1) + '\n');
const summary = [];
for (const file of fs.readdirSync(templatesDir).filter((f) => f.endsWith('.jinja')).sort()) {
  const bytes = fs.readFileSync(path.join(templatesDir, file));
  const source = bytes.toString('utf8');
  const out = { template: file, length: bytes.length, fnv1a64: fnv1a64(bytes), cases: [] };
  let tmpl = null;
  try {
    tmpl = new Template(source);
  } catch (e) {
    out.parse_error = String(e.message ?? e);
  }
  let rendered = 0;
  if (tmpl) {
    for (const [name, conv] of Object.entries(conversations)) {
      for (const gen of [true, false]) {
        const ctx = { messages: conv.messages, add_generation_prompt: gen, bos_token: '<BOS>', eos_token: '<EOS>' };
        if (conv.tools) ctx.tools = conv.tools;
        const c = { conversation: name, add_generation_prompt: gen };
        try {
          c.output = tmpl.render(structuredClone(ctx));
          rendered++;
        } catch (e) {
          c.error = String(e.message ?? e);
        }
        out.cases.push(c);
      }
    }
  }
  fs.writeFileSync(path.join(outDir, file.replace(/\.jinja$/, '.json')), JSON.stringify(out, null, 1) + '\n');
  summary.push(`${file}: ${out.parse_error ? 'parse error: ' + out.parse_error : `${rendered}/${out.cases.length} rendered`}`);
}
console.log(summary.join('\n'));
