"""Float64 PyTorch oracle for DeepSeek-V4.1's standalone blocks (issue 29), run through
`waste-dump-v41blocks` on seeded random inputs at small shapes:

  v41_blocks_oracle.py --dump-tool BIN --workdir DIR [--part router|mhc|engram|dequant ...]

Written from the model's maths (transformers deepseek_v41: DeepseekV41TopKRouter, the decoder
layer's single-pass hyper-connections, DeepseekV41Engram, the fp8 + E8M0 table rows), not from
the engine:

- router: p = sqrt(softplus(logits / gate_temp)) (torch's softplus, threshold 20) or sigmoid /
  softmax; the top-k of p + bias, image-span tokens with bias_vl; weights = the chosen p over
  (their sum + 1e-20), times route_scale. Selections equal exactly (a token whose k-th and next
  biased scores lie within 1e-6 may differ inside that band; its weights are then checked on the
  engine's choice), weights within 1e-6. The biases must matter: without them, and with bias
  instead of bias_vl on image tokens, the selections differ.
- mhc: per site one projection of the RMS-normalised flattened streams (eps 1e-20) gives
  pre = sigmoid(.)+hc_eps, post = 2 sigmoid(.), comb = Sinkhorn (20 rounds); the sublayer (a
  stand-in y = tanh(W x)) reads the streams collapsed with the PREVIOUS site's pre (one-hot for
  layer 0's attention), the head the last FFN site's pre. Head and streams within 1e-5 of the
  streams' size (max abs error / max(1, max |streams|); float32 torch is as far); the
  carried pre must matter (same-site pre, the mean head, one Sinkhorn round: all > 1e-3 away).
- engram: kv = wkv . rows; per stream gate = sigmoid(signed sqrt(max(|dot|, 1e-6))) with dot =
  sum(h * q_weight * k_weight * key) * rstd(h) * rstd(key) / sqrt(hidden), rstd per stream (eps
  1e-20); h += gate * value; image tokens untouched bit for bit. Streams and gates within 1e-5
  (gates 1e-6); a zero stream takes the 1e-6 floor (gate sigmoid(1e-3)); the signed sqrt and the
  per-stream normalisation must matter.
- dequant: random rows of each storage form decode bit for bit (f8_e8m0: e4m3 FN with bias 7,
  subnormals, NaN codes; E8M0 2^(e-127); q8 / q4, the engram-L{n}.bin rows: an IEEE half scale
  per 32 columns first, then int8 codes or nibbles - 8).

Exit 0 pass, 1 fail, 77 skip (no torch).
"""
from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_logits  # noqa: E402

try:
    import numpy as np
except ImportError:  # main() skips (exit 77) through compare_logits.require_torch
    np = None

TIE = 1e-6
WEIGHT_TOL = 1e-6
MHC_TOL = 1e-5
ENGRAM_TOL = 1e-5
GATE_TOL = 1e-6
MATTERS = 1e-3


