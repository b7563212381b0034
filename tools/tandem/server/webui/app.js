// The chat page's controller: conversations (store.js), settings (settings.js), streaming an answer
// (chat_stream.js) and drawing messages (markdown.js), with the speculation view: each token coloured by where
// it came from, acceptance and accepted length per message, and a live chart per round.
import { renderMarkdown } from './markdown.js';
import { MessageBuilder, SseParser, roundSeries, specSummary } from './chat_stream.js';
import { ConversationStore, StoreError, titleFrom } from './store.js';
import { SAMPLING, SPECULATIVE, buildRequest, defaultSettings, fieldValue, loadSettings, parseTools, saveSettings } from './settings.js';

const $ = (id) => document.getElementById(id);
const KEY_STORAGE = 'tandem.apiKey';
const CURRENT_STORAGE = 'tandem.current';
const MAX_ATTACHMENT = 512 * 1024;

const store = new ConversationStore(localStorage);
let settings = loadSettings(localStorage);
let conv = null;  // the open conversation
let live = null;  // the answer being streamed: {controller, builder, el, msg, frame}
let pendingFiles = [];  // [{name, text}] for the next message

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

function notice(text) {
  const n = $('notice');
  n.replaceChildren(el('span', { text }), el('button', { type: 'button', text: 'Dismiss', onclick: () => { n.hidden = true; } }));
  n.hidden = !text;
}

function announce(text) { $('status').textContent = text; }

function headers() {
  const h = { 'Content-Type': 'application/json' };
  const key = localStorage.getItem(KEY_STORAGE);
  if (key) h.Authorization = 'Bearer ' + key;
  return h;
}

// ---- theme ----
function applyTheme() {
  const t = settings.theme === 'auto' ? (matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light') : settings.theme;
  document.documentElement.dataset.theme = t;
  $('theme').value = settings.theme;
}

// ---- conversations ----
function persist() {
  if (!conv) return;
  try {
    conv = store.save(conv);
  } catch (e) {
    notice(e instanceof StoreError ? e.message : String(e));
  }
  renderSidebar();
}

function renderSidebar() {
  const ul = $('conversations');
  ul.replaceChildren();
  for (const c of store.list()) {
    const current = conv && c.id === conv.id;
    ul.append(el('li', { 'aria-current': current ? 'true' : 'false', 'data-id': c.id },
      el('button', { type: 'button', class: 'conv-open', text: c.title, title: c.title, onclick: () => openConversation(c.id) }),
      el('button', { type: 'button', class: 'conv-act conv-rename', 'aria-label': `Rename "${c.title}"`, text: 'Rename', onclick: () => renameConversation(c.id) }),
      el('button', { type: 'button', class: 'conv-act conv-delete', 'aria-label': `Delete "${c.title}"`, text: 'Delete', onclick: () => deleteConversation(c.id) })));
  }
}

// Leaving a conversation while it streams: the answer so far is kept, marked stopped, in that conversation.
function abandonLive() {
  if (!live) return;
  live.controller.abort();
  live.msg.stopped = true;
  finishLive();
}

function openConversation(id) {
  abandonLive();
  conv = id ? store.get(id) : null;
  if (conv) localStorage.setItem(CURRENT_STORAGE, conv.id); else localStorage.removeItem(CURRENT_STORAGE);
  $('title').textContent = conv ? conv.title : 'tandem';
  document.title = conv ? `${conv.title} · tandem` : 'tandem chat';
  renderSidebar();
  renderMessages();
  closeSidebar();
}

function newConversation() {
  abandonLive();
  conv = null;
  localStorage.removeItem(CURRENT_STORAGE);
  openConversation(null);
  $('input').focus();
}

function renameConversation(id) {
  const c = store.get(id);
  if (!c) return;
  const name = prompt('Rename the conversation', c.title);
  if (name === null) return;
  try {
    const r = store.rename(id, name);
    if (conv && conv.id === id) { conv = r; $('title').textContent = r.title; }
  } catch (e) { notice(e.message); }
  renderSidebar();
}

function deleteConversation(id) {
  const c = store.get(id);
  if (!c || !confirm(`Delete "${c.title}"?`)) return;
  if (conv && conv.id === id) abandonLive();  // before the removal: finishing saves the conversation
  store.remove(id);
  if (conv && conv.id === id) openConversation(null); else renderSidebar();
}

function exportConversations() {
  const blob = new Blob([store.exportJson()], { type: 'application/json' });
  const a = el('a', { href: URL.createObjectURL(blob), download: `tandem-conversations-${new Date().toISOString().slice(0, 10)}.json` });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 1000);
}

