// Hostile HTTP input against `waste serve` on loopback (issue 27): bodies and header lines far over
// the limits, clients that trickle bytes and never finish, a flood of large generation requests
// past the queue, and the API key given by file or environment. Each test is bounded in time and
// stops by itself; RSS is the server's (/proc/PID/status).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { makeContainer, startServer, rawRequest, post, rssKiB, withTimeout } from './helpers.mjs';

const MiB = 1 << 20;
// The RSS bound of the two 64 MiB floods. Under AddressSanitizer (scripts/test.sh sets ASAN_OPTIONS
// for that stage) freed blocks wait in ASan's quarantine and still count in RSS, so the bound there
// is 48 MiB: still below what reading the 64 MiB would cost. The release run holds the 16 MiB bound.
const RSS_BOUND_KIB = (process.env.ASAN_OPTIONS ? 48 : 16) * 1024;
let container, server;
before(async () => {
  container = makeContainer();
  server = await startServer(container.model, ['--parallel', '1', '--read-timeout', '3']);
});
after(async () => {
  if (server) await server.stop();
  if (container) container.cleanup();
});

// Writes `head`, then `total` bytes made by `piece()` as fast as the socket takes them (the
// server may answer and close at any point); resolves {status, body, bytesWritten} at close.
function flood(port, head, total, piece) {
  return withTimeout(new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    const chunks = [];
    let written = 0, closed = false;
    socket.on('data', (c) => chunks.push(c));
    socket.on('error', () => {});
    socket.on('close', () => {
      closed = true;
      const text = Buffer.concat(chunks).toString('latin1');
      const m = text.match(/^HTTP\/1\.[01] (\d{3})/);
      const split = text.indexOf('\r\n\r\n');
      resolve({ status: m ? Number(m[1]) : 0, body: split >= 0 ? text.slice(split + 4) : '', written });
    });
    socket.write(head);
    const pump = () => {
      while (!closed && written < total) {
        const p = piece(written);
        written += p.length;
        if (!socket.write(p)) { socket.once('drain', pump); return; }
      }
      if (!closed) socket.end();
    };
    pump();
  }), 60000, 'flood');
}

async function health(port) {
  const start = Date.now();
  const r = await rawRequest(port, Buffer.from('GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'), 5000);
  return { status: r.status, ms: Date.now() - start };
}

test('a 64 MiB chunked body gets 413 and the RSS grows < 16 MiB', async () => {
  const before = rssKiB(server.proc.pid);
  const chunk = Buffer.concat([Buffer.from('10000\r\n'), Buffer.alloc(0x10000, 'a'), Buffer.from('\r\n')]);
  const head = 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n';
  const r = await flood(server.port, head, 64 * MiB, () => chunk);
  assert.equal(r.status, 413, `status ${r.status}: ${r.body.slice(0, 200)}`);
  assert.equal(JSON.parse(r.body).error.code, 'payload_too_large');
  const grew = rssKiB(server.proc.pid) - before;
  console.log(`chunked 64 MiB: ${r.status} after ${r.written} bytes written, RSS grew ${grew} KiB`);
  assert.ok(grew < RSS_BOUND_KIB, `RSS grew ${grew} KiB`);
  assert.equal((await health(server.port)).status, 200);
});

test('a 64 MiB header line closes the connection (431) and the RSS grows < 16 MiB', async () => {
  const before = rssKiB(server.proc.pid);
  const piece = Buffer.alloc(0x10000, 'b');
  const r = await flood(server.port, 'GET /health HTTP/1.1\r\nHost: x\r\nX-Long: ', 64 * MiB, () => piece);
  assert.ok(r.status === 431 || r.status === 0, `status ${r.status}`);
  if (r.status === 431) assert.equal(JSON.parse(r.body).error.code, 'header_too_large');
  assert.ok(r.written < 64 * MiB || r.status === 431, 'the server read the whole line');
  const grew = rssKiB(server.proc.pid) - before;
  console.log(`header line 64 MiB: ${r.status} after ${r.written} bytes written, RSS grew ${grew} KiB`);
  assert.ok(grew < RSS_BOUND_KIB, `RSS grew ${grew} KiB`);
  assert.equal((await health(server.port)).status, 200);
});

