"""Quality of int8 trunk products for decode steps (WASTE_DECODE_INT8, docs/QUALITY.md) on kjv-mini.

Revelation's chapters are fed one token at a time as decode steps (waste-dump-logits --chunk 1), so
every position's logits score the next token. Run once with the decode rule off (f32 trunk products)
and once on (int8): perplexity over every scored position, top-1 agreement between the two, max
|logit difference|. Prompt tokens are not involved (every token is a decode step).
`--head q6|q4` compares the decode head instead (WASTE_DECODE_HEAD q8 then the given one, the decode
rule on for both).
Usage: measure_decode.py CONTAINER DUMP_TOOL [--work DIR] [--threads N] [--head q6|q4]
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
from measure_prefill import chapters, nll_and_top  # noqa: E402


def dump(tool, cdir, ids, path, threads, mode, head):
    env = dict(os.environ, WASTE_DECODE_HEAD=mode, WASTE_DECODE_INT8="on") if head else \
        dict(os.environ, WASTE_DECODE_INT8=mode)
    subprocess.run([tool, cdir, path, "--prompt", ",".join(map(str, ids)), "--decode", "0", "--chunk", "1",
                    "--threads", str(threads), "--ctx", str(len(ids) + 8)], env=env, check=True, capture_output=True)
    with open(path, "rb") as f:
        n, vocab = struct.unpack("<ii", f.read(8))
        rows = []
        for _ in range(n):
            f.read(4)
            row = array("f")
            row.frombytes(f.read(4 * vocab))
            rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("container")
    ap.add_argument("dump_tool")
    ap.add_argument("--work", default="/tmp/kjv-decode")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--head", choices=("q6", "q4"), help="the q8 decode head (off) against this one (on)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    enc = kd.Encoder(kd.read_tiktoken(os.path.join(HERE, "tiktoken.model")))
    seqs = [enc.encode(t) for t in chapters("Rev")]
    nll = {"off": [], "on": []}
    top = {"off": [], "on": []}
    worst = 0.0
    for ids in seqs:
        logits = {}
        for mode in ("off", "on"):
            value = {"off": "q8", "on": a.head}[mode] if a.head else mode
            lg = dump(a.dump_tool, a.container, ids, os.path.join(a.work, "d.bin"), a.threads, value, bool(a.head))
            logits[mode] = lg
            for pos in range(len(ids) - 1):  # the logits after token pos score token pos + 1
                x, t = nll_and_top(lg[pos], ids[pos + 1])
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
