// The official `openai` client against `waste serve` on a tiny synthetic container: models,
// chat (blocking and streaming), completions, error objects (image_url parts included), 4 concurrent seeded streams equal
// to the same 4 one after another, a disconnect freeing the slot (streamed or blocking), and SIGTERM
// draining.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import OpenAI from 'openai';
import { makeContainer, startServer, rawRequest, post, metric, withTimeout, bin } from './helpers.mjs';

let container, server, client;

before(async () => {
  container = makeContainer();
  // /metrics is behind the key unless --metrics-public; these tests read it without one.
  server = await startServer(container.model, ['--parallel', '4', '--api-key', 'sk-test', '--metrics-public', '--ctx', '2048']);
  client = new OpenAI({ apiKey: 'sk-test', baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 60000 });
});

after(async () => {
  if (server) await server.stop();
  if (container) container.cleanup();
});

const messages = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: [{ type: 'text', text: 'Tell me about ' }, { type: 'text', text: 'the fox.' }] },
];

async function collect(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

test('GET /health, /v1/models and /metrics', async () => {
  assert.deepEqual(await (await fetch(`${server.url}/health`)).json(), { status: 'ok' });
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => [m.id, m.object, m.owned_by]), [['tiny', 'model', 'waste']]);
  const one = await client.models.retrieve('tiny');
  assert.equal(one.id, 'tiny');
  const text = await (await fetch(`${server.url}/metrics`)).text();
  assert.match(text, /^# TYPE waste_requests_total counter$/m);
  assert.match(text, /^waste_requests_total\{route="\/v1\/models",status="200"\} 1$/m);
  assert.match(text, /^waste_active_sequences 0$/m);
  assert.match(text, /^waste_stage_seconds_total\{stage="forward"\} /m);
});

test('chat: blocking answer, then the same request streamed gives the same text', async () => {
  const params = { model: 'tiny', messages, max_tokens: 12, temperature: 0.9, seed: 7 };
  const blocking = await client.chat.completions.create(params);
  assert.equal(blocking.object, 'chat.completion');
  assert.match(blocking.id, /^chatcmpl-/);
  const choice = blocking.choices[0];
  assert.equal(choice.message.role, 'assistant');
  assert.ok(['stop', 'length'].includes(choice.finish_reason));
  assert.equal(choice.logprobs, null);
  assert.ok(blocking.usage.prompt_tokens > 10);
  assert.ok(blocking.usage.completion_tokens >= 1 && blocking.usage.completion_tokens <= 12);
  assert.equal(blocking.usage.total_tokens, blocking.usage.prompt_tokens + blocking.usage.completion_tokens);

  const chunks = await collect(await client.chat.completions.create({
    ...params, stream: true, stream_options: { include_usage: true } }));
  assert.deepEqual(chunks[0].choices[0].delta, { role: 'assistant', content: '' });
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  // The same prompt again: the prefix cache restores it up to its last multiple of 64 (the prefill
  // chunk) before its last token, a snapshot the blocking request left; the rest of usage is equal.
  const { prompt_tokens_details: again, ...streamed } = last.usage;
  const { prompt_tokens_details: first, ...blocked } = blocking.usage;
  assert.deepEqual(streamed, blocked);
  assert.equal(first.cached_tokens, 0);
  assert.equal(again.cached_tokens, Math.floor((blocking.usage.prompt_tokens - 1) / 64) * 64);
  const finish = chunks.at(-2);
  assert.equal(finish.choices[0].finish_reason, choice.finish_reason);
  assert.ok(chunks.slice(0, -1).every((c) => c.usage === null && c.id === chunks[0].id));
  const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
  assert.equal(text, choice.message.content);

  // The helper that checks a stream's shape end to end (role, finish_reason on every choice).
  const runner = client.chat.completions.stream(params);
  const final = await runner.finalChatCompletion();
  assert.equal(final.choices[0].message.content, choice.message.content);
});

test('chat: logprobs with top_logprobs', async () => {
  const r = await client.chat.completions.create({
    model: 'tiny', messages, max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 3 });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, r.usage.completion_tokens - (r.choices[0].finish_reason === 'stop' ? 1 : 0));
  for (const t of content) {
    assert.equal(t.top_logprobs.length, 3);
    assert.ok(t.logprob <= 0);
    // Greedy: the chosen token is the most likely one.
    assert.equal(t.logprob, t.top_logprobs[0].logprob);
  }
});

test('completions: blocking and streamed text agree; token-id prompts work', async () => {
  const params = { model: 'tiny', prompt: 'The quick brown fox', max_tokens: 10, temperature: 0 };
  const blocking = await client.completions.create(params);
  assert.equal(blocking.object, 'text_completion');
  assert.equal(blocking.choices[0].finish_reason, 'length');
  assert.equal(blocking.usage.completion_tokens, 10);
  const chunks = await collect(await client.completions.create({ ...params, stream: true }));
  assert.equal(chunks.map((c) => c.choices[0].text).join(''), blocking.choices[0].text);
  assert.equal(chunks.at(-1).choices[0].finish_reason, 'length');
  const ids = await client.completions.create({ model: 'tiny', prompt: [1, 2, 3], max_tokens: 2, temperature: 0 });
  assert.equal(ids.usage.prompt_tokens, 3);
});

