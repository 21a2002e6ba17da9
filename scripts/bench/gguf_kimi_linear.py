#!/usr/bin/env python3
"""A random-weight GGUF of llama.cpp's `kimi-linear` architecture at a WASTE container's shape (issue 26).

For speed comparisons only: the weights are noise, the tokenizer is a byte-level stub. The shape (layers, which
layers are MLA and which KDA, dense first layers, experts, top-k, widths, vocab) is read from the container's
manifest.json ("config", the Hugging Face config the container was made from).

Trunk tensors are written as F16/F32, the way llama.cpp's HF converter writes them; `llama-quantize` then gives
them the target recipe's types. Routed-expert tensors are written directly as random but valid quant blocks of
the type the recipe would pick for them, so `llama-quantize` copies them unchanged (it refuses to requantize):

  --recipe q4_k_m   gate/up Q4_K; down Q6_K on the layers Q4_K_M gives more bits, Q4_K elsewhere
  --recipe iq3_xxs  gate/up/down IQ3_XXS (quantize with the all-ones importance matrix of --imatrix-out)

Needs numpy and gguf-py from the llama.cpp tree that will read the file (PYTHONPATH=LLAMA_CPP_DIR/gguf-py):
tensor names and metadata keys are that version's.
"""
import argparse
import json
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

try:
    import gguf
    from gguf import GGMLQuantizationType as QType
except ImportError as e:  # pragma: no cover
    sys.exit(f"gguf_kimi_linear.py: cannot import gguf ({e}); set PYTHONPATH=LLAMA_CPP_DIR/gguf-py")


@dataclass(frozen=True)
class Shape:
    layers: int
    mla: frozenset          # 0-based indices of the full-attention (MLA) layers
    dense_first: int        # leading layers with a dense FFN instead of experts
    hidden: int
    ffn_dense: int
    heads: int
    kda_head_dim: int
    conv_kernel: int
    kv_lora: int
    qk_nope: int
    qk_rope: int
    v_head: int
    experts: int
    top_k: int
    shared: int
    ffn_expert: int
    vocab: int
    rms_eps: float
    routed_scale: float


def read_shape(container: Path) -> Shape:
    manifest = container / "manifest.json"
    try:
        cfg = json.loads(manifest.read_text())["config"]
    except (OSError, KeyError, json.JSONDecodeError) as e:
        sys.exit(f"gguf_kimi_linear.py: {manifest}: no readable config ({e})")
    if cfg.get("model_type") != "kimi_linear":
        sys.exit(f"gguf_kimi_linear.py: {manifest}: model_type is {cfg.get('model_type')!r}, not 'kimi_linear'")
    lin = cfg["linear_attn_config"]
    if lin["num_heads"] != cfg["num_attention_heads"]:
        sys.exit(f"gguf_kimi_linear.py: {manifest}: KDA heads {lin['num_heads']} != MLA heads "
                 f"{cfg['num_attention_heads']} (llama.cpp's kimi-linear has one head count)")
    return Shape(
        layers=cfg["num_hidden_layers"],
        mla=frozenset(i - 1 for i in lin["full_attn_layers"]),   # the config counts from 1
        dense_first=cfg.get("first_k_dense_replace", 0),
        hidden=cfg["hidden_size"], ffn_dense=cfg["intermediate_size"],
        heads=cfg["num_attention_heads"], kda_head_dim=lin["head_dim"],
        conv_kernel=lin["short_conv_kernel_size"], kv_lora=cfg["kv_lora_rank"],
        qk_nope=cfg["qk_nope_head_dim"], qk_rope=cfg["qk_rope_head_dim"], v_head=cfg["v_head_dim"],
        experts=cfg["num_experts"], top_k=cfg["num_experts_per_token"], shared=cfg.get("num_shared_experts", 0),
        ffn_expert=cfg["moe_intermediate_size"], vocab=cfg["vocab_size"],
        rms_eps=cfg.get("rms_norm_eps", 1e-5), routed_scale=cfg.get("routed_scaling_factor", 1.0))


