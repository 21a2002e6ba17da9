"""Float64 PyTorch oracle for GLM-5.3-Flash's k-pool DSA indexer and the MLA that attends only
the positions it selects (compute/forward/kpool_indexer.hpp), and the engine-vs-oracle check.

  indexer_oracle.py --dump-tool BIN --workdir DIR [--case small|rope|long ...]

Each case draws seeded random float32 weights and inputs, runs `waste-dump-indexer` over them in
calls of several chunk sizes (1 = decode), and recomputes everything here in float64, written
from the model's maths, not from the engine: k = LayerNorm(wk x) (weight, bias, eps 1e-6); pool
p's key = per-channel softmax over its kpool tokens of (compress_gate x + ape) weighting k;
score(t, p) = sum_h (weights_proj x_t)_h / sqrt(H) * relu((wq_b r_t)_h . K_p / sqrt(D)) over the
complete pools ending at or before t; keep the topk/kpool best (all of them when there are no
more), then the tokens of the unfilled tail; MLA un-absorbed (keys and values expanded per head)
with the softmax over the selected positions only.

Checks, per case: the selected position sets equal the oracle's exactly for every token (a token
whose keep-th and next score lie within 1e-6 relative may differ only inside that tie band, and
its output is then checked against the oracle run on the engine's set); outputs within 1e-4 of
the oracle (max abs, outputs O(1)); every chunking gives the same bits; tokens that see no more
than topk/kpool pools attend every position (dense); sparse cases do select fewer; and the gate
matters (mean pooling would select differently). Exit 0 pass, 1 fail, 77 skip (no torch).
"""
from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_logits  # noqa: E402

# name: (seed, hidden, q_lora, kv_lora, heads, nope, rope, v, index heads, index dim, kpool, topk,
#        tokens, chunk sizes)
CASES = {
    # GLM's shape cut small: NoPE MLA, sparsity after 16 tokens.
    "small": (1, 64, 32, 32, 4, 16, 0, 16, 4, 16, 4, 16, 83, (1, 7, 64)),
    # The same with qk_rope dims (unrotated, as K3's NoPE MLA carries them).
    "rope": (2, 64, 32, 32, 4, 16, 4, 16, 4, 16, 4, 16, 61, (1, 64)),
    # GLM's real index_topk 2048 / kpool 4 (512 pools) at a small width, past 2048 tokens.
    "long": (3, 32, 16, 16, 2, 8, 0, 8, 2, 8, 4, 2048, 2200, (64,)),
}

TIE_REL = 1e-6
TOL = 1e-4


