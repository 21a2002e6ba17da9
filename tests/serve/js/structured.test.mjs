// Structured output and tool calling through the official `openai` client against `waste serve`
// on a tiny random-weight container (K3 chat format, Kimi tool-call markup): every JSON answer
// parses and matches its schema (checked by the small validator below, for the keywords these
// schemas use), forced tool calls (required, a named function) carry arguments that match the
// tool's parameters, streamed and not; tools with auto may give text on a random model, so only
// the shape is asserted there. Error cases get a 400 with the exact message.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { makeContainer, startServer } from './helpers.mjs';

let container, server, client;

before(async () => {
  container = makeContainer();
  server = await startServer(container.model, ['--parallel', '2', '--ctx', '2048']);
  client = new OpenAI({ apiKey: 'sk-none', baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 120000 });
});

after(async () => {
  if (server) await server.stop();
  if (container) container.cleanup();
});

// JSON Schema check for what the schemas here use: type (incl. integer), properties, required,
// additionalProperties false, enum, minLength/maxLength, minimum/maximum, items, minItems/maxItems.
// Returns the first violation, or null.
export function violation(schema, value, path = '$') {
  const typeOf = (v) => (v === null ? 'null' : Array.isArray(v) ? 'array' : Number.isInteger(v) ? 'integer' : typeof v);
  if (schema.type) {
    const types = Array.isArray(schema.type) ? schema.type : [schema.type];
    const t = typeOf(value);
    if (!types.includes(t) && !(t === 'integer' && types.includes('number'))) return `${path}: ${t} is not ${types}`;
  }
  if (schema.enum && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value))) return `${path}: not in enum`;
  if (typeof value === 'string') {
    const n = [...value].length;
    if (schema.minLength !== undefined && n < schema.minLength) return `${path}: shorter than ${schema.minLength}`;
    if (schema.maxLength !== undefined && n > schema.maxLength) return `${path}: longer than ${schema.maxLength}`;
  }
  if (typeof value === 'number') {
    if (schema.minimum !== undefined && value < schema.minimum) return `${path}: below ${schema.minimum}`;
    if (schema.maximum !== undefined && value > schema.maximum) return `${path}: above ${schema.maximum}`;
  }
  if (Array.isArray(value)) {
    if (schema.minItems !== undefined && value.length < schema.minItems) return `${path}: fewer than ${schema.minItems} items`;
    if (schema.maxItems !== undefined && value.length > schema.maxItems) return `${path}: more than ${schema.maxItems} items`;
    for (let i = 0; schema.items && i < value.length; ++i) {
      const v = violation(schema.items, value[i], `${path}[${i}]`);
      if (v) return v;
    }
  }
  if (value && typeof value === 'object' && !Array.isArray(value)) {
    for (const key of schema.required ?? []) if (!(key in value)) return `${path}: missing ${key}`;
    for (const [key, v] of Object.entries(value)) {
      const sub = schema.properties?.[key];
      if (!sub) {
        if (schema.additionalProperties === false) return `${path}: unexpected ${key}`;
        continue;
      }
      const bad = violation(sub, v, `${path}.${key}`);
      if (bad) return bad;
    }
  }
  return null;
}

function assertMatches(schema, text) {
  let value;
  assert.doesNotThrow(() => { value = JSON.parse(text); }, `not JSON: ${text}`);
  assert.equal(violation(schema, value), null, `${text}`);
  return value;
}

const person = {
  type: 'object',
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 8 },
    age: { type: 'integer', minimum: 0, maximum: 120 },
    role: { enum: ['admin', 'user'] },
    tags: { type: 'array', items: { type: 'string', maxLength: 4 }, maxItems: 2 },
  },
  required: ['name', 'age', 'role', 'tags'],
  additionalProperties: false,
};

const weather = {
  type: 'object',
  properties: { city: { type: 'string', maxLength: 10 }, unit: { enum: ['c', 'f'] } },
  required: ['city', 'unit'],
  additionalProperties: false,
};
const clock = {
  type: 'object', properties: { zone: { type: 'integer', minimum: -12, maximum: 14 } }, required: ['zone'],
  additionalProperties: false,
};
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather in a city', parameters: weather } },
  { type: 'function', function: { name: 'get_time', description: 'Time in a zone', parameters: clock } },
];
const schemaOf = { get_weather: weather, get_time: clock };
const messages = [{ role: 'user', content: 'Describe a person as JSON.' }];
const base = { model: 'tiny', temperature: 1, max_tokens: 400 };

