#!/usr/bin/env python3
"""ctest label `quality`: the committed kjv-mini checkpoint, converted and run by the engine.

  run_quality.py --waste BIN --checkpoint models/kjv-mini --golden tests/quality/golden_moses.json
                 --quality-doc docs/QUALITY.md --workdir DIR [--write-golden]

1. `waste convert CHECKPOINT --out DIR/kjv.waste` (VQ3R experts, Q4G trunk: convert's defaults).
2. `waste run kjv.waste PROMPT -n N --json` (greedy, the container's chat format): the token ids
   and the text must equal the golden file's, byte for byte.
3. `waste eval kjv.waste --file CHECKPOINT/heldout_jude.txt --json`: the perplexity must be
   within 2% of the figure docs/QUALITY.md states on its `ci_jude_perplexity = X` line.

Standard library only (no torch). --write-golden rewrites the golden file from this run (after a
retrain); the test itself never writes it.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

PROMPT = "And God said unto Moses,"
N_TOKENS = 24
TOLERANCE = 0.02


def run(cmd):
    print("+ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stdout[-3000:] + p.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"FAILED: `{' '.join(cmd)}` exited with {p.returncode}")
    return p.stdout


def documented_perplexity(doc_path: str) -> float:
    with open(doc_path) as f:
        text = f.read()
    m = re.findall(r"^ci_jude_perplexity = ([0-9.]+)\s*$", text, re.M)
    if len(m) != 1:
        raise SystemExit(f"FAILED: {doc_path} must have exactly one line 'ci_jude_perplexity = X', "
                         f"found {len(m)}")
    return float(m[0])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--waste", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--golden", required=True)
    ap.add_argument("--quality-doc", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--write-golden", action="store_true")
    args = ap.parse_args()

    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    model = os.path.join(args.workdir, "kjv.waste")
    run([args.waste, "convert", args.checkpoint, "--out", model, "--quiet", "--experts", "vq3r"])
    common = ["--in-process", "--threads", "2"]

    got = json.loads(run([args.waste, "run", model, PROMPT, "-n", str(N_TOKENS), "--json", *common]))
    result = {"prompt": PROMPT, "tokens": got["tokens"], "text": got["text"]}
    print(f"greedy continuation: {got['text']!r}\ntoken ids: {got['tokens']}")
    if args.write_golden:
        with open(args.golden, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
        print(f"wrote {args.golden}")
    with open(args.golden) as f:
        golden = json.load(f)
    ok = True
    if golden["prompt"] != PROMPT:
        print(f"FAIL: golden prompt {golden['prompt']!r} is not {PROMPT!r}")
        ok = False
    if got["tokens"] != golden["tokens"]:
        print(f"FAIL: greedy token ids differ from {args.golden}:\n  got    {got['tokens']}\n"
              f"  golden {golden['tokens']}")
        ok = False
    if got["text"] != golden["text"]:
        print(f"FAIL: greedy text differs:\n  got    {got['text']!r}\n  golden {golden['text']!r}")
        ok = False

    passage = os.path.join(args.checkpoint, "heldout_jude.txt")
    ev = json.loads(run([args.waste, "eval", model, "--file", passage, "--json", "--quiet", *common]))
    want = documented_perplexity(args.quality_doc)
    rel = abs(ev["perplexity"] - want) / want
    print(f"waste eval on {passage}: {ev['scored']} tokens scored, perplexity {ev['perplexity']:.4f}; "
          f"{args.quality_doc} says {want} (off by {100 * rel:.2f}%, limit {100 * TOLERANCE:.0f}%)")
    if not rel <= TOLERANCE:
        print("FAIL: held-out perplexity is more than 2% from the documented figure")
        ok = False
    shutil.rmtree(args.workdir, ignore_errors=True)
    print("PASS" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
