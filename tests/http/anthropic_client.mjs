// The official @anthropic-ai/sdk client against tokenloom serve's Messages API: messages.create
// and .stream (the SDK assembles the streamed events into a Message, which must equal the
// non-streamed one under greedy sampling), stop_sequences, count_tokens, tool use round trips
// and thinking blocks on real chat templates, x-api-key auth, and errors surfacing as the SDK's
// typed exceptions in Anthropic's error shape.
//
// Oracles: the OpenAI chat endpoint given the same conversation written by hand in the OpenAI
// shape (same text, same token counts: the translation is exact), the stream against the whole
// reply, a stop sequence against the unstopped text cut at its first occurrence.
//
// Usage: node anthropic_client.mjs MAIN_URL AUTH_URL HERMES_URL R1_URL (each but MAIN may be
// "-": that part is skipped)
//   MAIN: stories260K (ChatML fallback); AUTH: with --api-key sekrit; HERMES: a copy with the
//   Qwen2.5 template (hermes tool calls); R1: a copy with DeepSeek R1's (reasoning in <think>).
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { test, eq, check } from './lib.mjs';

const [mainUrl, authUrl, hermesUrl, r1Url] = process.argv.slice(2);
const opts = { apiKey: 'none', maxRetries: 0, timeout: 60000 };
const client = new Anthropic({ baseURL: mainUrl, ...opts });

async function servedModel(url) {
  const r = await fetch(`${url}/v1/models`);
  return (await r.json()).data[0].id;
}

// A message without its ids (message and tool_use ids are per request) and the SDK's own
// parsed_output (null: the stream helper adds it), keys sorted.
function canon(m) {
  const strip = (v) => {
    if (Array.isArray(v)) return v.map(strip);
    if (v && typeof v === 'object') {
      const o = {};
      for (const k of Object.keys(v).sort()) if (k !== 'id' && k !== 'parsed_output') o[k] = strip(v[k]);
      return o;
    }
    return v;
  };
  return strip(m);
}

// Expects fn to throw the SDK error class cls with this status and Anthropic error type; the
// message must mention `mention`.
async function expectError(fn, cls, status, type, mention) {
  let e = null;
  try {
    await fn();
  } catch (err) {
    e = err;
  }
  check(e, 'no error raised');
  check(e instanceof cls, `${cls.name}, got ${e && e.constructor && e.constructor.name}: ${e}`);
  eq(e.status, status, 'status');
  eq(e.error && e.error.type, 'error', 'body type');
  eq(e.error.error.type, type, 'error type');
  if (mention) check(e.error.error.message.includes(mention), `message '${e.error.error.message}' lacks '${mention}'`);
}

const model = await servedModel(mainUrl);
const SYSTEM = 'You tell stories.';
const USER = 'Once upon a time';
let whole = null;

await test('anthropic: messages.create matches the OpenAI chat reply of the same conversation', async () => {
  whole = await client.messages.create({
    model, max_tokens: 12, temperature: 0, system: SYSTEM, messages: [{ role: 'user', content: USER }],
  });
  eq(whole.type, 'message', 'type');
  eq(whole.role, 'assistant', 'role');
  eq(whole.model, model, 'model');
  check(whole.id.startsWith('msg_'), `id ${whole.id}`);
  eq(whole.content.length, 1, 'one block');
  eq(whole.content[0].type, 'text', 'text block');
  const oai = new OpenAI({ baseURL: `${mainUrl}/v1`, apiKey: 'none', maxRetries: 0 });
  const chat = await oai.chat.completions.create({
    model, max_tokens: 12, temperature: 0,
    messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: USER }],
  });
  eq(whole.content[0].text, chat.choices[0].message.content, 'text');
  eq(whole.usage.input_tokens, chat.usage.prompt_tokens, 'input_tokens');
  eq(whole.usage.output_tokens, chat.usage.completion_tokens, 'output_tokens');
  eq(whole.stop_reason, { length: 'max_tokens', stop: 'end_turn' }[chat.choices[0].finish_reason], 'stop_reason');
  eq(whole.stop_sequence, null, 'stop_sequence');
});

