"""Float64 PyTorch whole-model oracle of DeepSeek-V4.1-Flash containers (issue 29).

  v41_oracle.py CONTAINER --tokens 1,2,3 [--chunk N] [--trace OUT.json]

Reads a WASTE container (waste_container.Container: trunk tensors and the VQ3R / VQ4P expert bank
dequantized to dense float matrices; engram.json, engram-tokmap.bin and engram-L{n}.bin read
here) and runs the text model of transformers deepseek_v41 (model-families.md §2.1), written
from the maths, reusing the blocks already checked in float64 against the engine:

  * csa2_oracle: the rope schedules (inv_freq: main theta, or compress_rope_theta with YaRN, no
    mscale), rms / rope (Case.rms, Case.rope on the last qk_rope_head_dim dims as pairs), the
    top-k rule (Case.top: higher score first, the lower index on equal scores); and Case.run_stack
    as the one-shot cross-check of the stateful attention below (check_against_csa2);
  * v41_blocks_oracle: the sqrtsoftplus router (route_oracle / route_weights: p = sqrt(softplus(
    logits / gate_temp)), top-k of p + bias (bias_vl on image tokens), weights renormalised + 1e-20,
    x routed_scaling_factor), the mHC coefficients (mhc_coefficients: pre, post, Sinkhorn comb) and
    the Engram gate (engram_oracle);
  * engram_oracle: the n-gram row ids (oracle_rows) from engram.json and the compressed token map.

The model, per token: streams = hc_mult copies of the embedding; per layer: (Engram layers) the
Engram gate and update on the streams; the attention site, then the FFN site, each: its mixing
projection of the streams gives (pre, post, comb); the sublayer reads the streams collapsed with
the PREVIOUS site's pre (one-hot stream 0 for layer 0's attention), RMS-normed (input_layernorm /
post_attention_layernorm), and streams <- post * y + comb^T streams. The head collapses the
streams with the last FFN site's pre, norms them (model.norm) and applies lm_head. The FFN of
every layer is the MoE: routed experts top-k plus the shared expert, both SwiGLU with the clamp
(gate <= limit, |up| <= limit). The shared expert's clamp follows the mlx / transformers-style
ports (DeepseekV41MLP given swiglu_limit); the vendor's V4 inference code leaves its shared expert
unclamped: cfg.shared_clamp = 0 (compare_logits --ablate shared_clamp=0) computes that reading.
RMSNorm eps = rms_norm_eps everywhere (mHC and Engram included). The release's hc_head_{fn,base,
scale} (V4's head mixer) are not read: the single-pass head is the last FFN site's pre.

CSA2 attention of layer L at position p (compute/forward/csa2.hpp; csa2_oracle.py's docstring):
the window of the last sliding_window raw latents rope'd at their positions, plus, for a
compressing layer, the compressed entries of the latest KV source at or before L that the latest
index source at or before L selected for p (index_topk of the visible groups j < (p+1)/ratio;
the candidate source keeps the candidate_topk_blocks best blocks of candidate_block_size groups,
the newest pinned, and every later index source ranks only inside them); every index source
scores against the running keys of the latest KV source at or before it (the transformers
choice; the vendor's module-level key slot is not reproduced). One softmax with the per-head sink
in the denominator, the output rotated back by -p, the grouped low-rank o-proj.

State carried between calls (forward(tokens) = one call: a decode step or a prefill chunk): the
window ring of each layer (its last sliding_window - 1 latents), each KV source's partial group
(the compressor's kv and gate rows of an incomplete group), its compressed entries and index keys,
and the n-gram history (the last max_ngram_size - 1 token ids and image flags). Chunked and
token-at-a-time calls compute the same numbers (tests/reference/test_v41_oracle.py: 1e-9).

Recorded per token (self.trace, written by write_trace): the experts each layer selected (ids in
the router's order, highest biased score first), the compressed positions (group indices,
ascending) each compressing layer attended and the candidate source's kept blocks, for an exact
comparison with the engine's dumps (compare_traces), and where a selection came from a near tie
(the k-th and next score within 1e-6: equal relu-zero index scores do occur), the one place an
engine may choose otherwise.

Ablations (the oracle's own self-checks; V41Oracle(..., ablate=[...]), each a config switch that
compare_logits --ablate KEY=VALUE sets as well): "sink" (attn_sink=0: no sink), "candidates"
(candidate_source=-1: no two-level filter), "gate" (compressor_gate=0: the pooling gate zero, the
plain mean), "carry" (hc_single_pass=0: each site reads its own pre), "engram" (engram=0).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import struct
import sys
import types

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import csa2_oracle  # noqa: E402
import v41_blocks_oracle as blocks  # noqa: E402
from oracle import clamped_silu_glu  # noqa: E402
from waste_container import Container  # noqa: E402

# The oracle's self-check ablations, each one config switch (so compare_logits --ablate KEY=VALUE
# reaches them too).
ABLATIONS = {"sink": ("attn_sink", 0), "candidates": ("candidate_source", -1), "gate": ("compressor_gate", 0),
             "carry": ("hc_single_pass", 0), "engram": ("engram", 0)}
ENGRAM_PAGE = 4096
TRACED = ("experts", "attended", "blocks")


# ----------------------------------------------------------------------------- engram tables
def engram_row(bits: int, raw: bytes, width: int) -> np.ndarray:
    """One engram-L{n}.bin row to float64 (compute/convert/engram_table.hpp): width/32 fp16 scales
    first, then the codes: int8 (bits 8), or two 4-bit codes a byte, even column in the low nibble,
    value code - 8 (bits 4); value = code x its group's scale. The one place that knows the row's
    byte order."""
    groups = width // 32
    scales = np.frombuffer(raw, dtype="<f2", count=groups).astype(np.float64)
    codes = np.frombuffer(raw, dtype=np.uint8, offset=2 * groups)
    if bits == 8:
        q = codes[:width].view(np.int8).astype(np.float64)
    else:
        q = np.empty(width, dtype=np.float64)
        q[0::2] = (codes[:width // 2] & 15).astype(np.float64) - 8.0
        q[1::2] = (codes[:width // 2] >> 4).astype(np.float64) - 8.0
    return q * np.repeat(scales, 32)


class EngramTable:
    """engram-L{n}.bin: the header checked, rows read by id."""

    HEAD = struct.Struct("<8sIIQIIIIIIQII")

    def __init__(self, path: str, layer: int, width: int):
        with open(path, "rb") as f:
            self.data = f.read()
        (magic, version, self.bits, self.rows, w, group, self.row_bytes, self.per_page, self.page_bytes, hl,
         data_bytes, _data_crc, _head_crc) = self.HEAD.unpack_from(self.data)
        if magic != b"WENGRAM\0" or version != 1 or w != width or group != 32 or hl != layer \
                or self.bits not in (4, 8) or len(self.data) != ENGRAM_PAGE + data_bytes:
            raise ValueError(f"{path}: header (magic {magic!r}, version {version}, bits {self.bits}, width {w}, "
                             f"layer {hl}, {data_bytes} data bytes) does not describe layer {layer}'s "
                             f"{width}-wide table of {len(self.data)} bytes")
        self.width = width

    def row(self, r: int) -> np.ndarray:
        if not 0 <= r < self.rows:
            raise ValueError(f"engram row {r} outside 0..{self.rows - 1}")
        off = ENGRAM_PAGE + r // self.per_page * self.page_bytes + r % self.per_page * self.row_bytes
        return engram_row(self.bits, self.data[off:off + self.row_bytes], self.width)


# ----------------------------------------------------------------------------- config
class V41Config(types.SimpleNamespace):
    """The keys this oracle reads (shared/container/model_config.hpp names). Flags are ints so
    that compare_logits' --ablate KEY=VALUE can set them."""

    @classmethod
    def from_raw(cls, c: dict) -> "V41Config":
        rs = c.get("rope_scaling") or {}
        n = int(c["num_hidden_layers"])
        return cls(
            n_layers=n, hidden=int(c["hidden_size"]), vocab=int(c["vocab_size"]), eps=float(c["rms_norm_eps"]),
            heads=int(c["num_attention_heads"]), head_dim=int(c["head_dim"]), rope_dim=int(c["qk_rope_head_dim"]),
            q_lora=int(c["q_lora_rank"]), o_groups=int(c["o_groups"]), o_lora=int(c["o_lora_rank"]),
            window=int(c["sliding_window"]), ratios=[int(r) for r in c["compress_ratios"][:n]],
            kv_sources=[int(x) for x in c.get("kv_source_layer_ids") or []],
            index_sources=[int(x) for x in c.get("index_source_layer_ids") or []],
            candidate_source=int(c["candidate_source_layer_id"]) if c.get("candidate_source_layer_id") is not None
            else (int(c["kv_source_layer_ids"][-1]) if c.get("kv_source_layer_ids") and
                  c.get("index_source_layer_ids") else -1),
            candidate_blocks=int(c.get("candidate_topk_blocks") or 0), block_size=int(c.get("candidate_block_size") or 0),
            index_heads=int(c.get("index_n_heads") or 0), index_dim=int(c.get("index_head_dim") or 0),
            index_topk=int(c.get("index_topk") or 0),
            rope_theta=float(c.get("rope_theta", 10000.0)), compress_theta=float(c["compress_rope_theta"]),
            yarn_factor=float(rs.get("factor", 1.0)), yarn_orig=int(rs.get("original_max_position_embeddings", 0)),
            yarn_beta_fast=float(rs.get("beta_fast", 32.0)), yarn_beta_slow=float(rs.get("beta_slow", 1.0)),
            n_experts=int(c["num_experts"]), top_k=int(c["num_experts_per_token"]),
            scoring=c.get("scoring_func") or "sqrtsoftplus", renorm=int(bool(c.get("moe_renormalize", True))),
            routed_scale=float(c.get("routed_scaling_factor", 1.0)), gate_temp=float(c.get("gate_temp", 1.0)),
            swiglu_limit=float(c.get("swiglu_limit") or 0.0), shared_clamp=1, compressor_gate=1, engram=1, vl_bias=1,
            hc_mult=int(c["hc_mult"]),
            hc_iters=int(c.get("hc_sinkhorn_iters", 20)), hc_eps=float(c.get("hc_eps", 1e-6)),
            attn_sink=int(bool(c.get("attn_sink", True))), hc_single_pass=int(bool(c.get("hc_single_pass", True))),
            engram_layers=[int(x) for x in c.get("engram_layer_ids") or []],
            engram_head_dim=int(c.get("engram_head_dim") or 0),
        )


