"""kjv-mini: the Kimi-Linear forward pass, batched over [B, T] for training (PyTorch, CPU).

The maths is tests/reference/oracle.py's, one sequence at a time turned into a batch: KDA by
its per-token delta-rule recurrence (decay, then the delta rule against the decayed state,
output from the updated state), MLA un-absorbed with NoPE (mla_use_nope: the rope dims are
plain shared dims), MoE with sigmoid scores, top-k by score + e_score_correction_bias, weights
from the unbiased scores renormalised, times routed_scaling_factor, plus the shared expert.
Parameter names are the Hugging Face checkpoint's, except the routed experts, which are held
stacked (experts_w1 [E, I, H] ...) and split into experts.{e}.w1.weight on export.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def lin(i, o):
    return nn.Linear(i, o, bias=False)


class Norm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))


class Conv(nn.Module):
    def __init__(self, c, k):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(c, 1, k).uniform_(-k ** -0.5, k ** -0.5))


CHUNK = 8


def kda_naive(qn, kn, v, g, beta):
    """The oracle's recurrence, token by token. qn/kn normalised [B, T, H, D], v [B, T, H, V],
    g [B, T, H, D] log-decay, beta [B, T, H]. Returns o [B, T, H, V]."""
    B, T, H, D = kn.shape
    S = kn.new_zeros(B, H, D, v.shape[-1])
    decay = torch.exp(g)
    outs = []
    for t in range(T):
        S = S * decay[:, t, :, :, None]
        kt = kn[:, t]
        u = torch.einsum("bhkv,bhk->bhv", S, kt)
        d = beta[:, t, :, None] * (v[:, t] - u)
        S = S + kt[..., None] * d[..., None, :]
        outs.append(torch.einsum("bhkv,bhk->bhv", S, qn[:, t]))
    return torch.stack(outs, 1)


def kda_chunked(qn, kn, v, g, beta, C=CHUNK):
    """The same recurrence in chunks of C tokens (equal up to rounding; tested against
    kda_naive). With G the in-chunk cumulative log-decay and S0 the state entering a chunk:
    S_t = e^G_t * S0 + sum_{s<=t} e^(G_t - G_s) * k_s u_s^T, where the deltas u solve the unit
    lower-triangular system (I + diag(beta) A) U = diag(beta) (V - (e^G * K) S0) with
    A_ts = sum_d k_t k_s e^(G_t - G_s) (s < t). Every exponent is <= 0 (g <= 0), so nothing
    overflows; only the pass over chunks is sequential."""
    B, T, H, D = kn.shape
    Vd = v.shape[-1]
    N = T // C
    sh = lambda x: x.reshape(B, N, C, H, -1).permute(0, 3, 1, 2, 4)  # noqa: E731  [B, H, N, C, *]
    q, k, vv, G = sh(qn), sh(kn), sh(v), sh(g).cumsum(3)
    b = beta.reshape(B, N, C, H).permute(0, 3, 1, 2)            # [B, H, N, C]
    incl = torch.ones(C, C, dtype=torch.bool).tril()
    diff = (G[..., :, None, :] - G[..., None, :, :]).masked_fill(~incl[:, :, None], float("-inf"))
    E = torch.exp(diff)                                          # [B, H, N, C(t), C(s), D]
    A = (k[..., :, None, :] * k[..., None, :, :] * E).sum(-1).masked_fill(~incl.tril(-1), 0.0)
    Bm = (q[..., :, None, :] * k[..., None, :, :] * E).sum(-1)   # inclusive of s = t
    eye = torch.eye(C, dtype=kn.dtype)
    Tinv = torch.linalg.solve_triangular(eye + b[..., None] * A, eye.expand(B, H, N, C, C),
                                         upper=False, unitriangular=True)
    eG = torch.exp(G)
    W = Tinv @ (b[..., None] * k * eG)
    U0 = Tinv @ (b[..., None] * vv)
    Kd = k * torch.exp(G[..., -1:, :] - G)                       # each key decayed to the chunk end
    gC = torch.exp(G[..., -1, :])                                # [B, H, N, D]
    qt = q * eG
    S = kn.new_zeros(B, H, D, Vd)
    outs = []
    for n in range(N):
        U = U0[:, :, n] - W[:, :, n] @ S
        outs.append(qt[:, :, n] @ S + Bm[:, :, n] @ U)
        S = gC[:, :, n, :, None] * S + Kd[:, :, n].transpose(-1, -2) @ U
    o = torch.stack(outs, 2)                                     # [B, H, N, C, V]
    return o.permute(0, 2, 3, 1, 4).reshape(B, T, H, Vd)


class KDA(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        lac = cfg["linear_attn_config"]
        H, D, K, hid = lac["num_heads"], lac["head_dim"], lac["short_conv_kernel_size"], cfg["hidden_size"]
        C = H * D
        self.H, self.D, self.K, self.eps = H, D, K, cfg["rms_norm_eps"]
        self.q_proj, self.k_proj, self.v_proj = lin(hid, C), lin(hid, C), lin(hid, C)
        self.q_conv1d, self.k_conv1d, self.v_conv1d = Conv(C, K), Conv(C, K), Conv(C, K)
        self.f_a_proj, self.f_b_proj = lin(hid, D), lin(D, C)
        self.b_proj = lin(hid, H)
        self.A_log = nn.Parameter(torch.log(torch.empty(1, 1, H, 1).uniform_(1, 16)))
        dt = torch.exp(torch.empty(C).uniform_(math.log(1e-3), math.log(1e-1)))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1(dt)
        self.g_a_proj, self.g_b_proj = lin(hid, D), lin(D, C)
        self.o_norm = Norm(D)
        self.o_proj = lin(C, hid)

    def conv(self, x, conv):
        # Depthwise causal conv, w[:, K-1] on the newest sample, zero history, then SiLU.
        B, T, C = x.shape
        y = F.conv1d(F.pad(x.transpose(1, 2), (self.K - 1, 0)), conv.weight, groups=C)
        return F.silu(y.transpose(1, 2))

    def forward(self, x):
        B, T, _ = x.shape
        H, D = self.H, self.D
        q = self.conv(self.q_proj(x), self.q_conv1d).view(B, T, H, D)
        k = self.conv(self.k_proj(x), self.k_conv1d).view(B, T, H, D)
        v = self.conv(self.v_proj(x), self.v_conv1d).view(B, T, H, D)
        z = (self.f_b_proj(self.f_a_proj(x)) + self.dt_bias).view(B, T, H, D)
        a = torch.exp(self.A_log.view(H))[:, None]
        g = -a * F.softplus(z)                               # [B, T, H, D] log-decay per key channel
        beta = torch.sigmoid(self.b_proj(x))                  # [B, T, H]
        qn = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-12) * D ** -0.5
        kn = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-12)
        o = kda_chunked(qn, kn, v, g, beta) if T % CHUNK == 0 else kda_naive(qn, kn, v, g, beta)
        gate = self.g_b_proj(self.g_a_proj(x)).view(B, T, H, D)
        o = rms_norm(o, self.o_norm.weight, self.eps) * torch.sigmoid(gate)
        return self.o_proj(o.reshape(B, T, H * D))


class MLA(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        hid = cfg["hidden_size"]
        self.nh, self.nope, self.rope, self.vd = (cfg[k] for k in ("num_attention_heads", "qk_nope_head_dim",
                                                                   "qk_rope_head_dim", "v_head_dim"))
        self.lora, self.eps = cfg["kv_lora_rank"], cfg["rms_norm_eps"]
        self.q_proj = lin(hid, self.nh * (self.nope + self.rope))
        self.kv_a_proj_with_mqa = lin(hid, self.lora + self.rope)
        self.kv_a_layernorm = Norm(self.lora)
        self.kv_b_proj = lin(self.lora, self.nh * (self.nope + self.vd))
        self.o_proj = lin(self.nh * self.vd, hid)

    def forward(self, x):
        B, T, _ = x.shape
        nh, nope, rope, vd = self.nh, self.nope, self.rope, self.vd
        q = self.q_proj(x).view(B, T, nh, nope + rope)
        ckv = self.kv_a_proj_with_mqa(x)
        c = rms_norm(ckv[..., :self.lora], self.kv_a_layernorm.weight, self.eps)
        k_rope = ckv[..., self.lora:]                         # NoPE: shared by all heads, not rotated
        kv = self.kv_b_proj(c).view(B, T, nh, nope + vd)
        k = torch.cat([kv[..., :nope], k_rope[:, :, None, :].expand(B, T, nh, rope)], -1)
        v = kv[..., nope:]
        scores = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(nope + rope)
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        attn = torch.softmax(scores.masked_fill(mask, float("-inf")), -1)
        o = torch.einsum("bhts,bshd->bthd", attn, v)
        return self.o_proj(o.reshape(B, T, nh * vd))


class FFN(nn.Module):
    def __init__(self, hid, inter):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = lin(hid, inter), lin(hid, inter), lin(inter, hid)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Gate(nn.Module):
    def __init__(self, E, hid):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(E, hid) * 0.02)
        # Aux-loss-free balancing (DeepSeek-V3): moved by the sign of the load error, not by SGD.
        self.register_buffer("e_score_correction_bias", torch.zeros(E))


class MoE(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        hid, I, E = cfg["hidden_size"], cfg["moe_intermediate_size"], cfg["num_experts"]
        self.E, self.k = E, cfg["num_experts_per_token"]
        self.renorm, self.scale = cfg["moe_renormalize"], cfg["routed_scaling_factor"]
        self.gate = Gate(E, hid)
        std = 0.02
        self.experts_w1 = nn.Parameter(torch.randn(E, I, hid) * std)
        self.experts_w3 = nn.Parameter(torch.randn(E, I, hid) * std)
        self.experts_w2 = nn.Parameter(torch.randn(E, hid, I) * std)
        self.shared_experts = FFN(hid, I * cfg["num_shared_experts"])
        self.last_load = None

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        p = torch.sigmoid(x @ self.gate.weight.t())
        sel = (p + self.gate.e_score_correction_bias).detach()
        ids = torch.topk(sel, self.k, dim=-1).indices         # [N, k]
        w = p.gather(1, ids)
        if self.renorm and self.k > 1:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        w = w * self.scale
        self.last_load = torch.bincount(ids.reshape(-1), minlength=self.E).float()
        out = torch.zeros_like(x)
        flat_ids, flat_w = ids.reshape(-1), w.reshape(-1)
        tok = torch.arange(x.shape[0]).repeat_interleave(self.k)
        for e in range(self.E):
            m = flat_ids == e
            if not bool(m.any()):
                continue
            t = tok[m]
            xe = x[t]
            h = F.silu(xe @ self.experts_w1[e].t()) * (xe @ self.experts_w3[e].t())
            out.index_add_(0, t, (h @ self.experts_w2[e].t()) * flat_w[m][:, None])
        out = out + self.shared_experts(x)
        return out.view(shape)

    @torch.no_grad()
    def update_bias(self, rate):
        load = self.last_load
        self.gate.e_score_correction_bias += rate * torch.sign(load.mean() - load)


class Layer(nn.Module):
    def __init__(self, cfg, i):
        super().__init__()
        hid = cfg["hidden_size"]
        self.input_layernorm, self.post_attention_layernorm = Norm(hid), Norm(hid)
        self.eps = cfg["rms_norm_eps"]
        kda = (i + 1) in cfg["linear_attn_config"]["kda_layers"]
        self.self_attn = KDA(cfg) if kda else MLA(cfg)
        if i >= cfg["first_k_dense_replace"]:
            self.block_sparse_moe = MoE(cfg)
        else:
            self.mlp = FFN(hid, cfg["intermediate_size"])

    def forward(self, x):
        x = x + self.self_attn(rms_norm(x, self.input_layernorm.weight, self.eps))
        h = rms_norm(x, self.post_attention_layernorm.weight, self.eps)
        ffn = self.block_sparse_moe if hasattr(self, "block_sparse_moe") else self.mlp
        return x + ffn(h)


class Inner(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList(Layer(cfg, i) for i in range(cfg["num_hidden_layers"]))
        self.norm = Norm(cfg["hidden_size"])


class KimiMini(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Inner(cfg)
        self.lm_head = lin(cfg["hidden_size"], cfg["vocab_size"])
        for name, p in self.named_parameters():
            if p.dim() == 2 and "gate.weight" not in name:
                nn.init.normal_(p, std=0.02)
                if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                    p.data /= math.sqrt(2 * cfg["num_hidden_layers"])
        for layer in self.model.layers:
            if hasattr(layer, "block_sparse_moe"):
                layer.block_sparse_moe.experts_w2.data /= math.sqrt(2 * cfg["num_hidden_layers"])

    def forward(self, ids):
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x)
        return self.lm_head(rms_norm(x, self.model.norm.weight, self.cfg["rms_norm_eps"]))

    def moe_layers(self):
        return [l.block_sparse_moe for l in self.model.layers if hasattr(l, "block_sparse_moe")]

    def hf_state(self) -> dict:
        """name -> float32 tensor, the checkpoint's names (experts split per expert)."""
        out = {}
        for name, t in self.state_dict().items():
            if ".experts_w" in name:
                base, kind = name.rsplit(".experts_", 1)
                for e in range(t.shape[0]):
                    out[f"{base}.experts.{e}.{kind}.weight"] = t[e].clone()
            else:
                out[name] = t.clone()
        return out

    def load_hf_state(self, sd: dict) -> None:
        own = {}
        for name in self.state_dict():
            if ".experts_w" in name:
                base, kind = name.rsplit(".experts_", 1)
                E = self.cfg["num_experts"]
                own[name] = torch.stack([sd[f"{base}.experts.{e}.{kind}.weight"] for e in range(E)])
            else:
                own[name] = sd[name]
        self.load_state_dict(own)
