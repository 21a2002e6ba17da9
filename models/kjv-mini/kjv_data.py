"""KJV text from Debian's bible-kjv, the Kimi pre-tokenizer (ASCII form) and a byte-level BPE
in tiktoken's format. Shared by train.py and measure.py; standard library only."""
from __future__ import annotations

import base64
import collections
import heapq
import os
import re
import subprocess

HELD_OUT = ("Jude", "Rev")  # the last two books of the New Testament
VERSE = re.compile(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.*)$")

# The engine's Kimi pattern (compute/tokenizer/pre_tokenizer.hpp) restricted to ASCII, where it
# is exact: \p{L} = [A-Za-z], \p{Lu} = [A-Z], \p{Ll} = [a-z], \p{N} = [0-9], no Han, no marks.
# The KJV text is checked to be printable ASCII plus '\n', so no other class can occur.
_C = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
KIMI_ASCII = re.compile(
    r"[^\r\nA-Za-z0-9]?[A-Z]*[a-z]+" + _C +
    r"|[^\r\nA-Za-z0-9]?[A-Z]+[a-z]*" + _C +
    r"|[0-9]{1,3}| ?[^\sA-Za-z0-9]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

SPECIALS = ["[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>",
            "<|im_middle|>"]
USER = "<|im_user|>user<|im_middle|>"
ASSISTANT = "<|im_assistant|>assistant<|im_middle|>"
END = "<|im_end|>"


def read_kjv() -> list[tuple[str, int, int, str]]:
    """Every verse (book, chapter, verse, text) in canonical order, from `bible`."""
    env = dict(os.environ, COLUMNS="100000")
    out = subprocess.run(["bible", "-f", "Ge1:1-Rev22:21"], env=env, capture_output=True,
                         text=True, check=True).stdout
    verses = []
    for line in out.splitlines():
        if not line.strip():
            continue
        m = VERSE.match(line)
        if not m:
            raise SystemExit(f"bible output line not understood: {line[:80]!r}")
        verses.append((m.group(1), int(m.group(2)), int(m.group(3)), m.group(4).strip()))
    if len(verses) != 31102:
        raise SystemExit(f"expected 31102 verses from bible-kjv, got {len(verses)}")
    for b, c, v, t in verses:
        if not all(32 <= ord(ch) < 127 for ch in t):
            raise SystemExit(f"{b}{c}:{v} is not printable ASCII")
    return verses


def books_in_order(verses) -> list[str]:
    seen = []
    for b, *_ in verses:
        if not seen or seen[-1] != b:
            seen.append(b)
    return seen


def split(verses):
    """(train verses, held-out verses): Jude and Revelation held out."""
    train = [v for v in verses if v[0] not in HELD_OUT]
    held = [v for v in verses if v[0] in HELD_OUT]
    return train, held


def pieces(text: str) -> list[str]:
    return KIMI_ASCII.findall(text)


# ------------------------------------------------------------------------------ BPE
def train_bpe(text: str, n_ranks: int) -> list[bytes]:
    """Byte-level BPE: ranks 0..255 are the bytes, then merges in order of (count desc, first
    seen pair asc) until n_ranks tokens. A merge whose bytes already exist is skipped."""
    counts = collections.Counter(pieces(text))
    words = [[bytes([b]) for b in w.encode()] for w in counts]
    freq = list(counts.values())
    vocab = [bytes([i]) for i in range(256)]
    known = set(vocab)
    pair_count = collections.Counter()
    where = collections.defaultdict(set)
    for wi, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pair_count[(a, b)] += freq[wi]
            where[(a, b)].add(wi)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    while len(vocab) < n_ranks and heap:
        c, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -c or c == 0:
            continue  # stale entry
        new = pair[0] + pair[1]
        if new in known:
            pair_count[pair] = 0
            continue
        vocab.append(new)
        known.add(new)
        changed = collections.Counter()
        for wi in list(where[pair]):
            w = words[wi]
            f = freq[wi]
            for a, b in zip(w, w[1:]):
                changed[(a, b)] -= f
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == pair[0] and w[i + 1] == pair[1]:
                    out.append(new)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            words[wi] = out
            for a, b in zip(out, out[1:]):
                changed[(a, b)] += f
                where[(a, b)].add(wi)
        for p, d in changed.items():
            if d:
                pair_count[p] += d
                heapq.heappush(heap, (-pair_count[p], p))
        pair_count[pair] = 0
    return vocab


class Encoder:
    """tiktoken's encoding: per pre-token piece, a whole-piece rank if there is one, else merge
    the adjacent pair with the lowest rank until none is left (what compute/tokenizer does)."""

    def __init__(self, vocab: list[bytes]):
        self.rank = {t: i for i, t in enumerate(vocab)}
        self.vocab = vocab
        self.n_base = len(vocab)
        self.special = {s: self.n_base + i for i, s in enumerate(SPECIALS)}
        self._cache = {}

    def _piece(self, p: bytes) -> list[int]:
        r = self.rank.get(p)
        if r is not None:
            return [r]
        parts = [p[i:i + 1] for i in range(len(p))]
        while len(parts) > 1:
            best, bi = None, -1
            for i in range(len(parts) - 1):
                r = self.rank.get(parts[i] + parts[i + 1])
                if r is not None and (best is None or r < best):
                    best, bi = r, i
            if best is None:
                break
            parts[bi:bi + 2] = [parts[bi] + parts[bi + 1]]
        return [self.rank[x] for x in parts]

    def encode(self, text: str) -> list[int]:
        ids = []
        for p in pieces(text):
            got = self._cache.get(p)
            if got is None:
                got = self._cache[p] = self._piece(p.encode())
            ids.extend(got)
        return ids

    def encode_markup(self, text: str) -> list[int]:
        """Text with the chat markers in it: markers are their special ids."""
        ids = []
        pat = "(" + "|".join(re.escape(s) for s in SPECIALS) + ")"
        for part in re.split(pat, text):
            if part in self.special:
                ids.append(self.special[part])
            elif part:
                ids.extend(self.encode(part))
        return ids

    def decode(self, ids) -> str:
        out = b""
        for i in ids:
            out += self.vocab[i] if i < self.n_base else SPECIALS[i - self.n_base].encode()
        return out.decode("utf-8", errors="replace")


def write_tiktoken(path: str, vocab: list[bytes]) -> None:
    with open(path, "w") as f:
        for i, t in enumerate(vocab):
            f.write(base64.b64encode(t).decode() + f" {i}\n")


def read_tiktoken(path: str) -> list[bytes]:
    vocab = []
    with open(path) as f:
        for i, line in enumerate(f):
            tok, rank = line.split()
            assert int(rank) == i, f"{path}:{i + 1}: rank {rank} out of order"
            vocab.append(base64.b64decode(tok))
    return vocab