class V41Oracle:
    """DeepSeek-V4.1 text model over one sequence; forward(tokens) per call, state carried."""

    def __init__(self, container: Container, ablate=()):
        if isinstance(container, str):
            container = Container(container)
        self.c = container
        self.cfg = V41Config.from_raw(container.config.raw)
        self.dtype = torch.float64  # float64 only: the rope tables and positions are float64
        for name in ablate:
            if name not in ABLATIONS:
                raise ValueError(f"unknown ablation {name!r} (known: {sorted(ABLATIONS)})")
            setattr(self.cfg, *ABLATIONS[name])
        self._w = {}
        self._experts = {}
        self._engram_loaded = False
        self.reset()

    # ---- weights -------------------------------------------------------------------------------
    def w(self, name: str) -> torch.Tensor:
        t = self._w.get(name)
        if t is None:
            t = self._w[name] = torch.from_numpy(np.asarray(self.c.tensor(name), dtype=np.float64)).to(self.dtype)
        return t

    def vec(self, name: str) -> torch.Tensor:
        return self.w(name).reshape(-1)

    def expert(self, layer: int, e: int):
        key = (layer, e)
        if key not in self._experts:
            self._experts[key] = tuple(torch.from_numpy(m.astype(np.float64)).to(self.dtype)
                                       for m in self.c.expert(layer, e))
        return self._experts[key]

    def _load_engram(self):
        if self._engram_loaded or not self.cfg.engram_layers:
            return
        with open(os.path.join(self.c.path, "engram.json")) as f:
            doc = json.load(f)
        self.engram_doc = doc
        self.engram_layer_index = {int(layer["layer"]): i for i, layer in enumerate(doc["layers"])}
        self.token_map = np.fromfile(os.path.join(self.c.path, "engram-tokmap.bin"), dtype="<i4").astype(np.int64)
        self.tables = {L: EngramTable(os.path.join(self.c.path, f"engram-L{L}.bin"), L, self.cfg.engram_head_dim)
                       for L in self.cfg.engram_layers}
        self._engram_loaded = True

    # ---- the shared blocks' parameters ----------------------------------------------------------
    def _setup_blocks(self):
        """csa2_oracle / v41_blocks_oracle keep their eps and YaRN constants at module level; set
        them from this container's config (float64 throughout)."""
        cfg = self.cfg
        csa2_oracle.EPS = cfg.eps
        csa2_oracle.ROPE.update(theta=cfg.rope_theta, c_theta=cfg.compress_theta, factor=cfg.yarn_factor,
                                orig=cfg.yarn_orig, beta_fast=cfg.yarn_beta_fast, beta_slow=cfg.yarn_beta_slow)
        blocks.RMS_EPS = cfg.eps
        blocks.HC_EPS = cfg.hc_eps

    def _shim(self, T=0):
        """The attributes csa2_oracle.Case's methods read."""
        cfg = self.cfg
        return types.SimpleNamespace(
            t=torch, name="v41", hid=cfg.hidden, H=cfg.heads, D=cfg.head_dim, R=cfg.rope_dim, q_lora=cfg.q_lora,
            G=cfg.o_groups, ol=cfg.o_lora, W=cfg.window, IH=cfg.index_heads, ID=cfg.index_dim, topk=cfg.index_topk,
            KB=cfg.candidate_blocks, B=cfg.block_size, T=T, sink=self.sink_on(),
            f_main=self.f_main, f_comp=self.f_comp, top=csa2_oracle.Case.top, in_band=csa2_oracle.Case.in_band)

    def sink_on(self) -> bool:
        return bool(self.cfg.attn_sink)

    def rms(self, v, w):
        return csa2_oracle.Case.rms(self.shim, v, w)

    def rope(self, v, pos, freq, sign=1.0):
        return csa2_oracle.Case.rope(self.shim, v, pos, freq, sign)

    # ---- state ---------------------------------------------------------------------------------
    def reset(self):
        cfg = self.cfg
        self._setup_blocks()
        yarn = cfg.yarn_factor > 1.0
        self.f_main = torch.tensor(csa2_oracle.inv_freq(cfg.rope_theta, cfg.rope_dim, False))
        self.f_comp = torch.tensor(csa2_oracle.inv_freq(cfg.compress_theta, cfg.rope_dim, yarn))
        self.shim = self._shim()
        self.pos = 0
        D, ID = cfg.head_dim, cfg.index_dim
        self.ring = {L: torch.zeros(0, D, dtype=self.dtype) for L in range(cfg.n_layers)}
        # Per KV source: the partial group's compressor rows, the compressed entries and index keys.
        self.src = {L: {"kv": torch.zeros(0, D, dtype=self.dtype), "gate": torch.zeros(0, D, dtype=self.dtype),
                        "C": torch.zeros(0, D, dtype=self.dtype), "keys": torch.zeros(0, ID, dtype=self.dtype)}
                    for L in cfg.kv_sources}
        self.history = ([], [])  # the last max_ngram_size - 1 token ids and their image flags
        self.trace = []  # per token: {"token", "experts": {L: ids}, "attended": {L: groups}}
        self.routes = []  # per token: [(layer, ids, weights)] (compare_logits' failure report)
        self.layer_inputs = {L: [] for L in range(cfg.n_layers)}  # normed attention inputs (cross-check)
        self.attn_outputs = {L: [] for L in range(cfg.n_layers)}

    # ---- CSA2 ----------------------------------------------------------------------------------
    def latest(self, ids, L):
        before = [i for i in ids if i <= L]
        return before[-1] if before else -1

    def compress(self, L, h):
        """KV source L takes the chunk's inputs h [n, hid]: completes groups, appends their entries."""
        cfg, s = self.cfg, self.src[L]
        a = f"model.layers.{L}.self_attn."
        ratio = cfg.ratios[L]
        s["kv"] = torch.cat([s["kv"], h @ self.w(a + "compressor.wkv.weight").T])
        if ratio > 1:
            g = h @ self.w(a + "compressor.wgate.weight").T
            if not cfg.compressor_gate:
                g = torch.zeros_like(g)
            s["gate"] = torch.cat([s["gate"], g])
        n = s["kv"].shape[0] // ratio
        if n == 0:
            return
        kv, rest = s["kv"][:n * ratio].view(n, ratio, -1), s["kv"][n * ratio:]
        if ratio > 1:
            gate = s["gate"][:n * ratio].view(n, ratio, -1)
            lat = (torch.softmax(gate, dim=1) * kv).sum(1)
            s["gate"] = s["gate"][n * ratio:]
        else:
            lat = kv[:, 0]
        s["kv"] = rest
        lat = self.rms(lat, self.vec(a + "compressor.norm.weight"))
        first = s["C"].shape[0]
        pos = torch.arange(first, first + n, dtype=torch.float64) * ratio
        s["C"] = torch.cat([s["C"], self.rope(lat, pos, self.f_comp)])
        key = self.rms(lat @ self.w(a + "indexer.wk.weight").T, self.vec(a + "indexer.k_norm.weight"))
        s["keys"] = torch.cat([s["keys"], self.rope(key, pos, self.f_comp)])

    def index(self, L, h, rq, P, keys, cand_blocks, state):
        """Index source L: per chunk token its selected groups (ascending); as the candidate source
        also its blocks (state["blocks"])."""
        cfg = self.cfg
        a = f"model.layers.{L}.self_attn.indexer."
        n = h.shape[0]
        iq = (rq @ self.w(a + "wq_b.weight").T).view(n, cfg.index_heads, cfg.index_dim)
        iq = self.rope(iq, P.view(-1, 1), self.f_comp)
        hw = (h @ self.w(a + "weights_proj.weight").T) / math.sqrt(cfg.index_heads)
        dots = torch.relu(torch.einsum("thd,jd->thj", iq, keys) / math.sqrt(cfg.index_dim))
        scores = torch.einsum("th,thj->tj", hw, dots).tolist()
        is_cand = L == cfg.candidate_source
        uses = cfg.candidate_source >= 0 and L > cfg.candidate_source
        sel, blocks_of, tied = [], [], []
        B = cfg.block_size
        if is_cand:
            state["block_tie"] = [False] * n
        for i in range(n):
            vis = (int(P[i]) + 1) // cfg.ratios[L]
            s = scores[i][:vis]
            if is_cand:
                nb = (vis + B - 1) // B
                bs = [max(s[b * B:(b + 1) * B]) for b in range(nb)]
                if nb:
                    bs[nb - 1] = math.inf  # the newest block pinned
                chosen, band = csa2_oracle.Case.top(bs, list(range(nb)), cfg.candidate_blocks)
                blocks_of.append(chosen)
                state["block_tie"][i] = band is not None
            items = list(range(vis))
            if uses:
                allowed = {j for b in cand_blocks[i] for j in range(b * B, (b + 1) * B)}
                items = [j for j in items if j in allowed]
            chosen, band = csa2_oracle.Case.top(s, items, cfg.index_topk)
            sel.append(chosen)
            tied.append(band is not None or ((uses or is_cand) and state["block_tie"][i]))
        state["tied"] = tied
        if is_cand:
            state["blocks"] = blocks_of
            for i in range(n):
                state["steps"][i]["blocks"] = {L: list(blocks_of[i])}
        return sel

    def attention(self, L, h, state):
        """Layer L's CSA2 output for the chunk's normed inputs h [n, hid] at positions P."""
        cfg = self.cfg
        a = f"model.layers.{L}.self_attn."
        n, H, D, W = h.shape[0], cfg.heads, cfg.head_dim, cfg.window
        P = torch.arange(self.pos, self.pos + n, dtype=torch.float64)
        ratio = cfg.ratios[L]
        freq = self.f_comp if ratio else self.f_main
        rq = self.rms(h @ self.w(a + "wq_a.weight").T, self.vec(a + "q_norm.weight"))
        q = self.rope((rq @ self.w(a + "wq_b.weight").T).view(n, H, D), P.view(-1, 1), freq)
        kv = self.rope(self.rms(h @ self.w(a + "wkv.weight").T, self.vec(a + "kv_norm.weight")), P, freq)
        ring = self.ring[L]
        keys = torch.cat([ring, kv])
        kpos = torch.arange(self.pos - ring.shape[0], self.pos + n, dtype=torch.float64)
        allowed = (kpos.view(1, -1) <= P.view(-1, 1)) & (kpos.view(1, -1) > P.view(-1, 1) - W)
        self.ring[L] = keys[max(0, keys.shape[0] - (W - 1)):].clone()
        attended = None
        if ratio:
            if L in cfg.kv_sources:
                self.compress(L, h)
            src = self.src[self.latest(cfg.kv_sources, L)]
            if L in cfg.index_sources:
                state["sel"] = self.index(L, h, rq, P, src["keys"], state.get("blocks"), state)
            if self.latest(cfg.index_sources, L) < 0:
                raise ValueError(f"layer {L} compresses but no index source is at or before it")
            attended = state["sel"]
            for i in range(n):
                if state["tied"][i]:
                    state["steps"][i]["ties"].append(L)
            C = src["C"]
            picked = torch.zeros(n, C.shape[0], dtype=torch.bool)
            for i, row in enumerate(attended):
                picked[i, row] = True
            keys = torch.cat([keys, C])
            allowed = torch.cat([allowed, picked], dim=1)
        s = torch.einsum("phd,kd->phk", q, keys) / math.sqrt(D)
        s = s.masked_fill(~allowed[:, None, :], -math.inf)
        top = s.max(-1, keepdim=True).values  # finite: each token's own window entry
        e = torch.exp(s - top)
        denom = e.sum(-1, keepdim=True)
        if self.sink_on():
            denom = denom + torch.exp(self.vec(a + "attn_sink").view(1, -1, 1) - top)
        o = self.rope((e / denom) @ keys, P.view(-1, 1), freq, sign=-1.0)
        G, per, ol = cfg.o_groups, H // cfg.o_groups, cfg.o_lora
        wo_a = self.w(a + "wo_a.weight")
        y = torch.cat([o[:, g * per:(g + 1) * per].reshape(n, -1) @ wo_a[g * ol:(g + 1) * ol].T for g in range(G)],
                      dim=1)
        return y @ self.w(a + "wo_b.weight").T, attended

    # ---- MoE -----------------------------------------------------------------------------------
    def glu(self, a, b, clamp=True):
        lim = self.cfg.swiglu_limit if clamp else 0.0
        return clamped_silu_glu(a, b, lim) if lim > 0 else a * torch.sigmoid(a) * b

    def moe(self, L, h, image):
        """h [n, hid] -> [n, hid], and each token's expert ids (router order)."""
        cfg = self.cfg
        m = f"model.layers.{L}.block_sparse_moe."
        n = h.shape[0]
        logits = h @ self.w(m + "gate.weight").T
        bias = self.vec(m + "gate.e_score_correction_bias") if self.c.has(m + "gate.e_score_correction_bias") \
            else torch.zeros(cfg.n_experts, dtype=self.dtype)
        # Image-span tokens select with bias_vl in place of the correction bias (transformers
        # DeepseekV41TopKRouter); without the tensor, or with vl_bias=0 (the self-check that
        # bias_vl moves the selection), they route as text.
        bias_vl = self.vec(m + "gate.bias_vl") if self.c.has(m + "gate.bias_vl") and self.cfg.vl_bias else bias
        case = (0, cfg.n_experts, cfg.top_k, n, cfg.scoring, bool(cfg.renorm), cfg.gate_temp, cfg.routed_scale,
                True, True)
        p, _, ids, ranked = blocks.route_oracle(torch, case, logits, bias, bias_vl, image)
        # Router near ties: the k-th and the next biased score within 1e-6 (v41_blocks_oracle.TIE).
        self.router_ties = [cfg.top_k < cfg.n_experts and
                            float(ranked[i, cfg.top_k - 1] - ranked[i, cfg.top_k]) <= blocks.TIE for i in range(n)]
        weights = blocks.route_weights(torch, case, p, ids)
        out = torch.zeros_like(h)
        for i in range(n):
            for e, wj in zip(ids[i].tolist(), weights[i]):
                wg, wu, wd = self.expert(L, e)
                out[i] = out[i] + wj * (wd @ self.glu(wg @ h[i], wu @ h[i]))
        sh = m + "shared_experts."
        if self.c.has(sh + "gate_proj.weight"):
            out = out + self.glu(h @ self.w(sh + "gate_proj.weight").T, h @ self.w(sh + "up_proj.weight").T,
                                 bool(self.cfg.shared_clamp)) @ self.w(sh + "down_proj.weight").T
        return out, ids.tolist(), weights.tolist()

    # ---- Engram --------------------------------------------------------------------------------
    def engram_rows(self, tokens, image):
        """[n, layers, rows per token] row ids of the chunk's tokens, the history carried."""
        d = self.engram_doc
        max_n, heads = int(d["max_ngram_size"]), int(d["n_heads"])
        hist_t, hist_d = self.history
        seq = hist_t + list(tokens)
        dead = hist_d + [int(x) for x in image]
        # oracle_rows treats position 0 as the sequence start: a full history puts every chunk
        # token's look-back inside the array, a short one is the real start.
        import engram_oracle  # numpy + sympy (exits 77 without sympy)
        rows = engram_oracle.oracle_rows(d["layers"], self.token_map, int(d["pad_id"]), max_n, heads, seq, dead)
        rows = rows.reshape(len(seq), len(d["layers"]), (max_n - 1) * heads)[len(hist_t):]
        keep = max_n - 1
        self.history = (seq[-keep:], dead[-keep:])
        return rows

    def engram(self, L, streams, row_ids, live):
        """streams [n, hc, hid] updated by layer L's Engram gate over its rows."""
        cfg = self.cfg
        if not cfg.engram:
            return streams
        p = f"model.layers.{L}.engram."
        li = self.engram_layer_index[L]
        table = self.tables[L]
        flat = torch.tensor(np.stack([np.concatenate([table.row(int(r)) for r in row_ids[i, li]])
                                      for i in range(streams.shape[0])]), dtype=self.dtype)
        out, _ = blocks.engram_oracle(torch, cfg.hc_mult, cfg.hidden, self.w(p + "wkv.weight"),
                                      self.w(p + "q_weight").view(cfg.hc_mult, cfg.hidden),
                                      self.w(p + "k_weight").view(cfg.hc_mult, cfg.hidden), flat, streams, live)
        return out

    # ---- the model -----------------------------------------------------------------------------
    def site(self, L, kind, streams):
        """(pre, post, comb) of every chunk token at site hc_{kind}_ of layer L."""
        p = f"model.layers.{L}.hc_{kind}_"
        fn, base, scale = self.w(p + "fn"), self.vec(p + "base"), self.vec(p + "scale")
        out = [blocks.mhc_coefficients(torch, streams[i], fn, base, scale, self.cfg.hc_mult, self.cfg.hc_iters)
               for i in range(streams.shape[0])]
        return [torch.stack(z) for z in zip(*out)]

    def forward(self, tokens, image=None, embeds=None) -> torch.Tensor:
        """One call (a decode step or a prefill chunk): logits [n, vocab] of each token.
        embeds (None, or one entry per token: None or a [hidden] vector): a token given a vector
        takes it as its input instead of its embedding row and is an image-span token (the
        engine's Engine::eval embeddings); image (flags) without embeds marks image tokens that
        keep their embedding rows."""
        cfg = self.cfg
        self._setup_blocks()
        tokens = [int(t) for t in tokens]
        n = len(tokens)
        for t in tokens:
            if not 0 <= t < cfg.vocab:
                raise ValueError(f"token {t} outside 0..{cfg.vocab - 1}")
        if embeds is not None and len(embeds) != n:
            raise ValueError(f"{len(embeds)} input vectors for {n} tokens")
        if image is None:
            image = [embeds is not None and embeds[i] is not None for i in range(n)]
        image = torch.as_tensor(image, dtype=torch.bool)
        rows = [np.asarray(embeds[i], np.float64) if embeds is not None and embeds[i] is not None
                else self.c.tensor_row("model.embed_tokens.weight", t) for i, t in enumerate(tokens)]
        emb = torch.tensor(np.stack(rows), dtype=self.dtype)
        hc = cfg.hc_mult
        streams = emb[:, None, :].repeat(1, hc, 1)  # [n, hc, hid]
        carried = torch.zeros(n, hc, dtype=self.dtype)
        carried[:, 0] = 1.0
        single = bool(cfg.hc_single_pass)
        row_ids = None
        if cfg.engram_layers:
            self._load_engram()
            row_ids = self.engram_rows(tokens, image.tolist())
        steps = [{"token": t, "experts": {}, "attended": {}, "blocks": {}, "ties": [], "router_ties": []}
                 for t in tokens]
        routes = [[] for _ in tokens]
        state = {"steps": steps}
        for L in range(cfg.n_layers):
            p = f"model.layers.{L}."
            if L in cfg.engram_layers:
                streams = self.engram(L, streams, row_ids, ~image)
            for kind, norm in (("attn", "input_layernorm"), ("ffn", "post_attention_layernorm")):
                pre, post, comb = self.site(L, kind, streams)
                use = carried if single else pre
                h = self.rms((use[:, :, None] * streams).sum(1), self.vec(p + norm + ".weight"))
                if kind == "attn":
                    y, attended = self.attention(L, h, state)
                    self.layer_inputs[L].append(h)
                    self.attn_outputs[L].append(y)
                    if attended is not None:
                        for i in range(n):
                            steps[i]["attended"][L] = list(attended[i])
                else:
                    y, ids, weights = self.moe(L, h, image)
                    for i in range(n):
                        steps[i]["experts"][L] = ids[i]
                        if self.router_ties[i]:
                            steps[i]["router_ties"].append(L)
                        routes[i].append((L, ids[i], weights[i]))
                streams = post[:, :, None] * y[:, None, :] + torch.einsum("njk,njd->nkd", comb, streams)
                carried = pre
        head = (carried[:, :, None] * streams).sum(1)  # the last FFN site's pre
        self.pos += n
        self.trace += steps
        self.routes += routes
        return self.rms(head, self.vec("model.norm.weight")) @ self.w("lm_head.weight").T

    def step(self, token: int, embed=None) -> torch.Tensor:
        """One decode step (compare_logits' interface): the token's logits [vocab]; `embed`: the
        input vector of an image-span token (forward's embeds)."""
        return self.forward([token], embeds=None if embed is None else [embed])[0]

    # ---- cross-check against csa2_oracle's one-shot stack ----------------------------------------
    def check_against_csa2(self):
        """Feeds every layer's recorded attention inputs (all tokens so far) to csa2_oracle.Case's
        one-shot run_stack; returns (max |stateful - one-shot| over the layers' outputs, the
        layers whose selections or candidate blocks differ)."""
        cfg = self.cfg
        T = self.pos
        shim = self._shim(T)
        shim.w, shim.layers = [], []
        for L in range(cfg.n_layers):
            a = f"model.layers.{L}.self_attn."
            w = {"x": torch.cat(self.layer_inputs[L])}
            for k, name in (("wq_a", "wq_a.weight"), ("wq_b", "wq_b.weight"), ("wkv", "wkv.weight"),
                            ("wo_a", "wo_a.weight"), ("wo_b", "wo_b.weight")):
                w[k] = self.w(a + name)
            for k, name in (("q_norm", "q_norm.weight"), ("kv_norm", "kv_norm.weight"), ("attn_sink", "attn_sink")):
                w[k] = self.vec(a + name)
            kv, ix = L in cfg.kv_sources, L in cfg.index_sources
            if kv:
                w["c_wkv"] = self.w(a + "compressor.wkv.weight")
                w["c_norm"] = self.vec(a + "compressor.norm.weight")
                if cfg.ratios[L] > 1:
                    w["c_wgate"] = self.w(a + "compressor.wgate.weight")
                    if not cfg.compressor_gate:
                        w["c_wgate"] = torch.zeros_like(w["c_wgate"])
                w["i_wk"] = self.w(a + "indexer.wk.weight")
                w["i_k_norm"] = self.vec(a + "indexer.k_norm.weight")
            if ix:
                w["i_wq_b"] = self.w(a + "indexer.wq_b.weight")
                w["i_wp"] = self.w(a + "indexer.weights_proj.weight")
            uses = ix and cfg.candidate_source >= 0 and L > cfg.candidate_source
            # Case.compressed computes index keys only for a KV source that is also an index source.
            if kv and not ix:
                raise ValueError(f"layer {L}: the one-shot cross-check needs every KV source to index")
            shim.w.append(w)
            shim.layers.append(((cfg.ratios[L], int(kv), int(ix), int(L == cfg.candidate_source), int(uses)), None))
        for name in ("rms", "rope", "compressed", "index_scores", "attention"):
            setattr(shim, name, types.MethodType(getattr(csa2_oracle.Case, name), shim))
        outs, sels, _, errors, _ = csa2_oracle.Case.run_stack(
            shim)
        worst = 0.0
        for L in range(cfg.n_layers):
            worst = max(worst, float((outs[L] - torch.cat(self.attn_outputs[L])).abs().max()))
        differ = [L for L, rows in sels.items()
                  if any(self.trace[p]["attended"].get(L) != rows[p] for p in range(T))]
        return worst, differ + [f"error: {e}" for e in errors]


