// Several models on one server through the official `openai` client: `--model A --model B=ID`
// loads each on first use (/v1/models says "unloaded", then "loaded"), answers each request with
// the model it names (the same text as a server of that model alone, concurrently too), 404s an
// unknown id; with a small --budget a model whose floor does not fit gets 507 naming the budget
// (not retried) while the other keeps serving; a budget for one model at a time unloads the idle
// one for the other; --idle-unload unloads an idle model, and its daemon, left without a client, exits.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import OpenAI from 'openai';
import { bin, makeContainer, startServer, startServerWith, withTimeout } from './helpers.mjs';

let tiny, small;            // synth tiny (Kimi-Linear shapes) and tiny-k3 (K3 shapes), both with the K3 chat.json
const singles = {};         // id -> the answers of a server of that model alone
const servers = [];

const client = (server) => new OpenAI({ apiKey: 'unused', baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 120000 });

// The requests every test compares: one chat (seeded sampling), one completion from token ids (greedy).
async function answers(openai, model) {
  const chat = await openai.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Name three rivers.' }], max_tokens: 10, temperature: 0.8, seed: 5,
  });
  const completion = await openai.completions.create({ model, prompt: [5, 22, 39, 56, 73, 90], max_tokens: 8, temperature: 0 });
  assert.equal(chat.model, model);
  assert.equal(completion.model, model);
  return { chat: chat.choices[0].message.content, completion: completion.choices[0].text };
}

// The waste-ioserver processes serving `model` (their command lines name it).
function daemonsOf(model) {
  const pids = [];
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    let cmd = '';
    try { cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8'); } catch { continue; }
    const args = cmd.split('\0');
    if (args[0].endsWith('waste-ioserver') && args.includes(model)) pids.push(pid);
  }
  return pids;
}

async function statuses(server) {
  const list = await client(server).models.list();
  return Object.fromEntries(list.data.map((m) => [m.id, m.status]));
}

async function waitForStatus(server, id, want, ms) {
  const deadline = Date.now() + ms;
  for (;;) {
    const now = (await statuses(server))[id];
    if (now === want || Date.now() > deadline) return now;
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function start(args) {
  const server = await startServerWith([...args, '--parallel', '2', '--linger', '0']);
  servers.push(server);
  return server;
}

before(async () => {
  tiny = makeContainer();
  small = makeContainer({ preset: 'tiny-k3', name: 'small' });
  for (const [id, container] of [['tiny', tiny], ['small', small]]) {
    const server = await startServer(container.model, ['--parallel', '2', '--linger', '0']);
    singles[id] = await answers(client(server), id);
    await server.stop();
  }
  assert.notDeepEqual(singles.tiny, singles.small);
});

after(async () => {
  for (const s of servers) await s.stop();
  tiny?.cleanup();
  small?.cleanup();
});

test('two models on one server: loaded on first use, each request answered by the model it names', async () => {
  const server = await start(['--model', tiny.model, '--model', `${small.model}=small`]);
  assert.match(server.stderr(), /waste serve: ready \(2 models, loaded on first use; parallel 2, ctx 512; budget [\d.]+ [KMG]?B from the machine cap: 3\/4 of usable RAM [\d.]+ [KMG]?B; idle unload 300 s\)/);
  assert.deepEqual(await (await fetch(`${server.url}/health`)).json(), { status: 'ok' });
  assert.deepEqual(await statuses(server), { tiny: 'unloaded', small: 'unloaded' });
  const list = await client(server).models.list();
  assert.deepEqual(list.data.map((m) => [m.id, m.object, m.owned_by]), [['tiny', 'model', 'waste'], ['small', 'model', 'waste']]);
  // Both at once: each loads, each answer is its own model's.
  const [fromTiny, fromSmall] = await withTimeout(
    Promise.all([answers(client(server), 'tiny'), answers(client(server), 'small')]), 120000, 'two models');
  assert.deepEqual(fromTiny, singles.tiny);
  assert.deepEqual(fromSmall, singles.small);
  assert.deepEqual(await statuses(server), { tiny: 'loaded', small: 'loaded' });
  assert.equal((await client(server).models.retrieve('small')).status, 'loaded');
  await assert.rejects(client(server).chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'hi' }] }),
    (e) => e.status === 404 && e.code === 'model_not_found' && e.param === 'model' &&
      e.error.message === "model 'nope' does not exist; this server serves 'tiny', 'small'");
  // `waste run` on a served container attaches to the same daemon, as it does beside `waste serve MODEL`.
  const daemons = daemonsOf(tiny.model);
  assert.equal(daemons.length, 1, 'one daemon for tiny');
  const run = spawnSync(bin, ['run', tiny.model, '--ids', '5,22,39', '-n', '4', '--threads', '1', '--ctx', '512'],
    { encoding: 'utf8', timeout: 60000 });
  assert.equal(run.status, 0, run.stderr);
  assert.equal(run.stdout.trim().split(/\s+/).length, 4);
  assert.deepEqual(daemonsOf(tiny.model), daemons);
  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  assert.match(metrics, /^waste_model_state\{model="tiny",state="loaded"\} 1$/m);
  assert.match(metrics, /^waste_generated_tokens_total\{model="small"\} \d+$/m);
  await server.stop();
});

