"""Small random Hugging Face checkpoints with the real tensor names and dtypes (test-time only).

  make_checkpoint.py --arch kimi-linear|k3|deepseek-v3|glm --out DIR [--size small|bench] [--seed 0]

* kimi-linear: bf16, two shards + model.safetensors.index.json, KimiLinearForCausalLM names.
  --size bench is the issue's checkpoint: 4 layers (0 dense, 3 MoE of 64 experts, top-2, one
  shared), hidden 512, expert width 256, KDA 4 heads x 32, MLA at layer 3, vocabulary 600;
  bench2x is the same with 128 experts per layer.
* k3: nested text_config, tensors under language_model., latent MoE, Attention Residuals,
  full-rank KDA gate, MLA output gate; routed experts as MXFP4 pairs (weight_packed U8, E2M1
  nibbles low first + weight_scale U8 E8M0 per 32 inputs), trunk bf16.
* deepseek-v3: DeepseekV3ForCausalLM names and keys (n_routed_experts, mlp.experts.E.gate_proj,
  mlp.shared_experts), every 2-D linear F8_E4M3 with F32 weight_scale_inv per 128 x 128 block
  (quantization_config.weight_block_size), gate bf16, e_score_correction_bias F32, one MTP layer.
* glm: GLM-5.3-Flash (Glm5NextForConditionalGeneration) as the release spells it: nested
  text_config (model_type glm5_next_text) with layer_types / mlp_layer_types, a 0-based
  linear_attn_config.kda_layers, eos_token_id a list of three, hc_* / swiglu_limit / index_* keys;
  tensors under model.language_model.layers.N with a top-level lm_head.weight, DeepSeek MoE names
  (mlp.gate, mlp.experts.E.gate_proj, mlp.shared_experts), mHC hc_{attn,ffn}_{fn,base,scale} in F32,
  the DSA indexer on the MLA layer, 2-D linears F8_E4M3 + weight_scale_inv per 128 x 128 block
  (embeddings, lm_head, router and mHC stay bf16/F32), one MTP layer (index num_hidden_layers) and a
  two-tensor vision tower (model.visual.*) that the converter must leave out. hidden 768 so that the
  24 x 3072 mHC projections are over the F32 size limit (they must come out Q8G). Writes
  tokenizer.json (byte-level BPE, GPT-2 byte escape, merges in rank order, GLM's pre-tokenizer
  pattern with no Han branch; `A股` is one token) and tokenizer_config.json instead of tiktoken.model.

Debian's torch 1.13 has no float8 dtypes, so fp8 and MXFP4 bytes are written with numpy. Also
writes tiktoken.model (bytes 0..255 + a few merges) and tokenizer_config.json with the
architecture's chat markers as added tokens. The same --seed gives the same bytes.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from py_synth import trunk_shapes  # noqa: E402

KIMI_SPECIALS = ["[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>",
                 "<|im_middle|>"]
K3_SPECIALS = ["[BOS]", "[EOS]", "<|end_of_msg|>", "<|open|>", "<|close|>", "<|sep|>"]


def config_for(arch: str, size: str) -> dict:
    if arch == "kimi-linear" and size in ("bench", "bench2x"):
        return {
            "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear",
            "num_hidden_layers": 4, "hidden_size": 512, "vocab_size": 600,
            "first_k_dense_replace": 1, "intermediate_size": 1024, "moe_intermediate_size": 256,
            "num_experts": 64 if size == "bench" else 128, "num_experts_per_token": 2,
            "num_shared_experts": 1,
            "moe_renormalize": True, "routed_scaling_factor": 2.0, "num_attention_heads": 4,
            "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32, "kv_lora_rank": 64,
            "q_lora_rank": None, "mla_use_nope": True, "rms_norm_eps": 1e-5, "hidden_act": "silu",
            "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False,
            "linear_attn_config": {"head_dim": 32, "num_heads": 4, "short_conv_kernel_size": 4,
                                   "kda_layers": [1, 2, 3], "full_attn_layers": [4]},
        }
    base = {
        "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear",
        "num_hidden_layers": 4, "hidden_size": 128, "vocab_size": 300,
        "first_k_dense_replace": 1, "intermediate_size": 256, "moe_intermediate_size": 64,
        "num_experts": 8, "num_experts_per_token": 2, "num_shared_experts": 1,
        "moe_renormalize": True, "routed_scaling_factor": 2.0, "num_attention_heads": 4,
        "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "kv_lora_rank": 32,
        "q_lora_rank": None, "mla_use_nope": True, "rms_norm_eps": 1e-5, "hidden_act": "silu",
        "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False,
        "linear_attn_config": {"head_dim": 32, "num_heads": 4, "short_conv_kernel_size": 4,
                               "kda_layers": [1, 2, 4], "full_attn_layers": [3]},
    }
    if arch == "kimi-linear":
        return base
    if arch == "k3":
        text = dict(base)
        text.update({
            "num_hidden_layers": 5, "num_shared_experts": 2, "routed_scaling_factor": 1.0,
            "q_lora_rank": 48, "routed_expert_hidden_size": 64, "latent_moe_use_norm": True,
            "attn_res_block_size": 2, "mla_use_output_gate": True, "hidden_act": "situ",
            "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0,
            "linear_attn_config": {"head_dim": 32, "num_heads": 4, "short_conv_kernel_size": 4,
                                   "kda_layers": [1, 2, 4, 5], "full_attn_layers": [3],
                                   "use_full_rank_gate": True, "gate_lower_bound": -5.0},
        })
        return {"architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3",
                "media_placeholder_token_id": 299, "vision_config": {"hidden_size": 64},
                "quantization_config": {"format": "mxfp4-pack-quantized", "quant_method": "compressed-tensors"},
                "text_config": text}
    if arch == "deepseek-v3":
        return {
            "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
            "num_hidden_layers": 3, "hidden_size": 256, "vocab_size": 300,
            "first_k_dense_replace": 1, "intermediate_size": 384, "moe_intermediate_size": 192,
            "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1,
            "norm_topk_prob": True, "routed_scaling_factor": 2.5, "num_attention_heads": 4,
            "q_lora_rank": 96, "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16,
            "v_head_dim": 32, "rms_norm_eps": 1e-6, "hidden_act": "silu", "scoring_func": "sigmoid",
            "topk_method": "noaux_tc", "n_group": 2, "topk_group": 1, "num_nextn_predict_layers": 1,
            "max_position_embeddings": 163840, "rope_theta": 10000.0,
            "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                             "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
            "bos_token_id": 0, "eos_token_id": 1, "tie_word_embeddings": False,
            "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                    "weight_block_size": [128, 128]},
        }
    if arch == "glm":
        text = {
            "architectures": ["Glm5NextForCausalLM"], "model_type": "glm5_next_text",
            "num_hidden_layers": 4, "hidden_size": 768, "vocab_size": 300,
            "intermediate_size": 128, "moe_intermediate_size": 64,
            "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1, "n_group": 1,
            "topk_group": 1, "norm_topk_prob": True, "routed_scaling_factor": 2.5,
            "num_attention_heads": 2, "num_key_value_heads": 2, "q_lora_rank": 64, "kv_lora_rank": 32,
            "qk_nope_head_dim": 32, "qk_rope_head_dim": 0, "v_head_dim": 32, "head_dim": 0,
            "mla_use_nope": True, "rms_norm_eps": 1e-5, "hidden_act": "silu", "swiglu_limit": 10.0,
            "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6,
            "index_topk": 8, "index_kpool": 4, "index_n_heads": 2, "index_head_dim": 16,
            "index_kpool_always_select_tail": True, "indexer_types": ["full"] * 4,
            "layer_types": ["linear_attention", "linear_attention", "linear_attention",
                            "deepseek_sparse_attention"],
            "mlp_layer_types": ["dense", "sparse", "sparse", "sparse"],
            "linear_attn_config": {"head_dim": 32, "num_heads": 2, "short_conv_kernel_size": 4,
                                   "kda_layers": [0, 1, 2], "full_attn_layers": [3], "safe_gate": True,
                                   "lower_bound": -5.0},
            "num_nextn_predict_layers": 1, "max_position_embeddings": 1048576,
            "pad_token_id": GLM_PAD, "bos_token_id": None, "eos_token_id": list(GLM_EOS),
            "tie_word_embeddings": False,
        }
        return {"architectures": ["Glm5NextForConditionalGeneration"], "model_type": "glm5_next",
                "image_token_id": 299, "vision_config": {"model_type": "glm_ocr_vision", "hidden_size": 32},
                "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                        "weight_block_size": [128, 128]},
                "text_config": text}
    raise SystemExit(f"unknown arch {arch!r}")


# ------------------------------------------------------------------------------ GLM tokenizer.json
# GLM's pre-tokenizer pattern (the cl100k one: no [\p{Han}]+ branch, digits in runs of 1..3).
GLM_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Merges (as bytes) after the 256 byte tokens, in rank order: ids 256.. in this order.
GLM_MERGES = [(b"\xe8", b"\x82"), (b"\xe8\x82", b"\xa1"), (b"A", "股".encode()), (b"t", b"h"),
              (b" ", b"th"), (b"e", b"r")]
GLM_SPECIALS = ["<|endoftext|>", "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>",
                "<|observation|>", "<think>", "</think>"]
GLM_SPECIAL_BASE = 290  # ids 290..298; the vocabulary has a gap 262..289
GLM_EOS = (290, 294, 296)  # <|endoftext|>, <|user|>, <|observation|>
GLM_PAD = 290


def gpt2_byte_chars() -> list:
    """GPT-2's byte -> printable character map, as a list indexed by byte, in its own order too."""
    printable = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    order, chars, extra = list(printable), {b: chr(b) for b in printable}, 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            order.append(b)
            extra += 1
    return [chars[b] for b in range(256)], order


