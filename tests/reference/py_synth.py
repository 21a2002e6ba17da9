"""Tiny deterministic WASTE v0 container writer, for testing the python reader and the oracle
without the C++ `waste synth` (waste-v0-reference.md 1.2-1.7, section 8 layout rules).

Weights are random; trunk matrices are quantized from random floats (Q8G for embed/lm_head,
Q4G otherwise, optionally Q3G), experts get random RVQ indices and codebooks. Two presets:
  tiny     Kimi-Linear shape at toy size (KDA + MLA, dense layer 0, shared expert, VQ3R)
  tiny-k3  K3 features (latent MoE + norm, AttnRes, SiTU, q_lora, MLA output gate, full-rank
           KDA gate, bounded gate, padded A_log, VQ4P experts, a Q3G matrix)
  tiny-k3-vq3r  the same K3 features with VQ3R experts (no int8 LUT step)
  tiny-glm GLM-5.3-Flash features (4 mHC streams with Q8G projections, SwiGLU clamp, NoPE MLA,
           safe-gate KDA, layer_types / mlp_layer_types with 3 dense layers first, shared expert,
           the k-pool DSA indexer with index_topk 16 in pools of 4: sparse past 19 tokens)
  tiny-v41 DeepSeek-V4.1-Flash features, every mechanism on (v41_preset_config below): CSA2 with a
           window-only layer, ratio-2 and ratio-1 KV sources, a reindex source inside the candidate
           blocks, sinks, grouped o-proj; single-pass mHC, sqrtsoftplus router with gate_temp,
           bias and bias_vl, clamped SwiGLU, Engram tables on layers 1 and 3 (8- and 4-bit rows)
Usage: py_synth.py --preset tiny --out DIR [--seed N]
"""
from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from waste_container import (CODEBOOK_MAGIC, EXPERT_MAGIC, FMT_F32, FMT_Q3G, FMT_Q4G,  # noqa: E402
                             FMT_Q8G, FMT_VQ3R, FMT_VQ4P, RECORD_HEADER)


def preset_config(name: str) -> tuple[dict, dict]:
    base = {
        "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear",
        "num_hidden_layers": 4, "hidden_size": 128, "vocab_size": 256,
        "first_k_dense_replace": 1, "intermediate_size": 256, "moe_intermediate_size": 64,
        "num_experts": 8, "num_experts_per_token": 2, "num_shared_experts": 1,
        "moe_renormalize": True, "routed_scaling_factor": 2.0, "num_attention_heads": 4,
        "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "kv_lora_rank": 32,
        "q_lora_rank": None, "rms_norm_eps": 1e-5, "hidden_act": "silu",
        "linear_attn_config": {"head_dim": 32, "num_heads": 4, "short_conv_kernel_size": 4,
                               "kda_layers": [1, 2, 4], "full_attn_layers": [3]},
    }
    quant = {"fmt": "VQ3R", "stages": 3, "vec_dim": 8, "entries": 256, "index_block": 64,
             "index_bits": 8, "bits_per_weight": 3}
    if name == "tiny":
        return base, quant
    if name in ("tiny-k3", "tiny-k3-vq3r"):
        k3 = dict(base)
        k3.update({
            "architectures": ["KimiK3ForConditionalGeneration"], "num_hidden_layers": 5,
            "num_shared_experts": 2, "routed_scaling_factor": 1.0, "q_lora_rank": 48,
            "routed_expert_hidden_size": 64, "latent_moe_use_norm": True,
            "attn_res_block_size": 2, "mla_use_output_gate": True, "hidden_act": "situ",
            "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0,
            "linear_attn_config": {"head_dim": 32, "num_heads": 4, "short_conv_kernel_size": 4,
                                   "kda_layers": [1, 2, 4, 5], "full_attn_layers": [3],
                                   "use_full_rank_gate": True, "gate_lower_bound": -5.0},
        })
        if name == "tiny-k3":
            quant = {"fmt": "VQ4P", "stages": 4, "vec_dim": 8, "entries": 64, "index_block": 64,
                     "index_bits": 6, "bits_per_weight": 3}
        return k3, quant
    if name == "tiny-glm":
        glm = dict(base)
        n = 6
        types = ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(n)]
        glm.update({
            "architectures": ["Glm5NextForConditionalGeneration"], "model_type": "glm5_next",
            "num_hidden_layers": n, "first_k_dense_replace": 3, "routed_scaling_factor": 2.5,
            "scoring_func": "sigmoid", "q_lora_rank": 48, "qk_nope_head_dim": 32,
            "qk_rope_head_dim": 0, "v_head_dim": 32, "swiglu_limit": 0.5, "hc_mult": 4,
            "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "layer_types": types,
            "index_topk": 16, "index_kpool": 4, "index_n_heads": 2, "index_head_dim": 32,
            "index_kpool_always_select_tail": True,
            "mlp_layer_types": ["dense"] * 3 + ["sparse"] * (n - 3),
            "linear_attn_config": {"head_dim": 32, "num_heads": 4, "short_conv_kernel_size": 4,
                                   "gate_lower_bound": -5.0,
                                   "kda_layers": [i + 1 for i in range(n) if types[i] != "full_attention"],
                                   "full_attn_layers": [i + 1 for i in range(n) if types[i] == "full_attention"]},
        })
        return glm, quant
    if name == "tiny-v41":
        return v41_preset_config(), quant
    raise SystemExit(f"unknown preset {name!r}")


