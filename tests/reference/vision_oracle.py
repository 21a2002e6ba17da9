"""PyTorch oracle for the K3 vision tower (reference §3.11), and the engine-vs-oracle check.

  vision_oracle.py --waste BIN --dump-tool BIN --workdir DIR [--size 126x126 --size 150x100]
                   [--layers 2] [--tol 1e-4]

Writes a synthetic tiny-k3 container with a real-shape tower (`waste synth --vision`), feeds
each size's seeded random RGB image to `waste-dump-vision`, and recomputes everything here in
float64 from the container's dequantized tower weights, written independently of the engine:
resize with F.interpolate (bilinear, align_corners=False), the patch embedding as the 14x14
stride-14 convolution it is, the position grid with F.interpolate, attention with explicit
complex-number RoPE, the 2x2 merge as a reshape. Checks the preprocessed input and the
embedding stage, then the projector output, by max absolute difference (the output rows are
RMS-normalised, values O(1), so absolute and relative agree there). Exit 0 pass, 1 fail,
77 skip (no torch).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_logits  # noqa: E402
from waste_container import Container  # noqa: E402


def run(cmd) -> None:
    print("+ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stdout[-2000:] + proc.stderr[-4000:], file=sys.stderr)
        sys.exit(f"FAILED: `{' '.join(cmd)}` exited with {proc.returncode}")


def choose_grid(w: int, h: int, patch: int, max_patches: int):
    scale = min(1.0, math.sqrt(max_patches / (w * h / (patch * patch))))
    gw = max(int(w * scale / patch + 0.5), 2) & ~1
    gh = max(int(h * scale / patch + 0.5), 2) & ~1
    while gw * gh > max_patches and (gw > 2 or gh > 2):
        if gw >= gh and gw > 2:
            gw -= 2
        else:
            gh -= 2
    return gw, gh


class Tower:
    def __init__(self, container: str):
        import torch
        self.torch = torch
        with open(os.path.join(container, "vision.json")) as f:
            self.cfg = json.load(f)
        self.c = Container(container)

    def w(self, name: str, shape=None):
        e = self.c.trunk[name]  # full name: the tower sits outside the text prefix
        a = self.c._dequant_rows(e, 0, e.rows).reshape(e.shape if shape is None else shape)
        return self.torch.from_numpy(np.ascontiguousarray(a)).double()

    def preprocess(self, rgb: np.ndarray):
        """uint8 [H, W, 3] -> (normalised image [1, 3, gh*p, gw*p], gw, gh)."""
        torch, F = self.torch, self.torch.nn.functional
        cfg = self.cfg
        p = cfg["patch_size"]
        h, w, _ = rgb.shape
        gw, gh = choose_grid(w, h, p, cfg["max_patches"])
        img = torch.from_numpy(rgb.astype(np.float64)).permute(2, 0, 1)[None]
        img = F.interpolate(img, size=(gh * p, gw * p), mode="bilinear", align_corners=False, antialias=False)
        img = img / 255.0
        mean = torch.tensor(cfg["image_mean"], dtype=torch.float64)[None, :, None, None]
        std = torch.tensor(cfg["image_std"], dtype=torch.float64)[None, :, None, None]
        return (img - mean) / std, gw, gh

    @staticmethod
    def patches(img, gw: int, gh: int, p: int):
        """[1, 3, gh*p, gw*p] -> [gh*gw, 3*p*p], each patch channel-major (the conv kernel's order)."""
        return img[0].reshape(3, gh, p, gw, p).permute(1, 3, 0, 2, 4).reshape(gh * gw, 3 * p * p)

    def embed(self, img, gw: int, gh: int):
        torch, F = self.torch, self.torch.nn.functional
        cfg = self.cfg
        D, p = cfg["vt_hidden_size"], cfg["patch_size"]
        conv = self.w("vision_tower.patch_embed.proj.weight", (D, 3, p, p))
        x = F.conv2d(img, conv, stride=p)[0]  # [D, gh, gw]
        ph, pw = cfg["init_pos_emb_height"], cfg["init_pos_emb_width"]
        grid = self.w("vision_tower.patch_embed.pos_emb.weight", (ph, pw, D)).permute(2, 0, 1)[None]
        pos = F.interpolate(grid, size=(gh, gw), mode="bilinear", align_corners=False)[0]
        return (x + pos).permute(1, 2, 0).reshape(gh * gw, D)

    def rope(self, gw: int, gh: int, hd: int, swap: bool = False):
        """Complex rotations [L, hd/2]: pair j turns by x*f (even j) or y*f (odd j), f = 10000^(-4*(j//2)/hd)."""
        torch = self.torch
        j = torch.arange(hd // 2, dtype=torch.float64)
        f = 1.0 / torch.pow(10000.0, 4.0 * torch.floor(j / 2) / hd)
        ys, xs = torch.meshgrid(torch.arange(gh, dtype=torch.float64), torch.arange(gw, dtype=torch.float64),
                                indexing="ij")
        if swap:  # the hazard: height at even pairs (what the reference's docstring claims)
            xs, ys = ys, xs
        coord = torch.where((j.long() % 2 == 0)[None, :], xs.reshape(-1, 1), ys.reshape(-1, 1))
        return torch.polar(torch.ones_like(coord), coord * f[None, :])

    def forward(self, x, gw: int, gh: int, swap_rope: bool = False):
        torch, F = self.torch, self.torch.nn.functional
        cfg = self.cfg
        D, H = cfg["vt_hidden_size"], cfg["vt_num_attention_heads"]
        Q = cfg["qkv_hidden_size"]
        hd = Q // H
        L = x.shape[0]
        eps = 1.1920928955078125e-07  # float32 epsilon: nn.RMSNorm without eps

        def rms(v, wt, e):
            return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + e) * wt

        rot = self.rope(gw, gh, hd, swap_rope)[:, None, :]  # [L, 1, hd/2]

        def rotate(t):  # [L, H, hd]
            c = torch.view_as_complex(t.reshape(L, H, hd // 2, 2).contiguous())
            return torch.view_as_real(c * rot).reshape(L, H, hd)

        for b in range(cfg["vt_num_hidden_layers"]):
            pre = f"vision_tower.encoder.blocks.{b}."
            y = rms(x, self.w(pre + "norm0.weight"), eps)
            qkv = (y @ self.w(pre + "wqkv.weight").T).reshape(L, 3, H, hd)
            q, k, v = rotate(qkv[:, 0]), rotate(qkv[:, 1]), qkv[:, 2]
            att = torch.softmax(torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(hd), dim=-1)
            o = torch.einsum("hij,jhd->ihd", att, v).reshape(L, Q)
            x = x + o @ self.w(pre + "wo.weight").T
            y = rms(x, self.w(pre + "norm1.weight"), eps)
            y = F.gelu(y @ self.w(pre + "mlp.fc0.weight").T, approximate="tanh")
            x = x + y @ self.w(pre + "mlp.fc1.weight").T
        x = rms(x, self.w("vision_tower.encoder.final_layernorm.weight"), eps)
        merged = x.reshape(gh // 2, 2, gw // 2, 2, D).permute(0, 2, 1, 3, 4).reshape(-1, 4 * D)
        h0 = F.gelu(merged @ self.w("mm_projector.proj.0.weight").T)  # exact (erf) GELU
        out = h0 @ self.w("mm_projector.proj.2.weight").T
        return rms(out, self.w("mm_projector.post_norm.weight"), 1e-5)


def read_f32(path: str, cols: int) -> np.ndarray:
    return np.fromfile(path, dtype="<f4").reshape(-1, cols)


def check(name: str, got: np.ndarray, want: np.ndarray, tol: float) -> bool:
    if got.shape != want.shape:
        print(f"FAILED: {name}: engine shape {got.shape}, oracle {want.shape}")
        return False
    diff = float(np.max(np.abs(got.astype(np.float64) - want)))
    scale = float(np.max(np.abs(want)))
    ok = diff <= tol
    print(f"{'ok' if ok else 'FAILED'}: {name}: max abs diff {diff:.3e} (tol {tol:.0e}, max |oracle| {scale:.3f})")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--waste", required=True)
    ap.add_argument("--dump-tool", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--size", action="append", default=[])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--tol", type=float, default=1e-4)
    args = ap.parse_args()
    sizes = args.size or ["126x126", "150x100"]

    compare_logits.require_torch()
    import torch
    torch.set_num_threads(int(os.environ.get("WASTE_ORACLE_THREADS", "2")))

    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    cdir = os.path.join(args.workdir, "container")
    run([args.waste, "synth", "--preset", "tiny-k3", "--vision", "--vision-layers", str(args.layers),
         "--seed", "7", "--out", cdir])
    tower = Tower(cdir)
    cfg = tower.cfg
    ok = True
    for i, size in enumerate(sizes):
        w, h = (int(v) for v in size.split("x"))
        rgb = np.random.default_rng(100 + i).integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        raw = os.path.join(args.workdir, f"img{i}.rgb")
        rgb.tofile(raw)
        out = os.path.join(args.workdir, f"out{i}")
        run([args.dump_tool, cdir, raw, str(w), str(h), out])
        with open(os.path.join(out, "grid.json")) as f:
            grid = json.load(f)
        img, gw, gh = tower.preprocess(rgb)
        print(f"image {size}: grid {gw}x{gh}, engine {grid['gw']}x{grid['gh']}, engine {grid['seconds']:.2f} s")
        if (gw, gh) != (grid["gw"], grid["gh"]):
            print(f"FAILED: {size}: patch grid differs")
            ok = False
            continue
        p = cfg["patch_size"]
        with torch.no_grad():
            ok &= check(f"{size} preprocessed patches", read_f32(os.path.join(out, "patches.f32"), 3 * p * p),
                        Tower.patches(img, gw, gh, p).numpy(), 1e-6)
            x = tower.embed(img, gw, gh)
            ok &= check(f"{size} patch embedding + position", read_f32(os.path.join(out, "embed.f32"),
                        cfg["vt_hidden_size"]), x.numpy(), args.tol)
            want = tower.forward(x, gw, gh).numpy()
            got = read_f32(os.path.join(out, "out.f32"), cfg["text_hidden_size"])
            ok &= check(f"{size} projector output", got, want, args.tol)
            if gw != gh:
                # The check can fail: the same image with the RoPE axes swapped must be far off.
                swapped = tower.forward(x, gw, gh, swap_rope=True).numpy()
                far = float(np.max(np.abs(got - swapped)))
                print(f"{'ok' if far > 100 * args.tol else 'FAILED'}: {size} engine vs oracle with x/y RoPE "
                      f"swapped: {far:.3e} (must exceed {100 * args.tol:.0e})")
                ok &= far > 100 * args.tol
    if ok:
        shutil.rmtree(args.workdir, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
