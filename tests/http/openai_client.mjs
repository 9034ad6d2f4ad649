// The official openai npm client against tokenloom serve: completions and chat, streaming and
// not, n > 1, stop strings, usage, and errors surfacing as the client's typed exceptions.
// Usage: node openai_client.mjs http://127.0.0.1:PORT
import OpenAI from 'openai';
import { test, eq, check } from './lib.mjs';

const base = process.argv[2];
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000 });
const GREEDY10 = ', there was a little girl named Lily';
let model = 'unknown';

await test('openai: models.list returns the served model', async () => {
  const page = await client.models.list();
  check(page.data.length === 1, 'one model');
  model = page.data[0].id;
  check(typeof model === 'string' && model.length > 0, 'model id');
});

await test('openai: completions.create (greedy) text and usage', async () => {
  const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 10, temperature: 0 });
  eq(r.object, 'text_completion', 'object');
  eq(r.choices[0].text, GREEDY10, 'text');
  eq(r.choices[0].finish_reason, 'length', 'finish_reason');
  eq(r.usage, { prompt_tokens: 5, completion_tokens: 10, total_tokens: 15, prompt_tokens_details: r.usage.prompt_tokens_details }, 'usage');
  check(typeof r.usage.prompt_tokens_details.cached_tokens === 'number', 'cached_tokens');
});

await test('openai: completions stream joins to the same text, with usage', async () => {
  const stream = await client.completions.create({
    model, prompt: 'Once upon a time', max_tokens: 10, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let usage = null;
  let finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  eq(text, GREEDY10, 'streamed text');
  eq(finish, 'length', 'finish_reason');
  eq(usage && usage.completion_tokens, 10, 'usage.completion_tokens');
});

await test('openai: completions n=3 and a list of prompts', async () => {
  const r = await client.completions.create({ model, prompt: ['Once', 'One day'], max_tokens: 4, n: 3, seed: 5, ignore_eos: true });
  eq(r.choices.length, 6, 'choices');
  eq(r.choices.map((c) => c.index), [0, 1, 2, 3, 4, 5], 'indexes');
  eq(r.usage.completion_tokens, 24, 'completion tokens');
});

await test('openai: stop strings', async () => {
  const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 30, temperature: 0, stop: ['girl', 'Lily'] });
  eq(r.choices[0].text, ', there was a little ', 'text before the stop');
  eq(r.choices[0].finish_reason, 'stop', 'finish_reason');
});

let chatText = null;
await test('openai: chat.completions.create', async () => {
  const r = await client.chat.completions.create({
    model, messages: [{ role: 'system', content: 'You tell stories.' }, { role: 'user', content: 'Once upon a time' }],
    max_completion_tokens: 12, temperature: 0,
  });
  eq(r.object, 'chat.completion', 'object');
  eq(r.choices[0].message.role, 'assistant', 'role');
  check(typeof r.choices[0].message.content === 'string', 'content');
  check(['stop', 'length'].includes(r.choices[0].finish_reason), 'finish_reason');
  check(r.usage.completion_tokens <= 12 && r.usage.prompt_tokens > 5, 'usage');
  chatText = r.choices[0].message.content;
});

await test('openai: chat stream: role first, content equals the non-streamed answer', async () => {
  const stream = await client.chat.completions.create({
    model, messages: [{ role: 'system', content: 'You tell stories.' }, { role: 'user', content: 'Once upon a time' }],
    max_completion_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let first = true;
  let usage = null;
  for await (const chunk of stream) {
    eq(chunk.object, 'chat.completion.chunk', 'object');
    if (chunk.usage) usage = chunk.usage;
    if (!chunk.choices.length) continue;
    if (first) eq(chunk.choices[0].delta.role, 'assistant', 'first delta role');
    first = false;
    text += chunk.choices[0].delta.content || '';
  }
  eq(text, chatText, 'streamed content');
  check(usage && usage.total_tokens === usage.prompt_tokens + usage.completion_tokens, 'usage');
});

await test('openai: chat n=2 streamed: both choices finish', async () => {
  const stream = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 5, n: 2, seed: 1, stream: true, ignore_eos: true,
  });
  const finished = new Set();
  for await (const chunk of stream) for (const c of chunk.choices) if (c.finish_reason) finished.add(c.index);
  eq([...finished].sort(), [0, 1], 'finished indexes');
});

await test('openai: a bad field raises BadRequestError (400) naming it', async () => {
  try {
    await client.completions.create({ model, prompt: 'x', temperature: 9 });
    throw new Error('no error');
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError, `BadRequestError, got ${e && e.constructor && e.constructor.name}: ${e}`);
    eq(e.status, 400, 'status');
    eq(e.param, 'temperature', 'param');
  }
});

await test('openai: an unknown model raises NotFoundError (404)', async () => {
  try {
    await client.chat.completions.create({ model: 'gpt-nope', messages: [{ role: 'user', content: 'x' }] });
    throw new Error('no error');
  } catch (e) {
    check(e instanceof OpenAI.NotFoundError, `NotFoundError, got ${e}`);
    eq(e.code, 'model_not_found', 'code');
  }
});
