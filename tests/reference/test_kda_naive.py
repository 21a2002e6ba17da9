"""Checks the oracle's KDA step (oracle.kda_recurrent_step) against two other formulations.

1. The recurrence written in fla's conventions (batched [B, T, H, K] tensors, q pre-scaled by
   K^-0.5 and L2-normalised outside the step, g as per-key-channel log-decay, beta per head,
   beta folded into the key of the rank-1 update).
2. A chunked form derived here: inside a chunk with cumulative log-decay G_t = sum_{i<=t} g_i,
       S_t = diag(e^{G_t}) S_0 + sum_{i<=t} diag(e^{G_t - G_i}) k_i d_i^T,
       d_i = beta_i (v_i - S_0^T (e^{G_i} * k_i) - sum_{j<i} (k_i . e^{G_i - G_j} * k_j) d_j),
   i.e. a unit lower-triangular system (I + L) D = beta (V - Ktilde S_0) solved per chunk, and
       o_t = S_0^T (e^{G_t} * q_t) + sum_{i<=t} (q_t . e^{G_t - G_i} * k_i) d_i.
Both must equal the token-by-token oracle to ~1e-5 on random inputs (float64 for the chunked
form's solve, to separate formulation errors from rounding).
"""
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle import kda_recurrent_step  # noqa: E402


def l2n(x):
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-12)


def oracle_sequence(q, k, v, g, beta, S0=None):
    """Token-by-token oracle over [T, H, *] inputs; returns (o [T, H, V], S)."""
    T, H, K = q.shape
    S = torch.zeros(H, K, v.shape[-1], dtype=q.dtype) if S0 is None else S0.clone()
    outs = []
    for t in range(T):
        o, S = kda_recurrent_step(S, q[t], k[t], v[t], g[t], beta[t])
        outs.append(o)
    return torch.stack(outs), S