def run(cmd) -> None:
    print("+ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stdout[-2000:] + proc.stderr[-4000:], file=sys.stderr)
        sys.exit(f"FAILED: `{' '.join(cmd)}` exited with {proc.returncode}")


def write_input(path, ints, floats, arrays):
    ints = list(ints) + [0] * (8 - len(ints))
    floats = list(floats) + [0.0] * (4 - len(floats))
    with open(path, "wb") as f:
        f.write(np.array(ints, dtype="<i4").tobytes())
        f.write(np.array(floats, dtype="<f4").tobytes())
        for a in arrays:
            f.write(np.ascontiguousarray(a.numpy() if hasattr(a, "numpy") else a).astype("<f4").tobytes())


def load(path, dtype, shape):
    return np.fromfile(path, dtype=dtype).reshape(shape)


# ---- router ---------------------------------------------------------------------------------
# name: (seed, experts, top_k, tokens, score, renormalize, gate_temp, route_scale, bias, bias_vl)
ROUTER_CASES = {
    "sqrtsoftplus": (11, 64, 6, 300, "sqrtsoftplus", True, 1.0, 1.5, True, True),
    "sqrtsoftplus-temp": (12, 48, 4, 200, "sqrtsoftplus", True, 0.7, 1.5, True, True),
    "sqrtsoftplus-no-renorm": (13, 32, 3, 100, "sqrtsoftplus", False, 1.0, 2.0, True, False),
    "sigmoid": (14, 40, 5, 100, "sigmoid", True, 1.0, 1.0, True, True),
    "softmax": (15, 40, 1, 100, "softmax", True, 1.0, 1.0, False, False),
}
SCORE_CODE = {"sigmoid": 0, "softmax": 1, "sqrtsoftplus": 2}


def router_scores(torch, score, logits, temp):
    x = logits / temp
    if score == "sqrtsoftplus":
        return torch.nn.functional.softplus(x).sqrt()  # beta 1, threshold 20
    if score == "sigmoid":
        return torch.sigmoid(x)
    return torch.softmax(x, dim=-1)


def route_oracle(torch, case, logits, bias, bias_vl, image):
    _, E, k, T, score, renorm, temp, scale, _, _ = case
    p = router_scores(torch, score, logits, temp)
    b = torch.where(image[:, None], bias_vl[None, :], bias[None, :])
    scored = p + b
    order = torch.sort(scored, dim=-1, descending=True, stable=True)
    return p, scored, order.indices[:, :k], order.values


def route_weights(torch, case, p, ids):
    _, E, k, T, score, renorm, temp, scale, _, _ = case
    w = p.gather(1, ids)
    if renorm and k > 1:
        w = w / (w.sum(-1, keepdim=True) + 1e-20)
    return w * scale


def check_router(torch, name, tool, workdir):
    errs = []
    case = ROUTER_CASES[name]
    seed, E, k, T, score, renorm, temp, scale, has_bias, has_vl = case
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(T, E, generator=g, dtype=torch.float64) * 3.0).float()
    # Past softplus' threshold and deep in its tail, on some tokens.
    logits[0, :4] = torch.tensor([25.0, 21.0, -40.0, 19.5])
    bias = (torch.randn(E, generator=g, dtype=torch.float64) * 0.5).float() if has_bias else torch.zeros(E)
    bias_vl = (torch.randn(E, generator=g, dtype=torch.float64) * 0.5).float() if has_vl else torch.zeros(E)
    image = torch.rand(T, generator=g) < 0.4
    d = os.path.join(workdir, "router-" + name)
    os.makedirs(d, exist_ok=True)
    arrays = [logits] + ([bias] if has_bias else []) + ([bias_vl] if has_vl else []) + [image.float()]
    write_input(os.path.join(d, "in.bin"), [E, k, T, SCORE_CODE[score], int(renorm), int(has_bias), int(has_vl)],
                [temp, scale], arrays)
    run([tool, "router", os.path.join(d, "in.bin"), d])
    ids = torch.from_numpy(load(os.path.join(d, "ids.i32"), "<i4", (T, k)).astype(np.int64))
    weights = torch.from_numpy(load(os.path.join(d, "weights.f32"), "<f4", (T, k)).astype(np.float64))
    p, scored, want, values = route_oracle(torch, case, logits.double(), bias.double(), bias_vl.double(), image)
    ties = 0
    for t in range(T):
        if torch.equal(ids[t], want[t]):
            continue
        # Inside the tie band: the engine's set must be the oracle's up to scores within TIE of the k-th.
        kth = values[t, k - 1].item()
        band = set(torch.nonzero((scored[t] - kth).abs() <= TIE).flatten().tolist())
        sure = set(want[t].tolist()) - band
        if sure <= set(ids[t].tolist()) and set(ids[t].tolist()) - set(want[t].tolist()) <= band:
            ties += 1
            continue
        errs.append(f"router {name}: token {t} selects {ids[t].tolist()}, oracle {want[t].tolist()}")
        if len(errs) > 5:
            break
    w_oracle = route_weights(torch, case, p, ids)  # on the engine's (equal or tie-band) choice
    werr = (weights - w_oracle).abs().max().item()
    print(f"router {name}: {T} tokens, {ties} tie-band differences, max weight error {werr:.3e}")
    if werr > WEIGHT_TOL:
        errs.append(f"router {name}: weights differ by {werr:.3e} > {WEIGHT_TOL}")
    if has_bias:
        # The bias must steer: without it (or with bias alone on image tokens) choices change.
        _, _, plain, _ = route_oracle(torch, case, logits.double(), torch.zeros(E, dtype=torch.float64),
                                      torch.zeros(E, dtype=torch.float64), image)
        if torch.equal(plain, want):
            errs.append(f"router {name}: the bias changes no selection (the check cannot fail)")
    if has_vl:
        _, _, no_vl, _ = route_oracle(torch, case, logits.double(), bias.double(), bias.double(), image)
        if torch.equal(no_vl, want):
            errs.append(f"router {name}: bias_vl changes no image token's selection")
    if score == "sqrtsoftplus":
        # The score function is checked, not assumed: sigmoid weights would be far off.
        sig = route_weights(torch, case, torch.sigmoid(logits.double() / temp), ids)
        if (sig - weights).abs().max().item() < MATTERS:
            errs.append(f"router {name}: sigmoid scores give the same weights")
    return errs