def write_glm_tokenizer(out: str) -> dict:
    """tokenizer.json + tokenizer_config.json; returns {bytes: id} of the BPE vocabulary."""
    chars, order = gpt2_byte_chars()
    esc = lambda bs: "".join(chars[b] for b in bs)  # noqa: E731
    ids = {bytes([b]): i for i, b in enumerate(order)}  # byte tokens in GPT-2's order, not by value
    merges = []
    for a, b in GLM_MERGES:
        ids[a + b] = 256 + len(merges)
        merges.append(esc(a) + " " + esc(b))
    tok = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": GLM_SPECIAL_BASE + i, "content": t, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}
                         for i, t in enumerate(GLM_SPECIALS)],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": GLM_PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": None, "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": {esc(k): v for k, v in ids.items()}, "merges": merges},
    }
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
    added = {str(GLM_SPECIAL_BASE + i): {"content": t, "special": True} for i, t in enumerate(GLM_SPECIALS)}
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"added_tokens_decoder": added, "eos_token": "<|endoftext|>",
                   "tokenizer_class": "PreTrainedTokenizerFast"}, f, indent=1)
    return ids


def glm_tensors(cfg: dict, gen: torch.Generator) -> dict:
    """The GLM checkpoint: name -> (dtype, shape, bytes), the release's names and encodings."""
    text = cfg["text_config"]
    H, L = text["hidden_size"], text["num_hidden_layers"]
    # trunk_shapes speaks Kimi keys and 1-based kda_layers; give it the normalised view.
    kcfg = dict(text, num_experts=text["n_routed_experts"], num_shared_experts=text["n_shared_experts"],
                first_k_dense_replace=1,
                linear_attn_config=dict(text["linear_attn_config"], kda_layers=[1, 2, 3]))
    weights = {}
    for name, w in random_weights(kcfg, gen).items():
        name = deepseek_names(name, kcfg).replace(".block_sparse_moe.", ".mlp.")
        if name.startswith("model."):
            name = "model.language_model." + name[len("model."):]
        weights[name] = w
    mix, hc = (2 + text["hc_mult"]) * text["hc_mult"], text["hc_mult"]
    for layer in range(L + 1):  # + the MTP layer
        p = f"model.language_model.layers.{layer}."
        for site in ("attn", "ffn"):
            weights[p + f"hc_{site}_fn"] = torch.randn(mix, hc * H, generator=gen) * 0.02
            weights[p + f"hc_{site}_base"] = 0.1 * torch.randn(mix, generator=gen)
            weights[p + f"hc_{site}_scale"] = 1.0 + 0.1 * torch.randn(3, generator=gen)
    ip = f"model.language_model.layers.3.self_attn.indexer."
    ih, idim = text["index_n_heads"], text["index_head_dim"]
    weights[ip + "wq_b.weight"] = torch.randn(ih * idim, text["q_lora_rank"], generator=gen) / 8.0
    weights[ip + "wk.weight"] = torch.randn(idim, H, generator=gen) / H ** 0.5
    weights[ip + "k_norm.weight"] = 1.0 + 0.1 * torch.randn(idim, generator=gen)
    weights[ip + "k_norm.bias"] = 0.1 * torch.randn(idim, generator=gen)
    weights[ip + "weights_proj.weight"] = torch.randn(ih, H, generator=gen) / H ** 0.5
    weights[ip + "index_kpool_compress_gate"] = torch.randn(idim, H, generator=gen) / H ** 0.5
    weights[ip + "index_kpool_compress_ape"] = 0.1 * torch.randn(text["index_kpool"], idim, generator=gen)
    mtp = f"model.language_model.layers.{L}."
    weights[mtp + "eh_proj.weight"] = torch.randn(H, 2 * H, generator=gen) * 0.05
    weights[mtp + "enorm.weight"] = torch.ones(H)
    weights[mtp + "hnorm.weight"] = torch.ones(H)
    weights[mtp + "input_layernorm.weight"] = torch.ones(H)
    weights[mtp + "mlp.experts.0.gate_proj.weight"] = torch.randn(text["moe_intermediate_size"], H, generator=gen) * 0.05
    weights["model.visual.patch_embed.proj.weight"] = torch.randn(32, 3 * 2 * 14 * 14, generator=gen) * 0.02
    weights["model.visual.blocks.0.attn.qkv.bias"] = torch.randn(96, generator=gen) * 0.02
    tensors = {}
    for name, w in weights.items():
        f32 = ".hc_" in name or name.endswith("e_score_correction_bias") or name.endswith("A_log") or \
            name.endswith("dt_bias") or "conv1d" in name
        fp8 = w.dim() == 2 and not f32 and not any(k in name for k in (
            "embed_tokens", "lm_head", "mlp.gate.weight", "index_kpool", "model.visual."))
        if fp8:
            q, s = fp8_block(w.numpy().astype(np.float32))
            tensors[name] = ("F8_E4M3", list(w.shape), q.tobytes())
            tensors[name + "_scale_inv"] = ("F32", list(s.shape), s.astype("<f4").tobytes())
        elif f32:
            tensors[name] = ("F32", list(w.shape), w.numpy().astype("<f4").tobytes())
        else:
            tensors[name] = ("BF16", list(w.shape), bf16_bytes(w))
    return tensors