def q4_k_m_gives_more_bits(layer: int, layers: int) -> bool:
    """The layers whose ffn_down llama.cpp's Q4_K_M recipe stores as Q6_K (first/last eighth, every third between)."""
    eighth = layers // 8
    return layer < eighth or layer >= 7 * layers // 8 or (layer - eighth) % 3 == 2


def expert_types(recipe: str, layer: int, layers: int) -> dict:
    if recipe == "iq3_xxs":
        return dict.fromkeys(("gate", "up", "down"), QType.IQ3_XXS)
    down = QType.Q6_K if q4_k_m_gives_more_bits(layer, layers) else QType.Q4_K
    return {"gate": QType.Q4_K, "up": QType.Q4_K, "down": down}


def plan(s: Shape, recipe: str):
    """(name, ggml dims ne0.., kind) of every tensor; kind is a QType for expert blocks or a fill rule."""
    E, kda_width = s.hidden, s.heads * s.kda_head_dim
    out = [("token_embd.weight", (E, s.vocab), "f16")]
    for i in range(s.layers):
        b = f"blk.{i}."
        out.append((b + "attn_norm.weight", (E,), "ones"))
        if i in s.mla:
            out += [(b + "attn_q.weight", (E, s.heads * (s.qk_nope + s.qk_rope)), "f16"),
                    (b + "attn_kv_a_mqa.weight", (E, s.kv_lora + s.qk_rope), "f16"),
                    (b + "attn_kv_a_norm.weight", (s.kv_lora,), "ones"),
                    (b + "attn_k_b.weight", (s.qk_nope, s.kv_lora, s.heads), "f16"),
                    (b + "attn_v_b.weight", (s.kv_lora, s.v_head, s.heads), "f16"),
                    (b + "attn_output.weight", (s.heads * s.v_head, E), "f16")]
        else:
            for x in "qkv":
                out.append((b + f"attn_{x}.weight", (E, kda_width), "f16"))
                out.append((b + f"ssm_conv1d_{x}.weight", (s.conv_kernel, 1, kda_width, 1), "conv"))
            out += [(b + "ssm_f_a.weight", (E, s.kda_head_dim), "f16"),
                    (b + "ssm_f_b.weight", (s.kda_head_dim, kda_width), "f16"),
                    (b + "ssm_g_a.weight", (E, s.kda_head_dim), "f16"),
                    (b + "ssm_g_b.weight", (s.kda_head_dim, kda_width), "f16"),
                    (b + "ssm_beta.weight", (E, s.heads), "f16"),
                    (b + "ssm_a", (1, s.heads, 1, 1), "decay"),
                    (b + "ssm_dt.bias", (kda_width,), "zeros"),
                    (b + "ssm_norm.weight", (s.kda_head_dim,), "ones"),
                    (b + "attn_output.weight", (kda_width, E), "f16")]
        out.append((b + "ffn_norm.weight", (E,), "ones"))
        if i < s.dense_first:
            out += [(b + "ffn_gate.weight", (E, s.ffn_dense), "f16"),
                    (b + "ffn_up.weight", (E, s.ffn_dense), "f16"),
                    (b + "ffn_down.weight", (s.ffn_dense, E), "f16")]
            continue
        t = expert_types(recipe, i, s.layers)
        out += [(b + "ffn_gate_inp.weight", (E, s.experts), "f32"),
                (b + "exp_probs_b.bias", (s.experts,), "zeros"),
                (b + "ffn_gate_exps.weight", (E, s.ffn_expert, s.experts), t["gate"]),
                (b + "ffn_up_exps.weight", (E, s.ffn_expert, s.experts), t["up"]),
                (b + "ffn_down_exps.weight", (s.ffn_expert, E, s.experts), t["down"])]
        if s.shared:
            w = s.ffn_expert * s.shared
            out += [(b + "ffn_gate_shexp.weight", (E, w), "f16"),
                    (b + "ffn_up_shexp.weight", (E, w), "f16"),
                    (b + "ffn_down_shexp.weight", (w, E), "f16")]
    out += [("output_norm.weight", (E,), "ones"), ("output.weight", (E, s.vocab), "f16")]
    return out


