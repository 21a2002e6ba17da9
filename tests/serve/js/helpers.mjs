// Shared by the node tests: a tiny synthetic container with the K3 chat.json (made once per test file), a `waste serve`
// on 127.0.0.1 with a free port, raw HTTP over loopback, and a bounded wait for anything.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, readFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

export const bin = path.join(process.env.WASTE_BIN_DIR ?? 'build/cli', 'waste');
export const sourceDir = process.env.WASTE_SOURCE_DIR ?? process.cwd();
export const k3Format = path.join(sourceDir, 'configs/chat/kimi-k3.json');

// `preset` and `name`: another synth preset under another folder name (NAME.waste).
export function makeContainer({ preset = 'tiny', name = 'tiny' } = {}) {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'waste-serve-'));
  const model = path.join(dir, `${name}.waste`);
  const r = spawnSync(bin, ['synth', '--preset', preset, '--tokenizer', '--chat-format', k3Format, '--out', model], { encoding: 'utf8', timeout: 120000 });
  if (r.status !== 0) throw new Error(`waste synth failed: ${r.stderr}`);
  return { model, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

export function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`timed out: ${what}`)), ms); }),
  ]);
}

// Starts `waste serve MODEL --port 0 ...`; resolves once it prints "ready" with {url, port, proc, stop()}.
// `env`: variables added to this process's environment for the server.
export async function startServer(model, extra = [], { env = {} } = {}) {
  return startServerWith([model, ...extra], { env });
}

// The same with the models given in `args` as they come (e.g. ['--model', A, '--model', B, ...]).
export async function startServerWith(extra, { env = {} } = {}) {
  const args = ['serve', '--port', '0', '--threads', '1', ...(extra.includes('--ctx') ? [] : ['--ctx', '512']), ...extra];
  const proc = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...env } });
  let stderr = '';
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const port = await withTimeout(new Promise((resolve, reject) => {
    let port = 0;
    proc.stderr.setEncoding('utf8');
    proc.stderr.on('data', (chunk) => {
      stderr += chunk;
      const m = stderr.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) port = Number(m[1]);
      if (port && stderr.includes('waste serve: ready')) resolve(port);
    });
    exited.then(({ code }) => reject(new Error(`waste serve exited (${code}): ${stderr}`)));
  }), 120000, 'waste serve start');
  const url = `http://127.0.0.1:${port}`;
  return {
    url, port, proc, exited,
    stderr: () => stderr,
    async stop() {
      if (proc.exitCode !== null || proc.signalCode !== null) return exited;
      proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), 30000);
      const r = await exited;
      clearTimeout(t);
      return r;
    },
  };
}

// One request on its own connection: `raw` is written as is (so bodies may be anything, and
// headers may promise a body that never comes). Resolves {status, headers, body} at close.
export function rawRequest(port, raw, timeoutMs = 30000) {
  return withTimeout(new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    const chunks = [];
    socket.on('data', (c) => chunks.push(c));
    socket.on('error', reject);
    socket.on('close', () => {
      const text = Buffer.concat(chunks).toString('latin1');
      const m = text.match(/^HTTP\/1\.[01] (\d{3})/);
      const split = text.indexOf('\r\n\r\n');
      resolve({ status: m ? Number(m[1]) : 0, headers: split >= 0 ? text.slice(0, split) : text,
                body: split >= 0 ? text.slice(split + 4) : '' });
    });
    socket.write(raw);
  }), timeoutMs, 'raw request');
}

export function post(pathName, body, headers = {}) {
  const bytes = Buffer.isBuffer(body) ? body : Buffer.from(body, 'utf8');
  let head = `POST ${pathName} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\n`;
  for (const [k, v] of Object.entries(headers)) head += `${k}: ${v}\r\n`;
  head += `Content-Length: ${bytes.length}\r\n\r\n`;
  return Buffer.concat([Buffer.from(head, 'latin1'), bytes]);
}

export function rssKiB(pid) {
  const m = readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/);
  return m ? Number(m[1]) : 0;
}

export async function metric(url, name) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const m = text.match(new RegExp(`^${name.replace(/[{}"/]/g, '\\$&')} (\\S+)$`, 'm'));
  return m ? Number(m[1]) : undefined;
}
