"""Absorbed MLA (what the engine computes, waste-v0-reference.md 3.5) equals the oracle's
un-absorbed MLA (oracle.mla_unabsorbed) within 1e-5 relative, on random weights and histories.

Absorbed form per head h: q~ = W_kb,h^T q_nope,h; s_t = (q~ . c_t + q_rope,h . k_r,t) / sqrt(qd);
a = softmax(s); c~ = sum_t a_t c_t; o_h = W_vb,h c~.
"""
import math
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle import mla_unabsorbed  # noqa: E402


def mla_absorbed(q, c_hist, kr_hist, w_kv_b, nh, nope, vd):
    w = w_kv_b.view(nh, nope + vd, -1)
    out = []
    for h in range(nh):
        w_kb, w_vb = w[h, :nope], w[h, nope:]
        q_lat = w_kb.T @ q[h, :nope]
        s = (c_hist @ q_lat + kr_hist @ q[h, nope:]) * (1.0 / math.sqrt(q.shape[-1]))
        a = torch.softmax(s, dim=0)
        out.append(w_vb @ (a @ c_hist))
    return torch.stack(out)


class MlaAbsorption(unittest.TestCase):
    def run_case(self, seed, nh, nope, rope, vd, lora, T):
        gen = torch.Generator().manual_seed(seed)
        r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
        q = r(nh, nope + rope)
        c_hist, kr_hist = r(T, lora), r(T, rope)
        w = r(nh * (nope + vd), lora) / math.sqrt(lora)
        o_un = mla_unabsorbed(q, c_hist, kr_hist, w, nh, nope, vd)
        o_ab = mla_absorbed(q, c_hist, kr_hist, w, nh, nope, vd)
        rel = float((o_un - o_ab).abs().max() / o_un.abs().max())
        self.assertLess(rel, 1e-5)
        # float32 too: what the engine and the oracle actually run
        o32 = mla_absorbed(q.float(), c_hist.float(), kr_hist.float(), w.float(), nh, nope, vd)
        self.assertLess(float((o32.double() - o_un).abs().max() / o_un.abs().max()), 1e-5)
        return o_un

    def test_absorbed_equals_unabsorbed_kimi_linear_like(self):
        self.run_case(seed=0, nh=4, nope=16, rope=8, vd=16, lora=32, T=9)

    def test_absorbed_equals_unabsorbed_single_token(self):
        o = self.run_case(seed=1, nh=2, nope=8, rope=4, vd=12, lora=16, T=1)
        self.assertEqual(tuple(o.shape), (2, 12))

    def test_k_rope_is_shared_by_all_heads_and_unrotated(self):
        # Changing k_r must change every head's output (MQA-shared, not per head).
        gen = torch.Generator().manual_seed(2)
        q = torch.randn(3, 12, generator=gen, dtype=torch.float64)
        c, kr = torch.randn(5, 8, generator=gen, dtype=torch.float64), torch.randn(5, 4, generator=gen, dtype=torch.float64)
        w = torch.randn(3 * 16, 8, generator=gen, dtype=torch.float64)
        base = mla_unabsorbed(q, c, kr, w, 3, 8, 8)
        kr2 = kr.clone()
        kr2[0] += torch.randn(4, generator=gen, dtype=torch.float64)  # a constant shift would cancel in softmax
        moved = mla_unabsorbed(q, c, kr2, w, 3, 8, 8)
        self.assertTrue(bool(((base - moved).abs().amax(-1) > 1e-6).all()))


if __name__ == "__main__":
    torch.set_num_threads(2)
    unittest.main()
