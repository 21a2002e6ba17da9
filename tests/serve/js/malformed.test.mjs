// 1,000 seeded malformed requests over raw loopback sockets (bad JSON, wrong types, huge or
// negative values, unknown roles, invalid UTF-8, oversize bodies, headers promising a body that
// never comes): every one gets a 4xx with an OpenAI error object, the server stays up, and its
// RSS stays bounded.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { makeContainer, startServer, rawRequest, post, rssKiB } from './helpers.mjs';

let container, server;
before(async () => {
  container = makeContainer();
  server = await startServer(container.model, ['--parallel', '2', '--read-timeout', '1']);
});
after(async () => {
  if (server) await server.stop();
  if (container) container.cleanup();
});

function mulberry32(seed) {
  return () => {
    seed = (seed + 0x6D2B79F5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const valid = () => ({ model: 'tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
const wrongTypes = [
  ['model', 7], ['messages', 'hi'], ['messages', [7]], ['temperature', 'hot'], ['top_p', []], ['max_tokens', '5'],
  ['stream', 1], ['stop', 5], ['stop', [1, 2]], ['seed', 'x'], ['n', true], ['logprobs', 'yes'], ['top_k', 1.5],
  ['stream_options', 3], ['presence_penalty', {}], ['max_completion_tokens', [1]],
];
const badValues = [
  ['max_tokens', -1], ['max_tokens', 1e20], ['max_completion_tokens', -7], ['temperature', 1e308],
  ['temperature', -0.5], ['top_p', 2], ['top_k', -1], ['seed', 1.5e30], ['n', 0], ['n', 1000000],
  ['frequency_penalty', -3], ['top_logprobs', 21], ['stop', ['a', 'b', 'c', 'd', 'e']],
  ['response_format', { type: 'json_schema' }], ['tools', [{ type: 'function' }]],
];

// Each generator returns the raw bytes of one request that must be refused with a 4xx.
function makeRequest(rand, i) {
  const pick = (a) => a[Math.floor(rand() * a.length)];
  const route = rand() < 0.8 ? '/v1/chat/completions' : '/v1/completions';
  switch (i % 8) {
    case 0: {  // bad JSON: a truncated valid body or random bytes
      const text = JSON.stringify(valid());
      const body = rand() < 0.5 ? text.slice(0, Math.floor(rand() * (text.length - 1)))
        : Buffer.from(Array.from({ length: 1 + Math.floor(rand() * 64) }, () => Math.floor(rand() * 256)));
      return post(route, body);
    }
    case 1: { const b = valid(); const [k, v] = pick(wrongTypes); b[k] = v; return post('/v1/chat/completions', JSON.stringify(b)); }
    case 2: { const b = valid(); const [k, v] = pick(badValues); b[k] = v; return post('/v1/chat/completions', JSON.stringify(b)); }
    case 3: {  // unknown roles and malformed messages
      const b = valid();
      b.messages = [pick([{ role: pick(['wizard', '', 'USER', 'function_x']), content: 'x' }, { content: 'x' },
        { role: 'user' }, { role: 'user', content: [{ type: 'image_url', image_url: { url: 'file:///etc/passwd' } }] }])];
      return post('/v1/chat/completions', JSON.stringify(b));
    }
    case 4: {  // invalid UTF-8 inside a JSON string
      const bad = Buffer.from([pick([0xff, 0xc0, 0xed, 0xf8]), pick([0x80, 0x20, 0xa0]), 0x41]);
      const body = Buffer.concat([Buffer.from('{"model":"tiny","messages":[{"role":"user","content":"'), bad,
        Buffer.from('"}]}')]);
      return post('/v1/chat/completions', body);
    }
    case 5: {  // oversize: a Content-Length over the 4 MiB cap (the body is never needed)
      const length = (4 << 20) + 1 + Math.floor(rand() * 1e9);
      return Buffer.from(`POST ${route} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: ${length}\r\n\r\n{"model"`);
    }
    case 6: {  // completions: bad prompts
      const prompt = pick([null, 5, [], [[1], [2]], ['a', 'b'], [-1], [1.5], { a: 1 }, [2 ** 40]]);
      return post('/v1/completions', JSON.stringify({ model: 'tiny', prompt }));
    }
    default: {  // unknown models, routes and methods
      return pick([
        post('/v1/chat/completions', JSON.stringify({ ...valid(), model: `m${i}` })),
        post(`/v1/${'x'.repeat(1 + (i % 50))}`, '{}'),
        Buffer.from(`GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`),
        Buffer.from(`DELETE /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`),
      ]);
    }
  }
}

test('1,000 malformed requests get 4xx error objects; the server stays up with bounded RSS', async () => {
  const rand = mulberry32(20261201);
  const rssBefore = rssKiB(server.proc.pid);
  const statuses = new Map();
  const all = Array.from({ length: 1000 }, (_, i) => ({ i, raw: makeRequest(rand, i) }));
  // The oversize ones are answered when the read of their missing body times out (1 s): they go
  // in batches of their own so they wait together.
  // Normal ones 4 at a time: cpp-httplib 0.11 listens with a backlog of 5, and a burst of more new
  // connections waits for SYN retransmits (1 s), which would only slow the test down.
  const normal = all.filter((r) => r.i % 8 !== 5), oversize = all.filter((r) => r.i % 8 === 5);
  const batches = [];
  for (let k = 0; k < normal.length; k += 4) batches.push(normal.slice(k, k + 4));
  for (let k = 0; k < oversize.length; k += 16) batches.push(oversize.slice(k, k + 16));
  for (const batch of batches) {
    const answers = await Promise.all(batch.map((r) => rawRequest(server.port, r.raw)));
    answers.forEach((a, j) => {
      const i = batch[j].i;
      assert.ok(a.status >= 400 && a.status < 500, `request ${i} got ${a.status}: ${a.body.slice(0, 200)}`);
      const error = JSON.parse(a.body).error;
      assert.equal(typeof error.message, 'string', `request ${i}`);
      assert.ok('type' in error && 'param' in error && 'code' in error, `request ${i}`);
      statuses.set(a.status, (statuses.get(a.status) ?? 0) + 1);
    });
  }
  assert.ok(statuses.get(400) > 500 && statuses.get(413) === 125 && statuses.get(404) > 0, JSON.stringify([...statuses]));
  console.log(`statuses: ${JSON.stringify([...statuses])}`);

  // Headers that promise a body which never comes: answered 400 at the read timeout, none hangs.
  const stalled = await Promise.all(Array.from({ length: 8 }, () => rawRequest(server.port,
    Buffer.from('POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"mo'), 20000)));
  for (const s of stalled) assert.equal(s.status, 400);

  const health = await fetch(`${server.url}/health`);
  assert.equal(health.status, 200);
  const rssAfter = rssKiB(server.proc.pid);
  assert.ok(rssAfter - rssBefore < 64 * 1024, `RSS grew from ${rssBefore} to ${rssAfter} KiB`);
  // And it still generates.
  const ok = await rawRequest(server.port, post('/v1/completions', JSON.stringify({ model: 'tiny', prompt: 'a', max_tokens: 2 })));
  assert.equal(ok.status, 200);
  assert.ok([1, 2].includes(JSON.parse(ok.body).usage.completion_tokens));
});