test('response_format json_schema (strict): blocking and streamed answers parse and match the schema', async () => {
  for (const seed of [1, 2, 3]) {
    const params = { ...base, seed, messages,
      response_format: { type: 'json_schema', json_schema: { name: 'person', strict: true, schema: person } } };
    const r = await client.chat.completions.create(params);
    assert.equal(r.choices[0].finish_reason, 'stop');
    assertMatches(person, r.choices[0].message.content);

    let text = '';
    let finish = null;
    for await (const chunk of await client.chat.completions.create({ ...params, stream: true })) {
      text += chunk.choices[0]?.delta?.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(finish, 'stop');
    assert.equal(text, r.choices[0].message.content);  // same seed, same bits
  }
});

test('response_format json_object gives a JSON object', async () => {
  const r = await client.chat.completions.create({ ...base, seed: 9, messages, response_format: { type: 'json_object' } });
  assert.equal(r.choices[0].finish_reason, 'stop');
  const value = JSON.parse(r.choices[0].message.content);
  assert.equal(typeof value, 'object');
  assert.ok(value !== null && !Array.isArray(value));
});

function checkCall(call, names) {
  assert.equal(call.type, 'function');
  assert.ok(names.includes(call.function.name), call.function.name);
  assert.equal(call.id, `functions.${call.function.name}:0`);
  return assertMatches(schemaOf[call.function.name], call.function.arguments);
}

test('tool_choice required: one call to a declared tool, arguments match its parameters', async () => {
  for (const seed of [4, 5, 6]) {
    const r = await client.chat.completions.create({ ...base, seed, tools, tool_choice: 'required',
      messages: [{ role: 'user', content: 'Weather or time?' }] });
    const choice = r.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls');
    assert.equal(choice.message.content, null);
    assert.equal(choice.message.tool_calls.length, 1);
    checkCall(choice.message.tool_calls[0], ['get_weather', 'get_time']);
  }
});

test('a named function, streamed: OpenAI tool-call deltas, and the stream helper assembles the call', async () => {
  const params = { ...base, seed: 11, tools, tool_choice: { type: 'function', function: { name: 'get_time' } },
    messages: [{ role: 'user', content: 'What time is it?' }] };
  const chunks = [];
  for await (const chunk of await client.chat.completions.create({ ...params, stream: true })) chunks.push(chunk);
  assert.deepEqual(chunks[0].choices[0].delta, { role: 'assistant', content: '' });
  const fragments = chunks.flatMap((c) => c.choices[0]?.delta?.tool_calls ?? []);
  assert.ok(fragments.length >= 2);
  assert.deepEqual(fragments[0], { index: 0, id: 'functions.get_time:0', type: 'function',
    function: { name: 'get_time', arguments: '' } });
  for (const f of fragments.slice(1)) assert.deepEqual(Object.keys(f).sort(), ['function', 'index']);
  const args = fragments.map((f) => f.function.arguments).join('');
  assertMatches(clock, args);
  assert.equal(chunks.at(-1).choices[0].finish_reason, 'tool_calls');

  const blocking = await client.chat.completions.create(params);
  assert.equal(blocking.choices[0].message.tool_calls[0].function.arguments, args);

  const helper = client.chat.completions.stream(params);
  const final = await helper.finalChatCompletion();
  assert.equal(final.choices[0].finish_reason, 'tool_calls');
  checkCall(final.choices[0].message.tool_calls[0], ['get_time']);
});

test('tools with auto: the answer has the OpenAI shape (text or calls)', async () => {
  const r = await client.chat.completions.create({ ...base, max_tokens: 24, seed: 3, tools,
    messages: [{ role: 'user', content: 'Hello' }] });
  const choice = r.choices[0];
  assert.ok(['stop', 'length', 'tool_calls'].includes(choice.finish_reason));
  assert.equal(choice.message.role, 'assistant');
  if (choice.message.tool_calls) {
    for (const call of choice.message.tool_calls) {
      assert.equal(call.type, 'function');
      assert.equal(typeof call.id, 'string');
      assert.equal(typeof call.function.arguments, 'string');
    }
  } else {
    assert.equal(typeof choice.message.content, 'string');
  }
});

test('a tool result goes back into the prompt and the conversation continues', async () => {
  const r = await client.chat.completions.create({ ...base, max_tokens: 8, seed: 2, tools, messages: [
    { role: 'user', content: 'Weather in Oslo?' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'functions.get_weather:0', type: 'function',
      function: { name: 'get_weather', arguments: '{"city":"Oslo","unit":"c"}' } }] },
    { role: 'tool', tool_call_id: 'functions.get_weather:0', content: '{"temp": 4}' },
  ] });
  assert.ok(r.usage.prompt_tokens > 40);
  assert.equal(r.choices[0].message.role, 'assistant');
});

test('bad tools, tool_choice and schemas: 400 with the exact message', async () => {
  const cases = [
    [{ tools, tool_choice: { type: 'function', function: { name: 'get_date' } } }, 'tool_choice.function.name',
      "'tool_choice.function.name' \"get_date\" is not one of the declared tools"],
    [{ tools: { type: 'function' } }, 'tools', "'tools' must be an array of function tools"],
    [{ tools: [{ type: 'function', function: { name: 'f', parameters: 'x' } }] }, 'tools[0].function.parameters',
      "'tools[0].function.parameters' must be a JSON Schema object"],
    [{ tools: [{ type: 'function' }] }, 'tools[0].function', "'tools[0].function' must be an object"],
    [{ tool_choice: 'required' }, 'tool_choice', "'tool_choice' \"required\" needs a non-empty 'tools'"],
    [{ response_format: { type: 'json_schema', json_schema: { schema: person } } }, 'response_format.json_schema.name',
      "'response_format.json_schema.name' must be a string of 1 to 64 characters from a-z, A-Z, 0-9, _ and -"],
  ];
  for (const [extra, param, message] of cases) {
    await assert.rejects(client.chat.completions.create({ ...base, messages, ...extra }), (e) => {
      assert.equal(e.status, 400, message);
      assert.equal(e.param, param);
      assert.equal(e.error.message, message);
      return true;
    });
  }
  // An unsupported keyword is named, never silently unconstrained.
  await assert.rejects(client.chat.completions.create({ ...base, messages, response_format: { type: 'json_schema',
    json_schema: { name: 'x', schema: { type: 'object', patternProperties: { '^a': { type: 'string' } } } } } }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, 'response_format.json_schema.schema');
    assert.match(e.error.message, /^'response_format\.json_schema\.schema': .*patternProperties/);
    return true;
  });
  await assert.rejects(client.chat.completions.create({ ...base, messages, tool_choice: 'required',
    tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', not: {} } } }] }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, 'tools[0].function.parameters');
    assert.match(e.error.message, /^'tools\[0\]\.function\.parameters': .*\bnot\b/);
    return true;
  });
});
