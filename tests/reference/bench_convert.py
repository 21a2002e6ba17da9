"""Conversion speed: `waste convert` on generated checkpoints of several sizes, and, side by side
in the same run on the issue's checkpoint, the public Python converter (sqliteai/warp
tools/convert.py, run from a copy OUTSIDE this tree). Not a test; figures go to
docs/PERFORMANCE.md.

  bench_convert.py --waste BIN --workdir DIR [--public /tmp/warp] [--jobs 2] [--sizes small,bench,bench2x]

--public DIR: a directory holding tools/convert.py and run_public_convert.py (a wrapper that
defines torch's float8 dtype names as placeholders on Debian's torch 1.13). Prints one
markdown table: wall seconds, CPU seconds, where our time goes (read, k-means, encode, write,
trunk+manifest) and the relative weight error of both converters' containers.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def timed(cmd, env=None):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        print(proc.stdout[-2000:], proc.stderr[-2000:], file=sys.stderr)
        raise SystemExit(f"FAILED: {' '.join(cmd)} exited {proc.returncode}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def container_error(cdir: str, src: str) -> float:
    """Relative weight error of a container's routed experts against the checkpoint (bf16)."""
    import numpy as np
    sys.path.insert(0, HERE)
    from run_convert_diff import load_checkpoint
    from waste_container import Container
    raw = load_checkpoint(src)
    c = Container(cdir, verify_crc=False)
    err = norm = 0.0
    for layer in sorted(c.manifest["layers"], key=int):
        for e in range(int(c.manifest["layers"][layer]["experts"])):
            rec = c.expert(int(layer), e)
            for k, w in zip(("w1", "w3", "w2"), rec):
                ref = raw[f"model.layers.{layer}.block_sparse_moe.experts.{e}.{k}.weight"].astype(np.float64)
                err += float(((ref - w) ** 2).sum())
                norm += float((ref ** 2).sum())
    return (err / norm) ** 0.5


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--waste", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--public")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--sizes", default="small,bench,bench2x")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    rows = []
    for size in args.sizes.split(","):
        src = os.path.join(args.workdir, f"kl-{size}")
        if not os.path.exists(os.path.join(src, "config.json")):
            subprocess.run([sys.executable, os.path.join(HERE, "make_checkpoint.py"), "--arch", "kimi-linear",
                            "--size", size, "--out", src], check=True, capture_output=True)
        mb = sum(os.path.getsize(os.path.join(src, f)) for f in os.listdir(src)) / 1e6
        out = os.path.join(args.workdir, f"ours-{size}.waste")
        report = os.path.join(args.workdir, f"ours-{size}.json")
        shutil.rmtree(out, ignore_errors=True)
        wall, cpu = timed([args.waste, "convert", src, "--out", out, "--jobs", str(args.jobs), "--quiet", "--experts", "vq3r",
                           "--report", report])
        r = json.load(open(report))
        s = r["seconds"]
        rows.append((size, mb, "waste convert", wall, cpu,
                     f"read {s['read']:.1f}, k-means {s['kmeans']:.1f}, encode {s['encode']:.1f}, "
                     f"write {s['write']:.1f}, trunk {s['trunk_and_manifest']:.1f}", r["relative_error"]["all"]))
        if args.public and size == "bench":
            pout = os.path.join(args.workdir, f"public-{size}.waste")
            shutil.rmtree(pout, ignore_errors=True)
            env = dict(os.environ, PYTHONPATH=os.path.join(args.public, "shim"))
            pwall, pcpu = timed([sys.executable, os.path.join(args.public, "run_public_convert.py"), "--src", src,
                                 "--out", pout, "--device", "cpu"], env)
            rows.append((size, mb, "public convert.py", pwall, pcpu, "", container_error(pout, src)))
    print("| checkpoint | MB in | converter | wall s | CPU s | our phases (s) | rel. weight error |")
    print("|---|---|---|---|---|---|---|")
    for size, mb, who, wall, cpu, phases, err in rows:
        print(f"| kimi-linear {size} | {mb:.1f} | {who} | {wall:.1f} | {cpu:.1f} | {phases} | {err:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
