// The prefix cache through the official `openai` client: a chat growing over 4 turns (seeded
// sampling and greedy, blocking and streamed with include_usage) gets the same answers from a
// server with the cache (the default) and one started with --prefix-cache 0;
// usage.prompt_tokens_details.cached_tokens is 0 on turn 1 and above 0 on turns 2-4 (0 always
// without the cache), and /metrics counts the reused tokens and the pool's bytes.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { makeContainer, startServer, metric } from './helpers.mjs';

let container, cachedServer, plainServer, cached, plain;

before(async () => {
  container = makeContainer();
  const common = ['--parallel', '2', '--ctx', '2048', '--metrics-public'];
  cachedServer = await startServer(container.model, common);
  plainServer = await startServer(container.model, [...common, '--prefix-cache', '0']);
  cached = new OpenAI({ apiKey: 'unused', baseURL: `${cachedServer.url}/v1`, maxRetries: 0, timeout: 120000 });
  plain = new OpenAI({ apiKey: 'unused', baseURL: `${plainServer.url}/v1`, maxRetries: 0, timeout: 120000 });
});

after(async () => {
  if (cachedServer) await cachedServer.stop();
  if (plainServer) await plainServer.stop();
  if (container) container.cleanup();
});

// One turn: the answer's text and its usage, blocking or streamed (usage from the last chunk).
async function ask(client, messages, turn) {
  const params = { model: 'tiny', messages, max_tokens: 16, temperature: turn % 2 ? 0 : 0.8, seed: 40 + turn };
  if (turn % 2 === 0) {
    const r = await client.chat.completions.create(params);
    return { text: r.choices[0].message.content ?? '', usage: r.usage };
  }
  const stream = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let usage = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  return { text, usage };
}

test('a growing 4-turn chat: the same answers with and without the prefix cache, cached_tokens from turn 2', async () => {
  assert.equal(await metric(plainServer.url, 'waste_prefix_cache_capacity_bytes'), 0);
  assert.ok((await metric(cachedServer.url, 'waste_prefix_cache_capacity_bytes')) > 0);
  const messages = [{ role: 'system', content: 'You answer in one line.' }];
  const questions = ['Where does the river start?', 'And where does it end?', 'How long is it, then?',
                     'Name a town on its banks, and say why it grew there.'];
  let reused = 0;
  for (let turn = 0; turn < 4; turn++) {
    messages.push({ role: 'user', content: questions[turn] });
    const withCache = await ask(cached, messages, turn);
    const withoutCache = await ask(plain, messages, turn);
    assert.equal(withCache.text, withoutCache.text, `turn ${turn + 1}: the answer`);
    assert.equal(withCache.usage.prompt_tokens, withoutCache.usage.prompt_tokens, `turn ${turn + 1}: prompt_tokens`);
    assert.equal(withCache.usage.completion_tokens, withoutCache.usage.completion_tokens);
    assert.equal(withoutCache.usage.prompt_tokens_details.cached_tokens, 0, `turn ${turn + 1}: no cache, nothing reused`);
    const hit = withCache.usage.prompt_tokens_details.cached_tokens;
    if (turn === 0) {
      assert.equal(hit, 0);
    } else {
      // At least the previous turn's prompt, never the whole prompt (its last token is fed).
      assert.ok(hit > 0 && hit < withCache.usage.prompt_tokens, `turn ${turn + 1}: cached_tokens ${hit}`);
    }
    reused += hit;
    messages.push({ role: 'assistant', content: withCache.text });
  }
  assert.equal(await metric(cachedServer.url, 'waste_prompt_cached_tokens_total'), reused);
  const bytes = await metric(cachedServer.url, 'waste_prefix_cache_bytes');
  assert.ok(bytes > 0 && bytes <= (await metric(cachedServer.url, 'waste_prefix_cache_capacity_bytes')));
  assert.equal(await metric(plainServer.url, 'waste_prompt_cached_tokens_total'), 0);
  assert.equal(await metric(plainServer.url, 'waste_prefix_cache_bytes'), 0);
});
