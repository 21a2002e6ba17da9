"""`waste convert` on a GLM-5.3-Flash checkpoint (make_checkpoint.py --arch glm), checked from the
outside: the printed notes, the manifest (prefix-less names, 1-based kda_layers rebuilt from
layer_types, the eos list, the GLM keys copied, tokenizer_han_split false), the trunk (mHC
projections Q8G, hc_*_scale kept, no MTP or vision tensor; bytes of F32 tensors equal to an
independent fp8/bf16 decode, Q8G bytes equal to an independent quantisation), the experts, and the
tokenizer re-encoded from tokenizer.json (ids from a small rank-ordered BPE written here; `A股` is
one token with the container's pattern and two with Kimi's).

  check_convert_glm.py --waste BIN --workdir DIR

Exit 0 pass, 1 fail, 77 skip (no numpy/torch, unless env CI is set).
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

try:
    import numpy as np
    import make_checkpoint as mk
    from waste_container import Container, fp16_to_f32
except ImportError as e:  # pragma: no cover - environment
    print(f"SKIP: {e}")
    sys.exit(1 if os.environ.get("CI") else 77)

FAILS = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILS.append(what)


def run(cmd):
    print("+ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stdout[-3000:], p.stderr[-3000:], file=sys.stderr)
        print(f"FAILED: exit {p.returncode}", file=sys.stderr)
        sys.exit(1)
    return p


def read_checkpoint(src):
    """name -> (dtype, shape, raw bytes) over the shards."""
    out = {}
    index = json.load(open(os.path.join(src, "model.safetensors.index.json")))
    for shard in sorted(set(index["weight_map"].values())):
        data = open(os.path.join(src, shard), "rb").read()
        n = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + n])
        base = 8 + n
        for name, h in header.items():
            if name == "__metadata__":
                continue
            a, b = h["data_offsets"]
            out[name] = (h["dtype"], h["shape"], data[base + a:base + b])
    return out


def decode(ck, name):
    """The checkpoint tensor as float32, decoded here (bf16 / F32 / fp8 x 128x128 block scale)."""
    dtype, shape, raw = ck[name]
    if dtype == "F32":
        return np.frombuffer(raw, "<f4").reshape(shape).astype(np.float32)
    if dtype == "BF16":
        return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
    assert dtype == "F8_E4M3", dtype
    table = mk.e4m3_table()
    q = table[np.frombuffer(raw, np.uint8)].reshape(shape)  # float64, exact
    _, sshape, sraw = ck[name + "_scale_inv"]
    s = np.frombuffer(sraw, "<f4").astype(np.float64).reshape(sshape)
    full = np.repeat(np.repeat(s, 128, 0), 128, 1)[:shape[0], :shape[1]]
    return (q * full).astype(np.float32)  # one rounding of an exact product: as f32 multiply


def q8g_bytes(w):
    """Independent Q8G: per 128 inputs s = max(amax, 1e-8)/127 (f32), q = rint(w/s), fp16(s)."""
    rows, cols = w.shape
    ng = -(-cols // 128)
    pad = np.zeros((rows, ng * 128), np.float32)
    pad[:, :cols] = w
    g = pad.reshape(rows, ng, 128)
    s = (np.maximum(np.abs(g).max(-1), np.float32(1e-8)) / np.float32(127)).astype(np.float32)
    q = np.clip(np.rint(g / s[:, :, None]), -127, 127).astype(np.int8)
    return q.reshape(rows, ng * 128).tobytes(), s.astype(np.float16).tobytes()


def bpe(ranks, piece: bytes):
    """tiktoken's merge loop: repeatedly merge the adjacent pair whose join has the lowest rank."""
    parts = [bytes([b]) for b in piece]
    while True:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            return [ranks[p] for p in parts]
        i = best[1]
        parts[i:i + 2] = [parts[i] + parts[i + 1]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--waste", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    src, out = os.path.join(a.workdir, "src"), os.path.join(a.workdir, "glm.waste")
    run([sys.executable, os.path.join(HERE, "make_checkpoint.py"), "--arch", "glm", "--out", src])
    ck = read_checkpoint(src)
    conv = run([a.waste, "convert", src, "--out", out, "--jobs", "2", "--experts", "vq3r"])

    # ---- Notes printed.
    cfg = json.load(open(os.path.join(src, "config.json")))
    text = cfg["text_config"]
    L = text["num_hidden_layers"]
    n_mtp = sum(1 for n in ck if n.startswith(f"model.language_model.layers.{L}.") and not n.endswith("_scale_inv"))
    n_vis = sum(1 for n in ck if n.startswith("model.visual."))
    err = conv.stderr.splitlines()
    check(f"waste convert: left out {n_mtp} tensors of the MTP layers (num_nextn_predict_layers 1) at index {L}+: "
          "the container has no reader for them" in err, f"MTP note ({n_mtp} tensors)")
    check(f"waste convert: left out {n_vis} tensors of the vision tower (model.visual.*): the text container "
          "does not carry it" in err, f"vision note ({n_vis} tensors)")
    check(any(line.startswith("waste convert: tokenizer.json re-encoded as tokenizer.model") and
              "no Han branch" in line for line in err), "tokenizer note")

    # ---- Manifest.
    m = json.load(open(os.path.join(out, "manifest.json")))
    c = m["config"]
    check(m.get("tensor_prefix", "") == "", "tensor_prefix is empty (prefix-less container)")
    check(c["linear_attn_config"]["kda_layers"] == [1, 2, 3], "kda_layers 1-based from layer_types")
    check(c["linear_attn_config"]["full_attn_layers"] == [4], "full_attn_layers 1-based")
    check(c["linear_attn_config"]["gate_lower_bound"] == -5.0, "gate_lower_bound from lower_bound")
    check(c["first_k_dense_replace"] == 1 and c["num_experts"] == 4 and c["num_experts_per_token"] == 2,
          "first_k_dense_replace / num_experts / num_experts_per_token")
    check(c["eos_token_id"] == list(mk.GLM_EOS), "eos_token_id list kept")
    for k in ("hc_mult", "hc_sinkhorn_iters", "hc_eps", "swiglu_limit", "index_topk", "index_kpool",
              "index_n_heads", "index_head_dim", "index_kpool_always_select_tail", "layer_types"):
        check(c.get(k) == text[k], f"config key {k} copied")
    check(c.get("tokenizer_han_split") is False, "tokenizer_han_split false")
    check(sorted(int(k) for k in m["layers"]) == [1, 2, 3], "banks for MoE layers 1..3")

    # ---- Trunk names: exactly the kept checkpoint tensors, renamed.
    def expected_name(n):
        if n.endswith("_scale_inv") or ".experts." in n or n.startswith("model.visual."):
            return None
        if n == "lm_head.weight":
            return n
        rest = n[len("model.language_model."):]
        if rest.startswith(f"layers.{L}."):
            return None
        parts = rest.split(".")
        if parts[0] == "layers" and int(parts[1]) >= 1 and parts[2] == "mlp":
            parts[2] = "block_sparse_moe"
        return "model." + ".".join(parts)
    want = {expected_name(n): n for n in ck if expected_name(n)}
    got = {e["name"]: e for e in m["trunk"]}
    check(set(got) == set(want), f"trunk names ({len(got)} vs {len(want)} expected)")
    check(not any("visual" in n or f"layers.{L}." in n or "eh_proj" in n for n in got), "no MTP / vision tensor")
    for layer in range(L):
        for site in ("attn", "ffn"):
            fn, scale = f"model.layers.{layer}.hc_{site}_fn", f"model.layers.{layer}.hc_{site}_scale"
            check(got.get(fn, {}).get("fmt") == 2, f"{fn} is Q8G")
            check(got.get(scale, {}).get("fmt") == 0 and got.get(scale, {}).get("shape") == [3], f"{scale} kept, F32 [3]")

    cont = Container(out)
    trunk = np.fromfile(os.path.join(out, "trunk.bin"), np.uint8)
    # F32 tensors: bit-equal to this script's decode (F32, bf16 and fp8 sources).
    for name in ("model.layers.2.hc_attn_scale", "model.layers.0.hc_ffn_base", "model.layers.1.input_layernorm.weight",
                 "model.layers.2.block_sparse_moe.gate.e_score_correction_bias", "model.layers.0.self_attn.b_proj.weight",
                 "model.layers.3.self_attn.indexer.k_norm.bias", "model.layers.3.self_attn.kv_a_layernorm.weight"):
        e = got[name]
        check(e["fmt"] == 0, f"{name} is F32")
        mine = decode(ck, want[name]).reshape(-1)
        theirs = trunk[e["off"]:e["off"] + mine.size * 4].view("<f4")
        check(np.array_equal(mine, theirs), f"{name} bytes equal the source decode ({want[name]}, {ck[want[name]][0]})")
    # Q8G tensors: payload and scales equal to an independent quantisation of the decoded source.
    for name in ("model.layers.1.hc_attn_fn", "model.layers.3.hc_ffn_fn", "lm_head.weight"):
        e = got[name]
        w = decode(ck, want[name]).reshape(e["shape"][0], -1)
        pay, sc = q8g_bytes(w)
        check(trunk[e["off"]:e["off"] + len(pay)].tobytes() == pay, f"{name} Q8G payload bytes")
        check(trunk[e["scale_off"]:e["scale_off"] + len(sc)].tobytes() == sc, f"{name} Q8G scale bytes")
    # An fp8 Q4G matrix dequantizes close to its source.
    w = decode(ck, "model.language_model.layers.3.self_attn.kv_b_proj.weight")
    d = cont.tensor("model.layers.3.self_attn.kv_b_proj.weight")
    check(float(np.linalg.norm(d - w) / np.linalg.norm(w)) < 0.15, "fp8 kv_b_proj (Q4G) within 15% of its source")
    # Experts: codebook reconstruction of an fp8 expert within VQ3R's usual error.
    gate, up, down = cont.expert(2, 3)
    src_up = decode(ck, "model.language_model.layers.2.mlp.experts.3.up_proj.weight")
    rel = float(np.linalg.norm(up - src_up) / np.linalg.norm(src_up))
    check(rel < 0.35, f"expert L2 E3 up_proj relative error {rel:.3f} < 0.35")

    # ---- Tokenizer.
    chars, order = mk.gpt2_byte_chars()
    ranks = {bytes([b]): i for i, b in enumerate(order)}
    for i, (x, y) in enumerate(mk.GLM_MERGES):
        ranks[x + y] = 256 + i
    lines = open(os.path.join(out, "tokenizer.model")).read().splitlines()
    got_ranks = {base64.b64decode(l.split(" ")[0]): int(l.split(" ")[1]) for l in lines}
    check(got_ranks == ranks, f"tokenizer.model holds the {len(ranks)} BPE tokens, bytes undone from the GPT-2 map")
    specials = json.load(open(os.path.join(out, "specials.json")))
    check(specials == [{"id": mk.GLM_SPECIAL_BASE + i, "text": t} for i, t in enumerate(mk.GLM_SPECIALS)],
          "specials.json from added_tokens")

    def tokenize(model, s):
        return [int(x) for x in run([a.waste, "tokenize", model, s]).stdout.split()]
    a_gu = "A股".encode()
    check(tokenize(out, "A股") == [ranks[a_gu]] == bpe(ranks, a_gu), f"'A股' is one token ({ranks[a_gu]})")
    pieces = [" A股", " the", " ", "123", "4"]  # GLM's pattern: no Han branch, digits in runs of 1..3
    want_ids = [i for p in pieces for i in bpe(ranks, p.encode())]
    check(tokenize(out, " A股 the 1234") == want_ids, f"' A股 the 1234' -> {want_ids}")
    # The same container read with Kimi's pattern (key removed): the Han branch splits A|股.
    kimi = os.path.join(a.workdir, "kimi-pattern.waste")
    shutil.copytree(out, kimi)
    m2 = dict(m)
    m2["config"] = {k: v for k, v in c.items() if k != "tokenizer_han_split"}
    json.dump(m2, open(os.path.join(kimi, "manifest.json"), "w"))
    split = bpe(ranks, b"A") + bpe(ranks, "股".encode())
    check(tokenize(kimi, "A股") == split and len(split) == 2, f"with Kimi's pattern 'A股' is {split}")

    if FAILS:
        print(f"{len(FAILS)} check(s) failed", file=sys.stderr)
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
