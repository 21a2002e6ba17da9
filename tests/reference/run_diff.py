"""One ctest entry of the engine-vs-oracle differential: synth a container, let the engine dump
its logits, compare against the oracle.

  run_diff.py --waste BIN --dump-tool BIN --preset NAME --workdir DIR [--synth-arg=--layers
              --synth-arg=2] [--prompt ids] [--decode 16] [--float64]

Steps: `waste synth --preset NAME --out DIR/container ...` (or py_synth.py with
--python-synth: a container written by an independent writer), then
`waste-dump-logits DIR/container DIR/logits.bin --prompt i,j,... --decode N`, then
compare_logits. Prompt ids are taken modulo the container's vocab. Exit 0 pass, 1 fail,
77 skip (see compare_logits.py).
--image-span START:LEN (DeepSeek-V4.1): prompt positions START..START+LEN-1 are image-span tokens
fed with random input vectors (seeded by --image-seed) instead of their embedding rows; the
vectors go to DIR/embeddings.bin, which the dump tool (--embeddings) and the oracle both read.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_logits  # noqa: E402

DEFAULT_PROMPT = "1,17,42,99,123,7,200,31,64,128,255,3,77,150,9,222"


def run(cmd) -> None:
    print("+ " + " ".join(cmd), flush=True)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        print(f"FAILED: cannot run {cmd[0]}: {e} (is the target built?)", file=sys.stderr)
        sys.exit(1)
    if proc.stdout.strip():
        print(proc.stdout.rstrip()[-4000:])
    if proc.returncode == compare_logits.SKIP:  # e.g. py_synth's tiny-v41 without sympy
        print(proc.stderr.rstrip()[-4000:], file=sys.stderr)
        sys.exit(compare_logits.SKIP)
    if proc.returncode != 0:
        print(proc.stderr.rstrip()[-4000:], file=sys.stderr)
        print(f"FAILED: `{' '.join(cmd)}` exited with {proc.returncode}", file=sys.stderr)
        sys.exit(1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--waste", help="waste binary (its `synth` writes the container)")
    ap.add_argument("--python-synth", action="store_true",
                    help="write the container with py_synth.py instead of `waste synth`")
    ap.add_argument("--dump-tool", required=True)
    ap.add_argument("--preset", required=True)
    ap.add_argument("--synth-arg", action="append", default=[])
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--prompt", default=DEFAULT_PROMPT)
    ap.add_argument("--decode", type=int, default=16)
    ap.add_argument("--float64", action="store_true")
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--chunk", type=int, default=0,
                    help="feed the prompt by prefill calls of this many tokens (the chunked path) "
                         "and compare after each call; no decode steps then")
    ap.add_argument("--ablate", action="append", default=[], metavar="KEY=VALUE",
                    help="the oracle with this config setting changed must differ from the engine "
                         "by more than --ablate-min (the mechanism is exercised)")
    ap.add_argument("--ablate-min", type=float, default=1e-2)
    ap.add_argument("--trace-out", help="DeepSeek-V4.1: write the oracle's per-token experts, attended "
                                        "compressed positions and candidate blocks here (JSON)")
    ap.add_argument("--engine-trace", help="DeepSeek-V4.1: an engine trace in the same JSON format to "
                                           "compare exactly")
    ap.add_argument("--trace", action="store_true",
                    help="DeepSeek-V4.1: have the dump tool write its per-token trace (--trace) and "
                         "compare it exactly with the oracle's (as --engine-trace)")
    ap.add_argument("--image-span", action="append", default=[], metavar="START:LEN",
                    help="DeepSeek-V4.1: these prompt positions take random input vectors (image spans)")
    ap.add_argument("--image-seed", type=int, default=0)
    ap.add_argument("--shifted-min", type=float, default=0.0,
                    help="also require the engine to differ by more than this from the oracle "
                         "run with token t at position 2t (rotary containers)")
    args = ap.parse_args()

    compare_logits.require_torch()  # skip (77) before spending time on synth
    import torch
    torch.set_num_threads(int(os.environ.get("WASTE_ORACLE_THREADS", "2")))

    cdir = os.path.join(args.workdir, "container")
    dump = os.path.join(args.workdir, "logits.bin")
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    if args.python_synth:
        run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "py_synth.py"),
             "--preset", args.preset, "--out", cdir, *args.synth_arg])
    elif args.waste:
        run([args.waste, "synth", "--preset", args.preset, "--out", cdir, *args.synth_arg])
    else:
        ap.error("give --waste or --python-synth")

    with open(os.path.join(cdir, "manifest.json")) as f:
        cfg = json.load(f)["config"]
    vocab = int(cfg.get("text_config", cfg)["vocab_size"])
    prompt = [i % vocab for i in compare_logits.parse_ids(args.prompt)]
    chunk_args = ["--chunk", str(args.chunk)] if args.chunk > 0 else []
    trace_args = []
    if args.trace:
        args.engine_trace = os.path.join(args.workdir, "engine_trace.json")
        trace_args = ["--trace", args.engine_trace]
    embeddings = {}
    if args.image_span:
        import numpy as np
        rng = np.random.default_rng(args.image_seed)
        hidden = int(cfg.get("text_config", cfg)["hidden_size"])
        for span in args.image_span:
            start, length = (int(x) for x in span.split(":"))
            if start < 0 or length < 1 or start + length > len(prompt):
                ap.error(f"--image-span {span}: outside the prompt of {len(prompt)} tokens")
            for p in range(start, start + length):
                embeddings[p] = rng.normal(0.0, 1.0, hidden).astype(np.float32).astype(np.float64)
        path = os.path.join(args.workdir, "embeddings.bin")
        compare_logits.write_embeddings(path, embeddings)
        trace_args += ["--embeddings", path]
        embeddings = compare_logits.read_embeddings(path, hidden)  # what the engine reads
    run([args.dump_tool, cdir, dump, "--prompt", ",".join(map(str, prompt)),
         "--decode", str(0 if args.chunk > 0 else args.decode), *chunk_args, *trace_args])

    try:
        ok = compare_logits.compare(cdir, dump, prompt, tol=args.tol, float64=args.float64,
                                    shifted_min=args.shifted_min,
                                    ablate=[tuple(a.split("=", 1)) for a in args.ablate],
                                    ablate_min=args.ablate_min, chunk=args.chunk,
                                    trace_out=args.trace_out, engine_trace=args.engine_trace,
                                    embeddings=embeddings)
    except Exception as e:  # bad dump / container: name it
        print(f"FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if ok and not os.environ.get("WASTE_KEEP_DIFF"):
        shutil.rmtree(args.workdir, ignore_errors=True)  # kept on failure for debugging
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