# ------------------------------------------------------------------------------ encoders
def bf16_bytes(t: torch.Tensor) -> bytes:
    return t.to(torch.bfloat16).view(torch.int16).numpy().tobytes()


def e4m3_table() -> np.ndarray:
    vals = np.zeros(256, dtype=np.float64)
    for b in range(256):
        e, m = (b >> 3) & 15, b & 7
        mag = m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
        vals[b] = np.nan if (e == 15 and m == 7) else (-mag if b & 0x80 else mag)
    return vals


def to_e4m3(x: np.ndarray) -> np.ndarray:
    """Nearest E4M3FN code per element (|x| <= 448)."""
    table = e4m3_table()
    pos = np.array([b for b in range(128) if not np.isnan(table[b])], dtype=np.int64)
    pv = table[pos]
    a = np.abs(x).astype(np.float64)
    i = np.clip(np.searchsorted(pv, a), 1, len(pv) - 1)
    lo, hi = pv[i - 1], pv[i]
    code = np.where(a - lo <= hi - a, pos[i - 1], pos[i]).astype(np.uint8)
    return np.where(x < 0, code | 0x80, code).astype(np.uint8)


def fp8_block(w: np.ndarray, block: int = 128):
    """(e4m3 codes, f32 scale_inv [ceil(M/b), ceil(N/b)]) with W ~ fp8 * scale."""
    m, n = w.shape
    sm, sn = -(-m // block), -(-n // block)
    scales = np.zeros((sm, sn), dtype=np.float32)
    q = np.zeros((m, n), dtype=np.uint8)
    for i in range(sm):
        for j in range(sn):
            blk = w[i * block:(i + 1) * block, j * block:(j + 1) * block]
            s = max(float(np.abs(blk).max()), 1e-12) / 448.0
            scales[i, j] = s
            q[i * block:(i + 1) * block, j * block:(j + 1) * block] = to_e4m3(blk / s)
    return q, scales


E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float64)