def write_trace(oracle: V41Oracle, path: str) -> None:
    """The per-token trace as JSON: [{"token", "experts": {"L": ids}, "attended": {"L": groups},
    "blocks": {"L": candidate blocks}, "ties": [L...], "router_ties": [L...]}], layers as strings
    in the dicts."""
    with open(path, "w") as f:
        json.dump([{"token": s["token"], **{what: {str(k): v for k, v in s[what].items()} for what in TRACED},
                    "ties": s["ties"], "router_ties": s["router_ties"]} for s in oracle.trace], f)


def compare_traces(oracle_trace: list, engine_path: str) -> list:
    """Exact comparison with an engine trace in write_trace's format (no engine dump writes one
    yet); returns the differences. A token whose selection at a layer came from a near tie (its
    index source's k-th and next score, or the candidate blocks', within 1e-6 relative: "ties";
    the router's k-th and next biased score within 1e-6: "router_ties") may differ there: such
    differences are counted in the last entry, not reported."""
    with open(engine_path) as f:
        eng = json.load(f)
    errs, forgiven = [], 0
    if len(eng) != len(oracle_trace):
        return [f"{engine_path}: {len(eng)} tokens, the oracle ran {len(oracle_trace)}"]
    for i, (a, b) in enumerate(zip(oracle_trace, eng)):
        for what in TRACED:
            want = {str(k): v for k, v in a[what].items()}
            got = b.get(what, {})
            for L in sorted(set(want) | set(got), key=int):
                w, g = want.get(L), got.get(L)
                if w != g:
                    excused = a["router_ties"] if what == "experts" else a["ties"]
                    if int(L) in excused:
                        forgiven += 1
                        continue
                    errs.append(f"token {i}: layer {L} {what}: engine {g}, oracle {w}")
    return errs + ([f"({forgiven} differences inside near-tie bands, allowed)"] if forgiven and errs else [])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("container")
    ap.add_argument("--tokens", required=True, help="comma-separated token ids")
    ap.add_argument("--chunk", type=int, default=1, help="tokens per forward call")
    ap.add_argument("--trace", help="write the per-token experts / attended positions here (JSON)")
    ap.add_argument("--ablate", action="append", default=[], choices=sorted(ABLATIONS))
    args = ap.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("WASTE_ORACLE_THREADS", "2")))
    oracle = V41Oracle(Container(args.container), ablate=args.ablate)
    toks = [int(s) for s in args.tokens.split(",") if s]
    for b in range(0, len(toks), args.chunk):
        logits = oracle.forward(toks[b:b + args.chunk])
        for i, row in enumerate(logits):
            print(f"step {b + i}: token {toks[b + i]} -> argmax {int(torch.argmax(row))} max {float(row.max()):.6f}")
    if args.trace:
        write_trace(oracle, args.trace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
