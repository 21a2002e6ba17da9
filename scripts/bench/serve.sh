#!/usr/bin/env bash
# Serving benchmark: aggregate decode tok/s at 1/2/4/8 concurrent streams (over each stream's span,
# and in the steady state where every stream decodes), time to first token and
# inter-token p50/p99, against `waste serve` on loopback (warm: one untimed round first).
# Usage: scripts/bench/serve.sh MODEL [TOKENS_PER_STREAM] [extra waste serve args...]
#        SERVE_LEVELS="1 4 1 4" alternates levels (default "1 2 4 8").
# e.g.   waste synth --preset kimi-linear --layers 8 --out kl8.waste --tokenizer
#        nice -n 10 scripts/bench/serve.sh kl8.waste 64
# Prints one JSON line per concurrency level. Needs node (>= 18, for fetch). Stops its server at exit.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
model="${1:?usage: serve.sh MODEL [TOKENS] [serve args...]}"; shift
tokens="${1:-64}"; shift || true
waste="${WASTE_BIN:-$root/build/cli/waste}"
log="$(mktemp)"
"$waste" serve "$model" --port 0 --parallel 8 --ctx 2048 "$@" 2>"$log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 600); do
  grep -q "waste serve: ready" "$log" && break
  kill -0 $pid 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.5
done
port="$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -1)"
model_id="$(basename "$model" .waste)"
PORT="$port" MODEL_ID="$model_id" TOKENS="$tokens" LEVELS="${SERVE_LEVELS:-1 2 4 8}" node --input-type=module - <<'JS'
const url = `http://127.0.0.1:${process.env.PORT}/v1/completions`;
const tokens = Number(process.env.TOKENS);
// One stream: completions with ids as the prompt (no tokenizer needed); times of each SSE event.
async function stream(i) {
  const start = performance.now();
  const body = JSON.stringify({ model: process.env.MODEL_ID, prompt: Array.from({ length: 32 }, (_, k) => 1 + ((k * 7 + i * 13) % 200)),
    max_tokens: tokens, temperature: 0.8, seed: 1 + i, stream: true, logprobs: 0 });  // logprobs: one event per token
  const res = await fetch(url, { method: 'POST', body, headers: { 'Content-Type': 'application/json' } });
  const times = [];
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const chunk of res.body) {
    buffer += decoder.decode(chunk, { stream: true });
    let at;
    while ((at = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, at); buffer = buffer.slice(at + 2);
      if (event.includes('"token_logprobs"')) times.push(performance.now());  // one per sampled token
    }
  }
  return { start, times };
}
const pct = (a, p) => { const s = [...a].sort((x, y) => x - y); return s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))] : 0; };
await Promise.all([0, 1].map(stream));  // warm the cache and the pages
for (const n of (process.env.LEVELS || '1 2 4 8').trim().split(/\s+/).map(Number)) {
  const t0 = performance.now();
  const runs = await Promise.all(Array.from({ length: n }, (_, i) => stream(i)));
  const wall = (performance.now() - t0) / 1000;
  const ttft = runs.map((r) => r.times[0] - r.start);
  const gaps = runs.flatMap((r) => r.times.slice(1).map((t, k) => t - r.times[k]));
  const generated = runs.reduce((s, r) => s + r.times.length, 0);
  const decodeSeconds = Math.max(...runs.map((r) => (r.times.at(-1) - r.times[0]) / 1000));
  // Steady state: tokens in the window where every stream is decoding (after the last first token,
  // up to the first last token), so the early streams' spans do not count the later streams'
  // prompt passes as decode time.
  const from = Math.max(...runs.map((r) => r.times[0])), to = Math.min(...runs.map((r) => r.times.at(-1)));
  const inWindow = runs.reduce((s, r) => s + r.times.filter((t) => t > from && t <= to).length, 0);
  console.log(JSON.stringify({ streams: n, tokens: generated, wall_s: +wall.toFixed(3),
    aggregate_decode_tok_s: +((generated - n) / decodeSeconds).toFixed(2),
    steady_decode_tok_s: to > from ? +(inWindow / ((to - from) / 1000)).toFixed(2) : null,
    ttft_ms_p50: +pct(ttft, 0.5).toFixed(1), ttft_ms_max: +Math.max(...ttft).toFixed(1),
    inter_token_ms_p50: +pct(gaps, 0.5).toFixed(2), inter_token_ms_p99: +pct(gaps, 0.99).toFixed(2) }));
}
JS
