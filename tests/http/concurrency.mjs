// 32 simultaneous streaming clients, greedy: each gets its own, complete output, equal to the
// output of the same request sent alone. Usage: node concurrency.mjs http://127.0.0.1:PORT
import OpenAI from 'openai';
import { test, eq, check } from './lib.mjs';

const base = process.argv[2];
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 120000 });
const starts = ['Once upon a time', 'One day', 'Lily was', 'The little dog', 'Tim and Sue', 'There was a big'];
const reqs = Array.from({ length: 32 }, (_, i) => ({
  prompt: `${starts[i % starts.length]}${i % 2 ? ' in the park' : ''}`,
  max_tokens: 20 + ((i * 7) % 40),
  chat: i % 4 === 3,
}));

async function run(r) {
  const params = { model: r.model, max_tokens: r.max_tokens, temperature: 0, stream: true, stream_options: { include_usage: true } };
  const stream = r.chat
    ? await client.chat.completions.create({ ...params, messages: [{ role: 'user', content: r.prompt }] })
    : await client.completions.create({ ...params, prompt: r.prompt });
  let text = '';
  let usage = null;
  const ids = new Set();
  for await (const chunk of stream) {
    ids.add(chunk.id);
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) text += r.chat ? c.delta.content || '' : c.text;
  }
  return { text, usage, ids: [...ids] };
}

// The model id is checked by the server: use the served one.
const models = await client.models.list();
const model = models.data[0].id;
for (const r of reqs) r.model = model;
const runOne = (r) => run(r).catch((e) => ({ error: String(e) }));
let together = [];

await test('concurrency: 32 simultaneous streams all complete', async () => {
  together = await Promise.all(reqs.map((r) => runOne(r)));
  const errs = together.filter((x) => x.error);
  eq(errs.length, 0, `errors ${JSON.stringify(errs.slice(0, 2))}`);
});

await test('concurrency: each stream has one id of its own and its usage', async () => {
  const ids = together.map((x) => x.ids);
  check(ids.every((l) => l.length === 1), 'one id per stream');
  eq(new Set(ids.map((l) => l[0])).size, 32, 'distinct ids');
  together.forEach((x, i) => check(x.usage && x.usage.completion_tokens <= reqs[i].max_tokens, `usage of ${i}`));
});

await test('concurrency: greedy outputs equal the same requests sent one at a time', async () => {
  const alone = [];
  for (const r of reqs) alone.push(await run(r));
  const diff = [];
  alone.forEach((a, i) => { if (a.text !== together[i].text) diff.push({ i, alone: a.text, together: together[i].text }); });
  eq(diff.length, 0, `differing outputs ${JSON.stringify(diff.slice(0, 2))}`);
});