# DeepSeek-V4.1-Flash at toy size (model-families.md §2.1; the keys as the manifest states them,
# shared/container/model_config.hpp). Layer roles: 0 window only (main rope); 1 ratio-2 KV + index
# source; 2 reuses 1; 3 ratio-1 KV + index source, the candidate source (blocks of 4 groups, 3
# kept); 4 ratio-1 index source ranking layer 3's keys inside those blocks; 5 reuses 4. index_topk
# 5 is below the visible groups past 10 tokens, and the 3 candidate blocks cover 12 of them, so a
# prompt of ~40 tokens is sparse at both levels. Engram on layers 1 and 3 (3-grams, 2 heads: 4 rows
# of 32 per token), the rows' tables sized by the prime draw from engram_vocab_size 50.
V41_ENGRAM = dict(layer_ids=[1, 3], max_ngram_size=3, n_heads=2, head_dim=32, engram_vocab_size=50,
                  compressed_vocab_size=200, pad_token_id=2, bits=[8, 4])


def v41_preset_config() -> dict:
    e = V41_ENGRAM
    return {
        "architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v41_text",
        "num_hidden_layers": 6, "hidden_size": 64, "vocab_size": 300, "num_attention_heads": 4,
        "head_dim": 32, "q_lora_rank": 24, "qk_rope_head_dim": 16, "o_groups": 2, "o_lora_rank": 16,
        "sliding_window": 8, "compress_ratios": [0, 2, 2, 1, 1, 1],
        "kv_source_layer_ids": [1, 3], "index_source_layer_ids": [1, 3, 4],
        "candidate_source_layer_id": 3, "candidate_topk_blocks": 3, "candidate_block_size": 4,
        "index_n_heads": 3, "index_head_dim": 32, "index_topk": 5,
        "num_experts": 8, "num_experts_per_token": 2, "moe_intermediate_size": 32, "num_shared_experts": 1,
        "first_k_dense_replace": 0, "intermediate_size": 32,
        "scoring_func": "sqrtsoftplus", "moe_renormalize": True, "routed_scaling_factor": 1.5, "gate_temp": 0.5,
        "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "swiglu_limit": 1.0,
        "rms_norm_eps": 1e-20, "rope_theta": 10000.0, "compress_rope_theta": 160000.0,
        "rope_scaling": {"rope_type": "yarn", "factor": 16.0, "beta_fast": 32.0, "beta_slow": 1.0,
                         "original_max_position_embeddings": 64},
        "max_position_embeddings": 4096, "hidden_act": "silu",
        "engram_layer_ids": e["layer_ids"], "engram_num_embeddings": v41_engram_rows(),
        "engram_vocab_size": e["engram_vocab_size"], "engram_max_ngram_size": e["max_ngram_size"],
        "engram_n_heads": e["n_heads"], "engram_head_dim": e["head_dim"], "engram_pad_id": e["pad_token_id"],
        "engram_compressed_vocab_size": e["compressed_vocab_size"],
        "attn_sink": True, "hc_single_pass": True, "eos_token_id": 1, "bos_token_id": 0,
    }