def mxfp4(w: np.ndarray):
    """(packed U8 [M, N/2], E8M0 scales U8 [M, N/32]); even column in the low nibble."""
    m, n = w.shape
    g = w.reshape(m, n // 32, 32).astype(np.float64)
    amax = np.maximum(np.abs(g).max(-1), 1e-30)
    e = np.clip(np.ceil(np.log2(amax / 6.0)), -127, 127).astype(np.int64)
    scaled = g / (2.0 ** e)[..., None]
    a = np.abs(scaled)
    code = np.abs(a[..., None] - E2M1).argmin(-1).astype(np.uint8)
    code = np.where(scaled < 0, code | 8, code).reshape(m, n)
    packed = (code[:, 0::2] | (code[:, 1::2] << 4)).astype(np.uint8)
    return packed, (e + 127).astype(np.uint8)


# ------------------------------------------------------------------------------ writer
def write_safetensors(path: str, tensors: dict) -> None:
    """tensors: name -> (dtype string, shape, bytes); the reference writer's layout."""
    header, off, blobs = {}, 0, []
    for name in sorted(tensors):
        dtype, shape, data = tensors[name]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def write_sharded(out: str, tensors: dict, n_shards: int = 2) -> None:
    names = sorted(tensors)
    weight_map = {}
    for s in range(n_shards):
        file = f"model-{s + 1:05d}-of-{n_shards:05d}.safetensors"
        part = {n: tensors[n] for i, n in enumerate(names) if i % n_shards == s}
        write_safetensors(os.path.join(out, file), part)
        weight_map.update({n: file for n in part})
    total = sum(len(v[2]) for v in tensors.values())
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)