# ---- single-pass mHC -------------------------------------------------------------------------
# name: (seed, hc, hidden, layers, iters, tokens)
MHC_CASES = {
    "small": (21, 4, 32, 3, 20, 5),
    "wide": (22, 4, 96, 2, 20, 3),
}
RMS_EPS = 1e-20
HC_EPS = 1e-6


def mhc_coefficients(torch, x, fn, base, scale, hc, iters):
    """x [hc, hidden] -> pre [hc], post [hc], comb [hc(j), hc(k)]."""
    flat = x.flatten()
    flat = flat * torch.rsqrt(flat.square().mean() + RMS_EPS)
    mix = fn @ flat
    pre = torch.sigmoid(mix[:hc] * scale[0] + base[:hc]) + HC_EPS
    post = 2 * torch.sigmoid(mix[hc:2 * hc] * scale[1] + base[hc:2 * hc])
    logits = (mix[2 * hc:] * scale[2] + base[2 * hc:]).view(hc, hc)
    comb = torch.softmax(logits, dim=-1) + HC_EPS
    comb = comb / (comb.sum(0, keepdim=True) + HC_EPS)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(1, keepdim=True) + HC_EPS)
        comb = comb / (comb.sum(0, keepdim=True) + HC_EPS)
    return pre, post, comb


def mhc_oracle(torch, emb, sites, hc, iters, mode="single"):
    """mode: single (the V4.1 rule), same (GLM: each site's own pre), mean (mean head)."""
    heads, all_streams = [], []
    for t in range(emb.shape[0]):
        x = emb[t].unsqueeze(0).repeat(hc, 1)
        carried = torch.zeros(hc, dtype=emb.dtype)
        carried[0] = 1.0
        for fn, base, scale, w in sites:
            pre, post, comb = mhc_coefficients(torch, x, fn, base, scale, hc, iters)
            use = carried if mode != "same" else pre
            y = torch.tanh(w @ (use[:, None] * x).sum(0))
            x = post[:, None] * y[None, :] + comb.T @ x  # x_k = post_k y + sum_j comb[j, k] x_j
            carried = pre
        heads.append(x.mean(0) if mode == "mean" else (carried[:, None] * x).sum(0))
        all_streams.append(x)
    return torch.stack(heads), torch.stack(all_streams)


