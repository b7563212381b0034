// Headless Chromium (Debian's chromium, driven by playwright-core) loads the chat page, sends a message and sees
// a streamed answer with its statistics. Saves a screenshot (path printed).
import test from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { startServer, storiesDraft, STORIES, tmpDir } from './helpers.mjs';

const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';

test('the web chat page streams an answer', async () => {
  assert.ok(fs.existsSync(CHROMIUM), `Chromium not found at ${CHROMIUM} (apt-get install chromium, or set CHROMIUM_PATH)`);
  const srv = await startServer(['-m', STORIES, '-md', storiesDraft()]);
  const browser = await chromium.launch({
    executablePath: CHROMIUM, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
  try {
    const page = await browser.newPage();
    await page.goto(srv.base + '/');
    await page.fill('#temp', '0');
    await page.fill('#maxt', '48');
    await page.fill('#input', 'Once upon a time');
    await page.click('#send');
    await page.waitForFunction(() => {
      const s = document.querySelector('.stats');
      return s && /tokens\/s/.test(s.textContent);
    }, null, { timeout: 30000 });
    const answer = await page.textContent('.assistant');
    const stats = await page.textContent('.stats');
    assert.ok(answer.length > 10, `answer: ${answer}`);
    assert.match(stats, /48 tokens, [\d.]+ tokens\/s, draft acceptance/);
    const shot = path.join(process.env.TANDEM_ARTIFACTS || tmpDir(), 'webui.png');
    await page.screenshot({ path: shot, fullPage: true });
    console.log(`screenshot: ${shot}`);
  } finally {
    await browser.close();
    await srv.stop();
  }
});
