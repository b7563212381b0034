// The conversations, kept in the browser (localStorage, or any object with getItem/setItem): list, create, save,
// rename, delete, export to JSON and import from it. Each conversation is {id, title, created, updated, messages};
// a message is {role, content, reasoning?, toolCalls?, origins?, timings?, attachments?, error?, stopped?}.
// Pure apart from the storage it is given; tests/webui/ runs it under Node with a Map-backed storage.

const KEY = 'tandem.conversations.v1';

export class StoreError extends Error {}

export class ConversationStore {
  constructor(storage, now = () => Date.now()) {
    this.storage = storage;
    this.now = now;
  }

  all() {
    try {
      const v = JSON.parse(this.storage.getItem(KEY) || '[]');
      return Array.isArray(v) ? v : [];
    } catch {
      return [];  // a damaged entry is not the page's end: it starts empty (export first if that matters)
    }
  }

  write(list) {
    try {
      this.storage.setItem(KEY, JSON.stringify(list));
    } catch (e) {
      throw new StoreError(`the browser's storage is full (${e.name}): delete or export some conversations`);
    }
  }

  // Most recently updated first.
  list() { return this.all().sort((a, b) => b.updated - a.updated); }
  get(id) { return this.all().find((c) => c.id === id) || null; }

  newId() { return 'c' + this.now().toString(36) + Math.random().toString(36).slice(2, 8); }

  create(title = 'New chat') {
    const t = this.now();
    const c = { id: this.newId(), title, created: t, updated: t, messages: [] };
    this.write([...this.all(), c]);
    return c;
  }

  save(conv) {
    const list = this.all();
    const i = list.findIndex((c) => c.id === conv.id);
    const c = { ...conv, updated: this.now() };
    if (i >= 0) list[i] = c; else list.push(c);
    this.write(list);
    return c;
  }

  rename(id, title) {
    const c = this.get(id);
    if (!c) return null;
    const name = String(title).trim();
    if (!name) throw new StoreError('a conversation needs a name');
    return this.save({ ...c, title: name.slice(0, 200) });
  }

  remove(id) { this.write(this.all().filter((c) => c.id !== id)); }

  exportJson(ids = null) {
    const list = this.list().filter((c) => !ids || ids.includes(c.id));
    return JSON.stringify({ format: 'tandem-conversations', version: 1, conversations: list }, null, 2);
  }

  // Adds the conversations of an export (or a bare array of them); an id already here gets a new one.
  // Returns how many were added. Throws StoreError for a file that is not such an export.
  importJson(text) {
    let v;
    try {
      v = JSON.parse(text);
    } catch (e) {
      throw new StoreError(`not a JSON file: ${e.message}`);
    }
    const convs = Array.isArray(v) ? v : v && v.conversations;
    if (!Array.isArray(convs)) throw new StoreError('not a conversation export: no "conversations" list');
    const list = this.all();
    const ids = new Set(list.map((c) => c.id));
    let n = 0;
    for (const [i, c] of convs.entries()) {
      if (!c || typeof c !== 'object' || !Array.isArray(c.messages))
        throw new StoreError(`conversation ${i + 1}: it has no "messages" list`);
      for (const [j, m] of c.messages.entries()) {
        if (!m || !['user', 'assistant', 'system', 'tool'].includes(m.role) || typeof m.content !== 'string')
          throw new StoreError(`conversation ${i + 1}, message ${j + 1}: needs a role and a text content`);
      }
      const id = typeof c.id === 'string' && !ids.has(c.id) ? c.id : this.newId() + i;
      ids.add(id);
      const t = this.now();
      const title = typeof c.title === 'string' && c.title ? c.title : 'Imported chat';
      list.push({ id, title, created: Number(c.created) || t, updated: Number(c.updated) || t, messages: c.messages.map(cleanMessage) });
      n++;
    }
    this.write(list);
    return n;
  }
}

// An imported message as the page writes them: role and content (checked by the caller), and each optional field
// kept only in the shape the page reads (a field of another shape is dropped, not rendered: an export edited by
// hand, or by another program, must not leave a conversation that throws every time it is opened).
const isNum = (x) => typeof x === 'number' && Number.isFinite(x);
const isStr = (x) => typeof x === 'string';
export function cleanMessage(m) {
  const out = { role: m.role, content: m.content };
  if (isStr(m.reasoning)) out.reasoning = m.reasoning;
  if (isStr(m.error)) out.error = m.error;
  if (m.stopped === true) out.stopped = true;
  if (isStr(m.tool_call_id)) out.tool_call_id = m.tool_call_id;
  if (isStr(m.name)) out.name = m.name;
  if (Array.isArray(m.attachments)) {
    const a = m.attachments.filter((f) => f && isStr(f.name) && isStr(f.text)).map((f) => ({ name: f.name, text: f.text }));
    if (a.length) out.attachments = a;
  }
  if (Array.isArray(m.toolCalls)) {
    const calls = m.toolCalls.filter((c) => c && isStr(c.name) && isStr(c.arguments))
      .map((c) => ({ id: isStr(c.id) ? c.id : '', name: c.name, arguments: c.arguments }));
    if (calls.length) out.toolCalls = calls;
  }
  if (Array.isArray(m.origins) && m.origins.length && m.origins.every((o) => Array.isArray(o) && o.length === 4 &&
      isStr(o[0]) && isStr(o[1]) && isNum(o[2]) && (o[3] === null || isStr(o[3])))) out.origins = m.origins;
  if (out.origins && Array.isArray(m.rounds) && m.rounds.every((r) => r && isNum(r.round) && isNum(r.n) && isNum(r.t) &&
      (r.proposer === null || r.proposer === undefined || isStr(r.proposer))))
    out.rounds = m.rounds.map(({ round, n, proposer, t }) => ({ round, n, proposer: proposer ?? null, t }));
  if (m.timings && typeof m.timings === 'object' && !Array.isArray(m.timings)) {
    const t = Object.fromEntries(Object.entries(m.timings).filter(([, v]) => isNum(v)));
    if (Object.keys(t).length) out.timings = t;
  }
  return out;
}

// A title from the first user message: its first line, cut to 48 characters.
export function titleFrom(text) {
  const line = String(text).trim().split('\n')[0].trim();
  return line.length > 48 ? line.slice(0, 47) + '…' : line || 'New chat';
}