def run(cmd) -> None:
    print("+ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stdout[-2000:] + proc.stderr[-4000:], file=sys.stderr)
        sys.exit(f"FAILED: `{' '.join(cmd)}` exited with {proc.returncode}")


class Case:
    def __init__(self, name):
        import torch
        self.t = torch
        (seed, self.hid, self.q_lora, self.lora, self.nh, self.nope, self.rope, self.vd, self.ih, self.id,
         self.kpool, self.topk, self.T, self.chunks) = CASES[name]
        self.name = name
        g = torch.Generator().manual_seed(seed)

        def r(*shape, scale=1.0):
            return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).float()

        def lin(rows, cols):
            return r(rows, cols, scale=1.0 / math.sqrt(cols))

        qd = self.nope + self.rope
        self.arrays = [
            ("x", r(self.T, self.hid)),
            ("q_a", lin(self.q_lora, self.hid)),
            ("q_a_norm", 1.0 + r(self.q_lora, scale=0.1)),
            ("q_b", lin(self.nh * qd, self.q_lora)),
            ("kv_a", lin(self.lora + self.rope, self.hid)),
            ("kv_a_norm", 1.0 + r(self.lora, scale=0.1)),
            ("kv_b", lin(self.nh * (self.nope + self.vd), self.lora)),
            ("o_proj", lin(self.hid, self.nh * self.vd)),
            ("wq_b", lin(self.ih * self.id, self.q_lora)),
            ("wk", lin(self.id, self.hid)),
            ("k_norm_w", 1.0 + r(self.id, scale=0.1)),
            ("k_norm_b", r(self.id, scale=0.1)),
            ("weights_proj", lin(self.ih, self.hid)),
            ("gate", lin(self.id, self.hid)),
            ("ape", r(self.kpool, self.id, scale=0.5)),
        ]
        self.w = {k: v.double() for k, v in self.arrays}

    def write_input(self, path):
        header = np.array([self.hid, self.q_lora, self.lora, self.nh, self.nope, self.rope, self.vd, self.ih,
                           self.id, self.kpool, self.topk, self.T, 0], dtype="<i4")
        with open(path, "wb") as f:
            f.write(header.tobytes())
            for _, a in self.arrays:
                f.write(a.numpy().astype("<f4").tobytes())

    # ---- oracle ---------------------------------------------------------------------------
    def q_resid(self):
        t, w = self.t, self.w
        qa = w["x"] @ w["q_a"].T
        return qa * t.rsqrt(qa.pow(2).mean(-1, keepdim=True) + 1e-5) * w["q_a_norm"]

    def index_scores(self, gated=True):
        """score [T, P] over every complete pool P of the sequence (unmasked), and the pool count."""
        t, w = self.t, self.w
        x = w["x"]
        k = t.nn.functional.layer_norm(x @ w["wk"].T, (self.id,), w["k_norm_w"], w["k_norm_b"], eps=1e-6)
        gate = x @ w["gate"].T
        P = self.T // self.kpool
        idx = t.arange(P * self.kpool).view(P, self.kpool)
        if gated:
            prob = t.softmax(gate[idx] + w["ape"][None], dim=1)  # [P, kpool, D], per channel
        else:
            prob = t.full((P, self.kpool, self.id), 1.0 / self.kpool, dtype=t.float64)
        keys = (prob * k[idx]).sum(1)  # [P, D]
        q = (self.q_resid() @ w["wq_b"].T).view(self.T, self.ih, self.id)
        head_w = (x @ w["weights_proj"].T) * self.ih ** -0.5  # [T, H]
        dots = t.relu(t.einsum("thd,pd->thp", q, keys) * self.id ** -0.5)
        return t.einsum("th,thp->tp", head_w, dots), P

    def select(self, gated=True):
        """Per token: (sorted positions, the tie band (lo, hi) of the keep boundary or None, scores)."""
        t = self.t
        score, P = self.index_scores(gated)
        keep = self.topk // self.kpool
        out = []
        for i in range(self.T):
            pools = (i + 1) // self.kpool  # complete pools ending at or before i
            band = None
            if pools <= keep:
                chosen = list(range(pools))
            else:
                s = score[i, :pools]
                order = t.sort(s, descending=True, stable=True).indices  # ties: lower index first
                chosen = sorted(order[:keep].tolist())
                kth, nxt = float(s[order[keep - 1]]), float(s[order[keep]])
                scale = float(s.abs().max())
                if kth - nxt <= TIE_REL * scale:
                    band = (nxt - TIE_REL * scale, kth + TIE_REL * scale)
            positions = [p * self.kpool + j for p in chosen for j in range(self.kpool)]
            positions += list(range(pools * self.kpool, i + 1))
            out.append((positions, band, score[i, :pools]))
        return out

    def mla(self, selections):
        """Un-absorbed MLA, token i attending selections[i] only. Returns [T, hidden]."""
        t, w = self.t, self.w
        x, qd = w["x"], self.nope + self.rope
        q = (self.q_resid() @ w["q_b"].T).view(self.T, self.nh, qd)
        ckv = x @ w["kv_a"].T
        c = ckv[:, :self.lora]
        c = c * t.rsqrt(c.pow(2).mean(-1, keepdim=True) + 1e-5) * w["kv_a_norm"]
        kr = ckv[:, self.lora:]
        kv_b = w["kv_b"].view(self.nh, self.nope + self.vd, self.lora)
        k_nope = t.einsum("hnl,ul->uhn", kv_b[:, :self.nope], c)  # [T, H, nope]
        v = t.einsum("hvl,ul->uhv", kv_b[:, self.nope:], c)       # [T, H, v]
        out = t.zeros(self.T, self.hid, dtype=t.float64)
        for i in range(self.T):
            sel = t.tensor(selections[i], dtype=t.long)
            s = t.einsum("hn,uhn->hu", q[i, :, :self.nope], k_nope[sel])
            if self.rope:
                s = s + t.einsum("hr,ur->hu", q[i, :, self.nope:], kr[sel])
            a = t.softmax(s / math.sqrt(qd), dim=-1)
            o = t.einsum("hu,uhv->hv", a, v[sel]).reshape(-1)
            out[i] = w["o_proj"] @ o
        return out