def write_tokenizer(out: str, vocab: int, specials: list) -> None:
    n_base = vocab - len(specials)
    lines = [base64.b64encode(bytes([i])).decode() + f" {i}" for i in range(256)]
    merges = [b"th", b"he", b"in", b"er", b"an", b"the", b" t", b"re"]
    for i, m in enumerate(merges[:max(0, n_base - 256)]):
        lines.append(base64.b64encode(m).decode() + f" {256 + i}")
    n_ranks = len(lines)
    with open(os.path.join(out, "tiktoken.model"), "w") as f:
        f.write("\n".join(lines) + "\n")
    added = {str(vocab - len(specials) + i): {"content": s, "special": True} for i, s in enumerate(specials)}
    assert n_ranks <= vocab - len(specials)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"added_tokens_decoder": added, "tokenizer_class": "TikTokenTokenizer"}, f, indent=1)


def random_weights(cfg: dict, gen: torch.Generator) -> dict:
    """name -> float32 tensor for every text tensor (trunk and routed experts), no prefix."""
    out = {}
    for name, shape in sorted(trunk_shapes(cfg).items()):
        if name.endswith("norm.weight") or name.endswith("_norm.weight") or "layernorm" in name:
            t = 1.0 + 0.1 * (torch.rand(shape, generator=gen) * 2 - 1)
        elif name.endswith("A_log"):
            t = 0.5 * (torch.rand(shape, generator=gen) * 2 - 1)
        elif name.endswith("res_proj.weight"):
            t = 0.3 * torch.randn(shape, generator=gen)
        else:
            fan_in = shape[-1] if len(shape) > 1 else 1
            t = torch.randn(shape, generator=gen) / (fan_in ** 0.5) if len(shape) > 1 else \
                0.1 * torch.randn(shape, generator=gen)
        out[name] = t
    lat = cfg.get("routed_expert_hidden_size") or cfg["hidden_size"]
    inter, E = cfg["moe_intermediate_size"], cfg["num_experts"]
    for layer in range(cfg["first_k_dense_replace"], cfg["num_hidden_layers"]):
        for e in range(E):
            p = f"model.layers.{layer}.block_sparse_moe.experts.{e}."
            out[p + "w1.weight"] = torch.randn(inter, lat, generator=gen) / lat ** 0.5
            out[p + "w3.weight"] = torch.randn(inter, lat, generator=gen) / lat ** 0.5
            out[p + "w2.weight"] = torch.randn(lat, inter, generator=gen) / inter ** 0.5
    return out


