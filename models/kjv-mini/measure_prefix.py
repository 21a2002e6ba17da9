"""Time to first token over a growing chat, with and without `waste serve`'s prefix cache.

Two servers on one converted kjv-mini container: the default (prefix cache on) and
`--prefix-cache 0`. Each runs the same conversation of TURNS turns (a system message of held-out
verses, then user turns of a few verses each; greedy, 16 tokens, streamed with logprobs so the first
token's chunk is sent whatever its text), REPEATS times with another system message each time (so
one repetition never reuses another's prefix). Prints per turn the prompt tokens, the cached tokens
the reply reports, and the median time from sending the request to the first token's chunk.
Usage: measure_prefix.py WASTE CONTAINER [--turns 4] [--repeats 5] [--threads 2]
Standard-library python only.
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def verses():
    with open(os.path.join(HERE, "heldout_jude.txt"), encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


class Server:
    def __init__(self, waste, model, threads, extra):
        args = [waste, "serve", model, "--port", "0", "--threads", str(threads), "--parallel", "1", "--in-process"]
        self.proc = subprocess.Popen(args + extra, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        text = ""
        self.port = 0
        while "waste serve: ready" not in text:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError("waste serve exited: " + text)
            text += line
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
        self.banner = text

    def chat(self, messages, max_tokens):
        """(seconds to the first token's chunk, answer text, usage)"""
        body = json.dumps({"model": "kjv", "messages": messages, "max_tokens": max_tokens, "temperature": 0,
                           "stream": True, "stream_options": {"include_usage": True}, "logprobs": True})
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        start = time.perf_counter()
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {resp.read()!r}")
        first = None
        text = ""
        usage = None
        for raw in resp:
            line = raw.decode("utf-8").strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for choice in chunk.get("choices", []):
                if first is None and choice.get("logprobs"):
                    first = time.perf_counter() - start
                text += choice.get("delta", {}).get("content") or ""
        conn.close()
        return first, text, usage

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def conversation(server, rep, turns, lines):
    system = f"Session {rep}. " + " ".join(lines[:12])
    messages = [{"role": "system", "content": system}]
    out = []
    for t in range(turns):
        messages.append({"role": "user", "content": " ".join(lines[(12 + 4 * t + i) % len(lines)] for i in range(4))})
        ttft, text, usage = server.chat(messages, 16)
        details = usage.get("prompt_tokens_details") or {}
        out.append((usage["prompt_tokens"], details.get("cached_tokens", 0), ttft, text))
        messages.append({"role": "assistant", "content": text})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("waste")
    ap.add_argument("model")
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    lines = verses()
    results = {}
    for name, extra in (("on", []), ("off", ["--prefix-cache", "0"])):
        server = Server(a.waste, a.model, a.threads, extra)
        try:
            results[name] = [conversation(server, rep, a.turns, lines) for rep in range(a.repeats)]
        finally:
            server.stop()
    print("turn  prompt  cached(on)  ttft on ms  ttft off ms  answers equal")
    for t in range(a.turns):
        on = [r[t] for r in results["on"]]
        off = [r[t] for r in results["off"]]
        same = all(x[3] == y[3] for x, y in zip(on, off))
        print(f"{t + 1:4d}  {on[0][0]:6d}  {on[0][1]:10d}  {1e3 * statistics.median(x[2] for x in on):10.1f}  "
              f"{1e3 * statistics.median(x[2] for x in off):11.1f}  {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
