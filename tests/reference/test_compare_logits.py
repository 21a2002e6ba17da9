"""compare_logits.py can fail: an exact dump passes, a 2e-3 error or a swapped argmax fails,
a malformed dump is refused with a message naming it. Dumps are produced here from the oracle
in float64 on a py_synth container (so the float32 oracle agrees with them to ~1e-6)."""
import io
import os
import shutil
import struct
import sys
import tempfile
import unittest

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_logits  # noqa: E402
import py_synth  # noqa: E402
from oracle import Oracle  # noqa: E402
from waste_container import Container  # noqa: E402

PROMPT = [1, 17, 42, 99, 5]


def write_dump(path, steps):
    with open(path, "wb") as f:
        f.write(struct.pack("<ii", len(steps), steps[0][1].size))
        for tok, logits in steps:
            f.write(struct.pack("<i", tok) + logits.astype("<f4").tobytes())


class CompareLogitsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="waste-cmp-")
        cls.dirs, cls.steps = {}, {}
        for preset in ("tiny", "tiny-k3"):
            d = os.path.join(cls.tmp, preset)
            py_synth.write_container(d, *py_synth.preset_config(preset), seed=11)
            oracle = Oracle(Container(d), torch.float64)
            steps, tok = [], None
            for t in PROMPT:
                steps.append((t, oracle.step(t).numpy().astype(np.float32)))
            for _ in range(3):  # greedy decode
                tok = int(np.argmax(steps[-1][1]))
                steps.append((tok, oracle.step(tok).numpy().astype(np.float32)))
            cls.dirs[preset], cls.steps[preset] = d, steps

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_compare(self, preset, steps, prompt=PROMPT, float64=False):
        path = os.path.join(self.tmp, "dump.bin")
        write_dump(path, steps)
        out = io.StringIO()
        ok = compare_logits.compare(self.dirs[preset], path, prompt, float64=float64, out=out)
        return ok, out.getvalue()

    def test_float64_oracle_dump_passes_for_both_presets(self):
        # Against the float64 oracle itself: a float32 replay can flip a near-tie in routing on
        # some CPUs' BLAS kernels (seen on an AMD EPYC VM: 9.9e-3 at step 4), which says nothing
        # about the comparison tool this test is for.
        for preset in ("tiny", "tiny-k3"):
            ok, text = self.run_compare(preset, self.steps[preset], float64=True)
            self.assertTrue(ok, text)
            self.assertIn("PASS", text)

    def test_prefill_reporting_only_its_last_token_is_aligned(self):
        steps = self.steps["tiny"][len(PROMPT) - 1:]
        ok, text = self.run_compare("tiny", steps)
        self.assertTrue(ok, text)

    def test_error_above_tolerance_fails(self):
        steps = [(t, l.copy()) for t, l in self.steps["tiny"]]
        steps[6][1][3] += 2e-3
        ok, text = self.run_compare("tiny", steps)
        self.assertFalse(ok)
        self.assertIn("step   6", text.split("FAIL")[0].splitlines()[-1])

    def test_changed_argmax_fails(self):
        steps = [(t, l.copy()) for t, l in self.steps["tiny-k3"]]
        logits = steps[2][1]
        logits[int(np.argmin(logits))] = logits.max() + 5e-4  # inside tol, new argmax
        ok, text = self.run_compare("tiny-k3", steps)
        self.assertFalse(ok)
        self.assertIn("argmax differs", text)

    def test_truncated_dump_is_refused(self):
        path = os.path.join(self.tmp, "short.bin")
        write_dump(path, self.steps["tiny"])
        size = os.path.getsize(path)
        with open(path, "r+b") as f:
            f.truncate(size - 4)
        with self.assertRaises(ValueError) as cm:
            compare_logits.compare(self.dirs["tiny"], path, PROMPT, out=io.StringIO())
        self.assertEqual(str(cm.exception),
                         f"{path}: {size - 4} bytes, header (n_steps=8, vocab=256) implies {size}")


if __name__ == "__main__":
    torch.set_num_threads(2)
    unittest.main()