def check_mhc(torch, name, tool, workdir):
    errs = []
    seed, hc, hid, layers, iters, T = MHC_CASES[name]
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).float()

    mix_rows, width = (2 + hc) * hc, hc * hid
    emb = r(T, hid)
    sites = []
    for _ in range(2 * layers):
        fn = r(mix_rows, width, scale=1.0 / math.sqrt(width))
        base = r(mix_rows, scale=0.5)
        scale = 1.0 + r(3, scale=0.3)
        w = r(hid, hid, scale=1.5 / math.sqrt(hid))
        sites.append((fn, base, scale, w))
    d = os.path.join(workdir, "mhc-" + name)
    os.makedirs(d, exist_ok=True)
    arrays = [emb] + [a for s in sites for a in s]
    write_input(os.path.join(d, "in.bin"), [hc, hid, layers, iters, T], [RMS_EPS, HC_EPS], arrays)
    run([tool, "mhc", os.path.join(d, "in.bin"), d])
    head = torch.from_numpy(load(os.path.join(d, "head.f32"), "<f4", (T, hid)).astype(np.float64))
    streams = torch.from_numpy(load(os.path.join(d, "streams.f32"), "<f4", (T, hc, hid)).astype(np.float64))
    sites64 = [tuple(a.double() for a in s) for s in sites]
    want_head, want_streams = mhc_oracle(torch, emb.double(), sites64, hc, iters)
    herr = (head - want_head).abs().max().item()
    serr = (streams - want_streams).abs().max().item()
    # The streams grow through the sites (post up to 2 per site); errors are measured against
    # their size: max abs error / max(1, max |streams|). float32 torch on the same inputs sits at
    # the same distance from float64 (printed): the rounding of f32 itself, not the engine's.
    size = max(1.0, want_streams.abs().max().item())
    f32_head, _ = mhc_oracle(torch, emb, sites, hc, iters)
    f32err = (f32_head.double() - want_head).abs().max().item()
    print(f"mhc {name}: {2 * layers} sites, {T} tokens, head max error {herr:.3e}, streams {serr:.3e} "
          f"(|streams| up to {size:.2f}: relative {max(herr, serr) / size:.3e}; float32 torch's head "
          f"{f32err:.3e})")
    if max(herr, serr) / size > MHC_TOL:
        errs.append(f"mhc {name}: head {herr:.3e} / streams {serr:.3e} over |streams| {size:.2f} > {MHC_TOL}")
    for mode, what in (("same", "each site's own pre"), ("mean", "the mean head")):
        alt, _ = mhc_oracle(torch, emb.double(), sites64, hc, iters, mode)
        if (alt - head).abs().max().item() < MATTERS:
            errs.append(f"mhc {name}: {what} gives the engine's head (the check cannot fail)")
    one, _ = mhc_oracle(torch, emb.double(), sites64, hc, 1)
    if (one - head).abs().max().item() < MATTERS:
        errs.append(f"mhc {name}: one Sinkhorn round gives the engine's head")
    return errs


# ---- Engram gate -----------------------------------------------------------------------------
# name: (seed, hc, hidden, rows, row_dim, tokens)
ENGRAM_CASES = {
    "small": (31, 4, 64, 6, 32, 24),
    "released-rows": (32, 4, 48, 24, 32, 8),
}


def engram_oracle(torch, hc, hid, wkv, q, k, rows, streams, live, signed_sqrt=True, joint=False):
    T = rows.shape[0]
    kv = rows @ wkv.T
    key = kv[:, :hc * hid].view(T, hc, hid)
    value = kv[:, hc * hid:]
    h = streams
    if joint:
        rh = torch.rsqrt(h.square().mean((-1, -2), keepdim=True) + RMS_EPS).squeeze(-1)
        rk = torch.rsqrt(key.square().mean((-1, -2), keepdim=True) + RMS_EPS).squeeze(-1)
    else:
        rh = torch.rsqrt(h.square().mean(-1) + RMS_EPS)
        rk = torch.rsqrt(key.square().mean(-1) + RMS_EPS)
    dot = (h * (q * k)[None] * key).sum(-1) * rh * rk / math.sqrt(hid)
    if signed_sqrt:
        gate = torch.sigmoid(torch.copysign(dot.abs().clamp_min(1e-6).sqrt(), dot))
    else:
        gate = torch.sigmoid(dot)
    gate = torch.where(live[:, None], gate, torch.zeros_like(gate))
    return h + gate[..., None] * value[:, None, :], gate