def v41_engram_layout() -> list:
    """engram.json's layers (primes, offsets, multipliers) by the reference's derivation
    (engram_oracle.py: sympy primes, numpy PCG64 multipliers)."""
    import engram_oracle  # sympy: exits 77 without it
    return engram_oracle.oracle_layout(V41_ENGRAM, None)


def v41_engram_rows() -> list:
    return [sum(sum(row) for row in layer["primes"]) for layer in v41_engram_layout()]


def v41_token_map(vocab: int, cvs: int) -> np.ndarray:
    """A compressed token map onto all of 0..cvs-1, many tokens sharing an id (seeded)."""
    rng = np.random.default_rng(4141)
    m = np.concatenate([np.arange(cvs), rng.integers(0, cvs, vocab - cvs)])
    rng.shuffle(m)
    return m.astype(np.int64)


# engram-L{n}.bin (compute/convert/engram_table.hpp): a 4096-byte header, then pages of 4096 bytes
# holding floor(4096 / row_bytes) rows each. A row: width/32 fp16 scales, then the codes (int8, or
# two 4-bit codes a byte, even column low, code + 8).
ENGRAM_PAGE = 4096
ENGRAM_HEADER = struct.Struct("<8sIIQIIIIIIQI")  # up to the data CRC; the header CRC at byte 60


def engram_row_bytes(bits: int, width: int) -> int:
    return width // 32 * 2 + (width if bits == 8 else width // 2)


def encode_engram_row(bits: int, row: np.ndarray) -> bytes:
    qmax = 127 if bits == 8 else 7
    g = row.astype(np.float32).reshape(-1, 32)
    scales = (np.abs(g).max(-1) / np.float32(qmax)).astype(np.float16)
    s32 = scales.astype(np.float32)
    safe = np.where(s32 > 0, s32, 1.0)
    q = np.clip(np.rint(g / safe[:, None]), -qmax - (bits == 4), qmax).astype(np.int32).reshape(-1)
    if bits == 8:
        codes = q.astype(np.int8).tobytes()
    else:
        u = (q + 8).astype(np.uint8)
        codes = (u[0::2] | (u[1::2] << 4)).astype(np.uint8).tobytes()
    return scales.view(np.uint16).astype("<u2").tobytes() + codes


