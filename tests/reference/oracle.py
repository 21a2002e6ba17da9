"""PyTorch oracle of the Kimi-Linear / Kimi K3 forward pass (waste-v0-reference.md 3.3-3.9),
and of the DeepSeek-V3 family's (V3, R1, Kimi-K2): MLA with decoupled RoPE + YaRN and the
group-limited noaux_tc router, written from DeepSeek-V3's published model maths
(docs/design/deepseek.md); and of GLM-5.3-Flash's text model (transformers glm5_next, the
modeling file at 1f4d57a7): mHC residual streams with the Sinkhorn mixer, the clamped SwiGLU,
NoPE MLA and K3-style KDA, and its k-pool DSA indexer (index_n_heads > 0): per MLA layer, one
key per complete pool of index_kpool tokens (the per-channel softmax of the compress gate + ape
weighting the LayerNormed wk keys), and per token the index_topk / index_kpool pools of highest
score sum_h w_h relu(q_h . K_p / sqrt(D)) (w = weights_proj x / sqrt(H), q = wq_b of the normed
q_lora residual) plus the tokens of the unfilled pool; MLA attends those positions only.

Written from the equations with plain dense ops: every quantized tensor (trunk and routed
experts) is dequantized to a dense matrix first, the routed experts included (no lookup tables),
MLA is computed in the plain un-absorbed form (k = [W_kb c, k_r], v = W_vb c), and KDA by its
per-token recurrence. One `step(token)` = one decode step, returning the fp32/fp64 logits.

Usage as a script: oracle.py CONTAINER_DIR --tokens 1,2,3 [--float64] prints argmax per step.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from waste_container import Container  # noqa: E402


# ----------------------------------------------------------------------------- building blocks
def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """x * (mean(x^2) + eps)^-1/2 * w over the last dimension."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def silu_glu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a * torch.sigmoid(a) * b


def situ_glu(a: torch.Tensor, b: torch.Tensor, beta: float, lam: float) -> torch.Tensor:
    """SiTU: beta*tanh(a/beta)*sigmoid(a) * (lam*tanh(b/lam)), up left raw when lam <= 0."""
    up = lam * torch.tanh(b / lam) if lam > 0 else b
    return beta * torch.tanh(a / beta) * torch.sigmoid(a) * up


def causal_conv_step(ring: torch.Tensor, p: torch.Tensor, w: torch.Tensor):
    """Depthwise causal conv, one new sample. ring [C, K-1] holds the previous pre-conv values
    (oldest first), w [C, K] with w[:, K-1] on the newest sample. Returns (SiLU(y), new ring)."""
    window = torch.cat([ring, p[:, None]], dim=1)
    y = (window * w).sum(1)
    return F.silu(y), window[:, 1:].clone()


def kda_recurrent_step(S, q, k, v, g, beta, l2_eps=1e-12):
    """One KDA delta-rule step for all heads (section 3.4 step 4).

    S [H, K, V] state (key dim = rows), q/k [H, K] raw (post conv), v [H, V], g [H, K] log-decay
    per key channel, beta [H]. Returns (o [H, V], new S). Decay first, delta rule against the
    decayed state, output read from the post-update state.
    """
    dk = q.shape[-1]
    qn = q / torch.sqrt((q * q).sum(-1, keepdim=True) + l2_eps) * dk ** -0.5
    kn = k / torch.sqrt((k * k).sum(-1, keepdim=True) + l2_eps)
    S = S * torch.exp(g)[:, :, None]
    u = torch.einsum("hkv,hk->hv", S, kn)
    d = beta[:, None] * (v - u)
    S = S + kn[:, :, None] * d[:, None, :]
    o = torch.einsum("hkv,hk->hv", S, qn)
    return o, S


def clamped_silu_glu(a: torch.Tensor, b: torch.Tensor, limit: float) -> torch.Tensor:
    """GLM's SwiGLU: gate clamped above at limit, up to [-limit, limit], then SiLU(gate) * up."""
    a = a.clamp(max=limit)
    b = b.clamp(min=-limit, max=limit)
    return a * torch.sigmoid(a) * b


