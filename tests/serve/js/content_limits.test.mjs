// What a request's content can do to a running `waste serve` (docs/design/serve.md, Limits): a
// 1,000,000-deep array in a schema (it used to overflow the stack: SIGSEGV) gets a 400 naming the
// limit and /health answers afterwards; the 40-$defs schema of 2^40 derivations (it used to stall
// the engine under the scheduler's lock) gets its 400 within 1 s while a concurrent stream goes on
// producing tokens. Loopback only; every wait is bounded.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { makeContainer, startServer, rawRequest, post, withTimeout } from './helpers.mjs';

let container, server;

before(async () => {
  container = makeContainer();
  server = await startServer(container.model, ['--parallel', '2', '--ctx', '4096']);
});

after(async () => {
  if (server) await server.stop();
  if (container) container.cleanup();
});

const deep = (n) => '['.repeat(n) + ']'.repeat(n);
const messages = [{ role: 'user', content: 'x' }];

function withSchema(schemaText) {
  return `{"model": "tiny", "messages": ${JSON.stringify(messages)}, "max_tokens": 40, "response_format":
    {"type": "json_schema", "json_schema": {"name": "x", "schema": ${schemaText}}}}`;
}

function doublingDefs(levels) {
  const defs = { d0: { type: 'string' } };
  for (let k = 1; k <= levels; ++k) {
    const prev = { $ref: `#/$defs/d${k - 1}` };
    defs[`d${k}`] = { anyOf: [prev, prev] };
  }
  return { $defs: defs, $ref: `#/$defs/d${levels}` };
}

async function health() {
  const r = await withTimeout(fetch(`${server.url}/health`), 5000, '/health');
  return r.status;
}

test('a 1,000,000-deep array in a json_schema or in tools parameters gets 400 and the server lives on', async () => {
  const schema = await rawRequest(server.port, post('/v1/chat/completions', withSchema(`{"a": ${deep(1000000)}}`)));
  assert.equal(schema.status, 400);
  const e = JSON.parse(schema.body).error;
  assert.equal(e.param, 'response_format.json_schema.schema');
  assert.equal(e.message, 'response_format.json_schema.schema: nesting deeper than 64 (--max-json-depth)');
  assert.equal(await health(), 200);

  const tools = `{"model": "tiny", "messages": ${JSON.stringify(messages)}, "tool_choice": "required", "tools": [
    {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": ${deep(1000000)}}}}}]}`;
  const tool = await rawRequest(server.port, post('/v1/chat/completions', tools));
  assert.equal(tool.status, 400);
  assert.equal(JSON.parse(tool.body).error.message, 'tools[0].function.parameters: nesting deeper than 64 (--max-json-depth)');
  assert.equal(await health(), 200);
});

test('the 40-$defs schema (and a 20-level one) gets 400 within 1 s while a concurrent stream keeps producing tokens', async () => {
  // A completion that runs until cancelled: eos, its only stop id, banned.
  const eos = JSON.parse(readFileSync(path.join(container.model, 'manifest.json'), 'utf8')).config.eos_token_id;
  const controller = new AbortController();
  const response = await fetch(`${server.url}/v1/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, signal: controller.signal,
    body: JSON.stringify({ model: 'tiny', prompt: 'Tell me about the fox.', max_tokens: 3000, temperature: 0,
                           logit_bias: { [eos]: -100 }, stream: true }),
  });
  assert.equal(response.status, 200);
  const reader = response.body.getReader();
  const times = [];  // arrival of each token event
  let finished = false;
  const reading = (async () => {
    const decoder = new TextDecoder();
    let text = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
      let i;
      while ((i = text.indexOf('\n\n')) >= 0) {
        const event = text.slice(0, i);
        text = text.slice(i + 2);
        if (event.startsWith('data: {')) times.push(performance.now());
        if (event === 'data: [DONE]') finished = true;
      }
    }
  })().catch(() => {});
  await withTimeout((async () => { while (times.length < 3) await new Promise((r) => setTimeout(r, 10)); })(), 30000,
    'stream started');

  // Issue 27's 40 levels (refused by their nesting: two levels each), and 20 levels (within the
  // depth: refused by the expansion limit, 2^20 derivations).
  const cases = [
    [40, 'response_format.json_schema.schema: schema nesting deeper than 64 (--max-json-depth) at /$defs/d9/anyOf/0 ($ref hops count as levels)'],
    [20, "response_format.json_schema.schema: grammar too ambiguous: a byte in rule 'ref:#/$defs/d17' may be reached over 65536 ways (the expansion limit)"],
  ];
  for (const [levels, message] of cases) {
    const sent = performance.now();
    const reply = await rawRequest(server.port, post('/v1/chat/completions', withSchema(JSON.stringify(doublingDefs(levels)))), 5000);
    const answered = performance.now();
    assert.equal(reply.status, 400);
    const e = JSON.parse(reply.body).error;
    assert.equal(e.param, 'response_format.json_schema.schema');
    assert.equal(e.message, `'${message.replace(': ', "': ")}`);
    assert.ok(answered - sent < 1000, `${levels} levels: 400 after ${Math.round(answered - sent)} ms`);
  }

  // The stream goes on: tokens arrive after the 400, and it has not ended.
  const seen = times.length;
  await withTimeout((async () => { while (times.length < seen + 5) await new Promise((r) => setTimeout(r, 10)); })(), 10000,
    'tokens after the 400');
  assert.ok(!finished);
  controller.abort();
  await reading;
  assert.equal(await health(), 200);
});