async function importConversations(file) {
  try {
    const n = store.importJson(await file.text());
    announce(`Imported ${n} conversation${n === 1 ? '' : 's'}`);
    notice('');
    renderSidebar();
  } catch (e) {
    notice(`Import of ${file.name} failed: ${e.message}`);
  }
}

// ---- messages ----
function renderMessages() {
  const box = $('messages');
  box.replaceChildren();
  if (!conv || !conv.messages.length) {
    box.append(el('p', { class: 'empty', text: 'Start a conversation: type a message below.' }));
    return;
  }
  conv.messages.forEach((m, i) => box.append(messageEl(m, i)));
  box.scrollTop = box.scrollHeight;
}

function lastAssistantIndex() {
  for (let i = conv.messages.length - 1; i >= 0; i--) if (conv.messages[i].role === 'assistant') return i;
  return -1;
}

function messageEl(m, i) {
  const art = el('article', { class: `msg ${m.role}`, 'aria-label': m.role === 'user' ? 'Your message' : 'Answer', 'data-index': i });
  art.append(el('div', { class: 'role', text: m.role === 'user' ? 'You' : 'Assistant' }));
  if (m.role === 'user') {
    art.append(el('div', { class: 'plain', text: m.content }));
    if (m.attachments && m.attachments.length)
      art.append(el('div', { class: 'attach-list' }, ...m.attachments.map((a) => el('span', { class: 'chip', text: `📄 ${a.name}` }))));
    art.append(el('div', { class: 'msg-foot' }, el('div', { class: 'actions' },
      el('button', { type: 'button', class: 'edit', text: 'Edit', onclick: () => editMessage(i, art) }))));
  } else {
    fillAssistant(art, m, false);
  }
  return art;
}

// An assistant message's body: reasoning, content (Markdown, or the coloured tokens), tool calls, error, and
// its statistics line with the speculation summary and chart.
function fillAssistant(art, m, streaming) {
  const keep = art.querySelector('.role');
  const wasOpen = art.querySelector('details.reasoning')?.open;
  art.replaceChildren(keep);
  if (m.reasoning) {
    const d = el('details', { class: 'reasoning' }, el('summary', { text: streaming && !m.content ? 'Reasoning…' : 'Reasoning' }),
      el('div', { class: 'md' }));
    d.open = wasOpen ?? streaming;
    d.querySelector('.md').innerHTML = renderMarkdown(m.reasoning);
    art.append(d);
  }
  const showTokens = settings.showOrigins && m.origins && m.origins.length;
  if (showTokens) {
    const t = el('div', { class: 'tokens', 'aria-label': 'Tokens coloured by origin' });
    for (const [text, origin, round, proposer] of m.origins)
      t.append(el('span', { class: `tok tok-${origin}`, 'data-round': round, title: `round ${round} · ${origin}${proposer ? ` (${proposer})` : ''}`, text }));
    art.append(t);
  } else if (m.content || !m.toolCalls?.length) {
    const md = el('div', { class: 'md content' });
    md.innerHTML = renderMarkdown(m.content);
    art.append(md);
  }
  for (const c of m.toolCalls || []) {
    let args = c.arguments;
    try { args = JSON.stringify(JSON.parse(c.arguments), null, 2); } catch { /* still arriving, or not JSON */ }
    art.append(el('div', { class: 'tool-call' }, el('strong', { text: `Tool call: ${c.name}` }), el('pre', { text: args })));
  }
  if (m.error) art.append(el('div', { class: 'error', role: 'alert', text: m.error }));
  const foot = el('div', { class: 'msg-foot' });
  const stats = statsText(m, streaming);
  if (stats) foot.append(el('span', { class: 'stats', text: stats }));
  if (m.origins && m.origins.length) foot.append(specLine(m));
  if (!streaming) {
    const actions = el('div', { class: 'actions' },
      el('button', { type: 'button', class: 'copy', text: 'Copy', onclick: () => copyText(m.content) }));
    if (conv && Number(art.dataset.index) === lastAssistantIndex())
      actions.append(el('button', { type: 'button', class: 'regenerate', text: 'Regenerate', onclick: regenerate }));
    foot.append(actions);
  }
  art.append(foot);
}