def read_selected(path, T):
    data = np.fromfile(path, dtype="<i4")
    sel, at = [], 0
    for _ in range(T):
        n = int(data[at])
        sel.append(data[at + 1:at + 1 + n].tolist())
        at += 1 + n
    if at != data.size:
        sys.exit(f"FAILED: {path}: {data.size - at} trailing values")
    return sel


def check_case(name, dump_tool, workdir) -> list[str]:
    case = Case(name)
    errors = []
    os.makedirs(workdir, exist_ok=True)
    inp = os.path.join(workdir, f"{name}.in")
    case.write_input(inp)
    runs = {}
    for chunk in case.chunks:
        out_dir = os.path.join(workdir, f"{name}-chunk{chunk}")
        run([dump_tool, inp, str(chunk), out_dir])
        runs[chunk] = (read_selected(os.path.join(out_dir, "selected.i32"), case.T),
                       np.fromfile(os.path.join(out_dir, "out.f32"), dtype="<f4").reshape(case.T, case.hid))
    first = case.chunks[0]
    for chunk in case.chunks[1:]:
        if runs[chunk][0] != runs[first][0] or not np.array_equal(runs[chunk][1], runs[first][1]):
            errors.append(f"{name}: calls of {chunk} tokens differ from calls of {first}")
    eng_sel, eng_out = runs[first]

    oracle = case.select()
    keep = case.topk // case.kpool
    used, ties, sparse = [], 0, 0
    for i, (positions, band, scores) in enumerate(oracle):
        got = eng_sel[i]
        if (i + 1) // case.kpool <= keep and got != list(range(i + 1)):
            errors.append(f"{name}: token {i} sees at most {keep} pools but does not attend every position")
        if len(got) < i + 1:
            sparse += 1
        if got == positions:
            used.append(positions)
            continue
        if band is None:
            errors.append(f"{name}: token {i}: selected {got} but the oracle selects {positions}")
            used.append(positions)
            continue
        # A near tie at the boundary: the engine's pools must be the oracle's except inside the band.
        ties += 1
        lo, hi = band
        got_pools = sorted({p // case.kpool for p in got if p < len(scores) * case.kpool})
        want = {p for p in range(len(scores)) if float(scores[p]) > hi}
        allowed = {p for p in range(len(scores)) if float(scores[p]) >= lo}
        if not (want <= set(got_pools) <= allowed and len(got_pools) == keep):
            errors.append(f"{name}: token {i}: selection {got_pools} is not a top-{keep} of the oracle's scores")
        used.append(got)
    print(f"{name}: {case.T} tokens, {sparse} attend a sparse set, {ties} near ties at the boundary", flush=True)
    if case.T // case.kpool > keep and sparse == 0:
        errors.append(f"{name}: no token attends a sparse set")

    ref = case.mla(used).numpy()
    diff = float(np.abs(eng_out.astype(np.float64) - ref).max())
    print(f"{name}: max |engine - oracle| = {diff:.3e} (max |oracle| {float(np.abs(ref).max()):.3f})", flush=True)
    if not diff <= TOL:
        errors.append(f"{name}: outputs differ by {diff:.3e} > {TOL}")

    if case.T // case.kpool > keep:
        mean_pooled = case.select(gated=False)
        if all(m[0] == o[0] for m, o in zip(mean_pooled, oracle)):
            errors.append(f"{name}: mean pooling selects the same pools: the case does not test the gate")
    return errors


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump-tool", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--case", action="append", choices=sorted(CASES))
    args = ap.parse_args()
    compare_logits.require_torch()
    import torch
    torch.set_num_threads(int(os.environ.get("WASTE_ORACLE_THREADS", "2")))
    errors = []
    for name in args.case or list(CASES):
        errors += check_case(name, args.dump_tool, args.workdir)
    for e in errors:
        print("FAIL: " + e, file=sys.stderr)
    print("PASS" if not errors else f"FAILED ({len(errors)})")
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
