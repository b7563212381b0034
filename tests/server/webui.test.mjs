// The chat page in a real browser (Debian's chromium, driven by playwright-core): a whole session against
// `tandem serve` with a draft model — settings applied to the request, an answer streamed and stopped,
// regenerate and edit, the conversation surviving a reload, the coloured-token view matching the server's
// token_origins, conversations renamed, exported, deleted and imported, Markdown, reasoning and tool calls of an
// imported conversation, keyboard shortcuts, labels and contrast in both themes, the narrow layout, and a server
// with an API key (401 shown in place, then the key kept in the browser, then a lost connection shown in place).
// Screenshots go to $TANDEM_ARTIFACTS (or a temp dir); their paths are printed.
import test from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { startServer, storiesDraft, STORIES, tmpDir } from './helpers.mjs';

const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
const ARTIFACTS = process.env.TANDEM_ARTIFACTS || tmpDir();

async function launch() {
  assert.ok(fs.existsSync(CHROMIUM), `Chromium not found at ${CHROMIUM} (apt-get install chromium, or set CHROMIUM_PATH)`);
  return chromium.launch({
    executablePath: CHROMIUM, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
}

async function shot(page, name, opts = {}) {
  const file = path.join(ARTIFACTS, `webui-${name}.png`);
  await page.screenshot({ path: file, ...opts });
  console.log(`screenshot: ${file}`);
}

// Page errors and failed loads fail the test (a CSP violation or a script error shows up here).
function watch(page) {
  const problems = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error' && !/status of 401/.test(m.text())) problems.push(`console: ${m.text()}`); });
  return problems;
}

async function answered(page) {
  await page.waitForFunction(() => document.querySelector('#stop').hidden && document.querySelectorAll('.msg.assistant').length > 0
    && !document.querySelector('#messages').getAttribute('aria-busy')?.includes('true'), null, { timeout: 60000 });
}

async function openSettings(page, fields) {
  await page.click('#open-settings');
  for (const [id, v] of Object.entries(fields)) {
    const tag = await page.$eval(`#${id}`, (e) => e.tagName);
    if (tag === 'SELECT') await page.selectOption(`#${id}`, v); else await page.fill(`#${id}`, v);
  }
  await page.click('#settings-save');
  await page.waitForFunction(() => !document.querySelector('#settings').open);
}

// The SSE text of a chat stream: its token_origins and content.
function parseStream(text) {
  const origins = [];
  let content = '';
  for (const block of text.split('\n\n')) {
    const data = block.replace(/^data: ?/, '');
    if (!data || data === '[DONE]') continue;
    const o = JSON.parse(data);
    for (const t of o.token_origins || []) origins.push(t);
    const d = o.choices && o.choices[0] && o.choices[0].delta;
    if (d && typeof d.content === 'string') content += d.content;
  }
  return { origins, content };
}

test('the chat page: a whole session with speculation made visible', async () => {
  const srv = await startServer(['-m', STORIES, '-md', storiesDraft(), '-c', '4096']);
  const browser = await launch();
  try {
    const context = await browser.newContext({ viewport: { width: 1280, height: 860 }, acceptDownloads: true });
    const page = await context.newPage();
    const problems = watch(page);
    await page.goto(srv.base + '/');
    const csp = (await page.request.get(srv.base + '/')).headers()['content-security-policy'];
    assert.match(csp, /script-src 'self'/, 'the page is served with its Content-Security-Policy');
    await page.waitForFunction(() => document.querySelector('#model').textContent.includes('stories'));

    // settings, applied to the request
    await openSettings(page, { 'set-system': 'You tell stories.', 'set-temperature': '0', 'set-max_tokens': '40',
      'set-n_max': '4', 'set-adaptive': 'false', 'set-p_min': '0' });
    const streams = [];
    await page.route('**/v1/chat/completions', async (route) => {  // keeps what the server sent (delivered at once)
      const resp = await route.fetch();
      const body = await resp.text();
      streams.push({ request: route.request().postDataJSON(), body });
      await route.fulfill({ response: resp, body });
    });
    await page.fill('#input', 'Once upon a time');
    await page.press('#input', 'Enter');
    await answered(page);
    const { request, body } = streams[0];
    assert.deepEqual(request.messages, [{ role: 'system', content: 'You tell stories.' }, { role: 'user', content: 'Once upon a time' }]);
    assert.equal(request.temperature, 0);
    assert.equal(request.max_tokens, 40);
    assert.deepEqual(request.speculative, { n_max: 4, p_min: 0, adaptive: false });
    assert.equal(request.token_origins, true);
    const first = parseStream(body);
    assert.equal(first.origins.length, 40, 'the server sent an origin for every token');
    assert.ok(first.origins.some((t) => t.origin !== 'target'), 'no drafted token was accepted: the colours are untested');
    const shown = await page.textContent('.msg.assistant .content');
    assert.equal(shown.replace(/\s+/g, ''), first.content.replace(/\s+/g, ''));
    const stats = await page.textContent('.msg.assistant .stats');
    assert.match(stats, /^40 tokens, [\d.]+ tokens\/s · prompt \d+ tokens in \d+ ms · generation \d+ ms$/);

    // the coloured-token view is the server's token_origins, token for token
    await page.check('#show-origins');
    const spans = await page.$$eval('.msg.assistant .tokens .tok', (s) => s.map((e) => [e.textContent, e.className, e.dataset.round]));
    assert.deepEqual(spans, first.origins.map((t) => [t.text, `tok tok-${t.origin}`, String(t.round)]));
    const rounds = new Set(first.origins.map((t) => t.round)).size;
    const spec = await page.textContent('.msg.assistant .spec');
    assert.match(spec, new RegExp(`^accepted length ${(40 / rounds).toFixed(2)} tokens/round · draft acceptance \\d+%`));
    const count = (o) => first.origins.filter((t) => t.origin === o).length;
    assert.ok(spec.includes(`draft ${count('draft')} · tree ${count('tree')} · target ${count('target')}`), spec);
    assert.ok(await page.isVisible('.msg.assistant svg.chart rect'), 'the per-round chart is drawn');
    await shot(page, 'session-tokens');

    // a reload keeps the conversation, its origins and the view
    await page.reload();
    await page.waitForSelector('.msg.assistant .tokens');
    assert.deepEqual(await page.$$eval('#conversations li .conv-open', (b) => b.map((e) => e.textContent)), ['Once upon a time']);
    assert.equal(await page.$$eval('.msg.assistant .tokens .tok', (s) => s.length), 40);
    assert.equal(await page.textContent('.msg.user .plain'), 'Once upon a time');

    // regenerate: one answer still, the same greedy text
    await page.uncheck('#show-origins');
    await page.click('.msg.assistant .regenerate');
    await answered(page);
    assert.equal(await page.$$eval('.msg.assistant', (m) => m.length), 1);
    assert.equal(parseStream(streams[1].body).content, first.content, 'greedy regeneration gives the same text');
    assert.equal(streams[1].request.messages.length, 2, 'the old answer is not sent again');

    // edit the question: the conversation continues from the edited message
    await page.click('.msg.user .edit');
    await page.fill('.edit-box textarea', 'Tom and Lily');
    await page.click('.save-edit');
    await answered(page);
    assert.equal(await page.textContent('.msg.user .plain'), 'Tom and Lily');
    assert.equal(await page.$$eval('.msg', (m) => m.length), 2);
    assert.deepEqual(streams[2].request.messages.at(-1), { role: 'user', content: 'Tom and Lily' });
    await page.unroute('**/v1/chat/completions');

    // streaming, then Esc stops it: the server's slot is free again
    // (with a list of proposers: each round's winner is named on its tokens)
    // (ignore_eos added on the way, and a context of 4096: the answer cannot end by itself before the stop, however
    // slow a loaded machine makes the page — greedy stories260K reached its end of text at 336 tokens once)
    await openSettings(page, { 'set-max_tokens': '100000', 'set-type': 'draft,ngram' });
    await page.fill('#input', 'The little dog was sad because');
    await page.route('**/v1/chat/completions', (route) =>
      route.continue({ postData: JSON.stringify({ ...route.request().postDataJSON(), ignore_eos: true }) }));
    const sent = page.waitForRequest('**/v1/chat/completions');
    await page.press('#input', 'Enter');
    assert.deepEqual((await sent).postDataJSON().speculative, { type: 'draft,ngram', n_max: 4, p_min: 0, adaptive: false });
    await page.waitForFunction(() => {
      const m = document.querySelectorAll('.msg.assistant');
      const last = m[m.length - 1];
      return !document.querySelector('#stop').hidden && last && last.querySelector('.content')?.textContent.length > 30;
    }, null, { timeout: 30000 });
    await shot(page, 'streaming');
    await page.keyboard.press('Escape');
    await answered(page);
    assert.match(await page.textContent('.msg.assistant:last-of-type .stats'), /^stopped/);
    await page.unroute('**/v1/chat/completions');
    let busy = true;
    for (let i = 0; i < 50 && busy; i++) {
      const slots = await (await fetch(srv.base + '/slots')).json();
      busy = slots.some((s) => s.is_processing);
      if (busy) await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(busy, false, 'the stopped request is still generating on the server');
    await page.check('#show-origins');
    const titles = await page.$$eval('.msg.assistant:last-of-type .tok', (s) => s.map((e) => e.title));
    assert.ok(titles.length > 10 && titles.every((t) => /^round \d+ · (draft|tree|target)( \((draft|ngram)\))?$/.test(t)), titles.slice(0, 5).join('; '));
    assert.ok(titles.some((t) => /\((draft|ngram)\)$/.test(t)), 'no round names its proposer');
    await page.uncheck('#show-origins');

    // Shift+Enter is a new line, not a send
    await page.fill('#input', 'a');
    await page.press('#input', 'Shift+Enter');
    await page.type('#input', 'b');
    assert.equal(await page.inputValue('#input'), 'a\nb');
    await page.fill('#input', '');

    // conversations: rename, export, delete, import
    page.once('dialog', (d) => d.accept('Renamed chat'));
    await page.click('#conversations li .conv-rename');
    await page.waitForFunction(() => document.querySelector('#conversations .conv-open').textContent === 'Renamed chat');
    assert.equal(await page.textContent('#title'), 'Renamed chat');
    const [download] = await Promise.all([page.waitForEvent('download'), page.click('#export')]);
    const exported = path.join(ARTIFACTS, 'webui-export.json');
    await download.saveAs(exported);
    const ex = JSON.parse(fs.readFileSync(exported, 'utf8'));
    assert.equal(ex.conversations.length, 1);
    assert.equal(ex.conversations[0].messages.length, 4);
    page.once('dialog', (d) => d.accept());
    await page.click('#conversations li .conv-delete');
    await page.waitForFunction(() => document.querySelectorAll('#conversations li').length === 0);
    assert.match(await page.textContent('#messages'), /Start a conversation/);
    await page.setInputFiles('#import-file', exported);
    await page.waitForFunction(() => document.querySelectorAll('#conversations li').length === 1);

    // an imported conversation with Markdown, hostile HTML, reasoning and a tool call
    const rich = {
      conversations: [{
        id: 'rich', title: 'Rich answer', created: 1, updated: 2, messages: [
          { role: 'user', content: 'Show me' },
          { role: 'assistant', reasoning: 'First I *think*.', content: '## Plan\n\n- **one**\n- two\n\n```python\nprint("hi")\n```\n\n<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>',
            toolCalls: [{ id: 'c1', name: 'get_weather', arguments: '{"city":"Paris"}' }] },
        ],
      }],
    };
    const richFile = path.join(tmpDir(), 'rich.json');
    fs.writeFileSync(richFile, JSON.stringify(rich));
    await page.setInputFiles('#import-file', richFile);
    await page.waitForFunction(() => document.querySelectorAll('#conversations li').length === 2);
    await page.click('#conversations li[data-id="rich"] .conv-open');
    await page.waitForSelector('.msg.assistant .code');
    assert.equal(await page.textContent('.msg.assistant h2'), 'Plan');
    assert.equal(await page.textContent('.msg.assistant li strong'), 'one');
    assert.equal(await page.textContent('.msg.assistant .code .hl-string'), '"hi"');
    assert.equal(await page.$$eval('.msg.assistant img, .msg.assistant script', (e) => e.length), 0);
    assert.equal(await page.evaluate(() => window.pwned), undefined);
    assert.equal(await page.$eval('.msg.assistant details.reasoning', (d) => d.open), false, 'reasoning starts collapsed');
    await page.click('.msg.assistant details.reasoning summary');
    assert.equal(await page.$eval('.msg.assistant details.reasoning', (d) => d.open), true);
    assert.match(await page.textContent('.msg.assistant .tool-call'), /Tool call: get_weather[\s\S]*"city": "Paris"/);
    await shot(page, 'markdown');

    // every control has a name
    const unnamed = await page.evaluate(() => {
      const out = [];
      for (const e of document.querySelectorAll('button, input, select, textarea')) {
        if (e.closest('dialog') && !e.closest('dialog').open) continue;
        const name = e.getAttribute('aria-label') || (e.labels && [...e.labels].map((l) => l.textContent).join('').trim()) || e.textContent.trim();
        if (!name) out.push(e.outerHTML.slice(0, 80));
      }
      return out;
    });
    assert.deepEqual(unnamed, []);
    // focus order: the skip link first; from the message box, Tab reaches the attach control, then Send
    assert.equal(await page.evaluate(() => [...document.querySelectorAll('a[href], button, input, select, textarea')]
      .find((e) => e.tabIndex >= 0 && !e.disabled)?.className), 'skip');
    await page.focus('#input');
    await page.keyboard.press('Tab');
    assert.equal(await page.evaluate(() => document.activeElement.id), 'attach-file');
    await page.keyboard.press('Tab');
    assert.equal(await page.evaluate(() => document.activeElement.id), 'send');

    // contrast of text on its backgrounds, both themes
    for (const theme of ['light', 'dark']) {
      await page.selectOption('#theme', theme);
      const low = await page.evaluate(() => {
        const rgb = (c) => c.match(/\d+(\.\d+)?/g).slice(0, 3).map(Number);
        const lum = ([r, g, b]) => [r, g, b].map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; })
          .reduce((a, v, i) => a + v * [0.2126, 0.7152, 0.0722][i], 0);
        const ratio = (a, b) => { const [x, y] = [lum(rgb(a)), lum(rgb(b))].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05); };
        const css = getComputedStyle(document.documentElement);
        const v = (n) => { const d = document.createElement('div'); d.style.color = css.getPropertyValue(n); document.body.append(d); const c = getComputedStyle(d).color; d.remove(); return c; };
        const pairs = [['--text', '--bg'], ['--text', '--panel'], ['--muted', '--panel'], ['--muted', '--bg'], ['--text', '--user'],
          ['--text', '--tok-draft'], ['--text', '--tok-tree'], ['--accent-text', '--accent'], ['--danger', '--panel'],
          ['--hl-comment', '--code-bg'], ['--hl-string', '--code-bg'], ['--hl-number', '--code-bg'], ['--hl-keyword', '--code-bg'], ['--hl-literal', '--code-bg']];
        return pairs.map(([f, b]) => [f, b, ratio(v(f), v(b))]).filter((p) => p[2] < 4.5);
      });
      assert.deepEqual(low, [], `${theme}: text below 4.5:1`);
    }
    await shot(page, 'markdown-dark');
    await page.selectOption('#theme', 'light');

    // the narrow layout: the list is a drawer
    await page.setViewportSize({ width: 390, height: 780 });
    assert.equal(await page.isVisible('#open-sidebar'), true);
    await page.waitForFunction(() => document.querySelector('#sidebar').getBoundingClientRect().right <= 0
      && getComputedStyle(document.querySelector('#sidebar')).visibility === 'hidden', null, { timeout: 5000 });
    assert.equal(await page.isVisible('#new-chat'), false, 'the closed list is out of the tab order');
    await shot(page, 'narrow', { fullPage: true });
    await page.click('#open-sidebar');
    await page.waitForFunction(() => document.querySelector('#sidebar').getBoundingClientRect().left >= 0);
    assert.equal(await page.evaluate(() => document.activeElement.id), 'new-chat', 'opening the list moves the focus into it');
    await shot(page, 'narrow-list');
    assert.deepEqual(problems, []);
  } finally {
    await browser.close();
    await srv.stop();
  }
});

