"""Independent reader of WASTE v0 containers (waste-v0-reference.md section 1), numpy only.

Written from the format notes, not from the C++ reader, so that the differential test compares
two independent readings of the same bytes. Everything is dequantized to float32 arrays:
  * trunk tensors (F32 / Q8G / Q4G / Q3G, fp16 group scales, subnormal scales kept),
  * codebooks (positional records, fp16 decode that FLUSHES subnormals, as the v0 engine does),
  * expert records (VQ3R/VQ2R 8-bit indices blocked by 64 rows, VQ4P 6-bit packed), expanded
    to dense W[r][8v+j] = scale_r * sum_s C_s[idx(r, v, s)][j].
Errors raise ContainerError with the path / tensor / layer / expert in the message.
"""
from __future__ import annotations

import collections
import json
import os
import struct
import zlib

import numpy as np

FMT_F32, FMT_F16, FMT_Q8G, FMT_Q4G, FMT_VQ3R, FMT_VQ2R, FMT_SUB1, FMT_Q3G, FMT_VQ4P = range(9)
EXPERT_MAGIC = 0x50584557  # "WEXP"
CODEBOOK_MAGIC = 0x4B424357  # "WCBK"
RECORD_HEADER = struct.Struct("<IHHBBHHHIIIIIIII")  # 48 bytes, section 1.7
INDEX_BLOCK = 64  # the engine hard-codes 64 whatever the manifest's index_block says
KIND_NAMES = ("gate", "up", "down")


class ContainerError(Exception):
    pass


def fp16_to_f32(bits: np.ndarray, flush_subnormals: bool = False) -> np.ndarray:
    """fp16 bit patterns -> float32, the v0 engine's way.

    Trunk and record scales keep subnormals (m * 2^-24); codebooks flush them to +-0.
    Exponent 31 is not special-cased: it decodes as an ordinary (huge) normal number.
    """
    b = np.asarray(bits, dtype=np.uint16).astype(np.uint32)
    sign = np.where(b >> 15, -1.0, 1.0)
    exp = ((b >> 10) & 31).astype(np.int32)
    man = (b & 1023).astype(np.float64)
    normal = (1.0 + man / 1024.0) * np.exp2(exp.astype(np.float64) - 15.0)
    sub = np.zeros_like(man) if flush_subnormals else man * 2.0 ** -24
    return (sign * np.where(exp == 0, sub, normal)).astype(np.float32)


