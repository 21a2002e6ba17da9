// Forced tool calls in DeepSeek-V4.1's DSML markup (configs/chat/deepseek-v4.1.json) through the
// official `openai` client against `waste serve` on a tiny random-weight container (the synthetic
// tokenizer, so the DSML markers are plain text): tool_choice "required" among three tools and a
// named function, blocking and streamed, give one call whose arguments match the chosen tool's
// parameters (strings given back as strings, other values as JSON); a named tool that is not
// declared is a 400 with the exact message.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { bin, sourceDir, startServer } from './helpers.mjs';

let dir, server, client;

before(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'waste-dsml-tools-'));
  const model = path.join(dir, 'tiny.waste');
  const format = path.join(sourceDir, 'configs/chat/deepseek-v4.1.json');
  const r = spawnSync(bin, ['synth', '--preset', 'tiny', '--tokenizer', '--chat-format', format, '--out', model],
    { encoding: 'utf8', timeout: 120000 });
  if (r.status !== 0) throw new Error(`waste synth failed: ${r.stderr}`);
  server = await startServer(model, ['--parallel', '2', '--ctx', '2048']);
  client = new OpenAI({ apiKey: 'sk-none', baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 120000 });
});

after(async () => {
  if (server) await server.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const weather = {
  type: 'object', required: ['unit', 'city'],
  properties: { unit: { enum: ['celsius', 'fahrenheit'] }, city: { type: 'string', maxLength: 6 } },
};
const clock = {
  type: 'object', required: ['zone', 'utc'],
  properties: { zone: { type: 'integer', minimum: -12, maximum: 14 }, utc: { type: 'boolean' } },
};
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather', parameters: weather } },
  { type: 'function', function: { name: 'get_time', description: 'Time in a zone', parameters: clock } },
  { type: 'function', function: { name: 'ping' } },
];
const base = { model: 'tiny', temperature: 1, max_tokens: 300, tools };

function checkArguments(name, text) {
  const args = JSON.parse(text);
  if (name === 'get_weather') {
    assert.deepEqual(Object.keys(args), ['unit', 'city']);
    assert.ok(['celsius', 'fahrenheit'].includes(args.unit), text);
    assert.equal(typeof args.city, 'string');
    assert.ok([...args.city].length <= 6, text);
  } else if (name === 'get_time') {
    assert.deepEqual(Object.keys(args), ['zone', 'utc']);
    assert.ok(Number.isInteger(args.zone) && args.zone >= -12 && args.zone <= 14, text);
    assert.equal(typeof args.utc, 'boolean');
  } else {
    assert.equal(name, 'ping');
    assert.deepEqual(args, {});
  }
}

test('DSML markup, tool_choice required: one call to a declared tool, arguments match its parameters', async () => {
  for (const seed of [4, 5, 6]) {
    const r = await client.chat.completions.create({ ...base, seed, tool_choice: 'required',
      messages: [{ role: 'user', content: 'Weather or time?' }] });
    const choice = r.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls');
    assert.equal(choice.message.content, null);
    assert.equal(choice.message.tool_calls.length, 1);
    const call = choice.message.tool_calls[0];
    assert.equal(call.type, 'function');
    assert.match(call.id, /^call_/);
    checkArguments(call.function.name, call.function.arguments);
  }
});

test('DSML markup, a named function streamed: the call assembles to what the blocking answer gives', async () => {
  for (const name of ['get_time', 'get_weather']) {
    const params = { ...base, seed: 11, tool_choice: { type: 'function', function: { name } },
      messages: [{ role: 'user', content: 'What time is it?' }] };
    const chunks = [];
    for await (const chunk of await client.chat.completions.create({ ...params, stream: true })) chunks.push(chunk);
    const fragments = chunks.flatMap((c) => c.choices[0]?.delta?.tool_calls ?? []);
    assert.ok(fragments.length >= 2);
    assert.equal(fragments[0].function.name, name);
    const args = fragments.map((f) => f.function.arguments ?? '').join('');
    checkArguments(name, args);
    assert.equal(chunks.at(-1).choices[0].finish_reason, 'tool_calls');
    const blocking = await client.chat.completions.create(params);
    assert.equal(blocking.choices[0].message.tool_calls[0].function.arguments, args);
  }
});

test('DSML markup: a named tool that is not declared is a 400 with the exact message', async () => {
  await assert.rejects(client.chat.completions.create({ ...base, tool_choice: { type: 'function',
    function: { name: 'nope' } }, messages: [{ role: 'user', content: 'x' }] }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, 'tool_choice.function.name');
    assert.equal(e.error.message, "'tool_choice.function.name' \"nope\" is not one of the declared tools");
    return true;
  });
});