def check_engram(torch, name, tool, workdir):
    errs = []
    seed, hc, hid, nrows, row_dim, T = ENGRAM_CASES[name]
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).float()

    in_dim = nrows * row_dim
    wkv = r((hc + 1) * hid, in_dim, scale=1.0 / math.sqrt(in_dim))
    q = 1.0 + r(hc, hid, scale=0.5)
    k = 1.0 + r(hc, hid, scale=0.5)
    rows = r(T, in_dim)
    streams = r(T, hc, hid)
    streams[1, 2] = 0.0  # a zero stream: dot 0, the 1e-6 floor, gate sigmoid(1e-3)
    live = torch.rand(T, generator=g) < 0.75
    live[1] = True
    d = os.path.join(workdir, "engram-" + name)
    os.makedirs(d, exist_ok=True)
    write_input(os.path.join(d, "in.bin"), [hc, hid, nrows, row_dim, T], [RMS_EPS],
                [wkv, q, k, rows, streams, live.float()])
    run([tool, "engram", os.path.join(d, "in.bin"), d])
    out = torch.from_numpy(load(os.path.join(d, "streams.f32"), "<f4", (T, hc, hid)).astype(np.float64))
    gates = torch.from_numpy(load(os.path.join(d, "gates.f32"), "<f4", (T, hc)).astype(np.float64))
    args = (torch, hc, hid, wkv.double(), q.double(), k.double(), rows.double(), streams.double(), live)
    want, want_gates = engram_oracle(*args)
    serr = (out - want).abs().max().item()
    gerr = (gates - want_gates).abs().max().item()
    print(f"engram {name}: {T} tokens ({int((~live).sum())} image), streams max error {serr:.3e}, "
          f"gates {gerr:.3e}")
    if serr > ENGRAM_TOL or gerr > GATE_TOL:
        errs.append(f"engram {name}: streams {serr:.3e} > {ENGRAM_TOL} or gates {gerr:.3e} > {GATE_TOL}")
    dead = ~live
    if dead.any() and not torch.equal(out[dead].float(), streams[dead]):
        errs.append(f"engram {name}: an image token's streams changed")
    floor = 1.0 / (1.0 + math.exp(-1e-3))
    if abs(gates[1, 2].item() - floor) > GATE_TOL:
        errs.append(f"engram {name}: the zero stream's gate is {gates[1, 2].item()!r}, not sigmoid(1e-3)")
    for kw, what in (({"signed_sqrt": False}, "a plain sigmoid"), ({"joint": True}, "normalising over all streams")):
        _, alt = engram_oracle(*args, **kw)
        if (alt - gates).abs().max().item() < MATTERS:
            errs.append(f"engram {name}: {what} gives the engine's gates (the check cannot fail)")
    return errs


# ---- row decoding ----------------------------------------------------------------------------
def e4m3(b):
    s = -1.0 if b & 0x80 else 1.0
    e, m = (b >> 3) & 15, b & 7
    if e == 15 and m == 7:
        return math.nan
    return s * (m / 8.0 * 2.0 ** -6 if e == 0 else (1.0 + m / 8.0) * 2.0 ** (e - 7))


def half(bits):
    s = -1.0 if bits & 0x8000 else 1.0
    e, m = (bits >> 10) & 31, bits & 1023
    return s * (m * 2.0 ** -24 if e == 0 else (1.0 + m / 1024.0) * 2.0 ** (e - 15))


