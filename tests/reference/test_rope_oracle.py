"""The oracle's DeepSeek-V3 pieces against the published numbers (docs/design/deepseek.md):
YaRN frequencies and correction ranges for V3 and K2, the interleaved pairing, the mscale, and
the group-limited router on hand-made scores with known answers."""
import math
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle import apply_rope, route, yarn_inv_freq  # noqa: E402


class Yarn(unittest.TestCase):
    def test_v3_frequencies_keep_fast_pairs_and_divide_slow_ones_by_40(self):
        f = yarn_inv_freq(64, 10000.0, 40.0, 4096, 32.0, 1.0)
        plain = 10000.0 ** (-2.0 * torch.arange(32, dtype=torch.float64) / 64)
        # correction range [10, 23]: pairs <= 10 unchanged, >= 23 interpolated, ramp (i-10)/13
        self.assertTrue(torch.equal(f[:11], plain[:11]))
        self.assertTrue(torch.allclose(f[23:], plain[23:] / 40, rtol=0, atol=0))
        rho = (16 - 10) / 13
        self.assertAlmostEqual(float(f[16]), float(plain[16] * (1 - rho) + plain[16] / 40 * rho), places=15)

    def test_k2_frequencies_step_between_pairs_19_and_20(self):
        f = yarn_inv_freq(64, 50000.0, 32.0, 4096, 1.0, 1.0)
        plain = 50000.0 ** (-2.0 * torch.arange(32, dtype=torch.float64) / 64)
        self.assertTrue(torch.equal(f[:20], plain[:20]))
        self.assertTrue(torch.equal(f[20:], plain[20:] / 32))

    def test_mscale_squared_matches_the_published_values(self):
        for factor, m2 in ((40.0, 1.8738542), (32.0, 1.8132604)):
            m = 0.1 * math.log(factor) + 1.0
            self.assertAlmostEqual(m * m, m2, places=6)


class Pairing(unittest.TestCase):
    def test_consecutive_pairs_rotate_as_complex_numbers(self):
        x = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
        inv = torch.tensor([0.5, 0.25], dtype=torch.float64)
        y = apply_rope(x, 3, inv)
        want = []
        for i in range(2):
            a, b, phi = float(x[2 * i]), float(x[2 * i + 1]), 3 * float(inv[i])
            want += [a * math.cos(phi) - b * math.sin(phi), a * math.sin(phi) + b * math.cos(phi)]
        self.assertTrue(torch.allclose(y, torch.tensor(want, dtype=torch.float64), rtol=0, atol=1e-15))

    def test_scores_depend_only_on_the_position_difference(self):
        gen = torch.Generator().manual_seed(0)
        q, k = torch.randn(16, generator=gen, dtype=torch.float64), torch.randn(16, generator=gen, dtype=torch.float64)
        inv = yarn_inv_freq(16, 10000.0, 40.0, 4096, 32.0, 1.0)
        d1 = float(apply_rope(q, 9, inv) @ apply_rope(k, 4, inv))
        d2 = float(apply_rope(q, 105, inv) @ apply_rope(k, 100, inv))
        self.assertAlmostEqual(d1, d2, places=12)
        self.assertGreater(abs(d1 - float(apply_rope(q, 9, inv) @ apply_rope(k, 5, inv))), 1e-3)


class GroupRouting(unittest.TestCase):
    def test_groups_rank_by_top2_sum_not_by_max(self):
        # 4 groups of 4. Group 0 holds the single best score (0.9) but its top-2 sum is 0.9+0.1;
        # groups 1 and 2 win with 0.8+0.7 and 0.6+0.6. Keep 2 groups, top 3 experts.
        p = torch.tensor([0.9, 0.1, 0.0, 0.0,  0.8, 0.7, 0.0, 0.0,
                          0.6, 0.6, 0.5, 0.0,  0.3, 0.3, 0.3, 0.3], dtype=torch.float64)
        logits = torch.logit(p.clamp(1e-9, 1 - 1e-9))
        ids, w = route(logits, torch.zeros(16, dtype=torch.float64), 3, True, 2.5, "sigmoid", 4, 2)
        self.assertEqual(ids, [4, 5, 8])
        self.assertAlmostEqual(float(w.sum()), 2.5, places=12)

    def test_without_groups_the_best_expert_wins(self):
        p = torch.tensor([0.9, 0.1, 0.0, 0.0,  0.8, 0.7, 0.0, 0.0,
                          0.6, 0.6, 0.5, 0.0,  0.3, 0.3, 0.3, 0.3], dtype=torch.float64)
        logits = torch.logit(p.clamp(1e-9, 1 - 1e-9))
        ids, _ = route(logits, torch.zeros(16, dtype=torch.float64), 3, True, 1.0, "sigmoid", 1, 1)
        self.assertEqual(ids, [0, 4, 5])

    def test_equal_group_scores_keep_the_lower_group(self):
        p = torch.full((8,), 0.5, dtype=torch.float64)
        ids, _ = route(torch.logit(p), torch.zeros(8, dtype=torch.float64), 2, False, 1.0, "sigmoid", 4, 1)
        self.assertEqual(ids, [0, 1])


if __name__ == "__main__":
    torch.set_num_threads(2)
    unittest.main()
