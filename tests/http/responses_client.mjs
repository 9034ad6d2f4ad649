// The official openai npm client's Responses API (client.responses) against tokenloom serve.
// The oracle for every generated answer is the chat completions endpoint of the same server
// under greedy sampling: a Response must hold exactly what chat.completions returns for the
// conversation an OpenAI client would send there. Checked: text, instructions, usage, the
// stream helper (its final Response equals the non-streamed one; the deltas join to the text;
// sequence numbers count from 0), previous_response_id (equal to sending the whole
// conversation), input_items (ordered, paged), retrieve / delete / 404, store false, a function-call round trip (forced named
// tool, then its output), json_schema output validated, and the 400s naming their field.
// Usage: node responses_client.mjs http://127.0.0.1:PORT
import OpenAI from 'openai';
import { test, eq, check } from './lib.mjs';

const base = process.argv[2];
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000 });
const model = (await client.models.list()).data[0].id;

// A Response without what differs between two generations of the same answer (ids, call ids,
// times, prompt-cache hits) and without what the SDK adds itself (output_text, and the stream
// helper's parsed / output_parsed / parsed_arguments).
function strip(r) {
  const o = structuredClone(r);
  for (const k of ['id', 'created_at', 'output_text', 'output_parsed']) delete o[k];
  delete o.usage.input_tokens_details.cached_tokens;
  for (const it of o.output) {
    for (const k of ['id', 'call_id', 'parsed_arguments']) delete it[k];
    for (const p of it.content || []) delete p.parsed;
  }
  return o;
}

async function chat(messages, extra = {}) {
  return client.chat.completions.create({ model, messages, temperature: 0, ...extra });
}

await test('responses: create (string input) equals chat.completions, with usage', async () => {
  const r = await client.responses.create({ model, input: 'Once upon a time', max_output_tokens: 12, temperature: 0 });
  const c = await chat([{ role: 'user', content: 'Once upon a time' }], { max_completion_tokens: 12 });
  eq(r.object, 'response', 'object');
  check(/^resp_/.test(r.id), `id ${r.id}`);
  eq(r.output.length, 1, 'one output item');
  eq(r.output[0].type, 'message', 'item type');
  eq(r.output[0].role, 'assistant', 'role');
  eq(r.output[0].content[0].type, 'output_text', 'part type');
  eq(r.output_text, c.choices[0].message.content, 'text equals the chat answer');
  const fin = c.choices[0].finish_reason;
  eq(r.status, fin === 'length' ? 'incomplete' : 'completed', 'status');
  if (fin === 'length') eq(r.incomplete_details, { reason: 'max_output_tokens' }, 'incomplete_details');
  eq(r.usage.input_tokens, c.usage.prompt_tokens, 'input_tokens');
  eq(r.usage.output_tokens, c.usage.completion_tokens, 'output_tokens');
  eq(r.usage.total_tokens, c.usage.prompt_tokens + c.usage.completion_tokens, 'total_tokens');
  eq(r.max_output_tokens, 12, 'max_output_tokens echoed');
});

await test('responses: instructions and message items with input_text parts equal the chat answer', async () => {
  const r = await client.responses.create({
    model, instructions: 'You tell stories.', max_output_tokens: 16, temperature: 0,
    input: [{ role: 'user', content: [{ type: 'input_text', text: 'Once upon' }, { type: 'input_text', text: 'a time' }] }],
  });
  const c = await chat([{ role: 'system', content: 'You tell stories.' }, { role: 'user', content: 'Once upon\na time' }], { max_completion_tokens: 16 });
  eq(r.output_text, c.choices[0].message.content, 'text');
  eq(r.instructions, 'You tell stories.', 'instructions echoed');
  eq(r.usage.input_tokens, c.usage.prompt_tokens, 'input_tokens');
});

let plain = null;
await test('responses: stream helper: events in order, deltas join to the text, final equals create', async () => {
  const params = { model, input: 'One day, a cat', instructions: 'Be brief.', max_output_tokens: 20, temperature: 0 };
  plain = await client.responses.create(params);
  const stream = client.responses.stream(params);
  const events = [];
  for await (const ev of stream) events.push(ev);
  const final = await stream.finalResponse();
  eq(events.map((e) => e.sequence_number), events.map((_, i) => i), 'sequence numbers 0..n-1');
  eq(events[0].type, 'response.created', 'first event');
  eq(events[1].type, 'response.in_progress', 'second event');
  const last = events[events.length - 1];
  eq(last.type, plain.status === 'completed' ? 'response.completed' : 'response.incomplete', 'last event');
  const types = events.map((e) => e.type);
  for (const t of ['response.output_item.added', 'response.content_part.added', 'response.output_text.delta',
    'response.output_text.done', 'response.content_part.done', 'response.output_item.done'])
    check(types.includes(t), `an event ${t}`);
  const deltas = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  eq(deltas, plain.output_text, 'deltas join to the non-streamed text');
  eq(events.find((e) => e.type === 'response.output_text.done').text, plain.output_text, 'output_text.done text');
  eq(strip(final), strip(plain), 'final Response equals the non-streamed one');
  eq(final.id, last.response.id, 'final id');
  check(final.id !== plain.id, 'a new id per response');
  const kept = await client.responses.retrieve(final.id); // a streamed response is stored too
  eq(kept.output, last.response.output, 'retrieved output equals the streamed one');
});