await test('anthropic: messages.stream assembles the same Message; events in order', async () => {
  const stream = client.messages.stream({
    model, max_tokens: 12, temperature: 0, system: SYSTEM, messages: [{ role: 'user', content: USER }],
  });
  const types = [];
  let text = '';
  stream.on('streamEvent', (ev) => types.push(ev.type));
  stream.on('text', (t) => { text += t; });
  const final = await stream.finalMessage();
  eq(canon(final), canon(whole), 'final message');
  eq(text, whole.content[0].text, 'text events');
  eq(types[0], 'message_start', 'first event');
  eq(types[1], 'content_block_start', 'then a block');
  eq(types.slice(-3), ['content_block_stop', 'message_delta', 'message_stop'], 'last events');
  check(types.slice(2, -3).every((t) => t === 'content_block_delta'), `deltas only: ${types}`);
});

await test('anthropic: raw stream (stream: true) starts with message_start and a ping', async () => {
  const r = await fetch(`${mainUrl}/v1/messages`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ max_tokens: 3, stream: true, messages: [{ role: 'user', content: 'Hi' }] }),
  });
  eq(r.status, 200, 'status');
  check(r.headers.get('content-type').startsWith('text/event-stream'), 'event stream');
  const names = (await r.text()).split('\n').filter((l) => l.startsWith('event: ')).map((l) => l.slice(7));
  eq(names.slice(0, 2), ['message_start', 'ping'], 'first events');
  eq(names.at(-1), 'message_stop', 'last event');
});

await test('anthropic: stop_sequences end the reply with stop_reason stop_sequence', async () => {
  const msgs = [{ role: 'user', content: USER }];
  const full = await client.messages.create({ model, max_tokens: 30, temperature: 0, messages: msgs });
  const text = full.content[0].text;
  const stop = text.split(/\s+/).find((w, i) => i > 2 && /^[a-z]{3,}$/.test(w) && text.indexOf(w) > 5);
  check(stop, `a word to stop at in '${text}'`);
  const r = await client.messages.create({ model, max_tokens: 30, temperature: 0, messages: msgs, stop_sequences: ['zzzq', stop] });
  eq(r.stop_reason, 'stop_sequence', 'stop_reason');
  eq(r.stop_sequence, stop, 'stop_sequence');
  eq(r.content[0].text, text.slice(0, text.indexOf(stop)), 'text before the stop');
  const s = await client.messages.stream({ model, max_tokens: 30, temperature: 0, messages: msgs, stop_sequences: ['zzzq', stop] }).finalMessage();
  eq(canon(s), canon(r), 'streamed');
});

await test('anthropic: a stop sequence found 2000 bytes into a long reply', async () => {
  const msgs = [{ role: 'user', content: USER }];
  const full = (await client.messages.create({ model, max_tokens: 1900, temperature: 0, messages: msgs })).content[0].text;
  const words = [...new Set(full.match(/[A-Za-z]{4,}/g))].filter((w) => full.indexOf(w) > 2000);
  check(words.length, `a word first seen after byte 2000 in ${full.length} bytes`);
  const stop = words[0];
  const r = await client.messages.create({ model, max_tokens: 1900, temperature: 0, messages: msgs, stop_sequences: [stop] });
  eq([r.stop_reason, r.stop_sequence], ['stop_sequence', stop], 'stop');
  eq(r.content[0].text, full.slice(0, full.indexOf(stop)), 'text before the stop');
});

await test('anthropic: output_config.format json_schema constrains the reply to the schema', async () => {
  const schema = {
    type: 'object', properties: { name: { type: 'string' }, age: { type: 'integer' } },
    required: ['name', 'age'], additionalProperties: false,
  };
  const req = { model, max_tokens: 200, temperature: 0, output_config: { format: { type: 'json_schema', schema } },
    messages: [{ role: 'user', content: 'Tell me about Lily' }] };
  const r = await client.messages.create(req);
  eq(r.stop_reason, 'end_turn', 'stop_reason (the grammar ended the reply)');
  const v = JSON.parse(r.content[0].text);
  eq(Object.keys(v).sort(), ['age', 'name'], 'keys');
  check(typeof v.name === 'string' && Number.isInteger(v.age), `types: ${r.content[0].text}`);
  eq(canon(await client.messages.stream(req).finalMessage()), canon(r), 'streamed');
});

await test('anthropic: count_tokens equals usage.input_tokens', async () => {
  const c = await client.messages.countTokens({ model, system: SYSTEM, messages: [{ role: 'user', content: USER }] });
  eq(c, { input_tokens: whole.usage.input_tokens }, 'count');
});

