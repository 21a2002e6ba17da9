// docs/DEPLOY.md's set-up on loopback: nginx (least_conn, proxy_buffering off) in front of two
// `waste serve`; streams come through event by event and both servers take requests.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { makeContainer, startServer, metric, withTimeout } from './helpers.mjs';

let containers = [], servers = [], nginx, nginxDir, nginxPort;

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

before(async () => {
  // Two hosts: two containers (each server with its own daemon and cache).
  containers = [makeContainer(), makeContainer()];
  for (const c of containers) servers.push(await startServer(c.model, ['--parallel', '2']));
  nginxPort = await freePort();
  nginxDir = mkdtempSync(path.join(os.tmpdir(), 'waste-nginx-'));
  for (const d of ['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']) mkdirSync(path.join(nginxDir, d));
  writeFileSync(path.join(nginxDir, 'nginx.conf'), `
worker_processes 1;
pid ${nginxDir}/nginx.pid;
error_log ${nginxDir}/error.log warn;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path ${nginxDir}/client_body;
  proxy_temp_path ${nginxDir}/proxy;
  fastcgi_temp_path ${nginxDir}/fastcgi;
  uwsgi_temp_path ${nginxDir}/uwsgi;
  scgi_temp_path ${nginxDir}/scgi;
  upstream waste { least_conn; ${servers.map((s) => `server 127.0.0.1:${s.port};`).join(' ')} keepalive 8; }
  server {
    listen 127.0.0.1:${nginxPort};
    client_max_body_size 4m;
    location / {
      proxy_pass http://waste;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 300s;
    }
  }
}
`);
  nginx = spawn(process.env.WASTE_NGINX ?? 'nginx', ['-p', nginxDir, '-c', path.join(nginxDir, 'nginx.conf'), '-g', 'daemon off;'],
    { stdio: 'ignore' });
  await withTimeout((async () => {
    for (;;) {
      try { if ((await fetch(`http://127.0.0.1:${nginxPort}/health`)).status === 200) return; } catch {}
      await new Promise((r) => setTimeout(r, 100));
    }
  })(), 30000, 'nginx up');
});

after(async () => {
  if (nginx) { nginx.kill('SIGTERM'); await new Promise((r) => nginx.exitCode !== null ? r() : nginx.on('exit', r)); }
  for (const s of servers) await s.stop();
  if (nginxDir) rmSync(nginxDir, { recursive: true, force: true });
  for (const c of containers) c.cleanup();
});

test('streams through nginx arrive as events and both servers serve', async () => {
  const client = new OpenAI({ apiKey: 'x', baseURL: `http://127.0.0.1:${nginxPort}/v1`, maxRetries: 0 });
  const run = async (i) => {
    const chunks = [];
    const stream = await client.chat.completions.create({ model: 'tiny', max_tokens: 24, temperature: 0.8, seed: i,
      messages: [{ role: 'user', content: `hello ${i}` }], stream: true });
    for await (const c of stream) chunks.push(c);
    return chunks;
  };
  const results = await Promise.all([0, 1, 2, 3].map(run));
  for (const chunks of results) {
    assert.deepEqual(chunks[0].choices[0].delta, { role: 'assistant', content: '' });
    assert.ok(['stop', 'length'].includes(chunks.at(-1).choices[0].finish_reason));
  }
  const served = [];
  for (const s of servers) served.push(await metric(s.url, 'waste_requests_total{route="/v1/chat/completions",status="200"}') ?? 0);
  assert.ok(served.every((n) => n >= 1), `requests per server: ${served}`);
  // Direct to one server, the same seeded request gives the same text as through nginx.
  const direct = new OpenAI({ apiKey: 'x', baseURL: `${servers[0].url}/v1`, maxRetries: 0 });
  const again = await direct.chat.completions.create({ model: 'tiny', max_tokens: 24, temperature: 0.8, seed: 0,
    messages: [{ role: 'user', content: 'hello 0' }] });
  assert.equal(results[0].map((c) => c.choices[0]?.delta?.content ?? '').join(''), again.choices[0].message.content);
});