function statsText(m, streaming) {
  const t = m.timings;
  const parts = [];
  if (m.stopped) parts.push('stopped');
  if (t) {
    parts.push(`${t.predicted_n} tokens, ${(t.predicted_per_second || 0).toFixed(1)} tokens/s`);
    if (!streaming && t.prompt_n !== undefined) parts.push(`prompt ${t.prompt_n} tokens in ${Math.round(t.prompt_ms)} ms`);
    if (!streaming && t.predicted_ms !== undefined) parts.push(`generation ${Math.round(t.predicted_ms)} ms`);
  }
  return parts.join(' · ');
}

function specLine(m) {
  const s = specSummary(m.origins, m.timings);
  const line = el('span', { class: 'spec-line' });
  const caption = el('span', { class: 'chart-caption', text: 'per round: bars = tokens, line = tokens/s' });
  if (!Object.keys(s.byProposer).length) {
    line.append(el('span', { class: 'spec', text: `no drafting: all ${s.tokens} tokens from the target` }), chart(m.rounds || []), caption);
    return line;
  }
  const bits = [`accepted length ${s.meanAccepted.toFixed(2)} tokens/round`];
  if (s.acceptRate !== null) bits.push(`draft acceptance ${(100 * s.acceptRate).toFixed(0)}%`);
  if (s.treeTaken) bits.push(`tree alternatives taken ${s.treeTaken[0]} of ${s.treeTaken[1]}`);
  bits.push(`draft ${s.draft} · tree ${s.tree} · target ${s.target}`);
  const props = Object.entries(s.byProposer).map(([p, v]) => `${p} ${v.rounds} rounds`);
  if (props.length) bits.push(`won: ${props.join(', ')}`);
  line.append(el('span', { class: 'spec', text: bits.join(' · ') }), chart(m.rounds || []), caption);
  return line;
}

// A small chart per round: bars = tokens the round gave, line = tokens/s over the last rounds.
function chart(rounds) {
  const NS = 'http://www.w3.org/2000/svg';
  const W = 240, H = 56;
  const svg = document.createElementNS(NS, 'svg');
  svg.setAttribute('class', 'chart');
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  svg.setAttribute('preserveAspectRatio', 'none');
  svg.setAttribute('role', 'img');
  const series = roundSeries(rounds).slice(-120);
  const maxN = Math.max(1, ...series.map((r) => r.accepted));
  const tps = series.map((r) => r.tps).filter((v) => v !== null);
  const maxT = Math.max(1, ...tps);
  const last = series[series.length - 1];
  svg.setAttribute('aria-label', series.length
    ? `${series.length} rounds; last round ${last.accepted} tokens${last.tps ? `, ${last.tps.toFixed(0)} tokens/s` : ''}`
    : 'no rounds yet');
  const bw = W / Math.max(series.length, 1);
  let path = '';
  series.forEach((r, i) => {
    const h = (r.accepted / maxN) * (H - 4);
    const b = document.createElementNS(NS, 'rect');
    b.setAttribute('class', 'b');
    b.setAttribute('x', (i * bw).toFixed(1));
    b.setAttribute('y', (H - h).toFixed(1));
    b.setAttribute('width', Math.max(bw - 1, 0.5).toFixed(1));
    b.setAttribute('height', h.toFixed(1));
    svg.append(b);
    if (r.tps !== null) path += `${path ? 'L' : 'M'}${(i * bw + bw / 2).toFixed(1)},${(H - 2 - (r.tps / maxT) * (H - 6)).toFixed(1)}`;
  });
  if (path) {
    const p = document.createElementNS(NS, 'path');
    p.setAttribute('class', 'a');
    p.setAttribute('d', path);
    svg.append(p);
  }
  return svg;
}

