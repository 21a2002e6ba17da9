"""Quality of prefill by matrix products (WASTE_PREFILL_MATMUL, docs/QUALITY.md) on kjv-mini.
"on" is the default per-token rule (every prompt token's experts by matrix products).

Revelation's chapters are fed through chunked prefill (waste-dump-logits --chunk 64, first chunk
of 8, 16, ..., 64 tokens, so chunk ends fall on every 8th position); the logits after each chunk
score the next token. Run once with the LUT path (off) and once with the matrix products (on):
perplexity over the scored positions, top-1 agreement between the two, max |logit difference|.
Usage: measure_prefill.py CONTAINER DUMP_TOOL [--work DIR] [--threads N] [--switch VAR]
(--switch WASTE_PREFILL_INT8: the int8 trunk products off and on instead, compute/forward/int8_mode.hpp.)
"""
import argparse
import math
import os
import struct
import subprocess
import sys

from array import array

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kjv_data as kd  # noqa: E402


def chapters(book):
    by = {}
    for b, c, v, t in kd.read_kjv():
        if b == book:
            by.setdefault(c, []).append(t)
    return ["\n".join(vs) + "\n" for _, vs in sorted(by.items())]


def dump(tool, cdir, ids, first, path, threads, mode, switch="WASTE_PREFILL_MATMUL"):
    env = dict(os.environ, **{switch: mode})
    subprocess.run([tool, cdir, path, "--prompt", ",".join(map(str, ids)), "--decode", "0", "--chunk", "64",
                    "--first-chunk", str(first), "--threads", str(threads)], env=env, check=True,
                   capture_output=True)
    with open(path, "rb") as f:
        n, vocab = struct.unpack("<ii", f.read(8))
        rows = []
        for _ in range(n):
            f.read(4)
            row = array("f")
            row.frombytes(f.read(4 * vocab))
            rows.append(row)
    return rows


def nll_and_top(row, target):
    m = max(row)
    lse = m + math.log(sum(math.exp(x - m) for x in row))
    return lse - row[target], max(range(len(row)), key=row.__getitem__)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("container")
    ap.add_argument("dump_tool")
    ap.add_argument("--work", default="/tmp/kjv-prefill")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--switch", default="WASTE_PREFILL_MATMUL")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    enc = kd.Encoder(kd.read_tiktoken(os.path.join(HERE, "tiktoken.model")))
    seqs = [enc.encode(t) for t in chapters("Rev")]
    nll = {"off": [], "on": []}
    top = {"off": [], "on": []}
    worst = 0.0
    for ids in seqs:
        for first in range(8, 65, 8):
            ends = list(range(first, len(ids), 64))  # chunk ends with a next token to score
            if not ends:
                continue
            logits = {}
            for mode in ("off", "on"):
                lg = dump(a.dump_tool, a.container, ids, first, os.path.join(a.work, "d.bin"), a.threads, mode, a.switch)
                lg = lg[:len(ends)]
                logits[mode] = lg
                for row, e in zip(lg, ends):
                    x, t = nll_and_top(row, ids[e])
                    nll[mode].append(x)
                    top[mode].append(t)
            for r0, r1 in zip(logits["off"], logits["on"]):
                worst = max(worst, max(abs(x - y) for x, y in zip(r0, r1)))
    n = len(nll["off"])
    ppl = {k: math.exp(sum(v) / n) for k, v in nll.items()}
    agree = sum(x == y for x, y in zip(top["off"], top["on"])) / n
    print(f"scored {n} positions; ppl off {ppl['off']:.4f} on {ppl['on']:.4f} "
          f"({100 * (ppl['on'] / ppl['off'] - 1):+.4f}%); top-1 agreement on vs off {100 * agree:.2f}%; "
          f"max |logit diff| {worst:.3e}")


if __name__ == "__main__":
    main()