await test('anthropic: missing max_tokens is a 400 invalid_request_error naming it', async () => {
  await expectError(() => client.messages.create({ model, messages: [{ role: 'user', content: 'x' }] }),
    Anthropic.BadRequestError, 400, 'invalid_request_error', 'max_tokens');
});

await test('anthropic: image blocks, unknown fields, server tools and orphan tool_results are 400s naming them', async () => {
  const base = { model, max_tokens: 5 };
  await expectError(() => client.messages.create({
    ...base, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } }] }],
  }), Anthropic.BadRequestError, 400, 'invalid_request_error', 'image');
  await expectError(() => client.messages.create({ ...base, messages: [{ role: 'user', content: 'x' }], frobnicate: 1 }),
    Anthropic.BadRequestError, 400, 'invalid_request_error', 'frobnicate');
  await expectError(() => client.messages.create({
    ...base, messages: [{ role: 'user', content: 'x' }], tools: [{ type: 'web_search_20250305', name: 'web_search' }],
  }), Anthropic.BadRequestError, 400, 'invalid_request_error', 'web_search_20250305');
  await expectError(() => client.messages.create({
    ...base, messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_x', content: 'y' }] }],
  }), Anthropic.BadRequestError, 400, 'invalid_request_error', 'toolu_x');
  await expectError(() => client.messages.create({ ...base, temperature: 1.5, messages: [{ role: 'user', content: 'x' }] }),
    Anthropic.BadRequestError, 400, 'invalid_request_error', 'temperature');
});

await test('anthropic: an unknown model is a NotFoundError (not_found_error)', async () => {
  await expectError(() => client.messages.create({ model: 'claude-nope', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }),
    Anthropic.NotFoundError, 404, 'not_found_error', 'claude-nope');
});

if (authUrl && authUrl !== '-') {
  await test('anthropic: the API key as x-api-key or Bearer; a wrong one is an AuthenticationError', async () => {
    const m = await servedModel(mainUrl);
    const req = { model: m, max_tokens: 2, messages: [{ role: 'user', content: 'Hi' }] };
    const good = await new Anthropic({ ...opts, baseURL: authUrl, apiKey: 'sekrit' }).messages.create(req);
    eq(good.type, 'message', 'x-api-key');
    const bearer = await new Anthropic({ ...opts, baseURL: authUrl, apiKey: null, authToken: 'sekrit' }).messages.create(req);
    eq(bearer.type, 'message', 'Bearer');
    await expectError(() => new Anthropic({ ...opts, baseURL: authUrl, apiKey: 'wrong' }).messages.create(req),
      Anthropic.AuthenticationError, 401, 'authentication_error', 'API key');
  });
}

// ---- tools (Qwen2.5's template: hermes <tool_call>) --------------------------------------------

const TOOLS = [{
  name: 'get_weather', description: 'Weather of a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
}];
const OAI_TOOLS = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city', parameters: TOOLS[0].input_schema } }];