def write_engram_table(path: str, layer: int, bits: int, rows: np.ndarray) -> None:
    n, width = rows.shape
    rb = engram_row_bytes(bits, width)
    per_page = ENGRAM_PAGE // rb
    pages = -(-n // per_page)
    data = bytearray(pages * ENGRAM_PAGE)
    for r in range(n):
        off = r // per_page * ENGRAM_PAGE + r % per_page * rb
        data[off:off + rb] = encode_engram_row(bits, rows[r])
    head = bytearray(ENGRAM_PAGE)
    ENGRAM_HEADER.pack_into(head, 0, b"WENGRAM\0", 1, bits, n, width, 32, rb, per_page, ENGRAM_PAGE, layer,
                            len(data), zlib.crc32(bytes(data)) & 0xFFFFFFFF)
    struct.pack_into("<I", head, 60, zlib.crc32(bytes(head[:60])) & 0xFFFFFFFF)
    with open(path, "wb") as f:
        f.write(head + data)


def write_v41_engram(out: str, cfg: dict, rng) -> None:
    """engram.json, engram-tokmap.bin and one engram-L{n}.bin per Engram layer."""
    e = V41_ENGRAM
    token_map = v41_token_map(cfg["vocab_size"], e["compressed_vocab_size"])
    layers = v41_engram_layout()
    doc = {"compressed_vocab_size": e["compressed_vocab_size"], "pad_id": int(token_map[e["pad_token_id"]]),
           "max_ngram_size": e["max_ngram_size"], "n_heads": e["n_heads"], "head_dim": e["head_dim"],
           "layers": [{k: layer[k] for k in ("layer", "multipliers", "primes", "offsets")} for layer in layers]}
    with open(os.path.join(out, "engram.json"), "w") as f:
        json.dump(doc, f)
    token_map.astype("<i4").tofile(os.path.join(out, "engram-tokmap.bin"))
    for layer, n, bits in zip(e["layer_ids"], cfg["engram_num_embeddings"], e["bits"]):
        rows = rng.normal(0.0, 1.0, (n, e["head_dim"])).astype(np.float32)
        write_engram_table(os.path.join(out, f"engram-L{layer}.bin"), layer, bits, rows)


def trunk_shapes(cfg: dict) -> dict:
    """name -> shape for every text tensor the forward pass reads (section 3.2)."""
    if cfg.get("model_type", "").startswith("deepseek_v41"):
        return v41_trunk_shapes(cfg)
    hid, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    lac = cfg["linear_attn_config"]
    H, D, K = lac["num_heads"], lac["head_dim"], lac["short_conv_kernel_size"]
    C = H * D
    nh, nope, rope, vd = (cfg[k] for k in ("num_attention_heads", "qk_nope_head_dim",
                                           "qk_rope_head_dim", "v_head_dim"))
    lora, qlora = cfg["kv_lora_rank"], cfg.get("q_lora_rank") or 0
    E, inter = cfg["num_experts"], cfg["moe_intermediate_size"]
    S = inter * max(cfg.get("num_shared_experts", 0), 1)
    lat = cfg.get("routed_expert_hidden_size", 0)
    ar = cfg.get("attn_res_block_size", 0)
    s = {"model.embed_tokens.weight": [cfg["vocab_size"], hid], "model.norm.weight": [hid],
         "lm_head.weight": [cfg["vocab_size"], hid]}
    if ar:
        s["model.output_attn_res_norm.weight"] = [hid]
        s["model.output_attn_res_proj.weight"] = [hid]
    hc = cfg.get("hc_mult") or 0
    types = cfg.get("layer_types")
    for layer in range(L):
        p = f"model.layers.{layer}."
        s[p + "input_layernorm.weight"] = [hid]
        s[p + "post_attention_layernorm.weight"] = [hid]
        for site in ("hc_attn_", "hc_ffn_") if hc else ():
            s[p + site + "fn"] = [(2 + hc) * hc, hc * hid]
            s[p + site + "base"] = [(2 + hc) * hc]
            s[p + site + "scale"] = [3]
        if ar:
            for n in ("self_attention_res_norm", "self_attention_res_proj", "mlp_res_norm",
                      "mlp_res_proj"):
                s[p + n + ".weight"] = [hid]
        a = p + "self_attn."
        is_kda = types[layer] == "linear_attention" if types else (layer + 1) in lac["kda_layers"]
        if is_kda:
            for n in "qkv":
                s[a + f"{n}_proj.weight"] = [C, hid]
                s[a + f"{n}_conv1d.weight"] = [C, 1, K]
            s[a + "f_a_proj.weight"] = [D, hid]
            s[a + "f_b_proj.weight"] = [C, D]
            s[a + "b_proj.weight"] = [H, hid]
            s[a + "A_log"] = [128] if lac.get("use_full_rank_gate") else [1, 1, H, 1]
            s[a + "dt_bias"] = [C]
            if lac.get("use_full_rank_gate"):
                s[a + "g_proj.weight"] = [C, hid]
            else:
                s[a + "g_a_proj.weight"] = [D, hid]
                s[a + "g_b_proj.weight"] = [C, D]
            s[a + "o_norm.weight"] = [D]
            s[a + "o_proj.weight"] = [hid, C]
        else:
            if qlora:
                s[a + "q_a_proj.weight"] = [qlora, hid]
                s[a + "q_a_layernorm.weight"] = [qlora]
                s[a + "q_b_proj.weight"] = [nh * (nope + rope), qlora]
            else:
                s[a + "q_proj.weight"] = [nh * (nope + rope), hid]
            s[a + "kv_a_proj_with_mqa.weight"] = [lora + rope, hid]
            s[a + "kv_a_layernorm.weight"] = [lora]
            s[a + "kv_b_proj.weight"] = [nh * (nope + vd), lora]
            if cfg.get("mla_use_output_gate"):
                s[a + "g_proj.weight"] = [nh * vd, hid]
            s[a + "o_proj.weight"] = [hid, nh * vd]
            if cfg.get("index_n_heads"):
                ix, ih, idim = a + "indexer.", cfg["index_n_heads"], cfg["index_head_dim"]
                s[ix + "wq_b.weight"] = [ih * idim, qlora]
                s[ix + "wk.weight"] = [idim, hid]
                s[ix + "k_norm.weight"] = [idim]
                s[ix + "k_norm.bias"] = [idim]
                s[ix + "weights_proj.weight"] = [ih, hid]
                s[ix + "index_kpool_compress_gate"] = [idim, hid]
                s[ix + "index_kpool_compress_ape"] = [cfg["index_kpool"], idim]
        if E and layer >= cfg["first_k_dense_replace"]:
            m = p + "block_sparse_moe."
            s[m + "gate.weight"] = [E, hid]
            s[m + "gate.e_score_correction_bias"] = [E]
            s[m + "shared_experts.gate_proj.weight"] = [S, hid]
            s[m + "shared_experts.up_proj.weight"] = [S, hid]
            s[m + "shared_experts.down_proj.weight"] = [hid, S]
            if lat:
                s[m + "routed_expert_down_proj.weight"] = [lat, hid]
                s[m + "routed_expert_up_proj.weight"] = [hid, lat]
                s[m + "routed_expert_norm.weight"] = [lat]
        else:
            s[p + "mlp.gate_proj.weight"] = [cfg["intermediate_size"], hid]
            s[p + "mlp.up_proj.weight"] = [cfg["intermediate_size"], hid]
            s[p + "mlp.down_proj.weight"] = [hid, cfg["intermediate_size"]]
    return s


def v41_trunk_shapes(cfg: dict) -> dict:
    """DeepSeek-V4.1's tensors under the container's names (compute/convert/v41_config.hpp)."""
    hid, L, nh, hd = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["head_dim"]
    hc, ql, og, ol = cfg["hc_mult"], cfg["q_lora_rank"], cfg["o_groups"], cfg["o_lora_rank"]
    E, S = cfg["num_experts"], cfg["moe_intermediate_size"] * max(cfg.get("num_shared_experts", 0), 1)
    ih, idim = cfg["index_n_heads"], cfg["index_head_dim"]
    mix = (2 + hc) * hc
    s = {"model.embed_tokens.weight": [cfg["vocab_size"], hid], "model.norm.weight": [hid],
         "lm_head.weight": [cfg["vocab_size"], hid],
         # The release's head mixer; the single-pass head uses the last FFN site's pre instead
         # (model-families.md §2.1), so no forward reads these three.
         "model.hc_head_fn": [hc, hc * hid], "model.hc_head_base": [hc], "model.hc_head_scale": [1]}
    for layer in range(L):
        p = f"model.layers.{layer}."
        a = p + "self_attn."
        s[p + "input_layernorm.weight"] = [hid]
        s[p + "post_attention_layernorm.weight"] = [hid]
        s[a + "wq_a.weight"] = [ql, hid]
        s[a + "q_norm.weight"] = [ql]
        s[a + "wq_b.weight"] = [nh * hd, ql]
        s[a + "wkv.weight"] = [hd, hid]
        s[a + "kv_norm.weight"] = [hd]
        s[a + "wo_a.weight"] = [og * ol, nh * hd // og]
        s[a + "wo_b.weight"] = [hid, og * ol]
        s[a + "attn_sink"] = [nh]
        if layer in cfg["kv_source_layer_ids"]:
            s[a + "compressor.wkv.weight"] = [hd, hid]
            s[a + "compressor.norm.weight"] = [hd]
            if cfg["compress_ratios"][layer] > 1:
                s[a + "compressor.wgate.weight"] = [hd, hid]
            s[a + "indexer.wk.weight"] = [idim, hd]
            s[a + "indexer.k_norm.weight"] = [idim]
        if layer in cfg["index_source_layer_ids"]:
            s[a + "indexer.wq_b.weight"] = [ih * idim, ql]
            s[a + "indexer.weights_proj.weight"] = [ih, hid]
        for site in ("hc_attn_", "hc_ffn_"):
            s[p + site + "fn"] = [mix, hc * hid]
            s[p + site + "base"] = [mix]
            s[p + site + "scale"] = [3]
        m = p + "block_sparse_moe."
        s[m + "gate.weight"] = [E, hid]
        s[m + "gate.e_score_correction_bias"] = [E]
        s[m + "gate.bias_vl"] = [E]
        s[m + "shared_experts.gate_proj.weight"] = [S, hid]
        s[m + "shared_experts.up_proj.weight"] = [S, hid]
        s[m + "shared_experts.down_proj.weight"] = [hid, S]
        if layer in cfg.get("engram_layer_ids", []):
            rows = (cfg["engram_max_ngram_size"] - 1) * cfg["engram_n_heads"] * cfg["engram_head_dim"]
            s[p + "engram.wkv.weight"] = [hid * (hc + 1), rows]
            s[p + "engram.q_weight"] = [hc, hid]
            s[p + "engram.k_weight"] = [hc, hid]
    return s


def quantize(w2d: np.ndarray, fmt: int, group: int = 128) -> tuple[bytes, bytes]:
    """(payload, fp16 scales) of a [rows, N] matrix in Q8G / Q4G / Q3G (section 1.5)."""
    rows, n = w2d.shape
    ng = -(-n // group)
    wp = np.zeros((rows, ng * group), dtype=np.float32)
    wp[:, :n] = w2d
    g = wp.reshape(rows, ng, group)
    qmax = {FMT_Q8G: 127, FMT_Q4G: 7, FMT_Q3G: 3}[fmt]
    qmin = {FMT_Q8G: -127, FMT_Q4G: -8, FMT_Q3G: -4}[fmt]
    s = np.maximum(np.abs(g).max(-1), 1e-8).astype(np.float32) / np.float32(qmax)
    q = np.clip(np.rint(g / s[:, :, None]), qmin, qmax).astype(np.int32).reshape(rows, -1)
    scales = s.astype(np.float16).view(np.uint16).astype("<u2").tobytes()
    if fmt == FMT_Q8G:
        return q.astype(np.int8).tobytes(), scales
    if fmt == FMT_Q4G:
        u = (q + 8).astype(np.uint8)
        return (u[:, 0::2] | (u[:, 1::2] << 4)).astype(np.uint8).tobytes(), scales
    stride = (ng * group * 3 + 7) // 8 + 1
    out = np.zeros((rows, stride), dtype=np.uint8)
    u = (q + 4).astype(np.uint32)
    for i in range(ng * group):
        bit = 3 * i
        val = u[:, i] << (bit & 7)
        out[:, bit >> 3] |= (val & 0xFF).astype(np.uint8)
        out[:, (bit >> 3) + 1] |= (val >> 8).astype(np.uint8)
    return out.tobytes(), scales


def write_container(out: str, cfg: dict, quant: dict, seed: int = 0, q3g_names=()) -> None:
    rng = np.random.default_rng(seed)
    os.makedirs(out, exist_ok=True)
    shapes = trunk_shapes(cfg)
    trunk, entries = bytearray(), []
    for name in sorted(shapes):
        shape = shapes[name]
        numel = int(np.prod(shape))
        # Every matrix quantized even when small, as the v0 test container does.
        if (len(shape) == 1 or "conv1d" in name or name.endswith("A_log") or name.endswith("compress_ape")
                or name.endswith(("engram.q_weight", "engram.k_weight"))):
            fmt = FMT_F32
        elif "embed_tokens" in name or "lm_head" in name or name.endswith(("hc_attn_fn", "hc_ffn_fn")):
            fmt = FMT_Q8G
        else:
            fmt = FMT_Q3G if name in q3g_names else FMT_Q4G
        if fmt == FMT_F32:
            if name.endswith("norm.weight"):
                w = rng.uniform(0.5, 1.5, numel)
            elif name.endswith(("hc_attn_scale", "hc_ffn_scale", "engram.q_weight", "engram.k_weight")):
                w = rng.uniform(0.5, 1.5, numel)
            elif name.endswith("A_log"):
                w = rng.uniform(-1.0, 1.0, numel)
                if len(shape) == 1:  # K3 pads A_log to 128 with zeros
                    w[cfg["linear_attn_config"]["num_heads"]:] = 0.0
            else:
                w = rng.uniform(-0.5, 0.5, numel)
                if name.endswith("gate.bias_vl"):
                    w *= 4.0  # image-span tokens route far from text routing (v41_oracle's vl_bias=0)
            entries.append({"name": name, "fmt": FMT_F32, "off": len(trunk), "shape": shape})
            trunk += w.astype("<f4").tobytes()
        else:
            w = rng.normal(0.0, 1.0 / np.sqrt(shape[-1]), numel).astype(np.float32)
            if "embed" in name:
                w *= np.sqrt(shape[-1])
            if name.endswith("compressor.wgate.weight"):
                w *= 3.0  # a pooling gate far from the plain mean
            payload, scales = quantize(w.reshape(-1, shape[-1]), fmt)
            off = len(trunk)
            trunk += payload
            entries.append({"name": name, "fmt": fmt, "off": off, "shape": shape, "group": 128,
                            "scale_off": len(trunk), "bytes": len(payload) + len(scales)})
            trunk += scales
    with open(os.path.join(out, "trunk.bin"), "wb") as f:
        f.write(trunk)

    stages, vdim, n_ent = quant["stages"], quant["vec_dim"], quant["entries"]
    six = quant.get("index_bits", 8) == 6
    L, E = cfg["num_hidden_layers"], cfg["num_experts"]
    moe_layers = [l for l in range(L) if E and l >= cfg["first_k_dense_replace"]]
    books = bytearray()
    for b in range(3 * stages * len(moe_layers)):
        cent = rng.uniform(-0.3, 0.3, n_ent * vdim).astype(np.float16)
        books += struct.pack("<IHBBII", CODEBOOK_MAGIC, b, FMT_VQ3R, vdim, n_ent, 0)
        books += cent.view(np.uint16).astype("<u2").tobytes()
    with open(os.path.join(out, "codebooks.bin"), "wb") as f:
        f.write(books)

    inter = cfg["moe_intermediate_size"]
    lat = cfg.get("routed_expert_hidden_size") or cfg["hidden_size"]
    mats = [(inter, lat), (inter, lat), (lat, inter)]
    layers = {}
    for li, layer in enumerate(moe_layers):
        base = li * 3 * stages
        bank = bytearray()
        for e in range(E):
            idx_parts, scale_parts = [], []
            for rows, cols in mats:
                nb, nvr = -(-rows // 64), cols // vdim
                idx = rng.integers(0, n_ent, (nb * 64, nvr, stages), dtype=np.int64)
                idx[rows:] = 0  # padding rows are zero
                blk = idx.reshape(nb, 64, nvr, stages).transpose(0, 2, 1, 3)
                if six:
                    s0, s1, s2, s3 = (blk[..., i] for i in range(4))
                    packed = np.stack([(s0 | (s1 << 6)) & 255, ((s1 >> 2) | (s2 << 4)) & 255,
                                       ((s2 >> 4) | (s3 << 2)) & 255], axis=-1)
                    idx_parts.append(packed.astype(np.uint8).tobytes())
                else:
                    idx_parts.append(blk.astype(np.uint8).tobytes())
                scale_parts.append(rng.uniform(0.01, 0.05, rows).astype(np.float16)
                                   .view(np.uint16).astype("<u2").tobytes())
            offs, pos = [], 48
            for part in idx_parts:
                offs.append(pos)
                pos += len(part)
            body = b"".join(idx_parts) + b"".join(scale_parts)
            rec_bytes = -(-(48 + len(body)) // 4096) * 4096
            hdr = RECORD_HEADER.pack(EXPERT_MAGIC, layer, e, FMT_VQ4P if six else FMT_VQ3R, 0,
                                     base, 0, 0, rec_bytes // 4096, offs[0], offs[1], offs[2],
                                     pos, zlib.crc32(body) & 0xFFFFFFFF, 0, 0)
            bank += hdr + body + bytes(rec_bytes - 48 - len(body))
        fname = f"experts-L{layer}.bin"
        with open(os.path.join(out, fname), "wb") as f:
            f.write(bank)
        layers[str(layer)] = {"file": fname, "experts": E, "bytes": len(bank),
                              "codebook_base": base}
    manifest = {"format_version": 0, "arch": cfg["model_type"], "tensor_prefix": "",
                "config": cfg, "expert_quant": quant, "layers": layers, "trunk": entries}
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    if cfg.get("engram_layer_ids"):
        write_v41_engram(out, cfg, rng)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    cfg, quant = preset_config(args.preset)
    q3g = ("model.layers.1.self_attn.o_proj.weight",) if args.preset.startswith("tiny-k3") else ()
    write_container(args.out, cfg, quant, args.seed, q3g)
    return 0


if __name__ == "__main__":
    sys.exit(main())
