"""Differential check: the engine's logits dump against the PyTorch oracle.

Dump format (little-endian): int32 n_steps, int32 vocab, then n_steps x {int32 token_fed;
float32 logits[vocab]}: the logits after feeding token_fed. The oracle feeds the same tokens
in the same order (teacher-forced) and every step must agree: max |logit diff| <= tol (1e-3)
and the same argmax. If --prompt is given and the dump starts at the last prompt token (a
prefill that only reported its last position), the earlier prompt tokens are fed first.

Exit codes: 0 pass, 1 mismatch or bad input, 77 skipped (torch missing on a developer
machine; with env CI set a missing torch is a failure, never a skip).
"""
from __future__ import annotations

import argparse
import os
import struct
import sys

SKIP = 77


def require_torch():
    """Import torch/numpy, or decide between skip (developer machine) and failure (CI)."""
    try:
        import numpy  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        reason = f"PyTorch/numpy not importable by {sys.executable}: {e}"
        if os.environ.get("CI"):
            print(f"FAILED: {reason} (CI is set, so the oracle must run)", file=sys.stderr)
            sys.exit(1)
        print(f"SKIPPED: {reason}")
        sys.exit(SKIP)


def read_dump(path: str):
    """[(token_fed, float32 logits)], vocab. Raises ValueError with the path on bad input."""
    import numpy as np
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: {len(data)} bytes, shorter than the 8-byte header")
    n_steps, vocab = struct.unpack_from("<ii", data)
    if n_steps < 1 or vocab < 1:
        raise ValueError(f"{path}: header n_steps={n_steps} vocab={vocab} must be >= 1")
    step_bytes = 4 + 4 * vocab
    want = 8 + n_steps * step_bytes
    if len(data) != want:
        raise ValueError(f"{path}: {len(data)} bytes, header (n_steps={n_steps}, vocab={vocab}) "
                         f"implies {want}")
    steps = []
    for i in range(n_steps):
        off = 8 + i * step_bytes
        (tok,) = struct.unpack_from("<i", data, off)
        logits = np.frombuffer(data, dtype="<f4", count=vocab, offset=off + 4)
        steps.append((tok, logits))
    return steps, vocab


def read_embeddings(path: str, hidden: int) -> dict:
    """waste-dump-logits --embeddings' file: int32 n_rows, int32 hidden, then per row {int32 prompt
    position; f32 vector[hidden]}. Returns {position: float64 vector}."""
    import numpy as np
    with open(path, "rb") as f:
        data = f.read()
    n, width = struct.unpack_from("<ii", data)
    if width != hidden:
        raise ValueError(f"{path}: rows of width {width}, the container's hidden is {hidden}")
    rows, off = {}, 8
    for _ in range(n):
        (pos,) = struct.unpack_from("<i", data, off)
        rows[pos] = np.frombuffer(data, "<f4", hidden, off + 4).astype(np.float64)
        off += 4 + 4 * hidden
    if off != len(data):
        raise ValueError(f"{path}: {len(data)} bytes, {n} rows of {hidden} floats take {off}")
    return rows


def write_embeddings(path: str, rows: dict) -> None:
    """The file read_embeddings reads ({position: vector}, float32 on disk)."""
    import numpy as np
    hidden = len(next(iter(rows.values()))) if rows else 0
    with open(path, "wb") as f:
        f.write(struct.pack("<ii", len(rows), hidden))
        for pos in sorted(rows):
            f.write(struct.pack("<i", pos) + np.asarray(rows[pos], "<f4").tobytes())


def is_v41(container) -> bool:
    """A DeepSeek-V4.1 container (v41_oracle.py runs it, not oracle.Oracle)."""
    raw = container.config.raw
    arch = " ".join(raw.get("architectures") or []) + " " + str(raw.get("model_type", ""))
    return "DeepseekV41" in arch or "deepseek_v41" in arch


def make_oracle(container, float64: bool, vq4p_int8_lut: bool = True, pos_step: int = 1):
    """The family's oracle with the step(token) -> logits interface: v41_oracle.V41Oracle for
    DeepSeek-V4.1 containers (float64 always), oracle.Oracle for the others."""
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if is_v41(container):
        if pos_step != 1:
            raise ValueError("--shifted-min: the DeepSeek-V4.1 oracle has no position step (its window and "
                             "compressed groups are counted in tokens)")
        from v41_oracle import V41Oracle
        return V41Oracle(container)
    from oracle import Oracle
    return Oracle(container, torch.float64 if float64 else torch.float32, vq4p_int8_lut, pos_step=pos_step)