test('100 trickling connections: /health answers within 1 s, the tricklers are dropped at the deadline', async () => {
  const sockets = [];
  const closedAt = [];
  const start = Date.now();
  for (let i = 0; i < 100; ++i) {
    const s = net.connect(server.port, '127.0.0.1');
    s.on('error', () => {});
    s.on('close', () => closedAt.push(Date.now() - start));
    s.on('data', () => {});
    sockets.push(s);
  }
  const request = 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n';
  let sent = 0;
  const timer = setInterval(() => {  // one byte every 300 ms on each, never completing
    for (const s of sockets) if (!s.destroyed) s.write(request[sent % request.length]);
    ++sent;
  }, 300);
  try {
    await new Promise((r) => setTimeout(r, 1000));
    for (let k = 0; k < 3; ++k) {
      const h = await health(server.port);
      console.log(`/health with 100 tricklers: ${h.status} in ${h.ms} ms`);
      assert.equal(h.status, 200);
      assert.ok(h.ms < 1000, `/health took ${h.ms} ms`);
    }
    // The deadline is 3 s from each connection's first byte: all gone well before 10 s.
    await withTimeout((async () => {
      while (closedAt.length < 100) await new Promise((r) => setTimeout(r, 100));
    })(), 10000, 'tricklers dropped');
    console.log(`tricklers closed between ${Math.min(...closedAt)} and ${Math.max(...closedAt)} ms`);
    assert.ok(Math.max(...closedAt) < 8000, `last trickler closed after ${Math.max(...closedAt)} ms`);
    assert.ok(Math.min(...closedAt) >= 2500, `a trickler closed after ${Math.min(...closedAt)} ms`);
  } finally {
    clearInterval(timer);
    for (const s of sockets) s.destroy();
  }
});

// A byte every millisecond on each of 100 connections, and the server held still (SIGSTOP) across
// its 3 s deadline, as a loaded machine may: when it runs again, the deadline's handler and a read
// that has already taken bytes are queued together. Cancelling the socket misses that read, and
// before the transport gated its reads the request parser went on reading those connections with
// no deadline left (most of the 100 here; some under ctest -j2 with sanitizers, unprovoked).
test('100 connections sending a byte each millisecond across a stalled deadline are all dropped', async () => {
  const sockets = [];
  const closedAt = [];
  const start = Date.now();
  const head = 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n';
  for (let i = 0; i < 100; ++i) {
    const s = net.connect(server.port, '127.0.0.1');
    s.on('error', () => {});
    s.on('close', () => closedAt.push(Date.now() - start));
    s.on('data', () => {});
    s.write(head);
    sockets.push(s);
  }
  const timer = setInterval(() => { for (const s of sockets) if (!s.destroyed) s.write('a'); }, 1);
  try {
    await new Promise((r) => setTimeout(r, 2500));
    process.kill(server.proc.pid, 'SIGSTOP');
    await new Promise((r) => setTimeout(r, 1000));
    process.kill(server.proc.pid, 'SIGCONT');
    await withTimeout((async () => {
      while (closedAt.length < 100) await new Promise((r) => setTimeout(r, 100));
    })(), 10000, 'the fast tricklers dropped').catch((e) => {
      throw new Error(`${e.message}: ${closedAt.length} of 100 closed`);
    });
    console.log(`fast tricklers closed between ${Math.min(...closedAt)} and ${Math.max(...closedAt)} ms`);
    assert.ok(Math.min(...closedAt) >= 2500, `a fast trickler closed after ${Math.min(...closedAt)} ms`);
  } finally {
    clearInterval(timer);
    for (const s of sockets) s.destroy();
    try { process.kill(server.proc.pid, 'SIGCONT'); } catch {}
  }
});