def hc_sinkhorn(logits: torch.Tensor, iters: int, eps: float) -> torch.Tensor:
    """The mHC stream mixer from its [hc, hc] logits: softmax over the last axis plus eps,
    normalised over the first axis, then (iters - 1) rounds of last-axis then first-axis
    normalisation, each dividing by the sum plus eps."""
    comb = torch.softmax(logits, dim=-1) + eps
    comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(dim=-1, keepdim=True) + eps)
        comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    return comb


def hc_site(streams, fn, base, scale, hc, iters, hc_eps, rms_eps):
    """One mHC site (attention or FFN) on streams [hc, D]: returns (post [hc], comb [hc, hc],
    the collapsed input sum_k pre[k] streams[k] [D])."""
    flat = streams.reshape(-1)
    flat = flat * torch.rsqrt(flat.pow(2).mean() + rms_eps)
    mix = fn @ flat
    pre_w, post_w, comb_w = mix[:hc], mix[hc:2 * hc], mix[2 * hc:]
    pre = torch.sigmoid(pre_w * scale[0] + base[:hc]) + hc_eps
    post = 2 * torch.sigmoid(post_w * scale[1] + base[hc:2 * hc])
    comb = hc_sinkhorn(comb_w.view(hc, hc) * scale[2] + base[2 * hc:].view(hc, hc), iters, hc_eps)
    return post, comb, (pre[:, None] * streams).sum(0)


def hc_apply(streams, post, comb, y):
    """streams[i] <- post[i] y + sum_k comb[k, i] streams[k]."""
    return post[:, None] * y[None, :] + comb.transpose(0, 1) @ streams