def fla_convention_recurrent(q, k, v, g, beta):
    """[B, T, H, K] layout; q, k already L2-normalised; q scaled here; beta scales the key."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    q = q * K ** -0.5
    S = torch.zeros(B, H, K, V, dtype=q.dtype)
    o = torch.empty(B, T, H, V, dtype=q.dtype)
    for t in range(T):
        S = S * g[:, t].exp().unsqueeze(-1)
        pred = torch.einsum("bhk,bhkv->bhv", k[:, t], S)
        S = S + torch.einsum("bhk,bhv->bhkv", beta[:, t].unsqueeze(-1) * k[:, t], v[:, t] - pred)
        o[:, t] = torch.einsum("bhk,bhkv->bhv", q[:, t], S)
    return o, S


def chunked_kda(q, k, v, g, beta, chunk):
    """Chunked form for one head: q, k [T, K] normalised (q scaled), v [T, V], g [T, K], beta [T]."""
    T, K = q.shape
    S = torch.zeros(K, v.shape[-1], dtype=q.dtype)
    outs = []
    for c0 in range(0, T, chunk):
        qc, kc, vc, gc, bc = (x[c0:c0 + chunk] for x in (q, k, v, g, beta))
        n = qc.shape[0]
        G = gc.cumsum(0)                                              # [n, K]
        decay = (G[:, None, :] - G[None, :, :]).exp()                  # [i, j, K] = e^{G_i - G_j}
        strict = torch.tril(torch.ones(n, n, dtype=torch.bool), diagonal=-1)
        causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
        Lmat = torch.einsum("ik,ijk,jk->ij", kc, decay, kc) * bc[:, None]
        Lmat = torch.where(strict, Lmat, torch.zeros_like(Lmat))
        rhs = bc[:, None] * (vc - (G.exp() * kc) @ S)
        D = torch.linalg.solve_triangular(torch.eye(n, dtype=q.dtype) + Lmat, rhs,
                                          upper=False, unitriangular=True)
        Aqk = torch.einsum("tk,tik,ik->ti", qc, decay, kc)
        Aqk = torch.where(causal, Aqk, torch.zeros_like(Aqk))
        outs.append((G.exp() * qc) @ S + Aqk @ D)
        last = G[-1]
        S = last.exp()[:, None] * S + ((last[None, :] - G).exp() * kc).T @ D
    return torch.cat(outs), S


def random_inputs(T, H, K, V, seed, dtype=torch.float32, bounded=False):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=dtype)  # noqa: E731
    q, k, v = r(T, H, K), r(T, H, K), r(T, H, V)
    z = r(T, H, K)
    a = torch.exp(r(H) * 0.5)[None, :, None]
    g = -5.0 * torch.sigmoid(a * z) if bounded else -a * torch.nn.functional.softplus(z)
    beta = torch.sigmoid(r(T, H))
    return q, k, v, g, beta


class KdaAgainstFlaConventions(unittest.TestCase):
    def check(self, bounded, seed):
        T, H, K, V = 24, 3, 16, 16
        q, k, v, g, beta = random_inputs(T, H, K, V, seed, bounded=bounded)
        o_ref, S_ref = oracle_sequence(q, k, v, g, beta)
        o_fla, S_fla = fla_convention_recurrent(l2n(q)[None], l2n(k)[None], v[None], g[None],
                                                beta[None])
        self.assertLess(float((o_ref - o_fla[0]).abs().max()), 1e-5)
        self.assertLess(float((S_ref - S_fla[0]).abs().max()), 1e-5)

    def test_softplus_gate_matches_fla_recurrence(self):
        self.check(bounded=False, seed=1)

    def test_bounded_sigmoid_gate_matches_fla_recurrence(self):
        self.check(bounded=True, seed=2)


class KdaAgainstChunkedForm(unittest.TestCase):
    def check(self, bounded, seed, chunk):
        T, H, K, V = 37, 2, 16, 12  # T not a multiple of the chunk: last chunk is partial
        q, k, v, g, beta = random_inputs(T, H, K, V, seed, dtype=torch.float64, bounded=bounded)
        o_ref, S_ref = oracle_sequence(q.float(), k.float(), v.float(), g.float(), beta.float())
        for h in range(H):
            o_c, S_c = chunked_kda(l2n(q[:, h]) * K ** -0.5, l2n(k[:, h]), v[:, h], g[:, h],
                                   beta[:, h], chunk)
            self.assertLess(float((o_ref[:, h].double() - o_c).abs().max()), 1e-5, f"head {h}")
            self.assertLess(float((S_ref[h].double() - S_c).abs().max()), 1e-5, f"head {h}")

    def test_chunked_form_equals_recurrence_softplus_gate(self):
        self.check(bounded=False, seed=3, chunk=8)

    def test_chunked_form_equals_recurrence_bounded_gate(self):
        self.check(bounded=True, seed=4, chunk=16)

    def test_a_wrong_order_is_detected(self):
        # Guard against a vacuous comparison: the delta rule against the UNdecayed state
        # must differ from the oracle by far more than the tolerance.
        T, H, K, V = 12, 2, 8, 8
        q, k, v, g, beta = random_inputs(T, H, K, V, 5)
        o_ref, _ = oracle_sequence(q, k, v, g, beta)
        S = torch.zeros(H, K, V)
        qn, kn = l2n(q) * K ** -0.5, l2n(k)
        worst = 0.0
        for t in range(T):
            u = torch.einsum("hkv,hk->hv", S, kn[t])
            S = S * g[t].exp()[:, :, None] + kn[t][:, :, None] * (beta[t][:, None] * (v[t] - u))[:, None]
            worst = max(worst, float((torch.einsum("hkv,hk->hv", S, qn[t]) - o_ref[t]).abs().max()))
        self.assertGreater(worst, 1e-2)


if __name__ == "__main__":
    torch.set_num_threads(2)
    unittest.main()