async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    announce('Copied');
  } catch {
    const ta = el('textarea', { class: 'visually-hidden' });
    ta.value = text;
    document.body.append(ta);
    ta.select();
    document.execCommand('copy');
    ta.remove();
    announce('Copied');
  }
}

function editMessage(i, art) {
  if (live) return;
  const m = conv.messages[i];
  const ta = el('textarea', { 'aria-label': 'Edit your message' });
  ta.value = m.content;
  const box = el('div', { class: 'edit-box' }, ta, el('div', { class: 'row' },
    el('button', { type: 'button', text: 'Cancel', onclick: () => renderMessages() }),
    el('button', { type: 'button', class: 'primary save-edit', text: 'Save and send', onclick: () => {
      const text = ta.value.trim();
      if (!text) return;
      conv.messages = conv.messages.slice(0, i);
      conv.messages.push({ ...m, content: text });
      persist();
      renderMessages();
      generate();
    } })));
  art.replaceChildren(art.querySelector('.role'), box);
  ta.focus();
}

function regenerate() {
  if (live || !conv) return;
  const i = lastAssistantIndex();
  if (i < 0) return;
  conv.messages = conv.messages.slice(0, i);
  persist();
  renderMessages();
  generate();
}

// ---- sending and streaming ----
async function send(text) {
  if (live) return;
  if (!text.trim() && !pendingFiles.length) return;
  try {
    buildRequest(settings, []);  // checks the settings before anything is stored
  } catch (e) {
    notice(`Settings: ${e.message}`);
    return;
  }
  if (!conv) {
    try {
      conv = store.create(titleFrom(text || pendingFiles[0].name));
    } catch (e) { notice(e.message); return; }
    localStorage.setItem(CURRENT_STORAGE, conv.id);
    $('title').textContent = conv.title;
  }
  const msg = { role: 'user', content: text };
  if (pendingFiles.length) msg.attachments = pendingFiles;
  pendingFiles = [];
  renderAttachments();
  conv.messages.push(msg);
  persist();
  renderMessages();
  await generate();
}

function setStreaming(on) {
  $('send').hidden = on;
  $('stop').hidden = !on;
  $('messages').setAttribute('aria-busy', on ? 'true' : 'false');
}

async function generate() {
  const history = conv.messages.filter((m) => !(m.role === 'assistant' && m.error && !m.content));
  const msg = { role: 'assistant', content: '' };
  conv.messages.push(msg);
  const art = messageEl(msg, conv.messages.length - 1);
  $('messages').querySelector('.empty')?.remove();
  $('messages').append(art);
  const builder = new MessageBuilder();
  const controller = new AbortController();
  live = { controller, builder, art, msg, frame: 0 };
  setStreaming(true);
  announce('Answering…');
  let body;
  try {
    body = buildRequest(settings, history);
  } catch (e) {
    msg.error = `Settings: ${e.message}`;
    return finishLive();
  }
  try {
    const r = await fetch('/v1/chat/completions', { method: 'POST', headers: headers(), body: JSON.stringify(body), signal: controller.signal });
    if (!r.ok) {
      const text = await r.text();
      let why = text;
      try { why = JSON.parse(text).error.message || text; } catch { /* not JSON */ }
      msg.error = `Error ${r.status}: ${why}`;
      return finishLive();
    }
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    const sse = new SseParser();
    let done = false;
    while (!done) {
      const { value, done: end } = await reader.read();
      if (end) break;
      for (const data of sse.push(dec.decode(value, { stream: true }))) {
        if (data === '[DONE]') { done = true; break; }
        let chunk;
        try { chunk = JSON.parse(data); } catch { continue; }
        builder.apply(chunk, performance.now());
      }
      scheduleRender();
    }
    if (!builder.finish && !builder.error) msg.error = 'The connection closed before the answer was finished.';
  } catch (e) {
    if (e.name === 'AbortError') msg.stopped = true;
    else msg.error = `Connection lost: ${e.message}. Is the server running?`;
  }
  finishLive();
}