test('a model that cannot fit the budget gets 507 naming it, and the other keeps serving', async () => {
  // tiny-k3's floor at ctx 4096 (what its daemon checks, about 5.4 MB) fits 7M; tiny's (about 8 MB) does not.
  // The warning names tiny's floor as `waste plan` gives it.
  const mib = (bytes) => (bytes / 1048576).toFixed(1).replace('.', '\\.');
  const plan = (model) => JSON.parse(spawnSync(bin, ['plan', model, '--ctx', '4096', '--json'], { encoding: 'utf8' }).stdout);
  assert.ok(plan(small.model).floor_bytes < 7 * 1048576 && plan(tiny.model).floor_bytes > 7 * 1048576);
  const server = await start(['--budget', '7M', '--model', `${small.model}=small`, '--model', `${tiny.model}=big`]);
  assert.match(server.stderr(), new RegExp(`waste serve: warning: model 'big' needs ${mib(plan(tiny.model).floor_bytes)} MB, more than the budget 7\\.0 MB \\(--budget 7M\\): requests for it will get 507`));
  assert.deepEqual(await answers(client(server), 'small'), singles.small);
  const retried = new OpenAI({ apiKey: 'unused', baseURL: `${server.url}/v1`, maxRetries: 2, timeout: 120000 });
  let sends = 0;
  const counting = async (url, init) => { sends++; return fetch(url, init); };
  const watched = new OpenAI({ apiKey: 'unused', baseURL: `${server.url}/v1`, maxRetries: 2, timeout: 120000, fetch: counting });
  await assert.rejects(watched.completions.create({ model: 'big', prompt: 'hello', max_tokens: 4 }), (e) => {
    assert.equal(e.status, 507);
    assert.equal(e.code, 'insufficient_memory');
    assert.equal(e.type, 'server_error');
    // What big needs (2 sequences at ctx 512) is above what is left, and left + small's share is the budget.
    const m = e.error.message.match(/^model 'big' does not fit the budget: it needs (\d+\.\d) MB \(its memory plan's floor for 2 sequences at ctx 512\), (\d+\.\d) MB of the budget 7\.0 MB \(--budget 7M\) is left; 'small' holds (\d+\.\d) MB \(idle\)$/);
    assert.ok(m, e.error.message);
    const [need, left, held] = m.slice(1).map(Number);
    assert.ok(need > left, e.error.message);
    assert.ok(Math.abs(left + held - 7.0) <= 0.1 + 1e-9, e.error.message);
    return true;
  });
  assert.equal(sends, 1, 'x-should-retry: false: the client does not send it again');
  assert.deepEqual(await statuses(server), { small: 'loaded', big: 'unloaded' });
  assert.deepEqual(await answers(retried, 'small'), singles.small);
  assert.match(await (await fetch(`${server.url}/metrics`)).text(), /^waste_model_loads_total\{model="big",result="refused"\} 1$/m);
  await server.stop();
});

test('a budget for one model at a time: the idle one is unloaded for the other, then --idle-unload', async () => {
  const server = await start(['--budget', '9M', '--idle-unload', '3', '--model', `${small.model}=small`, '--model', `${tiny.model}=tiny`]);
  assert.deepEqual(await answers(client(server), 'small'), singles.small);
  assert.deepEqual(await statuses(server), { small: 'loaded', tiny: 'unloaded' });
  assert.deepEqual(await answers(client(server), 'tiny'), singles.tiny);
  assert.deepEqual(await statuses(server), { small: 'unloaded', tiny: 'loaded' });
  assert.deepEqual(await answers(client(server), 'small'), singles.small);
  assert.deepEqual(await statuses(server), { small: 'loaded', tiny: 'unloaded' });
  assert.match(server.stderr(), /waste serve: model 'small' unloaded to make room for 'tiny'/);
  assert.equal(daemonsOf(small.model).length, 1);
  assert.equal(await waitForStatus(server, 'small', 'unloaded', 15000), 'unloaded');
  assert.match(server.stderr(), /waste serve: model 'small' unloaded after [\d.]+ s without requests/);
  // Its engine closed, the daemon lease went with it: the daemon (--linger 0) exits.
  const deadline = Date.now() + 15000;
  while (daemonsOf(small.model).length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  assert.deepEqual(daemonsOf(small.model), []);
  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  assert.match(metrics, /^waste_model_unloads_total\{model="small",reason="room"\} 1$/m);
  assert.match(metrics, /^waste_model_unloads_total\{model="small",reason="idle"\} 1$/m);
  assert.match(metrics, /^waste_model_unloads_total\{model="tiny",reason="room"\} 1$/m);
});
