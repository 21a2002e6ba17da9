"""Quality of the q16 LUT mode (WASTE_LUT=q16, compute/forward/lut_mode.hpp; docs/QUALITY.md) on kjv-mini.

Each Revelation chapter is fed one token at a time with every expert by lookup tables
(WASTE_PREFILL_MATMUL=off, waste-dump-logits --chunk 1: the path decode steps take), once with
f32 tables and once with int16 tables; every position after the first scores the next token.
Prints the perplexity of each, top-1 agreement between the two, and max |logit difference|.
Usage: measure_lut.py CONTAINER DUMP_TOOL [--work DIR] [--threads N]
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


def dump(tool, cdir, ids, path, threads, lut):
    env = dict(os.environ, WASTE_PREFILL_MATMUL="off", WASTE_LUT=lut)
    subprocess.run([tool, cdir, path, "--prompt", ",".join(map(str, ids)), "--decode", "0", "--chunk", "1",
                    "--first-chunk", "1", "--threads", str(threads)], env=env, check=True, capture_output=True)
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
    ap.add_argument("--work", default="/tmp/kjv-lut")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    enc = kd.Encoder(kd.read_tiktoken(os.path.join(HERE, "tiktoken.model")))
    seqs = [enc.encode(t) for t in chapters("Rev")]
    nll = {"f32": [], "q16": []}
    top = {"f32": [], "q16": []}
    worst = 0.0
    for ids in seqs:
        logits = {}
        for mode in ("f32", "q16"):
            rows = dump(a.dump_tool, a.container, ids, os.path.join(a.work, "d.bin"), a.threads, mode)
            rows = rows[:len(ids) - 1]  # row p scores token p + 1
            logits[mode] = rows
            for p, row in enumerate(rows):
                x, t = nll_and_top(row, ids[p + 1])
                nll[mode].append(x)
                top[mode].append(t)
        for r0, r1 in zip(logits["f32"], logits["q16"]):
            worst = max(worst, max(abs(x - y) for x, y in zip(r0, r1)))
    n = len(nll["f32"])
    ppl = {k: math.exp(sum(v) / n) for k, v in nll.items()}
    agree = sum(x == y for x, y in zip(top["f32"], top["q16"])) / n
    print(f"scored {n} positions; ppl f32 {ppl['f32']:.4f} q16 {ppl['q16']:.4f} "
          f"({100 * (ppl['q16'] / ppl['f32'] - 1):+.4f}%); top-1 agreement q16 vs f32 {100 * agree:.2f}%; "
          f"max |logit diff| {worst:.3e}")


if __name__ == "__main__":
    main()