test('the chat page on a server with an API key: 401 in place, then the key kept; a lost connection in place', async () => {
  const srv = await startServer(['-m', STORIES, '--api-key', 'sekret', '-n', '16']);
  const browser = await launch();
  try {
    const page = await (await browser.newContext()).newPage();
    const problems = watch(page);
    await page.goto(srv.base + '/');
    await page.fill('#input', 'Hello');
    await page.press('#input', 'Enter');
    await answered(page);
    assert.match(await page.textContent('.msg.assistant .error'), /^Error 401: invalid or missing API key/);
    await shot(page, 'api-key-401');
    await openSettings(page, { 'set-key': 'sekret' });
    await page.click('.msg.assistant .regenerate');
    await answered(page);
    assert.equal(await page.$$eval('.msg.assistant .error', (e) => e.length), 0);
    assert.match(await page.textContent('.msg.assistant .stats'), /^16 tokens/);
    assert.equal(await page.textContent('.msg.assistant .spec'), 'no drafting: all 16 tokens from the target');
    await page.reload();
    assert.equal(await page.evaluate(() => localStorage.getItem('tandem.apiKey')), 'sekret');
    await page.fill('#input', 'Again');
    await page.press('#input', 'Enter');
    await answered(page);
    assert.equal(await page.$$eval('.msg.assistant .error', (e) => e.length), 0);

    // an attached text file goes with the message, after its text
    const notes = path.join(tmpDir(), 'notes.txt');
    fs.writeFileSync(notes, 'hello notes');
    await page.setInputFiles('#attach-file', notes);
    await page.waitForSelector('#attachments .chip');
    await page.fill('#input', 'Summarize');
    const sent = page.waitForRequest('**/v1/chat/completions');
    await page.press('#input', 'Enter');
    assert.deepEqual((await sent).postDataJSON().messages.at(-1), { role: 'user', content: 'Summarize\n\n--- notes.txt ---\nhello notes' });
    await answered(page);
    assert.equal(await page.textContent('.msg.user:nth-last-of-type(2) .chip'), '📄 notes.txt');
    assert.equal(await page.$$eval('#attachments .chip', (c) => c.length), 0, 'the attachment is sent once');
    await srv.stop();
    await page.fill('#input', 'Anyone there?');
    await page.press('#input', 'Enter');
    await answered(page);
    assert.match(await page.textContent('.msg.assistant:last-of-type .error'), /^Connection lost: .*Is the server running\?/);
    await shot(page, 'connection-lost');
    assert.deepEqual(problems.filter((p) => !/ERR_CONNECTION_REFUSED/.test(p)), []);
  } finally {
    await browser.close();
    await srv.stop();
  }
});
