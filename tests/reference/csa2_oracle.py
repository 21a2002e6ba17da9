"""Float64 PyTorch oracle for DeepSeek-V4.1's CSA2 attention block (compute/forward/csa2.hpp)
and the engine-vs-oracle check.

  csa2_oracle.py --dump-tool BIN --workdir DIR [--case small|wide|real ...]

Each case draws seeded random float32 weights and per-layer inputs for a small stack of layers
with every mechanism on: a window-only layer (main rope), a ratio-2 KV + index source and a
layer reusing its compressed cache and selection, a ratio-1 KV + index source that is also the
candidate source and a layer reusing it, a ratio-1 index source that rescores the same keys inside
the candidate blocks, and a layer reusing that. The window is shorter than the sequence, index_topk
is below the visible group count, and the candidate blocks cover fewer groups than are visible. It
runs `waste-dump-csa2` over them in calls of 1 (decode), 7 and all tokens, and recomputes
everything here in float64, one-shot over the whole sequence with masks, written from the model's
maths, not from the engine:

  r = rms(wq_a x) q_norm; q_h = rope_p(wq_b r)_h; kv_u = rope_u(rms(wkv x_u) kv_norm), rope on the
  last rope_dim dims as pairs (2i, 2i+1) rotated by pos * inv_freq_i; inv_freq_i = theta^(-2i/R)
  (main: 10000), or blended with inv_freq_i / factor by YaRN's linear ramp over the correction
  range (compress: 160000, factor 16, original 65536, beta 32 / 1), no mscale;
  KV source with ratio r: group j = tokens j*r .. j*r+r-1, latent l_j = rms(sum_i softmax_i(wgate
  x)[c] (wkv x)[c]) c_norm (r = 1: rms(wkv x_j) c_norm); C_j = rope_{j*r}(l_j), key_j =
  rope_{j*r}(rms(wk l_j) k_norm), both with the compress schedule;
  index source at position p over groups j < (p+1)/r: score(j) = sum_h w_h relu(iq_h . key_j) /
  sqrt(ID) with iq_h = rope_p(i_wq_b r)_h, w = weights_proj x / sqrt(IH); the candidate source
  keeps the candidate_topk_blocks best blocks of B groups (block score = max, the newest block
  pinned); a later index source ranks only inside them; the selection = the index_topk best;
  ties: the higher score first, the lower index on equal scores (torch's topk leaves them
  unspecified); the layers after an index source use its selection, and the compressed entries of
  the latest KV source at or before them;
  attention per head over the window (positions p-W+1 .. p) then the selected C_j, K = V,
  softmax with the sink exp(sink_h) added to the denominator only, the output rotated back by
  -p; out = wo_b [wo_a_g o_g]_g (heads in o_groups blocks).

Index keys: every index source scores against the running keys of the latest KV source at or
before it, as the transformers reference does (it republishes them on every call); the vendor's
module-level key slot, which on alternate decode steps makes layers 2/8/14 score against layer
20's keys, is not reproduced, nor is its fp8/fp4 fake quantization (everything here is exact).

Checks, per case: the selected groups and the candidate blocks equal the oracle's exactly for
every token and index source (a token whose boundary scores lie within 1e-6 relative may differ
only inside that tie band; the oracle then continues with the engine's choice); outputs of every
layer within 1e-4 of the oracle (max abs); every chunking gives the same bits; the mechanisms are
exercised: some selections are sparse, the candidate filter changes some selection, the sink, the
YaRN blend and the pooling gate each move the outputs by more than 10x the tolerance (with the
engine's selections; YaRN's blend only touches the slow pairs, so at 150 positions it moves them
by ~1e-2). Exit 0 pass, 1 fail, 77 skip.
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

# Layer roles: (ratio, kv source, index source, candidate source, uses candidates).
STACK = [
    (0, 0, 0, 0, 0),  # window only, main rope
    (2, 1, 1, 0, 0),  # ratio-2 KV + index source
    (2, 0, 0, 0, 0),  # reuses layer 1's compressed cache and selection
    (1, 1, 1, 1, 0),  # ratio-1 KV + index source, the candidate source
    (1, 0, 0, 0, 0),  # reuses layer 3
    (1, 0, 1, 0, 1),  # rescores layer 3's keys inside the candidate blocks
    (1, 0, 0, 0, 0),  # reuses layer 5's selection, layer 3's entries
]

# name: (seed, hidden, heads, head_dim, rope_dim, q_lora, o_groups, o_lora, window, index heads,
#        index dim, index_topk, candidate blocks, block size, tokens)
CASES = {
    "small": (11, 64, 4, 32, 8, 24, 2, 16, 8, 3, 16, 5, 3, 4, 61),
    # DeepSeek-V4.1's rope_dim 64 (the YaRN ramp over 32 pairs), wider heads, a longer sequence.
    "wide": (12, 96, 8, 128, 64, 48, 4, 24, 16, 4, 64, 8, 4, 8, 150),
    # The real per-head shapes (head_dim 512, rope 64, indexer 32 x 128), the real 128-token window
    # and block size 8, past the window three times; fewer heads, a narrow trunk, topk 128 and
    # 16 candidate blocks so that 400 tokens are sparse at both levels.
    "real": (13, 128, 4, 512, 64, 64, 2, 32, 128, 32, 128, 128, 16, 8, 400),
}
ROPE = dict(theta=10000.0, c_theta=160000.0, factor=16.0, orig=65536, beta_fast=32.0, beta_slow=1.0)
EPS = float(np.float32(1e-20))
TIE_REL = 1e-6
TOL = 1e-4


def run(cmd) -> None:
    print("+ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stdout[-2000:] + proc.stderr[-4000:], file=sys.stderr)
        sys.exit(f"FAILED: `{' '.join(cmd)}` exited with {proc.returncode}")


def inv_freq(theta, R, yarn):
    """The rotation speed of each of the R/2 pairs, YaRN-blended when `yarn`."""
    i = np.arange(R // 2, dtype=np.float64)
    base = theta ** (-2.0 * i / R)
    if not yarn:
        return base

    def dim_for(rotations):  # the pair whose wavelength turns `rotations` times over the original span
        return R * math.log(ROPE["orig"] / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    lo = max(math.floor(dim_for(ROPE["beta_fast"])), 0)
    hi = min(math.ceil(dim_for(ROPE["beta_slow"])), R - 1)
    if lo == hi:
        hi += 0.001
    ramp = np.clip((i - lo) / (hi - lo), 0.0, 1.0)
    return base * (1 - ramp) + base / ROPE["factor"] * ramp


class Case:
    def __init__(self, name, yarn=True, sink=True, gate=True):
        import torch
        self.t = torch
        (seed, self.hid, self.H, self.D, self.R, self.q_lora, self.G, self.ol, self.W, self.IH, self.ID,
         self.topk, self.KB, self.B, self.T) = CASES[name]
        self.name = name
        self.chunks = (1, 7, self.T)
        self.yarn, self.sink = yarn, sink
        g = torch.Generator().manual_seed(seed)

        def r(*shape, scale=1.0):
            return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).float()

        def lin(rows, cols):
            return r(rows, cols, scale=1.0 / math.sqrt(cols))

        self.layers = []  # per layer: role, list of (name, float32 tensor) in the dump tool's order
        for ratio, kv, ix, cand, uses in STACK:
            a = [("x", r(self.T, self.hid)), ("wq_a", lin(self.q_lora, self.hid)),
                 ("q_norm", 1.0 + r(self.q_lora, scale=0.1)), ("wq_b", lin(self.H * self.D, self.q_lora)),
                 ("wkv", lin(self.D, self.hid)), ("kv_norm", 1.0 + r(self.D, scale=0.1)),
                 ("wo_a", lin(self.G * self.ol, self.H * self.D // self.G)), ("wo_b", lin(self.hid, self.G * self.ol)),
                 ("attn_sink", r(self.H))]
            if kv:
                a.append(("c_wkv", lin(self.D, self.hid)))
                if ratio > 1:
                    a.append(("c_wgate", r(self.D, self.hid, scale=2.0 / math.sqrt(self.hid))))
                a.append(("c_norm", 1.0 + r(self.D, scale=0.1)))
            if ix:
                a += [("i_wq_b", lin(self.IH * self.ID, self.q_lora)), ("i_wp", lin(self.IH, self.hid))]
                if kv:
                    a += [("i_wk", lin(self.ID, self.D)), ("i_k_norm", 1.0 + r(self.ID, scale=0.1))]
            self.layers.append(((ratio, kv, ix, cand, uses), a))
        self.w = [{k: v.double() for k, v in a} for _, a in self.layers]
        for w in self.w:
            if not gate and "c_wgate" in w:  # ablation: plain mean pooling
                w["c_wgate"] = torch.zeros_like(w["c_wgate"])
        self.f_main = torch.tensor(inv_freq(ROPE["theta"], self.R, False))
        self.f_comp = torch.tensor(inv_freq(ROPE["c_theta"], self.R, self.yarn))

    def write_input(self, path):
        header = [self.hid, self.H, self.D, self.R, self.q_lora, self.G, self.ol, self.W, self.IH, self.ID,
                  self.topk, self.KB, self.B, self.T, len(self.layers), 0]
        with open(path, "wb") as f:
            f.write(np.array(header, dtype="<i4").tobytes())
            for role, _ in self.layers:
                f.write(np.array(role, dtype="<i4").tobytes())
            f.write(np.array([EPS, ROPE["theta"], ROPE["c_theta"], ROPE["factor"], ROPE["orig"], ROPE["beta_fast"],
                              ROPE["beta_slow"]], dtype="<f4").tobytes())
            for _, a in self.layers:
                for _, v in a:
                    f.write(v.numpy().astype("<f4").tobytes())

    # ---- the maths --------------------------------------------------------------------------
    def rms(self, v, w):
        return v * self.t.rsqrt(v.pow(2).mean(-1, keepdim=True) + EPS) * w

    def rope(self, v, pos, freq, sign=1.0):
        """Rotate the last R dims of v [..., N] (positions `pos` broadcast over the leading dims)."""
        t = self.t
        ang = t.as_tensor(pos, dtype=t.float64).unsqueeze(-1) * freq  # [..., R/2]
        c, s = t.cos(ang), sign * t.sin(ang)
        a, b = v[..., -self.R::2], v[..., -self.R + 1::2]
        out = v.clone()
        out[..., -self.R::2] = a * c - b * s
        out[..., -self.R + 1::2] = a * s + b * c
        return out

    def compressed(self, L):
        """KV source L's entries C [groups, D] and index keys [groups, ID] (or None)."""
        t, w = self.t, self.w[L]
        ratio, _, ix, _, _ = self.layers[L][0]
        x = w["x"]
        ckv = x @ w["c_wkv"].T
        n = self.T // ratio
        if ratio == 1:
            lat = ckv
        else:
            gate = (x @ w["c_wgate"].T)[: n * ratio].view(n, ratio, self.D)
            lat = (t.softmax(gate, dim=1) * ckv[: n * ratio].view(n, ratio, self.D)).sum(1)
        lat = self.rms(lat, w["c_norm"])
        pos = t.arange(n, dtype=t.float64) * ratio
        C = self.rope(lat, pos, self.f_comp)
        keys = self.rope(self.rms(lat @ w["i_wk"].T, w["i_k_norm"]), pos, self.f_comp) if ix else None
        return C, keys

    def index_scores(self, L, keys):
        """[T, groups] scores of index source L against `keys` (unmasked)."""
        t, w = self.t, self.w[L]
        rq = self.rms(w["x"] @ w["wq_a"].T, w["q_norm"])
        iq = (rq @ w["i_wq_b"].T).view(self.T, self.IH, self.ID)
        iq = self.rope(iq, t.arange(self.T, dtype=t.float64).view(-1, 1), self.f_comp)
        hw = (w["x"] @ w["i_wp"].T) / math.sqrt(self.IH)
        dots = t.relu(t.einsum("thd,jd->thj", iq, keys) / math.sqrt(self.ID))
        return t.einsum("th,thj->tj", hw, dots)

    @staticmethod
    def top(scores, items, k):
        """The k best of `items` by scores (higher first, the lower item on equal scores), ascending,
        and the tie band (lo, hi) at the boundary or None."""
        ranked = sorted(items, key=lambda i: (-scores[i], i))
        finite = [i for i in ranked if scores[i] > -math.inf]
        chosen = sorted(finite[:k])
        band = None
        if len(finite) > k:
            kth, nxt = scores[finite[k - 1]], scores[finite[k]]
            scale = max((abs(scores[i]) for i in finite if scores[i] < math.inf), default=0.0) or 1.0
            if kth - nxt <= TIE_REL * scale:
                band = (nxt - TIE_REL * scale, kth + TIE_REL * scale)
        return chosen, band

    def attention(self, L, C, selection):
        """Layer L's outputs [T, hidden], token p attending its window and C[selection[p]]."""
        t, w = self.t, self.w[L]
        ratio = self.layers[L][0][0]
        freq = self.f_comp if ratio else self.f_main
        pos = t.arange(self.T, dtype=t.float64)
        rq = self.rms(w["x"] @ w["wq_a"].T, w["q_norm"])
        q = self.rope((rq @ w["wq_b"].T).view(self.T, self.H, self.D), pos.view(-1, 1), freq)
        kv = self.rope(self.rms(w["x"] @ w["wkv"].T, w["kv_norm"]), pos, freq)
        keys = kv
        allowed = (pos.view(-1, 1) - pos.view(1, -1)).abs().le(self.W - 1) & (pos.view(-1, 1) >= pos.view(1, -1))
        if ratio and C is not None:
            picked = t.zeros(self.T, C.shape[0], dtype=t.bool)
            for p, row in enumerate(selection):
                picked[p, row] = True
            keys = t.cat([kv, C])
            allowed = t.cat([allowed, picked], dim=1)
        s = t.einsum("phd,kd->phk", q, keys) / math.sqrt(self.D)
        s = s.masked_fill(~allowed[:, None, :], -math.inf)
        top = s.max(-1, keepdim=True).values  # finite: the token's own window entry
        e = t.exp(s - top)
        denom = e.sum(-1, keepdim=True)
        if self.sink:
            denom = denom + t.exp(w["attn_sink"].view(1, -1, 1) - top)
        o = self.rope((e / denom) @ keys, pos.view(-1, 1), freq, sign=-1.0)  # [T, H, D]
        per = self.H // self.G
        y = t.cat([o[:, g * per:(g + 1) * per].reshape(self.T, -1) @ w["wo_a"][g * self.ol:(g + 1) * self.ol].T
                   for g in range(self.G)], dim=1)
        return y @ w["wo_b"].T

    def run_stack(self, engine_sel=None, engine_cand=None, use_candidates=True):
        """Outputs [layers, T, hidden], the oracle's selections and candidate blocks per index source,
        and the near ties. With engine_sel / engine_cand, a token inside a tie band continues with
        the engine's choice (checked to be one of the valid ones)."""
        errors, ties = [], 0
        outs, sels, cands = [], {}, {}
        C = keys = None
        cand_blocks = None
        selection = None
        for L, (role, _) in enumerate(self.layers):
            ratio, kv, ix, is_cand, uses = role
            if kv:
                C, keys = self.compressed(L)
            if ix:
                sc = self.index_scores(L, keys).tolist()
                selection, blocks_of = [], []
                for p in range(self.T):
                    vis = (p + 1) // ratio
                    s = sc[p][:vis]
                    if is_cand:
                        nb = (vis + self.B - 1) // self.B
                        bs = [max(s[b * self.B:(b + 1) * self.B]) for b in range(nb)]
                        if nb:
                            bs[nb - 1] = math.inf
                        want, band = self.top(bs, list(range(nb)), self.KB)
                        got = want if engine_cand is None else engine_cand[L][p]
                        if got != want:
                            if band is None or not self.in_band(bs, got, band, self.KB):
                                errors.append(f"{self.name}: layer {L} token {p}: candidate blocks {got}, "
                                              f"the oracle's {want}")
                            ties += 1
                        blocks_of.append(got)
                    items = list(range(vis))
                    if uses and use_candidates:
                        allowed = {j for b in cand_blocks[p] for j in range(b * self.B, (b + 1) * self.B)}
                        items = [j for j in items if j in allowed]
                    want, band = self.top(s, items, self.topk)
                    got = want if engine_sel is None else engine_sel[L][p]
                    if got != want:
                        if band is None or not self.in_band(s, got, band, self.topk):
                            errors.append(f"{self.name}: layer {L} token {p}: selected {got}, the oracle's {want}")
                        ties += 1
                    selection.append(got)
                sels[L] = selection
                if is_cand:
                    cand_blocks = cands[L] = blocks_of
            outs.append(self.attention(L, C, selection if ratio else None))
        return self.t.stack(outs), sels, cands, errors, ties

    @staticmethod
    def in_band(scores, got, band, k):
        lo, hi = band
        want = {i for i, v in enumerate(scores) if v > hi}
        allowed = {i for i, v in enumerate(scores) if v >= lo}
        return want <= set(got) <= allowed and len(got) == min(k, len(allowed))


