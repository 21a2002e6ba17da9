// Reasoning through the official `openai` client against `waste serve` on a tiny random-weight
// container whose chat.json declares a think pair whose close marker is "aaa". The reply is made
// deterministic with logit_bias (+100 on the token of "a", temperature 0): every token is "a".
// Two tokens: the reasoning never closes, so all of it is reasoning_content. Seven tokens: the
// close marker is met across three tokens at the start, so reasoning_content is "" and content
// the four "a"s after it. Blocking and streamed answers agree; reasoning_effort is checked
// against the format (which has an effort turn with levels and a numeric range).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { bin, startServer } from './helpers.mjs';

let dir, model, server, client, a;

const chat = {
  system: ['<|open|>message role="system"<|sep|>', '<|close|>message<|sep|><|end_of_msg|>'],
  user: ['<|open|>message role="user"<|sep|>', '<|close|>message<|sep|><|end_of_msg|>'],
  assistant: ['<|open|>message role="assistant"<|sep|>', '<|close|>message<|sep|><|end_of_msg|>'],
  open: '<|open|>message role="assistant"<|sep|>',
  think: ['<|open|>think<|sep|>', 'aaa'],
  effort: { turn: '<|open|>message role="system"<|sep|>effort {effort}<|close|>message<|sep|>', levels: { low: 'low', high: 'high' }, range: [0, 10] },
};

before(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'waste-reasoning-'));
  const format = path.join(dir, 'chat.json');
  writeFileSync(format, JSON.stringify(chat));
  model = path.join(dir, 'tiny.waste');
  const r = spawnSync(bin, ['synth', '--preset', 'tiny', '--tokenizer', '--chat-format', format, '--out', model], { encoding: 'utf8', timeout: 120000 });
  if (r.status !== 0) throw new Error(`waste synth failed: ${r.stderr}`);
  const t = spawnSync(bin, ['tokenize', model, 'a'], { encoding: 'utf8', timeout: 60000 });
  if (t.status !== 0) throw new Error(`waste tokenize failed: ${t.stderr}`);
  const ids = t.stdout.trim().split(/\s+/).map(Number);
  assert.equal(ids.length, 1, `"a" is one token: ${t.stdout}`);
  a = ids[0];
  server = await startServer(model, ['--ctx', '1024']);
  client = new OpenAI({ apiKey: 'sk-none', baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 120000 });
});

after(async () => {
  if (server) await server.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const messages = [
  { role: 'user', content: 'Think first.' },
  { role: 'assistant', content: 'Earlier answer.', reasoning_content: 'earlier reasoning' },
  { role: 'user', content: 'And now?' },
];
const forced = (n) => ({ model: 'tiny', messages, max_tokens: n, temperature: 0, logit_bias: { [a]: 100 } });

async function streamed(params) {
  const stream = await client.chat.completions.create({ ...params, stream: true });
  let reasoning = '', content = '', finish = null, chunks = 0;
  for await (const chunk of stream) {
    ++chunks;
    const choice = chunk.choices[0];
    if (!choice) continue;
    if (choice.delta.reasoning_content !== undefined) reasoning += choice.delta.reasoning_content;
    if (choice.delta.content) content += choice.delta.content;
    if (choice.finish_reason) finish = choice.finish_reason;
  }
  return { reasoning, content, finish, chunks };
}

test('reasoning that never closes is all reasoning_content, blocking and streamed', async () => {
  const blocking = await client.chat.completions.create(forced(2));
  const message = blocking.choices[0].message;
  assert.equal(message.reasoning_content, 'aa');
  assert.equal(message.content, '');
  assert.equal(blocking.choices[0].finish_reason, 'length');
  const s = await streamed(forced(2));
  assert.deepEqual([s.reasoning, s.content, s.finish], ['aa', '', 'length']);
});

test('the close marker across tokens ends the reasoning, the rest is content', async () => {
  const blocking = await client.chat.completions.create(forced(7));
  const message = blocking.choices[0].message;
  assert.equal(message.reasoning_content, '');
  assert.equal(message.content, 'aaaa');
  const s = await streamed(forced(7));
  assert.deepEqual([s.reasoning, s.content, s.finish], ['', 'aaaa', 'length']);
});

test('reasoning_effort: a level or a number in range is taken, anything else is a 400', async () => {
  for (const effort of ['low', 'high', 3]) {
    const r = await client.chat.completions.create({ ...forced(2), reasoning_effort: effort });
    assert.equal(r.choices[0].message.reasoning_content, 'aa');
  }
  // The effort turn is in the prompt: one more prompt token or more than without it.
  const plain = await client.chat.completions.create(forced(1));
  const withEffort = await client.chat.completions.create({ ...forced(1), reasoning_effort: 'high' });
  assert.ok(withEffort.usage.prompt_tokens > plain.usage.prompt_tokens);
  await assert.rejects(client.chat.completions.create({ ...forced(2), reasoning_effort: 'medium' }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, 'reasoning_effort');
    assert.equal(e.error.message, "'reasoning_effort' must be one of high, low, or a whole number from 0 to 10 for this model, not \"medium\"");
    return true;
  });
  await assert.rejects(client.chat.completions.create({ ...forced(2), reasoning_effort: 11 }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.error.message, "'reasoning_effort' must be one of high, low, or a whole number from 0 to 10 for this model, not 11");
    return true;
  });
  await assert.rejects(client.chat.completions.create({ ...forced(2), reasoning_effort: 'extreme' }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.error.message, "'reasoning_effort' must be one of none, minimal, low, medium, high, xhigh, max, or a whole number");
    return true;
  });
  // "none": the model's turn opens with the pair closed, so everything is content.
  const none = await client.chat.completions.create({ ...forced(2), reasoning_effort: 'none' });
  assert.deepEqual([none.choices[0].message.reasoning_content, none.choices[0].message.content], ['', 'aa']);
});

test('a json_object answer is constrained from its first token: no reasoning, reasoning_content ""', async () => {
  const r = await client.chat.completions.create({
    model: 'tiny', messages, max_tokens: 40, temperature: 0, response_format: { type: 'json_object' } });
  assert.equal(r.choices[0].message.reasoning_content, '');
  assert.ok(r.choices[0].message.content.startsWith('{'), r.choices[0].message.content);
});

test('past reasoning_content of the wrong type is refused', async () => {
  await assert.rejects(client.chat.completions.create({
    model: 'tiny', max_tokens: 1, messages: [{ role: 'assistant', content: 'x', reasoning_content: 3 }, { role: 'user', content: 'y' }] }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, 'messages[0].reasoning_content');
    assert.equal(e.error.message, "'messages[0].reasoning_content' must be a string");
    return true;
  });
});
