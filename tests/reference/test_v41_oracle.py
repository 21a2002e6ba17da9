"""The DeepSeek-V4.1 whole-model oracle (v41_oracle.py) on py_synth.py's tiny-v41 container, without
the engine: it runs, its chunked calls equal its decode steps, its stateful CSA2 equals
csa2_oracle's one-shot stack, every mechanism moves the logits, the Engram rows decode.
Run through run_unit.py (skip 77 without torch)."""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import unittest

import io
import json
import struct

import numpy as np
import torch

try:
    import sympy  # noqa: F401  (py_synth's tiny-v41 draws its Engram primes with it)
except ImportError as e:  # pragma: no cover
    print(f"SKIPPED: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_logits  # noqa: E402
import py_synth  # noqa: E402
from v41_oracle import ABLATIONS, EngramTable, V41Oracle, compare_traces, engram_row, write_trace  # noqa: E402

# 44 tokens: past the window 8 five times; 22 groups at ratio 2 and 44 at ratio 1 against
# index_topk 5 and 3 candidate blocks of 4 (gate_temp changes a selection past token 16).
TOKENS = [(i * 37 + 11) % 300 for i in range(44)]
CHUNK_TOL = 1e-9
MATTERS = 1e-3


class V41OracleTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="v41-oracle-")
        cls.container = os.path.join(cls.dir, "tiny-v41")
        cfg, quant = py_synth.preset_config("tiny-v41")
        py_synth.write_container(cls.container, cfg, quant, seed=0)
        cls.cfg = cfg
        cls.decode = V41Oracle(cls.container)
        cls.logits = torch.cat([cls.decode.forward([t]) for t in TOKENS])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_runs_sparse_at_both_levels(self):
        o, cfg = self.decode, self.cfg
        self.assertEqual(tuple(self.logits.shape), (len(TOKENS), cfg["vocab_size"]))
        self.assertTrue(bool(torch.isfinite(self.logits).all()))
        self.assertGreater(float(self.logits.std()), 0.1)
        for L, ratio in enumerate(cfg["compress_ratios"]):
            rows = [step["attended"].get(L) for step in o.trace]
            if ratio == 0:
                self.assertTrue(all(r is None for r in rows), f"window-only layer {L} attends groups")
                continue
            sparse = sum(1 for p, r in enumerate(rows) if len(r) < (p + 1) // ratio)
            print(f"layer {L} (ratio {ratio}): {sparse} of {len(TOKENS)} tokens attend a sparse set")
            self.assertGreater(sparse, 10, f"layer {L}")
            self.assertTrue(all(len(r) <= cfg["index_topk"] for r in rows))
        # Layer 4 ranks inside layer 3's candidate blocks: every pick lies in a kept block, the
        # newest block is always kept, and the blocks leave visible groups out (two-level sparse).
        B, KB = cfg["candidate_block_size"], cfg["candidate_topk_blocks"]
        dropped = 0
        for p, step in enumerate(o.trace):
            blocks = step["blocks"][3]
            nb = -(-(p + 1) // B)
            self.assertEqual(len(blocks), min(nb, KB))
            self.assertIn(nb - 1, blocks)
            self.assertTrue(all(j // B in blocks for j in step["attended"][4]), f"token {p}")
            dropped += nb > KB
        self.assertGreater(dropped, 20)
        for step in o.trace:
            self.assertEqual(sorted(step["experts"]), list(range(cfg["num_hidden_layers"])))
            self.assertTrue(all(len(set(ids)) == cfg["num_experts_per_token"] for ids in step["experts"].values()))

    def test_chunked_equals_decode_steps(self):
        for chunk in (2, 5, 16, len(TOKENS)):
            o = V41Oracle(self.container)
            got = torch.cat([o.forward(TOKENS[b:b + chunk]) for b in range(0, len(TOKENS), chunk)])
            diff = float((got - self.logits).abs().max())
            print(f"calls of {chunk} tokens: max |chunked - decode| = {diff:.3e}")
            self.assertLessEqual(diff, CHUNK_TOL)
            self.assertEqual(o.trace, self.decode.trace, f"calls of {chunk}: experts or attended positions differ")

    def test_stateful_csa2_equals_one_shot_stack(self):
        worst, differ = self.decode.check_against_csa2()
        print(f"stateful CSA2 vs csa2_oracle.Case.run_stack: max |diff| {worst:.3e}, differing {differ}")
        self.assertLessEqual(worst, CHUNK_TOL)
        self.assertEqual(differ, [])

    def test_every_mechanism_moves_the_logits(self):
        for name in ABLATIONS:
            o = V41Oracle(self.container, ablate=[name])
            moved = float((o.forward(TOKENS) - self.logits).abs().max())
            print(f"without {name}: the logits move by {moved:.3e}")
            self.assertGreater(moved, MATTERS, name)
            if name in ("candidates", "gate", "sink"):  # the CSA2 ablations agree with csa2_oracle too
                worst, differ = o.check_against_csa2()
                self.assertLessEqual(worst, CHUNK_TOL, name)
                self.assertEqual(differ, [], name)

    def test_image_tokens(self):
        # Image-span tokens: the router's bias_vl and no Engram update (gate 0) change the logits;
        # chunked equals decode steps with the flags too.
        image = [0] * 10 + [1] * 6 + [0] * 8
        toks = TOKENS[:24]
        a = V41Oracle(self.container)
        with_img = torch.cat([a.forward([t], [f]) for t, f in zip(toks, image)])
        b = V41Oracle(self.container)
        chunked = torch.cat([b.forward(toks[i:i + 5], image[i:i + 5]) for i in range(0, 24, 5)])
        self.assertLessEqual(float((with_img - chunked).abs().max()), CHUNK_TOL)
        self.assertGreater(float((with_img - self.logits[:24]).abs().max()), MATTERS)
        self.assertTrue(any(a.trace[p]["experts"] != self.decode.trace[p]["experts"] for p in range(10, 16)))

    def test_image_span_inputs(self):
        # Image-span tokens fed with input vectors (the engine's embeddings): chunked calls with
        # the span inside a chunk equal decode steps; the span's token ids do not matter (DEAD in
        # the n-gram history, their rows replaced); bias_vl moves the selection of the span's
        # tokens at layer 0 (before any Engram layer, so the bias alone), and text tokens
        # before the span route as without it.
        toks = TOKENS[:24]
        rng = np.random.default_rng(5)
        embeds = [None] * 24
        for p in range(10, 16):
            embeds[p] = rng.normal(0.0, 1.0, self.cfg["hidden_size"]).astype(np.float32).astype(np.float64)
        a = V41Oracle(self.container)
        steps = torch.cat([a.forward([t], embeds=[e]) for t, e in zip(toks, embeds)])
        b = V41Oracle(self.container)
        chunked = torch.cat([b.forward(toks[i:i + 7], embeds=embeds[i:i + 7]) for i in range(0, 24, 7)])
        self.assertLessEqual(float((steps - chunked).abs().max()), CHUNK_TOL)
        self.assertEqual(a.trace, b.trace)
        other = [(t + 101) % self.cfg["vocab_size"] if e is not None else t for t, e in zip(toks, embeds)]
        one_call = V41Oracle(self.container).forward(toks, embeds=embeds)
        self.assertEqual(float((V41Oracle(self.container).forward(other, embeds=embeds) - one_call).abs().max()), 0.0)
        self.assertGreater(float((steps - self.logits[:24]).abs().max()), MATTERS)
        text = V41Oracle(self.container)
        text.cfg.vl_bias = 0
        moved = float((text.forward(toks, embeds=embeds) - steps).abs().max())
        differ = [p for p in range(10, 16) if text.trace[p]["experts"][0] != a.trace[p]["experts"][0]]
        print(f"image span: bias_vl changes layer 0's experts of {len(differ)} of 6 tokens, the logits by {moved:.3e}")
        self.assertGreaterEqual(len(differ), 3)
        self.assertGreater(moved, MATTERS)
        self.assertEqual([s["experts"] for s in text.trace[:10]], [s["experts"] for s in a.trace[:10]])

    def write_dump(self, path, steps):
        with open(path, "wb") as f:
            f.write(struct.pack("<ii", len(steps), self.cfg["vocab_size"]))
            for tok, logits in steps:
                f.write(struct.pack("<i", tok) + logits.astype("<f4").tobytes())

    def test_run_diff_path(self):
        # compare_logits (run_diff.py's check) on a V4.1 container: a dump of the oracle's own
        # logits in float32 passes at 1e-4 with the ablations moving the logits past 1e-2; 2e-3
        # added to one logit fails; the trace written and compared with itself passes, and with
        # one expert id changed fails.
        prompt = TOKENS[:30]
        ref = self.logits.numpy()
        steps = [(t, ref[i]) for i, t in enumerate(TOKENS)]
        dump = os.path.join(self.dir, "dump.bin")
        trace = os.path.join(self.dir, "trace.json")
        self.write_dump(dump, steps)
        out = io.StringIO()
        ok = compare_logits.compare(self.container, dump, prompt, tol=1e-4, float64=True, out=out,
                                    ablate=[("attn_sink", "0"), ("hc_single_pass", "0"), ("index_topk", "4096"),
                                            ("swiglu_limit", "0"), ("gate_temp", "1"), ("compressor_gate", "0"),
                                            ("engram", "0"), ("candidate_source", "-1")],
                                    trace_out=trace)
        print(out.getvalue())
        self.assertTrue(ok, out.getvalue())
        out = io.StringIO()
        self.assertTrue(compare_logits.compare(self.container, dump, prompt, tol=1e-4, out=out, engine_trace=trace),
                        out.getvalue())
        with open(trace) as f:
            bad = json.load(f)
        bad[13]["experts"]["2"][0] = (bad[13]["experts"]["2"][0] + 1) % 8
        with open(trace, "w") as f:
            json.dump(bad, f)
        out = io.StringIO()
        self.assertFalse(compare_logits.compare(self.container, dump, prompt, tol=1e-4, out=out, engine_trace=trace))
        self.assertIn("token 13: layer 2 experts", out.getvalue())
        off = [(t, l.copy()) for t, l in steps]
        off[14][1][5] += 2e-3
        self.write_dump(dump, off)
        out = io.StringIO()
        self.assertFalse(compare_logits.compare(self.container, dump, prompt, tol=1e-3, out=out))
        self.assertIn("step  14", out.getvalue().split("<-- FAIL")[0].splitlines()[-1])

    def test_trace_near_ties(self):
        # A difference in the attended groups is allowed only where the oracle recorded a near tie
        # (equal relu-zero index scores do occur here); elsewhere it is reported.
        path = os.path.join(self.dir, "ties.json")
        write_trace(self.decode, path)
        self.assertEqual(compare_traces(self.decode.trace, path), [])
        with open(path) as f:
            base = json.load(f)
        tied = [(p, L) for p, s in enumerate(base) for L in s["ties"]]
        self.assertTrue(tied, "no near tie in this run: the allowance is not exercised")
        p, L = tied[0]
        base[p]["attended"][str(L)] = base[p]["attended"][str(L)][:-1] + [999]
        free = next(q for q, s in enumerate(base) if not s["ties"] and "4" in s["attended"])
        for case, want in ((None, 0), (free, 1)):
            trace = json.loads(json.dumps(base))
            if case is not None:
                trace[case]["attended"]["4"] = trace[case]["attended"]["4"][:-1] + [999]
            with open(path, "w") as f:
                json.dump(trace, f)
            errs = compare_traces(self.decode.trace, path)
            self.assertEqual(len([e for e in errs if e.startswith("token")]), want, errs)

    def test_engram_rows_decode(self):
        # The writer's rows (fp16 scale per 32, round half to even) read back within half a step;
        # 4- and 8-bit tables; header fields checked by the reader.
        rng = np.random.default_rng(7)
        for bits in (8, 4):
            row = rng.normal(0, 1, 64).astype(np.float32)
            raw = py_synth.encode_engram_row(bits, row)
            self.assertEqual(len(raw), py_synth.engram_row_bytes(bits, 64))
            got = engram_row(bits, raw, 64)
            step = np.repeat(np.abs(row.reshape(-1, 32)).max(-1) / (127 if bits == 8 else 7), 32)
            self.assertTrue(np.all(np.abs(got - row) <= 0.5 * step * 1.01 + 1e-6), bits)
            self.assertGreater(np.abs(got).max(), 0.0)
        for layer, bits in zip(self.cfg["engram_layer_ids"], py_synth.V41_ENGRAM["bits"]):
            t = EngramTable(os.path.join(self.container, f"engram-L{layer}.bin"), layer, 32)
            self.assertEqual((t.bits, t.rows), (bits, self.cfg["engram_num_embeddings"][layer == 3]))
            self.assertTrue(np.isfinite(t.row(t.rows - 1)).all())
            with self.assertRaisesRegex(ValueError, "outside"):
                t.row(t.rows)
            with self.assertRaisesRegex(ValueError, "does not describe layer 9"):
                EngramTable(os.path.join(self.container, f"engram-L{layer}.bin"), 9, 32)


if __name__ == "__main__":
    unittest.main()
