#!/usr/bin/env python3
"""ctest label `quality`: the model kjv-mini was trained as is the model the engine computes.

  test_kjv_model.py --waste BIN --checkpoint models/kjv-mini --workdir DIR

1. The chunked KDA of models/kjv-mini/model.py (what training ran) equals the per-token
   recurrence (the oracle's) in float64, with decays down to e^-8 per step (hazard: a chunked
   form that drops or doubles a decay factor, or overflows on strong decay).
2. The converted checkpoint's dequantized weights loaded into model.py give the logits of
   tests/reference/oracle.py on the same container within 1e-4, at a length that takes the
   chunked path (16) and one that takes the naive path (17) (hazard: the trained maths differing
   from the engine's, e.g. a tensor name, the NoPE split, the router's bias or renormalisation).

Needs torch (exit 77 = skip on a developer machine without it; CI set = failure).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
sys.path.insert(0, os.path.join(ROOT, "models", "kjv-mini"))
import compare_logits  # noqa: E402

compare_logits.require_torch()
import torch  # noqa: E402
from model import KimiMini, kda_chunked, kda_naive  # noqa: E402
from oracle import Oracle  # noqa: E402
from waste_container import Container  # noqa: E402


def check_chunked() -> bool:
    g = torch.Generator().manual_seed(0)
    B, T, H, D = 2, 40, 3, 8
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    q, k, v = r(B, T, H, D), r(B, T, H, D), r(B, T, H, D)
    qn = q / q.norm(dim=-1, keepdim=True) * D ** -0.5
    kn = k / k.norm(dim=-1, keepdim=True)
    gdecay = -8.0 * torch.rand(B, T, H, D, generator=g, dtype=torch.float64)
    beta = torch.rand(B, T, H, generator=g, dtype=torch.float64)
    diff = float((kda_naive(qn, kn, v, gdecay, beta) - kda_chunked(qn, kn, v, gdecay, beta)).abs().max())
    ok = diff <= 1e-12
    print(f"chunked KDA vs recurrence (float64, T={T}, chunk 8): max|diff| {diff:.3e} (tol 1e-12): "
          f"{'PASS' if ok else 'FAIL'}")
    return ok


def check_against_oracle(container: str, checkpoint: str) -> bool:
    c = Container(container)
    with open(os.path.join(checkpoint, "config.json")) as f:
        cfg = json.load(f)
    model = KimiMini(cfg)
    shapes = {n: t.shape for n, t in model.hf_state().items()}
    sd = {}
    for name, shape in shapes.items():
        parts = name.split(".")
        if ".experts." in name:  # model.layers.L.block_sparse_moe.experts.E.wK.weight
            gate, up, down = c.expert(int(parts[2]), int(parts[5]))
            sd[name] = torch.from_numpy({"w1": gate, "w3": up, "w2": down}[parts[6]].copy()).float()
        else:
            sd[name] = torch.from_numpy(c.tensor(name).copy()).float().reshape(shape)
    model.load_hf_state(sd)
    ok = True
    ids = [(37 * i + 11) % 4000 for i in range(17)]
    for n in (16, 17):
        oracle = Oracle(c)
        ref = torch.stack([oracle.step(t) for t in ids[:n]])
        with torch.no_grad():
            got = model(torch.tensor([ids[:n]]))[0]
        diff = float((ref - got).abs().max())
        good = diff <= 1e-4
        ok = ok and good
        print(f"model.py on the dequantized container vs oracle, {n} tokens: max|diff| {diff:.3e} "
              f"(tol 1e-4): {'PASS' if good else 'FAIL'}")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--waste", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    ok = check_chunked()
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    container = os.path.join(args.workdir, "kjv.waste")
    subprocess.run([args.waste, "convert", args.checkpoint, "--out", container, "--quiet", "--experts", "vq3r"],
                   check=True)
    ok = check_against_oracle(container, args.checkpoint) and ok
    shutil.rmtree(args.workdir, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