def add_metadata(w, s: Shape):
    w.add_name("kimi-linear random weights (WASTE issue 26 side by side)")
    w.add_context_length(1 << 20)
    w.add_block_count(s.layers)
    w.add_embedding_length(s.hidden)
    w.add_feed_forward_length(s.ffn_dense)
    w.add_head_count(s.heads)
    w.add_head_count_kv([1 if i in s.mla else 0 for i in range(s.layers)])   # 0 marks a KDA layer
    w.add_key_length(s.kv_lora + s.qk_rope)
    w.add_value_length(s.kv_lora)
    w.add_key_length_mla(s.qk_nope + s.qk_rope)
    w.add_value_length_mla(s.v_head)
    w.add_kv_lora_rank(s.kv_lora)
    w.add_rope_dimension_count(s.qk_rope)
    w.add_layer_norm_rms_eps(s.rms_eps)
    w.add_expert_count(s.experts)
    w.add_expert_used_count(s.top_k)
    w.add_expert_shared_count(s.shared)
    w.add_expert_feed_forward_length(s.ffn_expert)
    w.add_leading_dense_block_count(s.dense_first)
    w.add_expert_weights_scale(s.routed_scale)
    w.add_expert_weights_norm(True)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_ssm_conv_kernel(s.conv_kernel)
    w.add_kda_head_dim(s.kda_head_dim)
    w.add_vocab_size(s.vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    # Byte-level BPE stub: the 256 byte symbols of GPT-2's mapping, one merge, then placeholders up to the vocab.
    printable = {*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)}
    shifted = iter(range(0x100, 0x200))     # the other bytes get the next code points above 255, in byte order
    tokens = [chr(b) if b in printable else chr(next(shifted)) for b in range(256)] + ["\u0120\u0120"]
    tokens += [f"<r{i}>" for i in range(len(tokens), s.vocab)]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([1] * s.vocab)
    w.add_token_merges(["\u0120 \u0120"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)


class Filler:
    """Tensor contents. Quant blocks: random bytes with each block's f16 scale(s) pinned to small finite values
    (so no NaN/Inf reaches the kernels); a 32 MiB random pattern is repeated, speed does not depend on values."""

    # byte offset of the f16 super-block scale(s) inside one block, and the values written there
    SCALES = {QType.Q4_K: ((0, 2.0e-5), (2, 1.5e-4)), QType.Q6_K: ((208, 1.0e-5),), QType.IQ3_XXS: ((0, 4.0e-5),)}

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.pattern = {}

    def blocks(self, qt, nblocks: int) -> np.ndarray:
        size = gguf.GGML_QUANT_SIZES[qt][1]
        if qt not in self.pattern:
            n = (32 << 20) // size
            p = np.frombuffer(self.rng.bytes(n * size), dtype=np.uint8).reshape(n, size).copy()
            for off, val in self.SCALES[qt]:
                p[:, off:off + 2] = np.frombuffer(np.float16(val).tobytes(), dtype=np.uint8)
            self.pattern[qt] = p
        p = self.pattern[qt]
        reps = -(-nblocks // len(p))
        return np.tile(p, (reps, 1))[:nblocks]

    def dense(self, kind: str, shape) -> np.ndarray:
        n = int(np.prod(shape))
        if kind == "f16":
            a = np.empty(n, dtype=np.float16)
            for lo in range(0, n, 1 << 25):
                hi = min(n, lo + (1 << 25))
                a[lo:hi] = self.rng.standard_normal(hi - lo, dtype=np.float32) * 0.02
            return a.reshape(shape)
        if kind == "f32":
            return (self.rng.standard_normal(n, dtype=np.float32) * 0.02).reshape(shape)
        if kind == "conv":
            return (self.rng.standard_normal(n, dtype=np.float32) * 0.3).reshape(shape)
        if kind == "decay":   # A = -exp(A_log), as the converter stores it
            return (-np.exp(self.rng.uniform(0.0, 2.5, n))).astype(np.float32).reshape(shape)
        return (np.ones if kind == "ones" else np.zeros)(shape, dtype=np.float32)


def write_gguf(s: Shape, recipe: str, out: Path, seed: int):
    tensors = plan(s, recipe)
    w = gguf.GGUFWriter(str(out), "kimi-linear")
    add_metadata(w, s)
    total = 0
    for name, ne, kind in tensors:
        np_shape = tuple(reversed(ne))
        if isinstance(kind, QType):
            per, size = gguf.GGML_QUANT_SIZES[kind]
            if ne[0] % per:
                sys.exit(f"gguf_kimi_linear.py: {name}: row of {ne[0]} is not a multiple of {kind.name}'s {per}")
            nbytes = int(np.prod(ne)) // per * size
            w.add_tensor_info(name, np_shape[:-1] + (ne[0] // per * size,), np.dtype(np.uint8), nbytes, raw_dtype=kind)
        else:
            dt = np.dtype(np.float16 if kind == "f16" else np.float32)
            nbytes = int(np.prod(ne)) * dt.itemsize
            w.add_tensor_info(name, np_shape, dt, nbytes)
        total += nbytes
    print(f"{out}: {len(tensors)} tensors, {total / 2**30:.2f} GiB", flush=True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    fill, t0 = Filler(seed), time.time()
    for name, ne, kind in tensors:
        np_shape = tuple(reversed(ne))
        if isinstance(kind, QType):
            per, size = gguf.GGML_QUANT_SIZES[kind]
            data = fill.blocks(kind, int(np.prod(ne)) // per).reshape(np_shape[:-1] + (ne[0] // per * size,))
        else:
            data = fill.dense(kind, np_shape)
        w.write_tensor_data(data)
        del data
    w.close()
    print(f"{out}: written in {time.time() - t0:.0f} s", flush=True)


def write_ones_imatrix(s: Shape, recipe: str, out: Path):
    """An all-ones importance matrix (llama.cpp's legacy .dat layout) for every matrix llama-quantize may quantize:
    uniform weighting, i.e. what quantizing without data does. This llama.cpp refuses IQ3_XXS without one."""
    entries = [(name, ne[0] * (ne[2] if len(ne) > 2 else 1)) for name, ne, kind in plan(s, recipe)
               if len(ne) >= 2 and name.endswith(".weight") and kind != "conv" and "ffn_gate_inp" not in name]
    with open(out, "wb") as f:
        f.write(struct.pack("<i", len(entries)))
        for name, nval in entries:
            raw = name.encode()
            f.write(struct.pack("<i", len(raw)) + raw + struct.pack("<ii", 1, nval))
            f.write(np.ones(nval, dtype=np.float32).tobytes())
        tag = b"all-ones"
        f.write(struct.pack("<ii", 1, len(tag)) + tag)
    print(f"{out}: {len(entries)} importance entries", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--container", type=Path, required=True, help="a kimi-linear WASTE container (NAME.waste)")
    ap.add_argument("--recipe", choices=("q4_k_m", "iq3_xxs"), required=True)
    ap.add_argument("--out", type=Path, help="the F16-trunk GGUF to write (quantize it with llama-quantize)")
    ap.add_argument("--imatrix-out", type=Path, help="also write an all-ones importance matrix for this plan")
    ap.add_argument("--seed", type=int, default=26)
    ap.add_argument("--print-shape", action="store_true", help="print the shape read from the container and stop")
    a = ap.parse_args()
    s = read_shape(a.container)
    if a.print_shape:
        print(json.dumps({**s.__dict__, "mla": sorted(s.mla)}))
        return
    if a.imatrix_out:
        write_ones_imatrix(s, a.recipe, a.imatrix_out)
    if a.out:
        write_gguf(s, a.recipe, a.out, a.seed)


if __name__ == "__main__":
    main()