if (hermesUrl && hermesUrl !== '-') {
  const hermes = new Anthropic({ ...opts, baseURL: hermesUrl });
  const hmodel = await servedModel(hermesUrl);
  const ask = [{ role: 'user', content: 'Weather in Paris?' }];
  let call = null;

  await test('anthropic tools: tool_choice any forces a tool_use block (stop_reason tool_use)', async () => {
    const r = await hermes.messages.create({
      model: hmodel, max_tokens: 200, temperature: 0, tools: TOOLS, messages: ask,
      tool_choice: { type: 'any', disable_parallel_tool_use: true },
    });
    eq(r.stop_reason, 'tool_use', 'stop_reason');
    const uses = r.content.filter((b) => b.type === 'tool_use');
    eq(uses.length, 1, 'one call');
    eq(uses[0].name, 'get_weather', 'name');
    check(uses[0].id.startsWith('toolu_'), `id ${uses[0].id}`);
    eq(Object.keys(uses[0].input), ['city'], 'input keys');
    check(typeof uses[0].input.city === 'string', 'city is a string');
    const s = await hermes.messages.stream({
      model: hmodel, max_tokens: 200, temperature: 0, tools: TOOLS, messages: ask,
      tool_choice: { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true },
    }).finalMessage();
    eq(canon(s), canon(r), 'streamed (input_json_delta) equals the whole reply');
    call = r;
  });

  await test('anthropic tools: tool_result round trip, counted as the OpenAI shape of the same turns', async () => {
    check(call, 'needs the call');
    const use = call.content.find((b) => b.type === 'tool_use');
    const msgs = [...ask, { role: 'assistant', content: call.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: [{ type: 'text', text: 'Sunny, 21 C' }] }] }];
    const r = await hermes.messages.create({ model: hmodel, max_tokens: 16, temperature: 0, tools: TOOLS, messages: msgs });
    eq(r.type, 'message', 'type');
    check(['end_turn', 'max_tokens', 'tool_use'].includes(r.stop_reason), `stop_reason ${r.stop_reason}`);
    const c = await hermes.messages.countTokens({ model: hmodel, tools: TOOLS, messages: msgs });
    eq(c.input_tokens, r.usage.input_tokens, 'count_tokens = input_tokens');
    const oaiMsgs = [{ role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [{ id: use.id, type: 'function', function: { name: 'get_weather', arguments: JSON.stringify(use.input) } }] },
      { role: 'tool', tool_call_id: use.id, name: 'get_weather', content: 'Sunny, 21 C' }];
    const tok = await (await fetch(`${hermesUrl}/tokenize`, {
      method: 'POST', body: JSON.stringify({ messages: oaiMsgs, tools: OAI_TOOLS }),
    })).json();
    eq(c.input_tokens, tok.count, 'tokens of the OpenAI-shaped conversation');
  });

  await test('anthropic tools: tool_choice none offers the tools but parses no call', async () => {
    const r = await hermes.messages.create({ model: hmodel, max_tokens: 8, temperature: 0, tools: TOOLS, tool_choice: { type: 'none' }, messages: ask });
    check(r.content.every((b) => b.type === 'text'), 'text only');
    check(r.stop_reason !== 'tool_use', 'no tool_use');
  });
}

// ---- thinking (DeepSeek R1's template opens <think> in the prompt) ------------------------------

if (r1Url && r1Url !== '-') {
  const r1 = new Anthropic({ ...opts, baseURL: r1Url });
  const rmodel = await servedModel(r1Url);

  await test('anthropic thinking: reasoning comes back as a thinking block, streamed as thinking_delta', async () => {
    const req = { model: rmodel, max_tokens: 16, temperature: 0, thinking: { type: 'adaptive' }, messages: [{ role: 'user', content: 'Hi' }] };
    const r = await r1.messages.create(req);
    eq(r.content[0].type, 'thinking', 'first block');
    check(r.content[0].thinking.length > 0, 'thinking text');
    eq(r.content[0].signature, '', 'signature');
    const oai = await new OpenAI({ baseURL: `${r1Url}/v1`, apiKey: 'none', maxRetries: 0 }).chat.completions.create({
      model: rmodel, max_tokens: 16, temperature: 0, messages: [{ role: 'user', content: 'Hi' }],
    });
    eq(r.content[0].thinking, oai.choices[0].message.reasoning_content, 'the chat path\'s reasoning_content');
    const kinds = new Set();
    const s = r1.messages.stream(req);
    s.on('streamEvent', (ev) => { if (ev.type === 'content_block_delta') kinds.add(ev.delta.type); });
    eq(canon(await s.finalMessage()), canon(r), 'streamed');
    check(kinds.has('thinking_delta'), `thinking_delta among ${[...kinds]}`);
  });

  await test('anthropic thinking: an earlier thinking block goes back to the template; budget rules checked', async () => {
    const msgs = [{ role: 'user', content: 'Hi' },
      { role: 'assistant', content: [{ type: 'thinking', thinking: 'greet back', signature: '' }, { type: 'text', text: 'Hello!' }] },
      { role: 'user', content: 'Tell me a story' }];
    const c = await r1.messages.countTokens({ model: rmodel, thinking: { type: 'enabled', budget_tokens: 1024 }, messages: msgs });
    check(c.input_tokens > 0, 'counted');
    await expectError(() => r1.messages.create({ model: rmodel, max_tokens: 100, thinking: { type: 'enabled', budget_tokens: 1024 }, messages: msgs }),
      Anthropic.BadRequestError, 400, 'invalid_request_error', 'budget_tokens');
  });
}