let first = null;
await test('responses: previous_response_id equals sending the whole conversation', async () => {
  first = await client.responses.create({ model, input: 'Tom had a ball.', max_output_tokens: 10, temperature: 0 });
  const second = await client.responses.create({
    model, previous_response_id: first.id, input: 'What did Tom do?', max_output_tokens: 10, temperature: 0,
  });
  eq(second.previous_response_id, first.id, 'previous_response_id echoed');
  const whole = await client.responses.create({
    model, store: false, max_output_tokens: 10, temperature: 0,
    input: [
      { role: 'user', content: 'Tom had a ball.' },
      ...first.output,
      { role: 'user', content: 'What did Tom do?' },
    ],
  });
  eq(second.output_text, whole.output_text, 'same answer');
  eq(second.usage.input_tokens, whole.usage.input_tokens, 'same prompt');
  const c = await chat([
    { role: 'user', content: 'Tom had a ball.' },
    { role: 'assistant', content: first.output_text },
    { role: 'user', content: 'What did Tom do?' },
  ], { max_completion_tokens: 10 });
  eq(second.output_text, c.choices[0].message.content, 'equals the chat answer');
  // input_items: the conversation before the answer, newest first, with ids; asc pages.
  const page = await client.responses.inputItems.list(second.id);
  eq(page.data.map((it) => [it.type, it.role]), [['message', 'user'], ['message', 'assistant'], ['message', 'user']], 'input items (desc)');
  eq(page.data[0].content, [{ type: 'input_text', text: 'What did Tom do?' }], 'newest item');
  eq(page.data[1].content[0].text, first.output_text, 'the first answer');
  check(page.data.every((it) => typeof it.id === 'string' && it.id.length > 0), 'ids');
  const asc = [];
  for await (const it of client.responses.inputItems.list(second.id, { order: 'asc', limit: 1 })) asc.push(it.id);
  eq(asc, page.data.map((it) => it.id).reverse(), 'asc pages of one item, auto-paginated');
  // A chain of three: the third sees both earlier turns.
  const third = await client.responses.create({ model, previous_response_id: second.id, input: 'And then?', max_output_tokens: 4, temperature: 0 });
  check(third.usage.input_tokens > second.usage.input_tokens + second.usage.output_tokens, 'third prompt holds the chain');
});

await test('responses: retrieve returns the stored response; delete; then 404 naming the id', async () => {
  const got = await client.responses.retrieve(first.id);
  const a = { ...got };
  const b = { ...first };
  delete a.output_text;
  delete b.output_text;
  eq(a, b, 'retrieved equals created');
  await client.responses.delete(first.id);
  try {
    await client.responses.retrieve(first.id);
    throw new Error('no error');
  } catch (e) {
    check(e instanceof OpenAI.NotFoundError, `NotFoundError, got ${e}`);
    check(String(e.message).includes(first.id), 'message names the id');
  }
  try {
    await client.responses.create({ model, previous_response_id: first.id, input: 'x', max_output_tokens: 2 });
    throw new Error('no error');
  } catch (e) {
    check(e instanceof OpenAI.NotFoundError, `NotFoundError, got ${e}`);
    eq(e.param, 'previous_response_id', 'param');
  }
  const unstored = await client.responses.create({ model, input: 'Hi', store: false, max_output_tokens: 2 });
  eq(unstored.store, false, 'store echoed');
  try {
    await client.responses.retrieve(unstored.id);
    throw new Error('no error');
  } catch (e) {
    check(e instanceof OpenAI.NotFoundError, `store false is not kept: ${e}`);
  }
});

const weather = {
  type: 'function', name: 'get_weather', description: 'Weather of a city',
  parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 8 } }, required: ['city'], additionalProperties: false },
};