class ModelConfig:
    """The config keys of section 1.3. Presence-tested booleans are read as booleans
    (a key set to false counts as false), as the notes recommend for a compatible reader."""

    def __init__(self, cfg: dict):
        def num(key, default, cast=int):
            v = cfg.get(key, default)
            return default if v is None else cast(v)

        self.raw = cfg
        self.n_layers = num("num_hidden_layers", 0)
        self.hidden = num("hidden_size", 0)
        self.n_experts = num("num_experts", 0)
        self.top_k = num("num_experts_per_token", 0)
        self.moe_inter = num("moe_intermediate_size", 0)
        self.dense_inter = num("intermediate_size", 0)
        self.n_shared = num("num_shared_experts", 0)
        self.first_dense = num("first_k_dense_replace", 0)
        self.vocab = num("vocab_size", 0)
        self.n_heads = num("num_attention_heads", 0)
        self.kv_lora = num("kv_lora_rank", 0)
        self.q_lora = num("q_lora_rank", 0)
        self.qk_nope = num("qk_nope_head_dim", 0)
        self.qk_rope = num("qk_rope_head_dim", 0)
        self.v_head = num("v_head_dim", 0)
        self.eps = num("rms_norm_eps", 1e-5, float)
        self.routed_scale = num("routed_scaling_factor", 1.0, float)
        self.renorm = bool(cfg.get("moe_renormalize", False))
        self.latent_dim = num("routed_expert_hidden_size", 0)
        self.latent_norm = bool(cfg.get("latent_moe_use_norm", False))
        self.attn_res_block = num("attn_res_block_size", 0)
        self.mla_output_gate = bool(cfg.get("mla_use_output_gate", False))
        self.act_situ = cfg.get("hidden_act") == "situ"
        self.situ_beta = num("activation_situ_beta", 1.0, float)
        self.situ_linear_beta = num("activation_situ_linear_beta", 0.0, float)
        lac = cfg.get("linear_attn_config") or {}
        self.full_rank_gate = bool(lac.get("use_full_rank_gate", False))
        self.gate_lower_bound = float(lac.get("gate_lower_bound", 0.0) or 0.0)
        self.kda_heads = int(lac.get("num_heads", 0) or 0)
        self.kda_dim = int(lac.get("head_dim", 0) or 0)
        self.conv_k = int(lac.get("short_conv_kernel_size", 4) or 4)
        # DeepSeek-V3 family (docs/design/deepseek.md): rotary on the qk_rope dims unless
        # mla_use_nope is true; absent, it is on for DeepSeek architectures only.
        arch = (cfg.get("architectures") or [""])[0] or ""
        outer = cfg.get("_outer") or {}
        outer_arch = (outer.get("architectures") or [""])[0] or ""
        deepseek = ("Deepseek" in arch or "Deepseek" in outer_arch
                    or cfg.get("model_type") in ("deepseek_v3", "deepseek_v2", "kimi_k2"))
        nope = cfg.get("mla_use_nope")
        self.rope = (not nope if nope is not None else deepseek) and self.qk_rope > 0
        self.rope_theta = num("rope_theta", 10000.0, float)
        rs = cfg.get("rope_scaling") or {}
        self.yarn = self.rope and (rs.get("type") or rs.get("rope_type")) == "yarn"
        self.yarn_factor = float(rs.get("factor", 1.0)) if self.yarn else 1.0
        self.yarn_orig = int(rs.get("original_max_position_embeddings", 0)) if self.yarn else 0
        self.yarn_beta_fast = float(rs.get("beta_fast", 32.0))
        self.yarn_beta_slow = float(rs.get("beta_slow", 1.0))
        self.yarn_mscale_all_dim = float(rs.get("mscale_all_dim", 0.0) or 0.0)
        self.scoring = cfg.get("scoring_func") or cfg.get("moe_router_activation_func") or "sigmoid"
        self.n_group = int(cfg.get("n_group") or cfg.get("num_expert_group") or 1)
        self.topk_group = int(cfg.get("topk_group") or self.n_group)
        if cfg.get("topk_method") == "greedy" or cfg.get("use_grouped_topk") is False:
            self.n_group = self.topk_group = 1
        kda_1based = set(int(i) for i in lac.get("kda_layers", []) or [])
        self.is_kda = [(layer + 1) in kda_1based for layer in range(self.n_layers)]
        # GLM-5.3-Flash (transformers glm5_next): the attention kind per layer from layer_types
        # ("linear_attention" = KDA, anything else MLA), the dense layers from mlp_layer_types.
        layer_types = cfg.get("layer_types")
        if layer_types is not None:
            self.is_kda = [t == "linear_attention" for t in layer_types[:self.n_layers]]
        mlp_types = cfg.get("mlp_layer_types")
        if mlp_types is not None:
            self.first_dense = sum(1 for t in mlp_types[:self.n_layers] if t == "dense")
        # mHC, the clamped SwiGLU and the DSA indexer's budget (absent: off).
        self.hc_mult = num("hc_mult", 0)
        self.hc_iters = num("hc_sinkhorn_iters", 20)
        self.hc_eps = num("hc_eps", 1e-6, float)
        self.swiglu_limit = num("swiglu_limit", 0.0, float)
        self.index_topk = num("index_topk", 0)
        self.index_n_heads = num("index_n_heads", 0)
        self.index_head_dim = num("index_head_dim", 0)
        self.index_kpool = num("index_kpool", 0)
        self.index_tail = bool(cfg.get("index_kpool_always_select_tail", True))
        if self.hidden < 1 or self.vocab < 1 or self.n_layers < 1:
            raise ContainerError(
                f"config: hidden_size={self.hidden}, vocab_size={self.vocab}, "
                f"num_hidden_layers={self.n_layers} must all be >= 1")

    @property
    def expert_in(self) -> int:
        return self.latent_dim if self.latent_dim > 0 else self.hidden

    def is_moe(self, layer: int) -> bool:
        return self.n_experts > 0 and layer >= self.first_dense