test('--prefill-chunk: a 100-token prompt in one pass instead of two, the same token; too small for --parallel is refused', async () => {
  const ids = Array.from({ length: 100 }, (_, k) => 1 + ((k * 7) % 200));
  const params = { model: 'tiny', prompt: ids, max_tokens: 1, temperature: 0 };
  const steps = async (url, run) => {
    const before = await metric(url, 'waste_steps_total');
    const answer = await run();
    return { passes: (await metric(url, 'waste_steps_total')) - before, answer };
  };
  const plain = await steps(server.url, () => client.completions.create(params));
  assert.equal(plain.passes, 2);  // the default 64 tokens a pass
  const wide = await startServer(container.model, ['--prefill-chunk', '128', '--metrics-public']);
  try {
    const one = await steps(wide.url, async () => {
      const res = await fetch(`${wide.url}/v1/completions`, { method: 'POST', body: JSON.stringify(params), headers: { 'Content-Type': 'application/json' } });
      assert.equal(res.status, 200);
      return res.json();
    });
    assert.equal(one.passes, 1);
    assert.equal(one.answer.choices[0].text, plain.answer.choices[0].text);
  } finally {
    await wide.stop();
  }
  const refused = spawnSync(bin, ['serve', container.model, '--port', '0', '--parallel', '8', '--prefill-chunk', '8'], { encoding: 'utf8', timeout: 60000 });
  assert.notEqual(refused.status, 0);
  assert.match(refused.stderr, /--parallel must be below 8 \(the tokens of one pass\)/);
});

test('errors are OpenAI error objects with the right status', async () => {
  await assert.rejects(client.chat.completions.create({ model: 'tiny', messages, n: 2 }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, 'n');
    assert.equal(e.type, 'invalid_request_error');
    assert.equal(e.error.message, "'n' must be 1 (one choice per request)");
    return true;
  });
  await assert.rejects(client.chat.completions.create({ model: 'tiny', messages,
    tools: [{ type: 'function', function: { name: 'f' } }], tool_choice: { type: 'function', function: { name: 'g' } } }),
  (e) => e.status === 400 && e.param === 'tool_choice.function.name');
  await assert.rejects(client.chat.completions.create({ model: 'nope', messages }),
    (e) => e.status === 404 && e.code === 'model_not_found' && e.param === 'model');
  const wrongKey = new OpenAI({ apiKey: 'sk-wrong', baseURL: `${server.url}/v1`, maxRetries: 0 });
  await assert.rejects(wrongKey.models.list(), (e) => e.status === 401 && e.code === 'invalid_api_key');

  const route = await fetch(`${server.url}/v1/nothing`, { headers: { Authorization: 'Bearer sk-test' } });
  assert.equal(route.status, 404);
  assert.equal((await route.json()).error.type, 'not_found_error');
  const big = await rawRequest(server.port, post('/v1/completions', 'x'.repeat(5 << 20), { Authorization: 'Bearer sk-test' }));
  assert.equal(big.status, 413);
  assert.equal(JSON.parse(big.body).error.code, 'payload_too_large');
  const overflow = await rawRequest(server.port, post('/v1/completions',
    JSON.stringify({ model: 'tiny', prompt: Array(2100).fill(1) }), { Authorization: 'Bearer sk-test' }));
  assert.equal(overflow.status, 400);
  assert.equal(JSON.parse(overflow.body).error.code, 'context_length_exceeded');
});

test('image_url parts: a data: URL is refused on a model without a vision tower, a remote URL always', async () => {
  const png = 'data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGMQUDAAAACkAGE0Zn1yAAAAAElFTkSuQmCC';
  await assert.rejects(client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: [
    { type: 'text', text: 'what is it' }, { type: 'image_url', image_url: { url: png, detail: 'low' } }] }] }),
  (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, 'messages[0].content[1].image_url.url');
    assert.equal(e.error.message, "'messages[0].content[1].image_url.url': this model has no vision tower " +
      '(no vision.json in the container), so image_url parts are not supported');
    return true;
  });
  await assert.rejects(client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: [
    { type: 'image_url', image_url: { url: 'https://example.com/cat.png' } }] }] }),
  (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, 'messages[0].content[0].image_url.url');
    assert.equal(e.error.message, "'messages[0].content[0].image_url.url' is a remote URL; only data: URLs are " +
      'accepted (data:image/png;base64,... or data:image/jpeg;base64,...): this server fetches nothing');
    return true;
  });
});