def compare(container_dir: str, dump_path: str, prompt=None, tol: float = 1e-3,
            float64: bool = False, out=sys.stdout, vq4p_int8_lut: bool = True,
            shifted_min: float = 0.0, ablate=(), ablate_min: float = 1e-2, chunk: int = 0,
            trace_out: str | None = None, engine_trace: str | None = None, embeddings=None) -> bool:
    """shifted_min > 0: also run the oracle with token t at position 2t (every distance doubled)
    and require the engine to differ from it by more than shifted_min: positions matter. (A
    constant shift would not do: rotary scores depend only on position differences.)
    ablate: (config attribute, value) pairs; for each, an oracle with that one setting changed
    (e.g. swiglu_limit 0: no clamp) must differ from the engine by more than ablate_min, so the
    mechanism is really exercised by this container and these tokens.
    chunk > 0: the dump holds one step per prefill call of `chunk` prompt tokens (waste-dump-logits
    --chunk), the logits after each call's last token; the oracle feeds every prompt token and
    compares at those ends.
    trace_out / engine_trace (DeepSeek-V4.1 only): write the oracle's per-token experts, attended
    compressed positions and candidate blocks as JSON (v41_oracle.write_trace) / compare them
    exactly with an engine trace in that format.
    embeddings ({prompt position: vector}, DeepSeek-V4.1 only): those positions are image-span
    tokens fed with the vector (waste-dump-logits --embeddings); every oracle run here gets them."""
    import numpy as np
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from waste_container import Container

    steps, vocab = read_dump(dump_path)
    container = Container(container_dir)
    if vocab != container.config.vocab:
        raise ValueError(f"{dump_path}: vocab {vocab} but {container_dir} has vocab_size "
                         f"{container.config.vocab}")
    fed = [t for t, _ in steps]
    prefix = []
    if chunk > 0:
        if not prompt:
            raise ValueError("a chunked dump needs the prompt")
        ends = list(range(chunk, len(prompt), chunk)) + [len(prompt)]
        if fed != [prompt[e - 1] for e in ends]:
            raise ValueError(f"{dump_path}: fed tokens {fed} are not the prompt's chunk ends {ends}")
        # Every prompt token becomes a step; only the chunk ends carry engine logits.
        by_end = dict(zip(ends, steps))
        steps = [by_end.get(i + 1, (tok, None)) for i, tok in enumerate(prompt)]
    elif prompt:
        if fed[:len(prompt)] == list(prompt):
            prefix = []
        elif fed[0] == prompt[-1]:
            prefix = list(prompt[:-1])
        else:
            raise ValueError(f"{dump_path}: first fed tokens {fed[:len(prompt)]} match neither "
                             f"the prompt {list(prompt)} nor its last token")
    embeddings = embeddings or {}
    if embeddings and not is_v41(container):
        raise ValueError("input vectors (image spans) are fed to the DeepSeek-V4.1 oracle only")

    def feed(o, pos, tok):
        return o.step(tok, embeddings[pos]) if pos in embeddings else o.step(tok)

    oracle = make_oracle(container, float64, vq4p_int8_lut)
    for p, t in enumerate(prefix):
        feed(oracle, p, t)
    worst, ok = 0.0, True
    for i, (tok, eng) in enumerate(steps):
        ref = feed(oracle, len(prefix) + i, tok).double().numpy()
        if eng is None:
            continue  # inside a prefill chunk: the engine reported no logits here
        diff = np.abs(eng.astype(np.float64) - ref)
        j = int(diff.argmax())
        worst = max(worst, float(diff[j]))
        a_eng, a_ref = int(np.argmax(eng)), int(np.argmax(ref))
        finite = bool(np.isfinite(eng).all())
        line = (f"step {i:3d} token {tok:7d}: max|diff| {diff[j]:.3e} at id {j} "
                f"(engine {eng[j]:+.6f}, oracle {ref[j]:+.6f}); argmax engine {a_eng} oracle {a_ref}")
        bad = []
        if not finite:
            bad.append("non-finite engine logits")
        if not diff[j] <= tol:
            bad.append(f"diff > {tol:g}")
        if a_eng != a_ref:
            top2 = np.sort(ref)[-2:]
            bad.append(f"argmax differs (oracle top-2 margin {top2[1] - top2[0]:.3e})")
        if bad:
            ok = False
            line += "  <-- FAIL: " + "; ".join(bad)
            routes = oracle.routes[-1]
            if routes:
                line += "\n      oracle routing this step: " + "; ".join(
                    f"L{layer} {ids}" for layer, ids, _ in routes)
        print(line, file=out)
    n_compared = sum(1 for _, eng in steps if eng is not None)
    print(f"overall max|diff| {worst:.3e} over {n_compared} steps (tol {tol:g}): "
          f"{'PASS' if ok else 'FAIL'}", file=out)
    if trace_out or engine_trace:
        if not hasattr(oracle, "trace"):
            raise ValueError("--trace-out / --engine-trace: only the DeepSeek-V4.1 oracle records a trace")
        import v41_oracle
        if trace_out:
            v41_oracle.write_trace(oracle, trace_out)
        if engine_trace:
            errs = v41_oracle.compare_traces(oracle.trace, engine_trace)
            for e in errs[:20]:
                print(f"trace: {e}", file=out)
            print(f"experts / attended positions / candidate blocks against {engine_trace}: "
                  f"{len(errs)} differences: {'PASS' if not errs else 'FAIL'}", file=out)
            ok = ok and not errs
    if shifted_min > 0:
        shifted = make_oracle(container, float64, vq4p_int8_lut, pos_step=2)
        for p, t in enumerate(prefix):
            feed(shifted, p, t)
        moved = 0.0
        for i, (tok, eng) in enumerate(steps):
            ref = feed(shifted, len(prefix) + i, tok).double().numpy()
            if eng is None:
                continue
            moved = max(moved, float(np.abs(eng.astype(np.float64) - ref).max()))
        shift_ok = moved > shifted_min
        print(f"positions 2t instead of t: max|engine - moved oracle| {moved:.3e} "
              f"(must exceed {shifted_min:g}): {'PASS' if shift_ok else 'FAIL'}", file=out)
        ok = ok and shift_ok
    for key, value in ablate:
        changed = make_oracle(Container(container_dir), float64, vq4p_int8_lut)
        if not hasattr(changed.cfg, key):
            raise ValueError(f"--ablate {key}: the oracle's config has no such setting")
        setattr(changed.cfg, key, type(getattr(changed.cfg, key))(value))
        for p, t in enumerate(prefix):
            feed(changed, p, t)
        moved = 0.0
        for i, (tok, eng) in enumerate(steps):
            ref = feed(changed, len(prefix) + i, tok).double().numpy()
            if eng is None:
                continue
            moved = max(moved, float(np.abs(eng.astype(np.float64) - ref).max()))
        ab_ok = moved > ablate_min
        routed = ""
        if engine_trace and hasattr(changed, "trace"):
            # The tokens whose routed experts that oracle chose otherwise than the engine; with
            # vl_bias=0 (image tokens routed as text) there must be some: bias_vl moves the selection.
            import json
            with open(engine_trace) as f:
                eng_trace = json.load(f)
            n_moved = sum(1 for a, b in zip(changed.trace, eng_trace)
                          if {str(k): v for k, v in a["experts"].items()} != b.get("experts", {}))
            routed = f"; experts differ on {n_moved} tokens"
            if key == "vl_bias" and n_moved == 0:
                ab_ok = False
        print(f"oracle with {key}={value}: max|engine - that oracle| {moved:.3e} "
              f"(must exceed {ablate_min:g}){routed}: {'PASS' if ab_ok else 'FAIL'}", file=out)
        ok = ok and ab_ok
    return ok


def parse_ids(text: str):
    return [int(s) for s in text.replace(" ", ",").split(",") if s]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("container", help="container directory the engine ran")
    ap.add_argument("dump", help="logits dump written by waste-dump-logits")
    ap.add_argument("--prompt", type=parse_ids, help="prompt ids (comma-separated)")
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--float64", action="store_true", help="run the oracle in float64")
    ap.add_argument("--exact-vq4p", action="store_true",
                    help="VQ4P experts as exact dense W x instead of the v0 int8-LUT kernel")
    args = ap.parse_args(argv)
    require_torch()
    import torch
    torch.set_num_threads(int(os.environ.get("WASTE_ORACLE_THREADS", "2")))
    try:
        ok = compare(args.container, args.dump, args.prompt, args.tol, args.float64,
                     vq4p_int8_lut=not args.exact_vq4p)
    except (OSError, ValueError) as e:
        print(f"FAILED: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # a ContainerError from the reader: say which file/record
        print(f"FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