class TrunkEntry:
    def __init__(self, d: dict):
        self.name = d["name"]
        self.fmt = int(d["fmt"])
        self.off = int(d["off"])
        self.shape = [int(s) for s in d["shape"]]
        self.group = int(d.get("group", 128))
        self.scale_off = int(d.get("scale_off", 0))
        self.cols = self.shape[-1]
        self.rows = int(np.prod(self.shape[:-1])) if len(self.shape) > 1 else 1
        self.ng = -(-self.cols // self.group)
        self.np_cols = self.ng * self.group

    @property
    def row_stride(self) -> int:
        if self.fmt == FMT_F32:
            return self.cols * 4
        if self.fmt == FMT_Q8G:
            return self.np_cols
        if self.fmt == FMT_Q4G:
            return self.np_cols // 2
        if self.fmt == FMT_Q3G:
            return (self.np_cols * 3 + 7) // 8 + 1
        raise ContainerError(f"trunk tensor {self.name}: unsupported fmt {self.fmt}")


class Container:
    def __init__(self, path: str, expert_cache_size: int = 48, verify_crc: bool = True):
        self.path = path
        mpath = os.path.join(path, "manifest.json")
        try:
            with open(mpath, "rb") as f:
                self.manifest = json.load(f)
        except (OSError, ValueError) as e:
            raise ContainerError(f"{mpath}: {e}") from e
        m = self.manifest
        if m.get("format_version") != 0:
            raise ContainerError(f"{mpath}: format_version {m.get('format_version')!r} is not 0")
        cfg = m.get("config", {})
        if isinstance(cfg.get("text_config"), dict):
            # A raw nested config: the text model's keys are inside; prefix defaults accordingly.
            cfg = cfg["text_config"]
            self.prefix = m.get("tensor_prefix", "language_model.")
        else:
            self.prefix = m.get("tensor_prefix", "")
        self.config = ModelConfig(cfg)
        eq = m.get("expert_quant", {}) or {}
        self.stages = int(eq.get("stages", 3))
        self.vec_dim = int(eq.get("vec_dim", 8))
        self.entries = int(eq.get("entries", 256))
        self.index_bits = int(eq.get("index_bits", 8))
        if self.index_bits == 6 and not (self.stages == 4 and self.entries == 64):
            raise ContainerError(f"{mpath}: index_bits 6 needs stages 4 and entries 64")
        self.trunk = {e["name"]: TrunkEntry(e) for e in m.get("trunk", [])}
        self.layers = {int(k): v for k, v in (m.get("layers") or {}).items()}
        self._trunk_map = None
        self._tensor_cache = {}
        self._books = None
        self._expert_cache = collections.OrderedDict()
        self._expert_cache_size = expert_cache_size
        self._bank_files = {}
        self.verify_crc = verify_crc

    # ---------------------------------------------------------------- trunk
    def _trunk_bytes(self) -> np.ndarray:
        if self._trunk_map is None:
            p = os.path.join(self.path, "trunk.bin")
            try:
                self._trunk_map = np.memmap(p, dtype=np.uint8, mode="r")
            except (OSError, ValueError) as e:
                raise ContainerError(f"{p}: {e}") from e
        return self._trunk_map

    def has(self, name: str) -> bool:
        return (self.prefix + name) in self.trunk

    def entry(self, name: str) -> TrunkEntry:
        full = self.prefix + name
        if full not in self.trunk:
            raise ContainerError(f"{self.path}: trunk tensor {full} is missing")
        return self.trunk[full]

    def _slice(self, e: TrunkEntry, off: int, n: int) -> np.ndarray:
        buf = self._trunk_bytes()
        if off < 0 or off + n > buf.size:
            raise ContainerError(f"trunk tensor {e.name}: bytes [{off}, {off + n}) "
                                 f"outside trunk.bin ({buf.size} bytes)")
        return np.asarray(buf[off:off + n])

    def _dequant_rows(self, e: TrunkEntry, r0: int, r1: int) -> np.ndarray:
        """Rows [r0, r1) of a trunk tensor as float32 [r1-r0, cols]."""
        n = r1 - r0
        if e.fmt == FMT_F32:
            raw = self._slice(e, e.off + r0 * e.cols * 4, n * e.cols * 4)
            return raw.view("<f4").reshape(n, e.cols).astype(np.float32)
        stride = e.row_stride
        pay = self._slice(e, e.off + r0 * stride, n * stride).reshape(n, stride)
        sc = self._slice(e, e.scale_off + r0 * e.ng * 2, n * e.ng * 2).view("<u2")
        scales = fp16_to_f32(sc).reshape(n, e.ng)
        if e.fmt == FMT_Q8G:
            q = pay.view(np.int8).astype(np.float32)
        elif e.fmt == FMT_Q4G:
            q = np.empty((n, e.np_cols), dtype=np.float32)
            q[:, 0::2] = (pay & 0x0F).astype(np.float32) - 8.0  # even element: low nibble
            q[:, 1::2] = (pay >> 4).astype(np.float32) - 8.0    # odd element: high nibble
        elif e.fmt == FMT_Q3G:
            bit = np.arange(e.np_cols, dtype=np.int64) * 3
            lo_b, sh = bit >> 3, (bit & 7).astype(np.uint16)
            p16 = pay.astype(np.uint16)
            v = (p16[:, lo_b] >> sh) | (p16[:, lo_b + 1] << (8 - sh))
            q = (v & 7).astype(np.float32) - 4.0
        else:
            raise ContainerError(f"trunk tensor {e.name}: unsupported fmt {e.fmt}")
        w = q.reshape(n, e.ng, e.group) * scales[:, :, None]
        return w.reshape(n, e.np_cols)[:, :e.cols].astype(np.float32)

    def tensor(self, name: str) -> np.ndarray:
        """Whole trunk tensor (name without the prefix), dequantized, in its HF shape."""
        if name not in self._tensor_cache:
            e = self.entry(name)
            out = np.empty((e.rows, e.cols), dtype=np.float32)
            chunk = max(1, (1 << 24) // max(1, e.cols))  # bound the int temporaries
            for r0 in range(0, e.rows, chunk):
                r1 = min(e.rows, r0 + chunk)
                out[r0:r1] = self._dequant_rows(e, r0, r1)
            self._tensor_cache[name] = out.reshape(e.shape)
        return self._tensor_cache[name]

    def tensor_row(self, name: str, row: int) -> np.ndarray:
        """One row (e.g. an embedding), without dequantizing the whole table."""
        e = self.entry(name)
        if not 0 <= row < e.rows:
            raise ContainerError(f"trunk tensor {e.name}: row {row} outside 0..{e.rows - 1}")
        return self._dequant_rows(e, row, row + 1)[0]

    def is_f32(self, name: str) -> bool:
        return self.has(name) and self.entry(name).fmt == FMT_F32

    # ------------------------------------------------------------ codebooks
    def codebooks(self) -> np.ndarray:
        """[n_books, entries, vec_dim] float32, addressed by position (headers ignored)."""
        if self._books is None:
            p = os.path.join(self.path, "codebooks.bin")
            try:
                raw = np.fromfile(p, dtype=np.uint8)
            except OSError as e:
                raise ContainerError(f"{p}: {e}") from e
            rec = 16 + self.entries * self.vec_dim * 2
            nb = raw.size // rec
            recs = raw[:nb * rec].reshape(nb, rec)
            bits = recs[:, 16:].copy().view("<u2")
            self._books = fp16_to_f32(bits, flush_subnormals=True).reshape(
                nb, self.entries, self.vec_dim)
        return self._books

    # --------------------------------------------------------------- experts
    def expert_shapes(self):
        c = self.config
        lat = c.expert_in
        return [(c.moe_inter, lat), (c.moe_inter, lat), (lat, c.moe_inter)]

    def _record(self, layer: int, expert: int) -> bytes:
        info = self.layers.get(layer)
        if info is None:
            raise ContainerError(f"{self.path}: layer {layer} has no expert bank")
        n_exp = int(info["experts"])
        rec_bytes = int(info["bytes"]) // n_exp
        if not 0 <= expert < n_exp:
            raise ContainerError(f"expert {expert} of layer {layer}: id outside 0..{n_exp - 1}")
        p = os.path.join(self.path, info["file"])
        f = self._bank_files.get(layer)
        if f is None:
            try:
                f = self._bank_files[layer] = open(p, "rb")
            except OSError as e:
                raise ContainerError(f"expert bank {p}: {e}") from e
        f.seek(expert * rec_bytes)
        data = f.read(rec_bytes)
        if len(data) != rec_bytes:
            raise ContainerError(f"expert {expert} of layer {layer}: short read "
                                 f"({len(data)} of {rec_bytes} bytes) from {p}")
        return data

    def _indices(self, data: bytes, off: int, rows: int, cols: int) -> np.ndarray:
        """Index array [rows, cols/vec_dim, stages] of one matrix at byte offset off."""
        nvr = cols // self.vec_dim
        nb = -(-rows // INDEX_BLOCK)
        run = 3 if self.index_bits == 6 else self.stages
        raw = np.frombuffer(data, dtype=np.uint8, count=nb * nvr * INDEX_BLOCK * run, offset=off)
        # On disk: [row_block][v][row_in_block][run]; bring rows together: [row][v][run].
        blk = raw.reshape(nb, nvr, INDEX_BLOCK, run).transpose(0, 2, 1, 3)
        blk = blk.reshape(nb * INDEX_BLOCK, nvr, run)[:rows]
        if self.index_bits != 6:
            return blk
        b0, b1, b2 = (blk[..., i].astype(np.uint16) for i in range(3))
        idx = np.empty((rows, nvr, 4), dtype=np.uint8)
        idx[..., 0] = b0 & 63
        idx[..., 1] = ((b0 >> 6) | (b1 << 2)) & 63
        idx[..., 2] = ((b1 >> 4) | (b2 << 4)) & 63
        idx[..., 3] = b2 >> 2
        return idx

    def expert_raw(self, layer: int, expert: int):
        """Validated record contents: (codebook_id, [idx per kind: uint8 [rows, nvr, stages]],
        [fp16-decoded row scales per kind])."""
        data = self._record(layer, expert)
        where = f"expert {expert} of layer {layer}"
        if len(data) < RECORD_HEADER.size:
            raise ContainerError(f"{where}: record shorter than its header")
        (magic, h_layer, h_expert, fmt, _flags, cb_id, lowrank, _r0, blocks4k,
         gate_off, up_off, down_off, scale_off, crc, _r1a, _r1b) = RECORD_HEADER.unpack_from(data)
        if magic != EXPERT_MAGIC:
            raise ContainerError(f"{where}: bad magic 0x{magic:08x}")
        if h_layer != layer or h_expert != expert:
            raise ContainerError(f"{where}: header says expert {h_expert} of layer {h_layer}")
        if blocks4k * 4096 != len(data):
            raise ContainerError(f"{where}: rec_4k_blocks {blocks4k} != {len(data)} / 4096")
        want_fmt = (FMT_VQ4P,) if self.index_bits == 6 else (FMT_VQ3R, FMT_VQ2R)
        if fmt not in want_fmt or lowrank != 0:
            raise ContainerError(f"{where}: fmt {fmt} / lowrank_id {lowrank} not accepted")
        if not gate_off == 48 < up_off < down_off < scale_off <= len(data):
            raise ContainerError(f"{where}: offsets {gate_off},{up_off},{down_off},{scale_off} "
                                 "are not ordered")
        shapes = self.expert_shapes()
        n_scales = sum(r for r, _ in shapes)
        end = scale_off + 2 * n_scales
        if end > len(data):
            raise ContainerError(f"{where}: scales end at {end}, record has {len(data)} bytes")
        if self.verify_crc and zlib.crc32(data[48:end]) & 0xFFFFFFFF != crc:
            raise ContainerError(f"{where}: crc32 mismatch (header 0x{crc:08x})")
        n_books = self.codebooks().shape[0]
        if cb_id + 3 * self.stages > n_books:
            raise ContainerError(f"{where}: codebook_id {cb_id} + {3 * self.stages} books "
                                 f"exceeds {n_books} books")
        scales = fp16_to_f32(np.frombuffer(data, dtype="<u2", count=n_scales, offset=scale_off))
        idx, sc, s0 = [], [], 0
        for (rows, cols), off in zip(shapes, (gate_off, up_off, down_off)):
            idx.append(self._indices(data, off, rows, cols))
            sc.append(scales[s0:s0 + rows])
            s0 += rows
        return cb_id, idx, sc

    def expert(self, layer: int, expert: int):
        """(W_gate, W_up, W_down) float32 dense matrices of one routed expert."""
        key = (layer, expert)
        hit = self._expert_cache.get(key)
        if hit is not None:
            self._expert_cache.move_to_end(key)
            return hit
        cb_id, idx, scales = self.expert_raw(layer, expert)
        books = self.codebooks()
        mats = []
        for kind in range(3):
            rows, nvr, _ = idx[kind].shape
            w = np.zeros((rows, nvr, self.vec_dim), dtype=np.float32)
            for s in range(self.stages):
                w += books[cb_id + kind * self.stages + s][idx[kind][..., s]]
            mats.append((w.reshape(rows, nvr * self.vec_dim) * scales[kind][:, None])
                        .astype(np.float32))
        result = tuple(mats)
        self._expert_cache[key] = result
        while len(self._expert_cache) > self._expert_cache_size:
            self._expert_cache.popitem(last=False)
        return result

    def close(self):
        for f in getattr(self, "_bank_files", {}).values():
            f.close()
        getattr(self, "_bank_files", {}).clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()
