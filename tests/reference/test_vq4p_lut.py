"""The oracle's VQ4P int8-LUT matvec (oracle.vq4p_lut_matvec) against a per-row scalar loop
written from waste-v0-reference.md section 2 (exact equality), and against the exact dense
W x within the int8 LUT error bound (so the emulation is neither a no-op nor wrong)."""
import os
import sys
import unittest

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle import vq4p_lut_matvec  # noqa: E402


def scalar_reference(x, idx, row_scales, books):
    n_stages, entries, vdim = books.shape
    nv = idx.shape[1]
    f32 = np.float32
    lut = np.zeros((nv, n_stages, entries), dtype=f32)
    for v in range(nv):
        for s in range(n_stages):
            for c in range(entries):
                acc = f32(0.0)
                for d in range(vdim):
                    acc = f32(acc + f32(x[v * vdim + d] * books[s, c, d]))
                lut[v, s, c] = acc
    blocks = []
    for b0 in range(0, nv, 32):
        mx = f32(np.abs(lut[b0:b0 + 32]).max())
        inv = f32(f32(127.0) / mx) if mx > 0 else f32(0.0)
        q = np.clip(np.rint((lut[b0:b0 + 32] * inv).astype(f32)), -127, 127).astype(np.int32)
        blocks.append((b0, q, f32(mx / f32(127.0))))
    y = np.zeros(idx.shape[0], dtype=f32)
    for r in range(idx.shape[0]):
        acc = f32(0.0)
        for b0, q, sc in blocks:
            total = 0
            for v in range(q.shape[0]):
                total += sum(int(q[v, s, idx[r, b0 + v, s]]) for s in range(n_stages))
            acc = f32(acc + f32(sc * f32(total)))
        y[r] = f32(acc * row_scales[r])
    return y


class Vq4pLut(unittest.TestCase):
    def setUp(self):
        rng = np.random.default_rng(5)
        self.rows, self.nv = 7, 40  # two LUT blocks, the second one short (8 positions)
        self.x = rng.normal(size=self.nv * 8).astype(np.float32)
        self.idx = rng.integers(0, 64, (self.rows, self.nv, 4)).astype(np.uint8)
        self.scales = rng.uniform(0.01, 0.05, self.rows).astype(np.float32)
        self.books = rng.uniform(-0.3, 0.3, (4, 64, 8)).astype(np.float32)

    def test_matches_scalar_loop_of_the_spec(self):
        got = vq4p_lut_matvec(torch.from_numpy(self.x), self.idx, self.scales, self.books).numpy()
        want = scalar_reference(self.x, self.idx, self.scales, self.books)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)

    def test_close_to_but_not_equal_to_exact_dense_product(self):
        w = self.books[np.arange(4)[None, None, :], self.idx].sum(2).reshape(self.rows, -1)
        exact = (w * self.scales[:, None]) @ self.x
        got = vq4p_lut_matvec(torch.from_numpy(self.x), self.idx, self.scales, self.books).numpy()
        err = np.abs(got - exact)
        # each of the nv*4 lookups is off by at most half an int8 step of its block
        lut = np.einsum("vd,sed->vse", self.x.reshape(self.nv, 8), self.books)
        bound = self.scales * 0.5 * 4 * sum(np.abs(lut[b:b + 32]).max() / 127 * min(32, self.nv - b)
                                            for b in range(0, self.nv, 32))
        self.assertTrue(bool((err <= bound * 1.001).all()))
        self.assertGreater(float(err.max()), 1e-6)


if __name__ == "__main__":
    unittest.main()
