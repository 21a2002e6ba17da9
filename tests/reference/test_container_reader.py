"""The python reader (waste_container.py) against scalar decodes written straight from the
format notes (waste-v0-reference.md 1.5-1.7), on containers written by py_synth.py.

The scalar decoders below walk single elements with the byte/bit formulas of the notes; the
reader is vectorised numpy. They must agree exactly (same float32 values)."""
import json
import os
import shutil
import struct
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import py_synth  # noqa: E402
from waste_container import Container, ContainerError, fp16_to_f32  # noqa: E402


def scalar_f16(bits: int, flush: bool) -> float:
    sign = -1.0 if bits & 0x8000 else 1.0
    e, m = (bits >> 10) & 31, bits & 1023
    if e == 0:
        return 0.0 * sign if flush else sign * m * 2.0 ** -24
    return sign * (1.0 + m / 1024.0) * 2.0 ** (e - 15)


def scalar_trunk_element(raw: bytes, entry: dict, r: int, c: int) -> float:
    fmt, n, g = entry["fmt"], entry["shape"][-1], entry.get("group", 128)
    if fmt == 0:
        return struct.unpack_from("<f", raw, entry["off"] + 4 * (r * n + c))[0]
    ng = -(-n // g)
    npad = ng * g
    (sbits,) = struct.unpack_from("<H", raw, entry["scale_off"] + 2 * (r * ng + c // g))
    scale = np.float32(scalar_f16(sbits, flush=False))
    if fmt == 2:
        q = struct.unpack_from("<b", raw, entry["off"] + r * npad + c)[0]
    elif fmt == 3:
        byte = raw[entry["off"] + r * (npad // 2) + c // 2]
        q = (byte & 15 if c % 2 == 0 else byte >> 4) - 8
    elif fmt == 7:
        row = entry["off"] + r * ((npad * 3 + 7) // 8 + 1)
        off = 3 * c
        v = (raw[row + (off >> 3)] >> (off & 7)) | (raw[row + (off >> 3) + 1] << (8 - (off & 7)))
        q = (v & 7) - 4
    else:
        raise AssertionError(fmt)
    return float(np.float32(q) * scale)


class ReaderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="waste-ref-")
        cls.dirs = {}
        for preset in ("tiny", "tiny-k3"):
            d = os.path.join(cls.tmp, preset)
            cfg, quant = py_synth.preset_config(preset)
            q3 = ("model.layers.1.self_attn.o_proj.weight",) if preset == "tiny-k3" else ()
            py_synth.write_container(d, cfg, quant, seed=7, q3g_names=q3)
            cls.dirs[preset] = d

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_fp16_decode_all_patterns(self):
        bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
        keep, flush = fp16_to_f32(bits), fp16_to_f32(bits, flush_subnormals=True)
        for b in list(range(0, 1100)) + [0x8001, 0x83FF, 0x3C00, 0x7BFF, 0x7C00, 0x7FFF, 0xFC01]:
            self.assertEqual(float(keep[b]), float(np.float32(scalar_f16(b, False))), hex(b))
            self.assertEqual(float(flush[b]), float(np.float32(scalar_f16(b, True))), hex(b))
        finite = ((bits >> 10) & 31) != 31
        np.testing.assert_array_equal(keep[finite], bits[finite].view(np.float16).astype(np.float32))
        self.assertEqual(float(keep[1]), 2.0 ** -24)      # smallest subnormal kept in the trunk
        self.assertEqual(float(flush[1]), 0.0)            # ...and flushed in codebooks
        self.assertEqual(float(keep[0x7C00]), 65536.0)    # exponent 31 is not inf for the engine

    def check_trunk(self, preset, names):
        d = self.dirs[preset]
        with open(os.path.join(d, "trunk.bin"), "rb") as f:
            raw = f.read()
        with open(os.path.join(d, "manifest.json")) as f:
            entries = {e["name"]: e for e in json.load(f)["trunk"]}
        c = Container(d)
        rng = np.random.default_rng(0)
        for name in names:
            e = entries[name]
            w = c.tensor(name).reshape(-1, e["shape"][-1])
            for _ in range(40):
                r, col = int(rng.integers(w.shape[0])), int(rng.integers(w.shape[1]))
                self.assertEqual(float(w[r, col]), scalar_trunk_element(raw, e, r, col),
                                 f"{name}[{r},{col}] fmt {e['fmt']}")
            row = int(rng.integers(w.shape[0]))
            np.testing.assert_array_equal(c.tensor_row(name, row), w[row])

    def test_trunk_formats_match_scalar_decode(self):
        self.check_trunk("tiny", ["model.embed_tokens.weight", "lm_head.weight",           # Q8G
                                  "model.layers.1.self_attn.q_proj.weight",               # Q4G
                                  "model.layers.1.self_attn.q_conv1d.weight",             # F32
                                  "model.norm.weight"])
        self.check_trunk("tiny-k3", ["model.layers.1.self_attn.o_proj.weight"])           # Q3G

    def test_quantized_trunk_is_close_to_the_source_floats(self):
        rng = np.random.default_rng(3)
        w = rng.normal(size=(5, 300)).astype(np.float32)
        for fmt, qmax in ((2, 127), (3, 7), (7, 3)):
            payload, scales = py_synth.quantize(w, fmt)
            entry = {"name": "t", "fmt": fmt, "off": 0, "shape": [5, 300], "group": 128,
                     "scale_off": len(payload)}
            raw = payload + scales
            got = np.array([[scalar_trunk_element(raw, entry, r, c) for c in range(300)]
                            for r in range(5)])
            step = np.abs(w).max() / qmax
            self.assertLess(float(np.abs(got - w).max()), 0.51 * step * 1.01, f"fmt {fmt}")

    def check_expert(self, preset, layer, expert):
        d = self.dirs[preset]
        c = Container(d)
        cfg = c.config
        info = c.layers[layer]
        rec_bytes = info["bytes"] // info["experts"]
        with open(os.path.join(d, info["file"]), "rb") as f:
            f.seek(expert * rec_bytes)
            rec = f.read(rec_bytes)
        hdr = struct.unpack_from("<IHHBBHHHIIIIIIII", rec)
        cb, offs, scale_off = hdr[5], hdr[9:12], hdr[12]
        with open(os.path.join(d, "codebooks.bin"), "rb") as f:
            books_raw = f.read()
        book_rec = 16 + c.entries * c.vec_dim * 2
        mats = c.expert(layer, expert)
        shapes = c.expert_shapes()
        rng = np.random.default_rng(expert)
        s_base = 0
        for kind, (rows, cols) in enumerate(shapes):
            nvr = cols // 8
            for _ in range(25):
                r, col = int(rng.integers(rows)), int(rng.integers(cols))
                v, j = col // 8, col % 8
                if c.index_bits == 6:
                    p = offs[kind] + ((r // 64) * nvr + v) * 64 * 3 + (r % 64) * 3
                    b0, b1, b2 = rec[p], rec[p + 1], rec[p + 2]
                    idx = [b0 & 63, ((b0 >> 6) | (b1 << 2)) & 63, ((b1 >> 4) | (b2 << 4)) & 63,
                           b2 >> 2]
                else:
                    p = offs[kind] + ((r // 64) * nvr + v) * 64 * c.stages + (r % 64) * c.stages
                    idx = list(rec[p:p + c.stages])
                acc = np.float32(0.0)
                for s, i in enumerate(idx):
                    book = cb + kind * c.stages + s
                    (bits,) = struct.unpack_from("<H", books_raw,
                                                 book * book_rec + 16 + 2 * (i * 8 + j))
                    acc = np.float32(acc + np.float32(scalar_f16(bits, flush=True)))
                (sb,) = struct.unpack_from("<H", rec, scale_off + 2 * (s_base + r))
                want = np.float32(acc * np.float32(scalar_f16(sb, flush=False)))
                self.assertEqual(float(mats[kind][r, col]), float(want),
                                 f"{preset} L{layer} e{expert} kind {kind} [{r},{col}]")
            s_base += rows
        self.assertEqual(mats[2].shape, (cfg.expert_in, cfg.moe_inter))

    def test_vq3r_expert_matches_scalar_decode(self):
        self.check_expert("tiny", 2, 5)

    def test_vq4p_expert_matches_scalar_decode(self):
        self.check_expert("tiny-k3", 3, 6)

    def corrupt(self, preset, offset, value: bytes):
        d = os.path.join(self.tmp, "corrupt")
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(self.dirs[preset], d)
        path = os.path.join(d, "experts-L1.bin")
        with open(path, "r+b") as f:
            f.seek(offset)
            f.write(value)
        return Container(d)

    def test_bad_magic_is_reported_with_layer_and_expert(self):
        c = self.corrupt("tiny", 0, b"XXXX")
        with self.assertRaises(ContainerError) as cm:
            c.expert(1, 0)
        self.assertEqual(str(cm.exception), "expert 0 of layer 1: bad magic 0x58585858")

    def test_flipped_index_byte_fails_the_crc(self):
        c = self.corrupt("tiny", 100, b"\x01\x02")
        with self.assertRaises(ContainerError) as cm:
            c.expert(1, 0)
        self.assertTrue(str(cm.exception).startswith("expert 0 of layer 1: crc32 mismatch"),
                        str(cm.exception))

    def test_nested_text_config_uses_language_model_prefix(self):
        d = os.path.join(self.tmp, "nested")
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(self.dirs["tiny"], d)
        mpath = os.path.join(d, "manifest.json")
        with open(mpath) as f:
            m = json.load(f)
        m["config"] = {"text_config": m["config"], "architectures": ["KimiK3"]}
        del m["tensor_prefix"]
        for e in m["trunk"]:
            e["name"] = "language_model." + e["name"]
        with open(mpath, "w") as f:
            json.dump(m, f)
        c = Container(d)
        self.assertEqual(c.prefix, "language_model.")
        self.assertEqual(c.config.hidden, 128)
        np.testing.assert_array_equal(c.tensor("model.norm.weight"),
                                      Container(self.dirs["tiny"]).tensor("model.norm.weight"))


if __name__ == "__main__":
    unittest.main()