def decode_rows(fmt, width, data):
    groups = width // 32
    code_bytes = {"f8_e8m0": width, "q8": width, "q4": width // 2}[fmt]
    row_bytes = code_bytes + (groups if fmt == "f8_e8m0" else 2 * groups)
    out = []
    for r in range(len(data) // row_bytes):
        row = data[r * row_bytes:(r + 1) * row_bytes]
        vals = []
        for c in range(width):
            g = c // 32
            if fmt == "f8_e8m0":
                # the release: codes, then one E8M0 byte per 32 columns
                e = row[code_bytes + g]
                scale = math.nan if e == 255 else 2.0 ** (e - 127)
                vals.append(e4m3(row[c]) * scale)
            else:
                # engram-L{n}.bin rows: the fp16 scales first, then the codes
                scale = half(row[2 * g] | (row[2 * g + 1] << 8))
                codes = row[2 * groups:]
                if fmt == "q8":
                    q = codes[c] - 256 if codes[c] >= 128 else codes[c]
                else:
                    q = ((codes[c // 2] >> 4) if c % 2 else (codes[c // 2] & 15)) - 8
                vals.append(q * scale)
        out.append(vals)
    with np.errstate(over="ignore"):  # 448 * 2^127 is inf in f32, as in the engine
        return np.array(out, dtype=np.float64).astype(np.float32)


def check_dequant(tool, workdir):
    errs = []
    rng = np.random.default_rng(41)
    width, n = 256, 12
    for fmt in ("f8_e8m0", "q8", "q4"):
        groups = width // 32
        code_bytes = {"f8_e8m0": width, "q8": width, "q4": width // 2}[fmt]
        rows = []
        for r in range(n):
            codes = rng.integers(0, 256, code_bytes, dtype=np.uint8)
            if fmt == "f8_e8m0":
                # Scales around 1, the extremes 0 (2^-127) and 254, and the NaN scale once.
                scales = rng.integers(110, 140, groups, dtype=np.uint8)
                if r == 0:
                    scales[:3] = [0, 254, 255]
                rows.append(np.concatenate([codes, scales]))
            else:
                # IEEE halves below exponent 31 (the trunk decoder reads 31 as a normal exponent),
                # subnormal ones included.
                signs = (rng.integers(0, 2, groups) << 15).astype(np.uint16)
                bits = rng.integers(0, 0x7C00, groups, dtype=np.uint16) | signs
                if r == 0:
                    bits[:2] = [0x0001, 0x83FF]
                rows.append(np.concatenate([bits.astype("<u2").view(np.uint8), codes]))
        data = np.concatenate(rows).astype(np.uint8)
        d = os.path.join(workdir, "dequant-" + fmt)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "rows.bin")
        data.tofile(path)
        run([tool, "dequant", fmt, str(width), path, d])
        got = np.fromfile(os.path.join(d, "values.f32"), dtype="<f4").reshape(n, width)
        want = decode_rows(fmt, width, data.tobytes())
        same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
        bad = int((~same).sum())
        print(f"dequant {fmt}: {n} rows of {width}, {int(np.isnan(want).sum())} NaN values, {bad} differing")
        if bad:
            i = np.argwhere(~same)[0]
            at = tuple(i)
            errs.append(f"dequant {fmt}: {bad} values differ, first at {at}: {got[at]!r} vs {want[at]!r}")
    return errs


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump-tool", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--part", action="append", choices=["router", "mhc", "engram", "dequant"])
    args = ap.parse_args()
    compare_logits.require_torch()
    import torch
    torch.set_num_threads(int(os.environ.get("WASTE_ORACLE_THREADS", "2")))
    os.makedirs(args.workdir, exist_ok=True)
    parts = args.part or ["router", "mhc", "engram", "dequant"]
    errors = []
    if "router" in parts:
        for name in ROUTER_CASES:
            errors += check_router(torch, name, args.dump_tool, args.workdir)
    if "mhc" in parts:
        for name in MHC_CASES:
            errors += check_mhc(torch, name, args.dump_tool, args.workdir)
    if "engram" in parts:
        for name in ENGRAM_CASES:
            errors += check_engram(torch, name, args.dump_tool, args.workdir)
    if "dequant" in parts:
        errors += check_dequant(args.dump_tool, args.workdir)
    for e in errors:
        print("FAIL: " + e, file=sys.stderr)
    print("PASS" if not errors else f"FAILED ({len(errors)})")
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
