// Drives llama.cpp's own web UI (tools/ui, built with npm) against a running `tandem serve` in Debian's chromium
// (playwright-core from tests/server): load, send a message and read the streamed answer, regenerate, stop a long
// answer, reload and find the conversation again. Records every console error and warning, page error, failed
// request and HTTP answer >= 400, prints a summary (JSON on the last line) and exits 1 when there is any.
//   node bench/llama-ui.mjs BASE_URL [DIST_DIR]
// With DIST_DIR the page's files are served by this harness from DIR (the API still goes to BASE_URL): for a tandem
// without --path (e.g. an older binary, to compare); without it, BASE_URL serves them (tandem serve --path DIST).
// bench/llama-ui.sh builds the UI, starts the server and runs this.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';

const require = createRequire(new URL('../tests/server/package.json', import.meta.url));
const { chromium } = require('playwright-core');

const [base, dist] = process.argv.slice(2);
if (!base) { console.error('usage: node bench/llama-ui.mjs BASE_URL [DIST_DIR]'); process.exit(2); }
const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
const SHOTS = process.env.UI_SHOTS || '';
const TIMEOUT = Number(process.env.UI_TIMEOUT_MS || 60000);

const problems = [];  // what fails the run
const notes = [];  // what is expected and only reported (a stopped stream's aborted request)
const requests = new Map();  // "METHOD path" -> {status: count}
const steps = [];
let stopping = false;

function count(method, url, status) {
  const u = new URL(url);
  if (u.origin !== new URL(base).origin) return;
  const key = `${method} ${u.pathname}`;
  const e = requests.get(key) || {};
  e[status] = (e[status] || 0) + 1;
  requests.set(key, e);
}

const browser = await chromium.launch({
  executablePath: CHROMIUM, headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
if (dist) {
  const root = fs.realpathSync(dist);
  await context.route(`${base}/**`, async (route) => {
    const u = new URL(route.request().url());
    let f = path.join(root, decodeURIComponent(u.pathname));
    if (f.endsWith('/')) f = path.join(f, 'index.html');
    if (route.request().method() === 'GET' && f.startsWith(root) && fs.existsSync(f) && fs.statSync(f).isFile())
      return route.fulfill({ path: f });
    return route.continue();
  });
}
const page = await context.newPage();
page.on('console', (m) => {
  if (m.type() === 'error' || m.type() === 'warning') {
    const text = `${m.type()}: ${m.text()}`.slice(0, 400);
    // a stopped answer's fetch is aborted by the UI itself (AbortController): expected, reported apart
    if (stopping && /abort/i.test(text)) notes.push(text);
    else if (expected403 > 0 && /status of 403/.test(text)) {
      expected403--;
      notes.push(`console ${text} (the 403 above)`);
    } else problems.push(`console ${text}`);
  }
});
if (process.env.UI_DEBUG) page.on('request', (r) => { if (r.method() === 'POST') console.log(`request ${r.url()} ${(r.postData() || '').slice(0, 1500)}`); });
page.on('pageerror', (e) => problems.push(`page error: ${e.message.slice(0, 400)}`));
// llama-server's own answer when its tools and CORS proxy are off (as here): 403, which the UI reads as "disabled";
// the browser still logs each 4xx as "Failed to load resource", so those lines are matched to these answers.
const llamaServersOwn = (status, p) => status === 403 && (p === '/tools' || p === '/cors-proxy');
let expected403 = 0;
page.on('response', (r) => {
  count(r.request().method(), r.url(), r.status());
  const u = new URL(r.url());
  if (r.status() < 400 || u.origin !== new URL(base).origin) return;
  const what = `HTTP ${r.status()} ${r.request().method()} ${u.pathname}`;
  if (llamaServersOwn(r.status(), u.pathname)) {
    expected403++;
    notes.push(`${what} (llama-server's answer with its tools off)`);
  } else problems.push(what);
});
page.on('requestfailed', (r) => {
  const why = `${r.request ? '' : ''}${r.method()} ${new URL(r.url()).pathname}: ${r.failure()?.errorText}`;
  if (stopping && /ERR_ABORTED/.test(why)) notes.push(`request aborted by Stop: ${why}`);
  else problems.push(`request failed: ${why}`);
});

async function shot(name) {
  if (SHOTS) await page.screenshot({ path: path.join(SHOTS, `llama-ui-${name}.png`) });
}
async function step(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    steps.push(`${name}: ok (${Date.now() - t0} ms)`);
  } catch (e) {
    problems.push(`step "${name}" failed: ${e.message.split('\n')[0]}`);
    steps.push(`${name}: FAILED`);
    await shot(`failed-${name.replace(/\W+/g, '-')}`).catch(() => {});
  }
}
const input = () => page.locator('textarea').first();
const assistant = () => page.getByLabel('Assistant message with actions');
const stopButton = () => page.getByRole('button', { name: 'Stop', exact: true });
async function answered(n) {  // n assistant messages, none streaming
  await assistant().nth(n - 1).waitFor({ timeout: TIMEOUT });
  await stopButton().waitFor({ state: 'hidden', timeout: TIMEOUT });
  const text = (await assistant().nth(n - 1).innerText()).trim();
  if (!text) throw new Error(`assistant message ${n} is empty`);
  return text;
}

await step('load', async () => {
  await page.goto(base + '/', { waitUntil: 'load' });
  await input().waitFor({ timeout: TIMEOUT });
  await page.waitForLoadState('networkidle', { timeout: TIMEOUT }).catch(() => {});
  await shot('loaded');
});
await step('send and stream', async () => {
  await input().fill('Once upon a time');
  await input().press('Enter');
  const text = await answered(1);
  console.log(`answer: ${JSON.stringify(text.slice(0, 120))}`);
  await shot('answered');
});
await step('regenerate', async () => {
  await assistant().first().hover();
  await page.getByRole('button', { name: 'Regenerate' }).first().click();
  await page.waitForTimeout(300);
  await answered(1);
});
await step('stop', async () => {
  await input().fill('Tell me a long story about a cat');
  stopping = true;
  await input().press('Enter');
  await stopButton().click({ timeout: TIMEOUT });
  await stopButton().waitFor({ state: 'hidden', timeout: TIMEOUT });
  await page.waitForTimeout(1500);
  stopping = false;
  if (await stopButton().isVisible()) throw new Error('the Stop button is still there 1.5 s after the stop');
  await shot('stopped');
});
await step('reload keeps the conversation', async () => {
  const before = await assistant().count();
  await page.reload({ waitUntil: 'load' });
  await input().waitFor({ timeout: TIMEOUT });
  await assistant().first().waitFor({ timeout: TIMEOUT });
  const after = await assistant().count();
  if (after < 1 || after < before - 1) throw new Error(`${after} assistant messages after the reload, ${before} before`);
  await page.waitForLoadState('networkidle', { timeout: TIMEOUT }).catch(() => {});
});
await browser.close();

const byPath = [...requests.entries()].sort().map(([k, v]) => `${k} ${Object.entries(v).map(([s, n]) => `${s}x${n}`).join(' ')}`);
console.log('steps:\n  ' + steps.join('\n  '));
console.log('requests to the server:\n  ' + byPath.join('\n  '));
if (notes.length) console.log('expected (not counted):\n  ' + notes.join('\n  '));
console.log(problems.length ? 'problems:\n  ' + problems.join('\n  ') : 'problems: none');
console.log(JSON.stringify({ ok: problems.length === 0, problems: problems.length, steps, requests: Object.fromEntries(requests) }));
process.exit(problems.length ? 1 : 0);