def deepseek_names(name: str, cfg: dict) -> str:
    """Kimi-style names (what trunk_shapes lists) -> DeepSeek-V3 checkpoint names."""
    if ".block_sparse_moe." in name:
        name = name.replace(".block_sparse_moe.", ".mlp.")
        name = name.replace(".w1.weight", ".gate_proj.weight").replace(".w3.weight", ".up_proj.weight")
        name = name.replace(".w2.weight", ".down_proj.weight")
    return name


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", required=True, choices=["kimi-linear", "k3", "deepseek-v3", "glm"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--size", default="small", choices=["small", "bench", "bench2x"])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    cfg = config_for(args.arch, args.size)
    text = cfg.get("text_config", cfg)
    gen = torch.Generator().manual_seed(args.seed)
    tensors = {}
    if args.arch == "glm":
        tensors = glm_tensors(cfg, gen)
        write_sharded(args.out, tensors, 2)
        with open(os.path.join(args.out, "config.json"), "w") as f:
            json.dump(cfg, f, indent=1)
        write_glm_tokenizer(args.out)
        print(f"wrote {args.out}: {len(tensors)} tensors, {sum(len(v[2]) for v in tensors.values()) / 1e6:.1f} MB")
        return 0
    if args.arch == "deepseek-v3":
        # trunk_shapes speaks Kimi keys; give it the normalised view (all layers MLA, no KDA).
        kcfg = dict(text, num_experts=text["n_routed_experts"], num_shared_experts=text["n_shared_experts"],
                    linear_attn_config={"num_heads": 1, "head_dim": 1, "short_conv_kernel_size": 4,
                                        "kda_layers": []})
        weights = random_weights(kcfg, gen)
        # One MTP layer (index num_hidden_layers): the converter must drop it.
        L = text["num_hidden_layers"]
        weights[f"model.layers.{L}.eh_proj.weight"] = torch.randn(text["hidden_size"], 2 * text["hidden_size"], generator=gen) * 0.05
        weights[f"model.layers.{L}.enorm.weight"] = torch.ones(text["hidden_size"])
        for name, w in weights.items():
            hf = deepseek_names(name, cfg)
            fp8 = w.dim() == 2 and not any(k in hf for k in ("embed_tokens", "lm_head", "mlp.gate.weight"))
            if fp8:
                q, s = fp8_block(w.numpy().astype(np.float32))
                tensors[hf] = ("F8_E4M3", list(w.shape), q.tobytes())
                tensors[hf + "_scale_inv"] = ("F32", list(s.shape), s.astype("<f4").tobytes())
            elif hf.endswith("e_score_correction_bias"):
                tensors[hf] = ("F32", list(w.shape), w.numpy().astype("<f4").tobytes())
            else:
                tensors[hf] = ("BF16", list(w.shape), bf16_bytes(w))
        specials = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"]
    else:
        weights = random_weights(text, gen)
        prefix = "language_model." if args.arch == "k3" else ""
        for name, w in weights.items():
            if args.arch == "k3" and ".experts." in name:
                packed, scales = mxfp4(w.numpy().astype(np.float32))
                base = prefix + name[:-len(".weight")]
                tensors[base + ".weight_packed"] = ("U8", list(packed.shape), packed.tobytes())
                tensors[base + ".weight_scale"] = ("U8", list(scales.shape), scales.tobytes())
            else:
                tensors[prefix + name] = ("BF16", list(w.shape), bf16_bytes(w))
        specials = K3_SPECIALS if args.arch == "k3" else KIMI_SPECIALS
    write_sharded(args.out, tensors, 2)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    write_tokenizer(args.out, text["vocab_size"], specials)
    print(f"wrote {args.out}: {len(tensors)} tensors, {sum(len(v[2]) for v in tensors.values()) / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
