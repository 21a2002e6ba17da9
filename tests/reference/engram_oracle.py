"""Numpy/sympy oracle for DeepSeek-V4.1's Engram addressing (compute/engram), and the
engine-vs-oracle check.

  engram_oracle.py --dump-tool BIN --workdir DIR

Written from the reference maths (model-families.md §2.1; the transformers deepseek_v41 Engram
layout and n-gram hash state), not from the engine:
  * bucket primes: per layer, per n-gram size 2..N, the search restarts at engram_vocab_size - 1
    and each head takes the next prime (sympy.isprime) above the previous one that no earlier
    (layer, n-gram size, head) took; offsets are each layer's running sums over (n-gram, head);
  * multipliers: numpy.random.default_rng(10007 * layer_id).integers(0, bound, N, dtype=int64)
    * 2 + 1 with bound = max(1, (int64 max // compressed_vocab_size) // 2);
  * row ids: ids through the compressed token map, image tokens dead; for look-back s = 0..N-1
    the id at t - s, replaced by the compressed pad id from the first slot that is before the
    sequence start or dead; rolling XOR of id * multiplier (int64), after each s >= 1 taken modulo
    each head's prime plus its offset.

  * the compressed token map: each token's decoded text (bytes) is keyed by its vocabulary
    spelling when it is not valid UTF-8 or holds U+FFFD, else normalized: NFKC, NFD, marks
    (category M*) removed, each character lowercased alone, [ \t\r\n]+ -> one space, a text of
    exactly one space kept through the White_Space trim by a sentinel; empty -> the raw text; ids
    handed out in order of first appearance.

Checks: primes equal (and, for the released sizes, they sum to the published
engram_num_embeddings); multipliers equal bit for bit on the released sizes, seed 0, seeds above
2**32, numpy's 32-bit draw path and a bound of 1; the engram.json the engine writes and reads back
equals the oracle's layout; row ids equal for random token sequences with image spans and
sequence starts, hashed in chunks of 1, 5 and 64 with the history carried and restored.
Exit 0 pass, 1 fail, 77 skip (no numpy or sympy).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import unicodedata

try:
    import numpy as np
    from sympy import isprime
except ImportError as e:  # pragma: no cover
    print(f"SKIP: {e}")
    sys.exit(77)

DEAD = -1
# The released model (model-families.md §2.1): 2 Engram layers, 4-grams, 8 heads, rows per table.
RELEASED = dict(layer_ids=[1, 14], max_ngram_size=4, n_heads=8, engram_vocab_size=16_000_000,
                compressed_vocab_size=99_092, num_embeddings=[384_006_168, 384_016_682])


def oracle_primes(n_layers, max_n, heads, vocab):
    taken, out = set(), []
    for _ in range(n_layers):
        layer = []
        for _ in range(max_n - 1):
            row, cur = [], vocab - 1
            for _ in range(heads):
                cand = cur + 1
                while not isprime(cand) or cand in taken:
                    cand += 1
                taken.add(cand)
                row.append(cand)
                cur = cand
            layer.append(row)
        out.append(layer)
    return out


def oracle_multipliers(layer_id, max_n, cvs):
    bound = max(1, (np.iinfo(np.int64).max // cvs) // 2)
    v = np.random.default_rng(10007 * layer_id).integers(low=0, high=bound, size=(max_n,), dtype=np.int64)
    return [int(x) for x in (v * 2 + 1)]


def oracle_layout(p, pad):
    primes = oracle_primes(len(p["layer_ids"]), p["max_ngram_size"], p["n_heads"], p["engram_vocab_size"])
    layers = []
    for i, lid in enumerate(p["layer_ids"]):
        flat = [q for row in primes[i] for q in row]
        offsets = [int(sum(flat[:k])) for k in range(len(flat))]
        layers.append({"layer": lid, "multipliers": oracle_multipliers(lid, p["max_ngram_size"],
                                                                       p["compressed_vocab_size"]),
                       "primes": primes[i], "offsets": offsets})
    return layers


def oracle_rows(layers, token_map, pad, max_n, heads, tokens, dead):
    t_len = len(tokens)
    comp = np.where(np.asarray(dead, bool), DEAD, np.asarray(token_map, np.int64)[np.asarray(tokens)])
    pos = np.arange(t_len)
    out = np.zeros((t_len, len(layers), (max_n - 1) * heads), np.int64)
    for li, layer in enumerate(layers):
        mult = np.asarray(layer["multipliers"], np.int64)
        primes = np.asarray(layer["primes"], np.int64)
        offs = np.asarray(layer["offsets"], np.int64).reshape(max_n - 1, heads)
        blocked = np.zeros(t_len, bool)
        rolling = None
        for s in range(max_n):
            src = comp[np.maximum(pos - s, 0)]
            blocked = blocked | (pos < s) | (src == DEAD)
            prod = np.where(blocked, pad, src).astype(np.int64) * mult[s]
            if s == 0:
                rolling = prod
                continue
            rolling = np.bitwise_xor(rolling, prod)
            out[:, li, (s - 1) * heads:s * heads] = rolling[:, None] % primes[s - 1][None, :] + offs[s - 1][None, :]
    return out.reshape(-1)


# Unicode's White_Space property (PropList.txt), which the reference's trim strips.
WHITE_SPACE = {chr(c) for c in [*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028,
                                0x2029, 0x202F, 0x205F, 0x3000]}
SENTINEL = "\ue000"


def oracle_normalize(text):
    s = unicodedata.normalize("NFD", unicodedata.normalize("NFKC", text))
    s = "".join(c.lower() for c in s if not unicodedata.category(c).startswith("M"))
    s = re.sub(r"[ \t\r\n]+", " ", s)
    if s == " ":
        s = SENTINEL
    while s and s[0] in WHITE_SPACE:
        s = s[1:]
    while s and s[-1] in WHITE_SPACE:
        s = s[:-1]
    return s.replace(SENTINEL, " ")


def oracle_token_map(texts):
    key_to_id, out = {}, []
    for raw, spelling in texts:
        try:
            text = raw.decode("utf-8")
            partial = "\ufffd" in text
        except UnicodeDecodeError:
            partial = True
        if partial:
            key = spelling
        else:
            key = oracle_normalize(text) or text
        out.append(key_to_id.setdefault(key, len(key_to_id)))
    return out, len(key_to_id)


# Token texts chosen to exercise each step of the chain (all from Unicode versions both ICU and
# Python know): case, accents composed and not, compatibility forms, whitespace-only tokens,
# partial UTF-8, U+FFFD, specials with fullwidth bars, Greek sigma, sharp s, dotted I, Hangul.
TOKEN_TEXTS = [
    " The", "the", "THE", " the", "The ", "caf\u00e9", "cafe", "CAFE\u0301", "\uff34\uff28\uff25", "\ufb01le", "file",
    " ", "  ", "\n", "\t\t", " \n ", "\u00a0", "\u3000", "\u2028x", "x\u2028", "\u0301", "\u20dd", "\u00ad",
    "<\uff5cUser\uff5c>", "<|User|>", "<|user|>", "\u03a3", "\u03c3", "\u03c2", "\u00df", "\u1e9e", "\u0130",
    "i", "\u01c5", "dz", "\ud55c", "\u1112\u1161\u11ab", "\ue000", " \ue000 ", "\ufffd", "A\u0308B", "\u2163",
    "iv", "\u00bd", "1/2", "\u212b", "\u00e5", "  hello\tworld\r\n", "hello world", "\u0345", "\u1f80",
]
PARTIAL = [b"\xe8", b"\xe8\x82", b"\xff", b"\x82"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump-tool", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    rng = np.random.default_rng(20261202)

    prime_cases = [[2, RELEASED["max_ngram_size"], RELEASED["n_heads"], RELEASED["engram_vocab_size"]],
                   [3, 3, 5, 100], [1, 2, 1, 2], [2, 5, 4, 1000]]
    multiplier_cases = [[lid, 4, RELEASED["compressed_vocab_size"]] for lid in RELEASED["layer_ids"]]
    multiplier_cases += [[0, 4, 99_092], [3, 6, 7], [5, 4, 3_000_000_000], [2, 4, 2**31 + 11], [7, 3, 2**62],
                         [500_000, 4, 99_092], [1, 16, 12345]]

    cvs, n_raw = 61, 200
    token_map = np.concatenate([np.arange(cvs), rng.integers(0, cvs, n_raw - cvs)])
    rng.shuffle(token_map)
    layout = dict(layer_ids=[1, 14, 3], max_ngram_size=4, n_heads=3, head_dim=8, engram_vocab_size=500,
                  compressed_vocab_size=cvs, pad_token_id=2, token_map=[int(x) for x in token_map])
    sequences = []
    for length, chunk in [(67, 1), (67, 5), (67, 64), (40, 7), (1, 1), (2, 1), (3, 2)]:
        tokens = rng.integers(0, n_raw, length)
        dead = np.zeros(length, np.int64)
        if length > 10:
            for start in rng.integers(0, length, 3):  # image spans of 1..4 tokens
                dead[start:start + int(rng.integers(1, 5))] = 1
            dead[0] = 1 if chunk == 5 else dead[0]  # an image at the sequence start
            dead[-1] = 1 if chunk == 64 else dead[-1]
        sequences.append({"tokens": [int(x) for x in tokens], "dead": [int(x) for x in dead], "chunk": chunk})
    # Repeated tokens: the same n-gram twice must give the same rows.
    sequences.append({"tokens": [5, 6, 7, 8, 5, 6, 7, 8], "dead": [0] * 8, "chunk": 3})

    texts = [(t.encode("utf-8"), f"tok{i}") for i, t in enumerate(TOKEN_TEXTS)]
    texts += [(b, f"partial{i}") for i, b in enumerate(PARTIAL)]
    texts += [(b"\xe8", "partial0")]  # the same spelling again shares its id
    token_texts = [{"hex": raw.hex(), "spelling": spelling} for raw, spelling in texts]
    case = dict(prime_cases=prime_cases, multiplier_cases=multiplier_cases, layout=layout, sequences=sequences,
                token_texts=token_texts)
    case_path = os.path.join(a.workdir, "case.json")
    with open(case_path, "w") as f:
        json.dump(case, f)
    proc = subprocess.run([a.dump_tool, case_path, os.path.join(a.workdir, "container")], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        print(proc.stderr[-4000:], file=sys.stderr)
        sys.exit(f"FAILED: {a.dump_tool} exited with {proc.returncode}")
    got = json.loads(proc.stdout)
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    for pc, g in zip(prime_cases, got["primes"]):
        check(g == oracle_primes(*pc), f"primes {pc}")
    released = got["primes"][0]
    sums = [sum(q for row in layer for q in row) for layer in released]
    check(sums == RELEASED["num_embeddings"], f"released primes sum to engram_num_embeddings {sums}")
    for mc, g in zip(multiplier_cases, got["multipliers"]):
        want = oracle_multipliers(*mc)
        check(g == want, f"multipliers {mc}: {g[:2]}... vs {want[:2]}...")

    pad = int(token_map[layout["pad_token_id"]])
    check(got["pad_id"] == pad, "pad id through the token map")
    want_layers = oracle_layout(layout, pad)
    check(got["layers"] == want_layers, "engram.json layout (layers, multipliers, primes, offsets)")
    heads, max_n = layout["n_heads"], layout["max_ngram_size"]
    for i, seq in enumerate(sequences):
        want = oracle_rows(want_layers, token_map, pad, max_n, heads, seq["tokens"], seq["dead"])
        g = np.asarray(got["rows"][i], np.int64)
        check(g.shape == want.shape and np.array_equal(g, want),
              f"row ids, sequence {i} ({len(seq['tokens'])} tokens, chunk {seq['chunk']}, "
              f"{sum(seq['dead'])} image tokens)")
    rows = np.asarray(got["rows"][0], np.int64).reshape(67, 3, -1)
    limits = np.asarray([sum(q for row in l["primes"] for q in row) for l in want_layers])
    check(bool((rows >= 0).all() and (rows < limits[None, :, None]).all()), "every row inside its layer's table")
    last = np.asarray(got["rows"][-1], np.int64).reshape(8, 3, -1)
    check(np.array_equal(last[7], last[3]) and not np.array_equal(last[7], last[6]),
          "the same 4-gram gives the same rows, another does not")
    want_map, want_size = oracle_token_map(texts)
    check(got["token_map"] == want_map and got["token_map_size"] == want_size,
          f"compressed token map ({want_size} ids for {len(texts)} tokens)")
    if got["token_map"] != want_map:
        for (raw, _), g, w in zip(texts, got["token_map"], want_map):
            if g != w:
                print(f"     {raw!r}: engine {g}, oracle {w}")
    # The chain must matter: case, accents, compatibility forms and spaces collapse.
    ids = dict(zip(TOKEN_TEXTS, want_map))
    check(ids[" The"] == ids["the"] == ids["THE"] == ids["\uff34\uff28\uff25"] and ids["caf\u00e9"] == ids["cafe"]
          and ids[" "] == ids["  "] != ids["\u0301"], "the normalization merges what it should")
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all engram checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