test('80 concurrent 16-image requests on --queue 0 while one generates: 429s, RSS < 2 GB', async () => {
  const own = makeContainer();
  // A long context: the one stream must still hold its slot while the 80 arrive.
  const small = await startServer(own.model, ['--parallel', '1', '--queue', '0', '--ctx', '16384']);
  try {
    const eos = JSON.parse(readFileSync(path.join(own.model, 'manifest.json'), 'utf8')).config.eos_token_id;
    // The one slot: a stream that runs until it is cancelled (eos banned).
    const holder = net.connect(small.port, '127.0.0.1');
    holder.on('error', () => {});
    const first = new Promise((resolve) => holder.once('data', resolve));
    holder.write(post('/v1/completions', JSON.stringify({ model: 'tiny', prompt: 'x', max_tokens: 100000, stream: true,
      logit_bias: { [eos]: -100 } })));
    await withTimeout(first, 30000, 'stream started');
    // 16 parts of ~200 KB each: a 3.2 MB body per request.
    const image = `data:image/png;base64,${Buffer.alloc(150000, 7).toString('base64')}`;
    const content = [{ type: 'text', text: 'look' },
      ...Array.from({ length: 16 }, () => ({ type: 'image_url', image_url: { url: image } }))];
    const body = JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content }], max_tokens: 4 });
    const raw = post('/v1/chat/completions', body);
    let peak = 0;
    const sampler = setInterval(() => { peak = Math.max(peak, rssKiB(small.proc.pid)); }, 20);
    const answers = await Promise.all(Array.from({ length: 80 }, () => rawRequest(small.port, raw, 60000)));
    clearInterval(sampler);
    peak = Math.max(peak, rssKiB(small.proc.pid));
    const statuses = answers.map((a) => a.status);
    console.log(`80 image requests: ${JSON.stringify(statuses.reduce((m, x) => ({ ...m, [x]: (m[x] ?? 0) + 1 }), {}))}, peak RSS ${peak} KiB`);
    assert.deepEqual([...new Set(statuses)], [429], `statuses: ${statuses.join(',')}`);
    assert.equal(JSON.parse(answers[0].body).error.type, 'rate_limit_error');
    assert.ok(peak < 2 * 1024 * 1024, `peak RSS ${peak} KiB`);
    holder.destroy();
  } finally {
    await small.stop();
    own.cleanup();
  }
});

test('the API key by file or environment: never in the command line; 401s; /metrics guarded', async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'waste-key-'));
  const key = 'sk-secret-7f3a9c';
  const keyFile = path.join(dir, 'key');
  writeFileSync(keyFile, `${key}\n`, { mode: 0o600 });
  const get = (s, p, auth) => rawRequest(s.port, Buffer.from(`GET ${p} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n` +
    (auth ? `Authorization: Bearer ${auth}\r\n` : '') + '\r\n'));
  const servers = [];
  try {
    servers.push(await startServer(container.model, ['--api-key-file', keyFile]));
    servers.push(await startServer(container.model, ['--metrics-public'], { env: { WASTE_API_KEY: key } }));
    for (const s of servers) {
      const cmdline = readFileSync(`/proc/${s.proc.pid}/cmdline`, 'latin1');
      assert.ok(!cmdline.includes(key), 'the key is in /proc/PID/cmdline');
      assert.ok(!readFileSync(`/proc/${s.proc.pid}/environ`, 'latin1').includes(key) || s === servers[1],
        'the key file leaked into the environment');
      assert.equal((await get(s, '/v1/models', 'sk-wrong')).status, 401);
      assert.equal((await get(s, '/v1/models')).status, 401);
      assert.equal((await get(s, '/v1/models', key)).status, 200);
      assert.equal((await get(s, '/health')).status, 200);
      assert.equal((await get(s, '/metrics', key)).status, 200);
    }
    const wrong = await get(servers[0], '/v1/models', 'sk-wrong');
    assert.equal(JSON.parse(wrong.body).error.code, 'invalid_api_key');
    assert.equal((await get(servers[0], '/metrics')).status, 401);  // a key and no --metrics-public
    assert.equal((await get(servers[1], '/metrics')).status, 200);  // --metrics-public
    assert.doesNotMatch(servers[0].stderr(), /warning/);
  } finally {
    for (const s of servers) await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  // The command-line form still works, with a warning.
  const cli = await startServer(container.model, ['--api-key', key]);
  try {
    assert.match(cli.stderr(), /warning: --api-key puts the key in \/proc\/PID\/cmdline/);
    assert.equal((await get(cli, '/v1/models', key)).status, 200);
  } finally {
    await cli.stop();
  }
});