def yarn_inv_freq(dim: int, base: float, factor: float, orig: int, beta_fast: float,
                  beta_slow: float) -> torch.Tensor:
    """Per-pair rotation frequencies (float64): base^(-2i/dim), and with YaRN (factor > 1) the
    pairs past the correction range divided by factor, a linear ramp in between."""
    i = torch.arange(dim // 2, dtype=torch.float64)
    freqs = base ** (-2.0 * i / dim)
    if factor <= 1.0:
        return freqs
    # The pair index that completes r rotations over the original context length.
    def corr(r):
        return dim * math.log(orig / (r * 2 * math.pi)) / (2 * math.log(base))
    low = max(math.floor(corr(beta_fast)), 0)
    high = min(math.ceil(corr(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    ramp = ((i - low) / (high - low)).clamp(0.0, 1.0)
    return freqs * (1 - ramp) + freqs / factor * ramp


def apply_rope(x: torch.Tensor, pos: int, inv_freq: torch.Tensor) -> torch.Tensor:
    """Rotate the last dim of x at `pos`: consecutive pairs (x[2i], x[2i+1]) as complex numbers
    times exp(j * pos * inv_freq[i]) (DeepSeek-V3's interleaved convention)."""
    z = torch.view_as_complex(x.to(torch.float64).reshape(*x.shape[:-1], -1, 2).contiguous())
    rot = torch.polar(torch.ones_like(inv_freq), pos * inv_freq)
    return torch.view_as_real(z * rot).reshape(x.shape).to(x.dtype)


def mla_unabsorbed(q, c_hist, kr_hist, w_kv_b, n_heads, nope, v_dim, scale=None):
    """Multi-head latent attention over the whole history, un-absorbed (section 3.5).

    q [nh, nope+rope]; c_hist [T, kv_lora] normed latents; kr_hist [T, rope] (raw for NoPE,
    rotated at each key's position otherwise); w_kv_b [nh*(nope+v), kv_lora]; scale defaults
    to 1/sqrt(nope+rope). Returns o [nh, v].
    """
    w = w_kv_b.view(n_heads, nope + v_dim, -1)
    k_nope = torch.einsum("hdc,tc->thd", w[:, :nope], c_hist)           # [T, nh, nope]
    k_rope = kr_hist[:, None, :].expand(-1, n_heads, -1)                # shared by all heads
    keys = torch.cat([k_nope, k_rope], dim=-1)                          # [T, nh, qd]
    vals = torch.einsum("hdc,tc->thd", w[:, nope:], c_hist)             # [T, nh, v]
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    scores = torch.einsum("hd,thd->ht", q, keys) * scale
    attn = torch.softmax(scores, dim=-1)
    return torch.einsum("ht,thd->hd", attn, vals)


def attn_res(blocks, ps, norm_w, proj_w, eps):
    """Attention Residuals mix (section 3.7): softmax over candidates blocks + [ps] of
    sum_j v[j] * rsqrt(mean(v^2)+eps) * norm_w[j] * proj_w[j]; returns sum_i alpha_i v_i."""
    cands = torch.stack(list(blocks) + [ps])
    scores = (rms_norm(cands, norm_w, eps) * proj_w).sum(-1)
    alpha = torch.softmax(scores, dim=0)
    return (alpha[:, None] * cands).sum(0)


def route(logits, bias, top_k, renorm, routed_scale, scoring="sigmoid", n_group=1, topk_group=1):
    """Router: p = sigmoid (or softmax) of the logits; select top_k by p + bias (ties -> lower
    id), weights from unbiased p, renormalized when asked and top_k > 1, then times
    routed_scale. With n_group > 1 (DeepSeek-V3's group-limited noaux_tc): each contiguous group
    scores the sum of its two largest p + bias (its largest without a bias), the topk_group
    best groups are kept and the rest masked to -inf before the top_k. Returns (ids, weights)."""
    p = torch.softmax(logits, dim=-1) if scoring == "softmax" else torch.sigmoid(logits)
    sel = p + bias if bias is not None else p
    if n_group > 1 and topk_group < n_group:
        groups = sel.view(n_group, -1)
        if bias is not None:
            gscore = torch.sort(groups, dim=-1, descending=True).values[:, :2].sum(-1)
        else:
            gscore = groups.max(-1).values
        keep = torch.sort(gscore, descending=True, stable=True).indices[:topk_group]
        mask = torch.ones(n_group, dtype=torch.bool)
        mask[keep] = False
        sel = groups.masked_fill(mask[:, None], float("-inf")).reshape(-1)
    # Stable descending sort keeps the lower id first among equal scores.
    order = torch.sort(sel, descending=True, stable=True).indices[:top_k]
    w = p[order]
    if renorm and top_k > 1:
        w = w / (w.sum() + 1e-20)
    return order.tolist(), w * routed_scale


VQ4P_LUT_BLOCK = 32  # vector positions per int8 LUT block (section 2, VQ4P variant)


def vq4p_lut_matvec(x, idx, row_scales, books):
    """y = W x the way v0 defines the VQ4P kernel: fp32 LUT of x against the 4 stage books,
    quantized to int8 per block of 32 vector positions (q = clamp(rint(LUT * (127/mx)), +-127),
    block scale mx/127), integer sums of the 4 stage lookups per position, then
    acc += scale_blk * block_sum and y = acc * row_scale. This int8 step is part of the v0
    computation (not a rounding detail), so the oracle reproduces it for VQ4P containers.

    x float32 [N]; idx uint8 [rows, N/8, stages]; row_scales float32 [rows];
    books float32 [stages, entries, vec_dim]. Returns float32 [rows]."""
    x = torch.as_tensor(x, dtype=torch.float32)
    books = torch.as_tensor(books, dtype=torch.float32)
    n_stages, _, vdim = books.shape
    nv = idx.shape[1]
    xv = x.view(nv, vdim)
    lut = xv[:, None, None, 0] * books[None, :, :, 0]      # [nv, stages, entries], d ascending
    for d in range(1, vdim):
        lut = lut + xv[:, None, None, d] * books[None, :, :, d]
    q = torch.empty_like(lut)
    blk_scales = []
    for b0 in range(0, nv, VQ4P_LUT_BLOCK):
        blk = lut[b0:b0 + VQ4P_LUT_BLOCK]
        mx = blk.abs().max()
        inv = torch.tensor(127.0, dtype=torch.float32) / mx if mx > 0 else torch.zeros(())
        q[b0:b0 + VQ4P_LUT_BLOCK] = torch.clamp(torch.round(blk * inv), -127, 127)
        blk_scales.append(mx / 127.0)
    ii = torch.from_numpy(idx.astype("int64"))
    picked = q[torch.arange(nv)[None, :, None], torch.arange(n_stages)[None, None, :], ii]
    per_pos = picked.sum(-1)                                # exact small integers in fp32
    acc = torch.zeros(idx.shape[0], dtype=torch.float32)
    for bi, b0 in enumerate(range(0, nv, VQ4P_LUT_BLOCK)):
        acc = acc + blk_scales[bi] * per_pos[:, b0:b0 + VQ4P_LUT_BLOCK].sum(-1)
    return acc * torch.from_numpy(row_scales)


# ----------------------------------------------------------------------------- the model
class Oracle:
    def __init__(self, container: Container, dtype=torch.float32, vq4p_int8_lut: bool = True,
                 pos_step: int = 1):
        self.c = container
        # Token t sits at position t * pos_step; != 1 only to show that rotary models depend on
        # positions (a constant shift would not: RoPE scores depend on position differences).
        self.pos_step = pos_step
        # VQ4P containers: reproduce the int8 LUT step of the v0 kernel (off = exact W x).
        self.vq4p_lut = vq4p_int8_lut and container.index_bits == 6
        self.cfg = container.config
        self.dtype = dtype
        self._w = {}
        self.reset()

    # weights --------------------------------------------------------------
    def w(self, name: str) -> torch.Tensor:
        t = self._w.get(name)
        if t is None:
            t = torch.from_numpy(self.c.tensor(name)).to(self.dtype)
            self._w[name] = t
        return t

    def w_flat(self, name: str, n: int) -> torch.Tensor:
        """First n values of an F32 vector tensor (A_log is padded on K3)."""
        return self.w(name).reshape(-1)[:n]

    def mv(self, name: str, x: torch.Tensor) -> torch.Tensor:
        return self.w(name) @ x

    # state ----------------------------------------------------------------
    def reset(self):
        cfg = self.cfg
        self.pos = 0
        self.kda_state, self.conv_rings, self.mla_cache, self.index_cache = {}, {}, {}, {}
        self.selected = []  # per indexed MLA call: (layer, token, the positions it attends)
        C, H, D = cfg.kda_heads * cfg.kda_dim, cfg.kda_heads, cfg.kda_dim
        for layer in range(cfg.n_layers):
            if cfg.is_kda[layer]:
                self.kda_state[layer] = torch.zeros(H, D, D, dtype=self.dtype)
                self.conv_rings[layer] = [torch.zeros(C, cfg.conv_k - 1, dtype=self.dtype)
                                          for _ in range(3)]
            else:
                self.mla_cache[layer] = ([], [])
                self.index_cache[layer] = ([], [], [])  # k rows, gate rows, pool keys
        self.routes = []  # per step: [(layer, ids, weights)]

    # layers ---------------------------------------------------------------
    def kda(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        H, D, K = cfg.kda_heads, cfg.kda_dim, cfg.conv_k
        C = H * D
        pre = f"model.layers.{layer}.self_attn."
        qkv = []
        for i, n in enumerate("qkv"):
            p = self.mv(pre + f"{n}_proj.weight", x)
            w = self.w_flat(pre + f"{n}_conv1d.weight", C * K).view(C, K)
            y, self.conv_rings[layer][i] = causal_conv_step(self.conv_rings[layer][i], p, w)
            qkv.append(y.view(H, D))
        q, k, v = qkv
        z = self.mv(pre + "f_b_proj.weight", self.mv(pre + "f_a_proj.weight", x))
        z = (z + self.w_flat(pre + "dt_bias", C)).view(H, D)
        a = torch.exp(self.w_flat(pre + "A_log", H))[:, None]
        if cfg.gate_lower_bound < 0:
            g = cfg.gate_lower_bound * torch.sigmoid(a * z)
        else:
            g = -a * F.softplus(z)  # softplus: threshold 20, as the engine
        beta = torch.sigmoid(self.mv(pre + "b_proj.weight", x))
        # GLM's l2norm (transformers glm5_next) adds 1e-6 under the root; the engine's 1e-12 is
        # within the diff tolerance of it.
        l2_eps = 1e-6 if cfg.hc_mult > 0 else 1e-12
        o, self.kda_state[layer] = kda_recurrent_step(self.kda_state[layer], q, k, v, g, beta, l2_eps)
        if self.c.has(pre + "g_proj.weight"):
            gate = self.mv(pre + "g_proj.weight", x)
        else:
            gate = self.mv(pre + "g_b_proj.weight", self.mv(pre + "g_a_proj.weight", x))
        o = rms_norm(o, self.w(pre + "o_norm.weight").reshape(-1), cfg.eps)
        o = o * torch.sigmoid(gate.view(H, D))
        return self.mv(pre + "o_proj.weight", o.reshape(C))

    def index_select(self, layer: int, x: torch.Tensor, qa: torch.Tensor) -> list:
        """GLM's k-pool DSA indexer for the token just cached: the positions it attends."""
        cfg = self.cfg
        H, D, kp = cfg.index_n_heads, cfg.index_head_dim, cfg.index_kpool
        pre = f"model.layers.{layer}.self_attn.indexer."
        k = F.layer_norm(self.mv(pre + "wk.weight", x), (D,), self.w(pre + "k_norm.weight").reshape(-1),
                         self.w(pre + "k_norm.bias").reshape(-1), eps=1e-6)
        gate = self.mv(pre + "index_kpool_compress_gate", x)
        ks, gates, keys = self.index_cache[layer]
        ks.append(k)
        gates.append(gate)
        t = len(ks) - 1
        if len(ks) % kp == 0:  # a pool completes: its key, a per-channel softmax over its tokens
            logits = torch.stack(gates[-kp:]) + self.w(pre + "index_kpool_compress_ape").reshape(kp, D)
            keys.append((torch.softmax(logits, dim=0) * torch.stack(ks[-kp:])).sum(0))
        pools, keep = len(keys), cfg.index_topk // kp
        if pools <= keep:
            chosen = list(range(pools))
        else:
            q = self.mv(pre + "wq_b.weight", qa).view(H, D)
            w = self.mv(pre + "weights_proj.weight", x) / math.sqrt(H)
            score = (w[:, None] * torch.relu(q @ torch.stack(keys).T / math.sqrt(D))).sum(0)
            ranked = sorted(range(pools), key=lambda p: (-float(score[p]), p))
            chosen = sorted(ranked[:keep])
        positions = [p * kp + j for p in chosen for j in range(kp)] + list(range(pools * kp, t + 1))
        self.selected.append((layer, t, positions))
        return positions

    def mla(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        nh, nope, rope, vd = cfg.n_heads, cfg.qk_nope, cfg.qk_rope, cfg.v_head
        pre = f"model.layers.{layer}.self_attn."
        qa = None
        if self.c.has(pre + "q_a_proj.weight"):
            qa = rms_norm(self.mv(pre + "q_a_proj.weight", x),
                          self.w(pre + "q_a_layernorm.weight"), cfg.eps)
            q = self.mv(pre + "q_b_proj.weight", qa)
        else:
            q = self.mv(pre + "q_proj.weight", x)
        q = q.view(nh, nope + rope)
        ckv = self.mv(pre + "kv_a_proj_with_mqa.weight", x)
        c = rms_norm(ckv[:cfg.kv_lora], self.w(pre + "kv_a_layernorm.weight"), cfg.eps)
        k_rope = ckv[cfg.kv_lora:]
        scale = 1.0 / math.sqrt(nope + rope)
        if cfg.rope:
            # Decoupled RoPE: every head's q_pe and the one shared k_pe, at this token's position;
            # the key is cached already rotated. YaRN's mscale enters the softmax scale squared.
            inv = yarn_inv_freq(rope, cfg.rope_theta, cfg.yarn_factor, cfg.yarn_orig,
                                cfg.yarn_beta_fast, cfg.yarn_beta_slow)
            q = torch.cat([q[:, :nope], apply_rope(q[:, nope:], self.pos, inv)], dim=-1)
            k_rope = apply_rope(k_rope, self.pos, inv)
            if cfg.yarn and cfg.yarn_factor > 1 and cfg.yarn_mscale_all_dim:
                m = 0.1 * cfg.yarn_mscale_all_dim * math.log(cfg.yarn_factor) + 1.0
                scale = scale * m * m
        c_list, kr_list = self.mla_cache[layer]
        c_list.append(c)
        kr_list.append(k_rope)
        c_hist, kr_hist = torch.stack(c_list), torch.stack(kr_list)
        if cfg.index_n_heads > 0:
            if qa is None:
                raise ValueError("the DSA indexer reads the q_lora residual: q_lora_rank must be positive")
            keep = torch.tensor(self.index_select(layer, x, qa), dtype=torch.long)
            c_hist, kr_hist = c_hist[keep], kr_hist[keep]
        o = mla_unabsorbed(q, c_hist, kr_hist,
                           self.w(pre + "kv_b_proj.weight"), nh, nope, vd, scale).reshape(nh * vd)
        if self.c.has(pre + "g_proj.weight"):
            o = o * torch.sigmoid(self.mv(pre + "g_proj.weight", x))
        return self.mv(pre + "o_proj.weight", o)

    def glu(self, a, b):
        cfg = self.cfg
        if cfg.swiglu_limit > 0:
            return clamped_silu_glu(a, b, cfg.swiglu_limit)
        if cfg.act_situ:
            return situ_glu(a, b, cfg.situ_beta, cfg.situ_linear_beta)
        return silu_glu(a, b)

    def ffn(self, pre: str, x: torch.Tensor) -> torch.Tensor:
        a = self.mv(pre + "gate_proj.weight", x)
        b = self.mv(pre + "up_proj.weight", x)
        return self.mv(pre + "down_proj.weight", self.glu(a, b))

    def moe(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        pre = f"model.layers.{layer}.block_sparse_moe."
        logits = self.mv(pre + "gate.weight", x)
        bias_name = pre + "gate.e_score_correction_bias"
        bias = self.w(bias_name).reshape(-1) if self.c.is_f32(bias_name) else None
        ids, weights = route(logits, bias, cfg.top_k, cfg.renorm, cfg.routed_scale, cfg.scoring,
                             cfg.n_group, cfg.topk_group)
        self.routes[-1].append((layer, ids, weights.tolist()))
        latent = self.c.has(pre + "routed_expert_down_proj.weight")
        xin = self.mv(pre + "routed_expert_down_proj.weight", x) if latent else x
        ysum = torch.zeros_like(xin)
        for e, wj in zip(ids, weights):
            if self.vq4p_lut:
                ysum = ysum + wj * self.expert_vq4p(layer, e, xin)
                continue
            wg, wu, wd = (torch.from_numpy(m).to(self.dtype) for m in self.c.expert(layer, e))
            ysum = ysum + wj * (wd @ self.glu(wg @ xin, wu @ xin))
        if latent:
            if cfg.latent_norm:
                ysum = rms_norm(ysum, self.w(pre + "routed_expert_norm.weight"), cfg.eps)
            ysum = self.mv(pre + "routed_expert_up_proj.weight", ysum)
        if self.c.has(pre + "shared_experts.gate_proj.weight"):
            ysum = ysum + self.ffn(pre + "shared_experts.", x)
        return ysum

    def expert_vq4p(self, layer: int, e: int, xin: torch.Tensor) -> torch.Tensor:
        cb, idx, scales = self.c.expert_raw(layer, e)
        books = self.c.codebooks()
        st = self.c.stages
        mv = lambda kind, v: vq4p_lut_matvec(  # noqa: E731
            v.float(), idx[kind], scales[kind], books[cb + kind * st: cb + (kind + 1) * st])
        h = self.glu(mv(0, xin), mv(1, xin))
        return mv(2, h).to(self.dtype)

    def mixer(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        pre = f"model.layers.{layer}."
        if self.c.has(pre + "block_sparse_moe.gate.weight"):
            return self.moe(layer, h)
        return self.ffn(pre + "mlp.", h)

    def hc(self, pre: str, streams: torch.Tensor):
        cfg = self.cfg
        return hc_site(streams, self.w(pre + "fn"), self.w(pre + "base").reshape(-1),
                       self.w(pre + "scale").reshape(-1), cfg.hc_mult, cfg.hc_iters, cfg.hc_eps, cfg.eps)

    def step_mhc(self, x: torch.Tensor) -> torch.Tensor:
        """GLM-5.3-Flash's decoder (Glm5NextTextDecoderLayer / TextModel): hc_mult copies of the
        embedding; per layer, per sublayer: collapse by pre, norm, sublayer, place by post and
        mix by comb; the head normalises the mean of the streams."""
        cfg = self.cfg
        if cfg.index_n_heads > 0 and not cfg.index_tail:
            raise ValueError("index_kpool_always_select_tail false: the first tokens would attend nothing")
        streams = x[None, :].expand(cfg.hc_mult, -1).clone()
        for layer in range(cfg.n_layers):
            pre = f"model.layers.{layer}."
            post, comb, col = self.hc(pre + "hc_attn_", streams)
            h = rms_norm(col, self.w(pre + "input_layernorm.weight"), cfg.eps)
            a = self.kda(layer, h) if cfg.is_kda[layer] else self.mla(layer, h)
            streams = hc_apply(streams, post, comb, a)
            post, comb, col = self.hc(pre + "hc_ffn_", streams)
            h = rms_norm(col, self.w(pre + "post_attention_layernorm.weight"), cfg.eps)
            streams = hc_apply(streams, post, comb, self.mixer(layer, h))
        self.pos += self.pos_step
        self.last_hidden = streams.reshape(-1)
        x = streams.mean(0)
        return self.mv("lm_head.weight", rms_norm(x, self.w("model.norm.weight"), cfg.eps))

    # one decode step ------------------------------------------------------
    def step(self, token: int) -> torch.Tensor:
        cfg = self.cfg
        if not 0 <= token < cfg.vocab:
            raise ValueError(f"token {token} outside 0..{cfg.vocab - 1}")
        self.routes.append([])
        x = torch.from_numpy(self.c.tensor_row("model.embed_tokens.weight", token)).to(self.dtype)
        if cfg.hc_mult > 0:
            return self.step_mhc(x)
        use_ar = cfg.attn_res_block > 0
        blocks, ps, live = [], x, False
        for layer in range(cfg.n_layers):
            pre = f"model.layers.{layer}."
            if use_ar:
                ps, live = x, True
                if blocks:
                    x = attn_res(blocks, ps, self.w(pre + "self_attention_res_norm.weight"),
                                 self.w(pre + "self_attention_res_proj.weight"), cfg.eps)
                if layer % cfg.attn_res_block == 0:
                    blocks.append(ps)
                    live = False
            h = rms_norm(x, self.w(pre + "input_layernorm.weight"), cfg.eps)
            a = self.kda(layer, h) if cfg.is_kda[layer] else self.mla(layer, h)
            if use_ar:
                ps = ps + a if live else a
                live = True
                x = attn_res(blocks, ps, self.w(pre + "mlp_res_norm.weight"),
                             self.w(pre + "mlp_res_proj.weight"), cfg.eps)
            else:
                x = x + a
            h = rms_norm(x, self.w(pre + "post_attention_layernorm.weight"), cfg.eps)
            if self.c.has(pre + "block_sparse_moe.gate.weight"):
                f = self.moe(layer, h)
            else:
                f = self.ffn(pre + "mlp.", h)
            if use_ar:
                ps = ps + f
                x = ps
            else:
                x = x + f
        if use_ar and blocks:
            x = attn_res(blocks, x, self.w("model.output_attn_res_norm.weight"),
                         self.w("model.output_attn_res_proj.weight"), cfg.eps)
        self.pos += self.pos_step
        self.last_hidden = x
        return self.mv("lm_head.weight", rms_norm(x, self.w("model.norm.weight"), cfg.eps))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("container")
    ap.add_argument("--tokens", required=True, help="comma-separated token ids fed one by one")
    ap.add_argument("--float64", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("WASTE_ORACLE_THREADS", "2")))
    oracle = Oracle(Container(args.container), torch.float64 if args.float64 else torch.float32)
    for i, t in enumerate(int(s) for s in args.tokens.split(",")):
        logits = oracle.step(t)
        print(f"step {i}: token {t} -> argmax {int(torch.argmax(logits))} "
              f"max {float(logits.max()):.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