test('4 concurrent seeded streams give exactly the tokens of the same 4 one after another', async () => {
  const requests = [0, 1, 2, 3].map((i) => ({
    model: 'tiny', max_tokens: 16 + i, temperature: 0.7 + 0.1 * i, seed: 100 + i, top_p: 0.95,
    messages: [{ role: 'user', content: `Question ${i}: ${'why '.repeat(10 * i + 1)}` }],
  }));
  const streamText = async (r) => (await collect(await client.chat.completions.create({ ...r, stream: true })))
    .map((c) => c.choices[0]?.delta?.content ?? '').join('');
  const sequential = [];
  for (const r of requests) sequential.push(await streamText(r));
  const concurrent = await Promise.all(requests.map(streamText));
  assert.deepEqual(concurrent, sequential);
  assert.ok(sequential.every((t) => t.length > 0));
});

// A completion that runs to the context unless cancelled: eos (the only stop id of /v1/completions)
// banned through logit_bias.
function endless(model = container.model, maxTokens = 100000) {
  const eos = JSON.parse(readFileSync(path.join(model, 'manifest.json'), 'utf8')).config.eos_token_id;
  return { model: 'tiny', prompt: 'Tell me about the fox.', max_tokens: maxTokens, temperature: 0, logit_bias: { [eos]: -100 } };
}

test('a client that disconnects mid-stream frees its slot', async () => {
  const before = await metric(server.url, 'waste_generated_tokens_total');
  const controller = new AbortController();
  const stream = await client.completions.create({ ...endless(), stream: true }, { signal: controller.signal });
  let seen = 0;
  try {
    for await (const chunk of stream) {
      if (++seen === 3) controller.abort();
    }
  } catch (e) {
    assert.equal(e.name, 'APIUserAbortError');
  }
  assert.ok(seen >= 3);
  // The sequence goes within a step or two: active sequences fall back to 0.
  await withTimeout((async () => {
    while ((await metric(server.url, 'waste_active_sequences')) !== 0) await new Promise((r) => setTimeout(r, 50));
  })(), 30000, 'slot freed');
  // Left alone it runs to the context (2048 - prompt tokens: eos is banned); it stopped long before.
  const after = await metric(server.url, 'waste_generated_tokens_total');
  assert.ok(after - before < 1500, `generated ${after - before} tokens after the disconnect`);
});

test('a client that leaves a blocking (non-streamed) request cancels its sequence', async () => {
  const before = await metric(server.url, 'waste_generated_tokens_total');
  const controller = new AbortController();
  const pending = client.completions.create(endless(), { signal: controller.signal });
  // Leave once the sequence is decoding (it holds a slot and has produced tokens).
  await withTimeout((async () => {
    while ((await metric(server.url, 'waste_generated_tokens_total')) - before < 3) await new Promise((r) => setTimeout(r, 20));
  })(), 30000, 'decoding started');
  controller.abort();
  await assert.rejects(pending, (e) => e instanceof OpenAI.APIUserAbortError);
  await withTimeout((async () => {
    while ((await metric(server.url, 'waste_active_sequences')) !== 0) await new Promise((r) => setTimeout(r, 50));
  })(), 30000, 'slot freed');
  const after = await metric(server.url, 'waste_generated_tokens_total');
  assert.ok(after - before < 1500, `generated ${after - before} tokens after the disconnect`);
});

test('429 past the queue, then SIGTERM drains the stream in flight and exits 0', async () => {
  // A container of its own: a second client of the first server's daemon would share its budget.
  const own = makeContainer();
  const small = await startServer(own.model, ['--parallel', '1', '--queue', '0', '--drain-seconds', '30']);
  try {
    const c = new OpenAI({ apiKey: 'x', baseURL: `${small.url}/v1`, maxRetries: 0 });
    // 1,000 tokens whatever the model answers (eos banned): the slot stays taken past the next request.
    const stream = await c.completions.create({ ...endless(own.model, 1000), stream: true });
    const iterator = stream[Symbol.asyncIterator]();
    await iterator.next();  // the first token: the one slot is now taken
    const busy = await rawRequest(small.port, post('/v1/completions', JSON.stringify({ model: 'tiny', prompt: 'x' })));
    assert.equal(busy.status, 429);
    assert.match(busy.headers, /^Retry-After: 1$/mi);
    assert.equal(JSON.parse(busy.body).error.type, 'rate_limit_error');
    small.proc.kill('SIGTERM');
    const rest = [];
    for (let r = await iterator.next(); !r.done; r = await iterator.next()) rest.push(r.value);
    assert.equal(rest.at(-1).choices[0].finish_reason, 'length');  // finished, not cut
    const { code } = await withTimeout(small.exited, 30000, 'exit after drain');
    assert.equal(code, 0);
    assert.match(small.stderr(), /waste serve: stopped \(0 cancelled at the deadline\)/);
  } finally {
    await small.stop();
    own.cleanup();
  }
});
