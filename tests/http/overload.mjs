// A burst of six times --max-queued-requests against a server that runs one request at a time
// (--max-batch-size 1): the excess gets 429 with Retry-After and an OpenAI error body, every
// accepted request completes in full, and the server stays up.
// Usage: node overload.mjs http://127.0.0.1:PORT MAX_QUEUED
import { test, eq, check } from './lib.mjs';

const base = process.argv[2];
const maxq = Number(process.argv[3]);
const total = 6 * maxq;
const body = JSON.stringify({ prompt: 'Once upon a time', max_tokens: 200, ignore_eos: true, temperature: 0 });

let results = [];
await test(`overload: a burst of ${total} requests is answered in full`, async () => {
  results = await Promise.all(
    Array.from({ length: total }, async () => {
      const r = await fetch(`${base}/v1/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body });
      return { status: r.status, retry: r.headers.get('retry-after'), json: await r.json() };
    }),
  );
  eq(results.length, total, 'answers');
});

await test('overload: the excess gets 429 with Retry-After and an error object', async () => {
  const rejected = results.filter((r) => r.status === 429);
  check(rejected.length > 0, 'some requests were rejected');
  for (const r of rejected) {
    check(r.retry !== null && Number(r.retry) >= 1, 'Retry-After');
    eq(r.json.error.code, 'rate_limit_exceeded', 'code');
  }
  const other = results.filter((r) => r.status !== 429 && r.status !== 200);
  eq(other.map((r) => r.status), [], 'statuses other than 200/429');
});

await test('overload: every accepted request completes', async () => {
  const accepted = results.filter((r) => r.status === 200);
  check(accepted.length >= maxq, `at least ${maxq} accepted, got ${accepted.length}`);
  for (const r of accepted) {
    eq(r.json.usage.completion_tokens, 200, 'completion tokens');
    eq(r.json.choices[0].finish_reason, 'length', 'finish_reason');
  }
  const texts = new Set(accepted.map((r) => r.json.choices[0].text));
  eq(texts.size, 1, 'greedy answers agree');
});

await test('overload: the server stays up and serves again', async () => {
  const h = await fetch(`${base}/health`);
  eq(h.status, 200, 'health');
  const r = await fetch(`${base}/v1/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body });
  eq(r.status, 200, 'a new request');
});