function takeBuilder(msg, b) {
  msg.content = b.content;
  if (b.reasoning) msg.reasoning = b.reasoning;
  if (b.toolCalls.length) msg.toolCalls = b.toolCalls.filter(Boolean);
  if (b.origins.length) { msg.origins = b.origins; msg.rounds = b.rounds.map(({ round, n, proposer, t }) => ({ round, n, proposer, t: Math.round(t) })); }
  if (b.timings) msg.timings = b.timings;
  if (b.error) msg.error = `Error: ${b.error}`;
}

function scheduleRender() {
  if (!live || live.frame) return;
  live.frame = requestAnimationFrame(() => {
    if (!live) return;
    live.frame = 0;
    takeBuilder(live.msg, live.builder);
    const box = $('messages');
    const atEnd = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
    fillAssistant(live.art, live.msg, true);
    if (atEnd) box.scrollTop = box.scrollHeight;
  });
}

function finishLive() {
  if (!live) return;
  const { msg, builder, frame } = live;
  if (frame) cancelAnimationFrame(frame);
  takeBuilder(msg, builder);
  live = null;
  setStreaming(false);
  persist();
  renderMessages();
  announce(msg.error ? 'The answer failed' : msg.stopped ? 'Stopped' : 'Answer complete');
  $('input').focus();
}

function stop() {
  if (live) live.controller.abort();
}

// ---- attachments ----
async function addFiles(files) {
  for (const f of files) {
    if (f.size > MAX_ATTACHMENT) { notice(`${f.name} is larger than ${MAX_ATTACHMENT / 1024} KiB: not attached`); continue; }
    const text = await f.text();
    if (text.includes('\u0000')) { notice(`${f.name} is not a text file: not attached`); continue; }
    pendingFiles.push({ name: f.name, text });
  }
  renderAttachments();
}

function renderAttachments() {
  $('attachments').replaceChildren(...pendingFiles.map((f, i) => el('span', { class: 'chip' }, `📄 ${f.name}`,
    el('button', { type: 'button', 'aria-label': `Remove ${f.name}`, text: '✕', onclick: () => { pendingFiles.splice(i, 1); renderAttachments(); } }))));
}

// ---- settings ----
function fieldInput(f, value) {
  const id = `set-${f.key}`;
  let input;
  if (f.kind === 'select') {
    input = el('select', { id });
    for (const o of f.options) input.append(el('option', { value: o, text: o === '' ? 'server default' : o }));
  } else if (f.kind === 'lines') {
    input = el('textarea', { id, rows: 2 });
  } else {
    input = el('input', { id, type: f.kind === 'text' ? 'text' : 'number', min: f.min, max: f.max, step: f.step ?? (f.kind === 'int' ? 1 : 'any'), placeholder: f.placeholder || 'default' });
  }
  input.value = Array.isArray(value) ? value.join('\n') : value ?? '';
  return el('label', { for: id }, f.label, input);
}

function openSettings() {
  const sf = $('sampling-fields'), pf = $('spec-fields');
  sf.replaceChildren(el('legend', { text: 'Sampling' }), ...SAMPLING.map((f) => fieldInput(f, settings.sampling[f.key])));
  pf.replaceChildren(el('legend', { text: 'Speculative decoding' }), ...SPECULATIVE.map((f) => fieldInput(f, settings.speculative[f.key])));
  $('set-system').value = settings.system;
  $('set-tools').value = settings.tools;
  $('set-key').value = localStorage.getItem(KEY_STORAGE) || '';
  $('settings-error').hidden = true;
  $('settings').showModal();
}

