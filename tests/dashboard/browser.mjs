// The dashboard page in a real browser: Debian's Chromium, headless, driven by playwright-core.
// Run by test_dashboard.py, which starts the servers and turns the JSON this prints into TAP.
//
//   node browser.mjs plain URL OUTDIR   a server without a key: the page loads, polls, its
//                                       charts change while this script runs load, and a
//                                       screenshot is written to OUTDIR/dashboard.png
//   node browser.mjs key URL KEY OUTDIR a server with --api-key: the page asks for the key and
//                                       polls once it is given (OUTDIR/dashboard-key.png)
//
// Every request the page makes goes through a route handler: one for any host but the server's
// is recorded and aborted (the page must make none). Console errors, page errors and failed
// requests are recorded too. Prints one JSON object on stdout; exits 0 unless the browser
// itself could not be driven.
import { chromium } from 'playwright-core';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const [mode, url, ...rest] = process.argv.slice(2);
const key = mode === 'key' ? rest[0] : null;
const outdir = mode === 'key' ? rest[1] : rest[0];
const origin = new URL(url).origin;
const POLL_MS = 250; // the page polls this often here (?interval_ms=), so the test is short
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const out = {
  mode, consoleErrors: [], pageErrors: [], failedRequests: [], otherHosts: [], statusErrors: [],
};

// Keeps `clients` completions in flight against the server until `ms` have passed.
async function load(clients, ms) {
  const end = Date.now() + ms;
  let done = 0, failed = 0;
  const headers = { 'Content-Type': 'application/json' };
  if (key) headers.Authorization = 'Bearer ' + key;
  const worker = async (i) => {
    while (Date.now() < end) {
      const body = JSON.stringify({ prompt: 'Once upon a time ' + i + ' ' + done, max_tokens: 400,
                                    temperature: 0.8, seed: i * 1000 + done });
      try {
        const r = await fetch(url + '/v1/completions', { method: 'POST', headers, body });
        await r.text();
        if (r.ok) done++; else failed++;
      } catch {
        failed++;
      }
    }
  };
  await Promise.all(Array.from({ length: clients }, (_, i) => worker(i)));
  return { done, failed };
}

const state = (page) => page.evaluate(() => {
  const d = window.tlDashboard;
  const hashes = {};
  for (const c of document.querySelectorAll('canvas')) {
    // FNV-1a over the canvas pixels: equal images, equal hashes.
    const data = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let h = 0x811c9dc5;
    for (let i = 0; i < data.length; i += 4) h = Math.imul(h ^ data[i] ^ (data[i + 1] << 8) ^ (data[i + 2] << 16), 16777619) >>> 0;
    hashes[c.id] = h;
  }
  const max = (name) => (d.series[name] || []).reduce((a, v) => (v !== null && v > a ? v : a), 0);
  return {
    polls: d.polls, errors: d.errors, needsKey: d.needsKey, draws: d.draws, hashes,
    series: Object.keys(d.series).sort(), samples: d.samples.length,
    maxGenTps: max('gen_tps'), maxPromptTps: max('prompt_tps'), maxRunning: max('running'),
    maxTokensPerStep: max('tokens_per_step'), maxBusy: max('util_busy'), maxTtftP50: max('ttft_p50'),
    maxItlP50: max('itl_p50'), lastGen: d.last && d.last.counters ? d.last.counters.generation_tokens : null,
    keyFormVisible: getComputedStyle(document.getElementById('keyform')).display !== 'none',
    model: document.getElementById('model').textContent,
    stateText: document.getElementById('state').textContent,
    engineText: document.getElementById('info-engine').textContent,
  };
});

async function waitFor(page, pred, ms) {
  const end = Date.now() + ms;
  let s = await state(page);
  while (!pred(s) && Date.now() < end) {
    await sleep(100);
    s = await state(page);
  }
  return s;
}

const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'tl-chromium-'));
const browser = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.TL_CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  viewport: { width: 1400, height: 1000 },
});
try {
  await browser.route('**/*', (route) => {
    const u = route.request().url();
    if (new URL(u).origin !== origin) {
      out.otherHosts.push(u);
      return route.abort();
    }
    return route.continue();
  });
  const page = browser.pages()[0] || (await browser.newPage());
  page.on('console', (m) => { if (m.type() === 'error') out.consoleErrors.push(m.text()); });
  page.on('pageerror', (e) => out.pageErrors.push(String(e)));
  page.on('requestfailed', (r) => out.failedRequests.push(r.url() + ' ' + (r.failure() || {}).errorText));
  page.on('response', (r) => { if (r.status() >= 400) out.statusErrors.push(r.status() + ' ' + r.url()); });

  const resp = await page.goto(url + '/dashboard?interval_ms=' + POLL_MS + '&history_s=30');
  out.pageStatus = resp.status();
  if (mode === 'key') {
    out.beforeKey = await waitFor(page, (s) => s.needsKey && s.keyFormVisible, 5000);
    await page.fill('#key', key);
    await page.click('#keyform button');
    out.afterKey = await waitFor(page, (s) => s.polls >= 3, 10000);
    await page.screenshot({ path: path.join(outdir, 'dashboard-key.png'), fullPage: true });
  } else {
    out.idle = await waitFor(page, (s) => s.polls >= 3, 10000);
    await sleep(2 * POLL_MS);
    out.idle = await state(page);
    out.load = await load(8, 6000);
    await sleep(3 * POLL_MS); // one more poll after the load, so the page saw its end
    out.loaded = await state(page);
    await page.screenshot({ path: path.join(outdir, 'dashboard.png'), fullPage: true });
  }
} finally {
  await browser.close();
  fs.rmSync(profile, { recursive: true, force: true });
}
console.log(JSON.stringify(out));