await test('responses: function call round trip (forced named tool, then function_call_output)', async () => {
  const r = await client.responses.create({
    model, input: 'Weather in Paris?', tools: [weather], tool_choice: { type: 'function', name: 'get_weather' },
    max_output_tokens: 200, temperature: 0,
  });
  eq(r.status, 'completed', 'status');
  const calls = r.output.filter((it) => it.type === 'function_call');
  eq(calls.length, 1, 'one call');
  const call = calls[0];
  eq(call.name, 'get_weather', 'name');
  check(/^call_/.test(call.call_id), `call_id ${call.call_id}`);
  const args = JSON.parse(call.arguments);
  check(typeof args.city === 'string' && args.city.length <= 8, `arguments ${call.arguments}`);
  eq(Object.keys(args), ['city'], 'only the schema\'s keys');
  // The same call through the chat endpoint (oracle for the forced grammar path).
  const c = await chat([{ role: 'user', content: 'Weather in Paris?' }], {
    tools: [{ type: 'function', function: { name: weather.name, description: weather.description, parameters: weather.parameters } }],
    tool_choice: { type: 'function', function: { name: 'get_weather' } }, max_completion_tokens: 200,
  });
  eq(call.arguments, c.choices[0].message.tool_calls[0].function.arguments, 'arguments equal the chat call');
  // Its output, continued from the stored response.
  const out = { type: 'function_call_output', call_id: call.call_id, output: '{"temp_c": 21}' };
  const r2 = await client.responses.create({ model, previous_response_id: r.id, input: [out], tools: [weather], max_output_tokens: 12, temperature: 0 });
  const whole = await client.responses.create({
    model, store: false, tools: [weather], max_output_tokens: 12, temperature: 0,
    input: [{ role: 'user', content: 'Weather in Paris?' }, call, out],
  });
  eq(r2.output_text, whole.output_text, 'continuation equals the whole conversation');
  eq(r2.usage.input_tokens, whole.usage.input_tokens, 'same prompt');
  const c2 = await chat([
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: '', tool_calls: [{ id: call.call_id, type: 'function', function: { name: call.name, arguments: call.arguments } }] },
    { role: 'tool', tool_call_id: call.call_id, content: '{"temp_c": 21}' },
  ], { tools: [{ type: 'function', function: { name: weather.name, description: weather.description, parameters: weather.parameters } }], max_completion_tokens: 12 });
  eq(r2.output_text, c2.choices[0].message.content ?? '', 'equals the chat answer after the tool message');
});

await test('responses: stream of a forced call: arguments delta/done, final equals create', async () => {
  const params = {
    model, input: 'Weather in Rome?', tools: [weather], tool_choice: { type: 'function', name: 'get_weather' },
    max_output_tokens: 200, temperature: 0,
  };
  const r = await client.responses.create(params);
  const stream = client.responses.stream(params);
  const events = [];
  for await (const ev of stream) events.push(ev);
  const final = await stream.finalResponse();
  eq(strip(final), strip(r), 'final equals create');
  const args = events.filter((e) => e.type === 'response.function_call_arguments.delta').map((e) => e.delta).join('');
  const call = r.output.find((it) => it.type === 'function_call');
  eq(args, call.arguments, 'argument deltas join to the arguments');
  eq(events.find((e) => e.type === 'response.function_call_arguments.done').arguments, call.arguments, 'done event');
});

await test('responses: text.format json_schema gives JSON valid against the schema', async () => {
  const schema = {
    type: 'object', additionalProperties: false, required: ['name', 'age'],
    properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer', minimum: 0, maximum: 120 } },
  };
  const r = await client.responses.create({
    model, input: 'Describe a person.', max_output_tokens: 120, temperature: 0,
    text: { format: { type: 'json_schema', name: 'person', schema, strict: true } },
  });
  eq(r.status, 'completed', 'status');
  eq(r.text.format.type, 'json_schema', 'text.format echoed');
  const v = JSON.parse(r.output_text);
  eq(Object.keys(v).sort(), ['age', 'name'], 'keys');
  check(typeof v.name === 'string' && v.name.length <= 12, `name ${v.name}`);
  check(Number.isInteger(v.age) && v.age >= 0 && v.age <= 120, `age ${v.age}`);
  const j = await client.responses.create({ model, input: 'JSON please', max_output_tokens: 80, temperature: 0, text: { format: { type: 'json_object' } } });
  if (j.status === 'completed') check(typeof JSON.parse(j.output_text) === 'object', 'json_object parses');
});

async function bad(params, param, what) {
  try {
    await client.responses.create({ model, max_output_tokens: 4, ...params });
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError, `${what}: BadRequestError, got ${e}`);
    eq(e.param, param, `${what}: param`);
    return e;
  }
  throw new Error(`${what}: no error`);
}

await test('responses: 400s name the field (built-in tools, unknown fields, bad items, reasoning effort)', async () => {
  const e = await bad({ input: 'x', tools: [{ type: 'web_search' }] }, 'tools[0]', 'web_search');
  check(e.message.includes('web_search'), 'names the tool');
  await bad({ input: 'x', tools: [weather, { type: 'file_search', vector_store_ids: ['v'] }] }, 'tools[1]', 'file_search');
  await bad({ input: 'x', foo: 1 }, 'foo', 'unknown field');
  await bad({ input: [{ type: 'function_call_output', call_id: 'call_x', output: '1' }] }, 'input[0]', 'output without its call');
  await bad({ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'http://x' }] }] }, 'input[0].content[0]', 'image part');
  await bad({ input: 'x', reasoning: { effort: 'high' } }, 'reasoning.effort', 'reasoning effort');
  await bad({ input: 'x', include: ['reasoning.encrypted_content'] }, 'include', 'include');
  await bad({ input: 'x', max_output_tokens: 0 }, 'max_output_tokens', 'max_output_tokens 0');
  await bad({ input: 'x', temperature: 3 }, 'temperature', 'temperature 3');
  await bad({}, 'input', 'no input');
  await bad({ input: 'x', text: { format: { type: 'xml' } } }, 'text.format.type', 'format type');
});