function saveSettingsFromForm() {
  const next = { ...settings, sampling: {}, speculative: {}, system: $('set-system').value, tools: $('set-tools').value };
  try {
    for (const f of SAMPLING) {
      const raw = $(`set-${f.key}`).value;
      fieldValue(f, raw);
      if (raw.trim() !== '') next.sampling[f.key] = raw;
    }
    for (const f of SPECULATIVE) {
      const raw = $(`set-${f.key}`).value;
      fieldValue(f, raw);
      if (raw.trim() !== '') next.speculative[f.key] = raw;
    }
    parseTools(next.tools);
  } catch (e) {
    const err = $('settings-error');
    err.textContent = e.message;
    err.hidden = false;
    return false;
  }
  settings = next;
  saveSettings(localStorage, settings);
  const key = $('set-key').value.trim();
  if (key) localStorage.setItem(KEY_STORAGE, key); else localStorage.removeItem(KEY_STORAGE);
  loadModel();
  return true;
}

async function loadModel() {
  try {
    const r = await fetch('/v1/models', { headers: headers() });
    const j = await r.json();
    $('model').textContent = j.data && j.data[0] ? j.data[0].id : '';
  } catch {
    $('model').textContent = '';
  }
}

function closeSidebar() {
  $('sidebar').classList.remove('open');
  $('open-sidebar').setAttribute('aria-expanded', 'false');
}

// ---- wiring ----
function init() {
  applyTheme();
  matchMedia('(prefers-color-scheme: dark)').addEventListener('change', applyTheme);
  $('show-origins').checked = settings.showOrigins;
  $('legend').hidden = !settings.showOrigins;
  $('theme').addEventListener('change', () => { settings.theme = $('theme').value; saveSettings(localStorage, settings); applyTheme(); });
  $('show-origins').addEventListener('change', () => {
    settings.showOrigins = $('show-origins').checked;
    saveSettings(localStorage, settings);
    $('legend').hidden = !settings.showOrigins;
    renderMessages();
  });
  $('new-chat').addEventListener('click', newConversation);
  $('export').addEventListener('click', exportConversations);
  $('import-file').addEventListener('change', (e) => { if (e.target.files[0]) importConversations(e.target.files[0]); e.target.value = ''; });
  $('attach-file').addEventListener('change', async (e) => { await addFiles([...e.target.files]); e.target.value = ''; });
  $('open-sidebar').addEventListener('click', () => { $('sidebar').classList.add('open'); $('open-sidebar').setAttribute('aria-expanded', 'true'); $('new-chat').focus(); });
  $('close-sidebar').addEventListener('click', closeSidebar);
  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    const text = $('input').value;
    if (!text.trim() && !pendingFiles.length) return;
    $('input').value = '';
    send(text.trim());
  });
  $('input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); $('composer').requestSubmit(); }
  });
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && live && !$('settings').open) { e.preventDefault(); stop(); }
  });
  $('stop').addEventListener('click', stop);
  $('messages').addEventListener('click', (e) => {
    const b = e.target.closest('.copy-code');
    if (b) copyText(b.closest('.code').querySelector('pre').textContent);
  });
  $('open-settings').addEventListener('click', openSettings);
  $('settings-cancel').addEventListener('click', () => $('settings').close());
  $('settings-reset').addEventListener('click', () => {
    const keep = { theme: settings.theme, showOrigins: settings.showOrigins };
    settings = { ...defaultSettings(), ...keep };
    saveSettings(localStorage, settings);
    $('settings').close();
    openSettings();
  });
  $('settings-form').addEventListener('submit', (e) => {
    e.preventDefault();
    if (saveSettingsFromForm()) $('settings').close();
  });
  loadModel();
  const current = localStorage.getItem(CURRENT_STORAGE);
  openConversation(current && store.get(current) ? current : null);
  $('input').focus();
}

init();