def read_rows(path, counts):
    """Per index source (layer order) per token: a count, then that many ints."""
    data = np.fromfile(path, dtype="<i4")
    out, at = {}, 0
    for L, T in counts:
        rows = []
        for _ in range(T):
            n = int(data[at])
            rows.append(data[at + 1:at + 1 + n].tolist())
            at += 1 + n
        out[L] = rows
    if at != data.size:
        sys.exit(f"FAILED: {path}: {data.size - at} trailing values")
    return out


def check_case(name, dump_tool, workdir) -> list[str]:
    case = Case(name)
    errors = []
    os.makedirs(workdir, exist_ok=True)
    inp = os.path.join(workdir, f"{name}.in")
    case.write_input(inp)
    index_layers = [(L, case.T) for L, (role, _) in enumerate(case.layers) if role[2]]
    cand_layers = [(L, case.T) for L, (role, _) in enumerate(case.layers) if role[3]]
    runs = {}
    for chunk in case.chunks:
        out_dir = os.path.join(workdir, f"{name}-chunk{chunk}")
        run([dump_tool, inp, str(chunk), out_dir])
        runs[chunk] = (np.fromfile(os.path.join(out_dir, "out.f32"), dtype="<f4").reshape(len(case.layers), case.T,
                                                                                          case.hid),
                       read_rows(os.path.join(out_dir, "selected.i32"), index_layers),
                       read_rows(os.path.join(out_dir, "candidates.i32"), cand_layers))
    first = case.chunks[0]
    for chunk in case.chunks[1:]:
        a, b = runs[chunk], runs[first]
        if not np.array_equal(a[0], b[0]) or a[1] != b[1] or a[2] != b[2]:
            errors.append(f"{name}: calls of {chunk} tokens differ from calls of {first}")
    eng_out, eng_sel, eng_cand = runs[first]

    ref, sels, cands, errs, ties = case.run_stack(eng_sel, eng_cand)
    errors += errs
    ref = ref.numpy()
    print(f"{name}: {case.T} tokens, window {case.W}, {ties} near ties at a selection boundary", flush=True)
    for L in range(len(case.layers)):
        diff = float(np.abs(eng_out[L].astype(np.float64) - ref[L]).max())
        print(f"{name}: layer {L} {case.layers[L][0]}: max |engine - oracle| = {diff:.3e} "
              f"(max |oracle| {float(np.abs(ref[L]).max()):.3f})", flush=True)
        if not diff <= TOL:
            errors.append(f"{name}: layer {L}: outputs differ by {diff:.3e} > {TOL}")

    # The mechanisms are exercised.
    for L, rows in sels.items():
        ratio = case.layers[L][0][0]
        sparse = sum(1 for p, row in enumerate(rows) if len(row) < (p + 1) // ratio)
        print(f"{name}: layer {L}: {sparse} of {case.T} tokens attend a sparse set of groups", flush=True)
        if sparse == 0:
            errors.append(f"{name}: layer {L}: no token's selection is sparse")
    unfiltered = case.run_stack(None, eng_cand, use_candidates=False)[1]  # the oracle's own choice
    for L, (role, _) in enumerate(case.layers):
        if role[4] and unfiltered[L] == sels[L]:
            errors.append(f"{name}: layer {L}: the candidate blocks change no selection")
    for label, kwargs in (("the sink", dict(sink=False)), ("YaRN", dict(yarn=False)),
                          ("the pooling gate", dict(gate=False))):
        other = Case(name, **kwargs).run_stack(eng_sel, eng_cand)[0].numpy()
        moved = float(np.abs(other - ref).max())
        print(f"{name}: without {label} the outputs move by {moved:.3e}", flush=True)
        if not moved > 10 * TOL:
            errors.append(f"{name}: {label} moves the outputs by only {moved:.3e}")
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
