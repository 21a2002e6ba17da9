#!/usr/bin/env python3
"""Random O_DIRECT record reads from a container's expert banks: the disk figure the expert
path can hope for (one aligned pread per record, as the engine does). Drop the page cache
first (root: sync; echo 3 > /proc/sys/vm/drop_caches) or the numbers are RAM speed.

usage: disk_speed.py CONTAINER [--records N] [--threads T ...]
"""
import argparse
import json
import mmap
import os
import random
import threading
import time
from pathlib import Path


def record_bytes(container: Path) -> int:
    """Bank bytes / experts of the first expert layer (records are fixed-size, 4 KiB aligned)."""
    layers = json.loads((container / "manifest.json").read_text())["layers"]
    for entry in layers.values():
        if entry.get("experts"):
            return int(entry["bytes"]) // int(entry["experts"])
    raise SystemExit("manifest: no expert layer")


def run(files, rec, n, threads, seed):
    rng = random.Random(seed)
    jobs = [(rng.choice(files), rng.randrange(os.path.getsize(files[0]) // rec)) for _ in range(n)]
    lock = threading.Lock()
    latencies = []

    def worker(part):
        buf = mmap.mmap(-1, rec)  # page aligned, as O_DIRECT needs
        fds = {f: os.open(f, os.O_RDONLY | os.O_DIRECT) for f in files}
        mine = []
        for f, idx in part:
            t0 = time.perf_counter()
            got = os.preadv(fds[f], [buf], idx * rec)
            mine.append(time.perf_counter() - t0)
            assert got == rec
        for fd in fds.values():
            os.close(fd)
        with lock:
            latencies.extend(mine)

    start = time.perf_counter()
    ts = [threading.Thread(target=worker, args=(jobs[i::threads],)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - start
    latencies.sort()
    return {"threads": threads, "records": n, "seconds": wall, "gb_per_s": n * rec / wall / 1e9,
            "p50_ms": 1e3 * latencies[len(latencies) // 2], "p99_ms": 1e3 * latencies[int(0.99 * (len(latencies) - 1))]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("container", type=Path)
    ap.add_argument("--records", type=int, default=256)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--record-bytes", type=int, default=0)
    args = ap.parse_args()
    files = sorted(str(p) for p in args.container.glob("experts-L*.bin"))
    rec = args.record_bytes or record_bytes(args.container)
    for i, t in enumerate(args.threads):
        print(json.dumps(run(files, rec, args.records, t, seed=i + 1)))


if __name__ == "__main__":
    main()
