#!/usr/bin/env python3
"""Markdown tables for docs/PERFORMANCE.md from the JSON that measure_targets.sh and
measure_daemon.sh leave in OUT.   usage: summarize.py OUT"""
import json
import sys
from pathlib import Path

out = Path(sys.argv[1])


def read(p):
    try:
        return json.loads(p.read_text())
    except ValueError:
        return {}  # a run still writing, or one that failed


def load(name):
    p = out / f"{name}.json"
    return read(p) if p.exists() else None


def hit(p):
    t = p["experts_hit"] + p["experts_missed"]
    return 100.0 * p["experts_hit"] / t if t else 0.0


def row(name, d):
    pf, dc = d["prefill"], d["decode"]
    return (f"| {name} | {d['cache_records']} | {d['lookahead']} | {pf['tokens_per_second']:.2f} | "
            f"{dc['tokens_per_second']:.2f} | {hit(dc):.1f} | {dc['bytes_read'] / 1e9:.2f} | "
            f"{dc['io_wait_seconds'] / max(dc['tokens'], 1) * 1e3:.1f} |")


print("### Runs\n")
print("| run | cache records | lookahead | prefill tok/s | decode tok/s | decode hit % | decode GB read | io wait ms/token |")
print("|---|---|---|---|---|---|---|---|")
for p in sorted(out.glob("*.json")):
    d = read(p)
    if "decode" in d and "prefill" in d:
        print(row(p.stem, d))

STAGES = ["embed", "attention_kda", "attention_mla", "router", "lookahead", "lut_build", "expert_matmul",
          "shared_dense_ffn", "io_wait", "lm_head", "sampling", "other"]
profiled = [(p.stem, read(p)) for p in sorted(out.glob("*.json"))]
profiled = [(n, d) for n, d in profiled if "decode" in d and "profile" in d["decode"]]
if profiled:
    print("\n### Decode profile (ms per token; share of wall)\n")
    print("| stage | " + " | ".join(n for n, _ in profiled) + " |")
    print("|---|" + "---|" * len(profiled))
    for s in STAGES:
        cells = []
        for _, d in profiled:
            pr = d["decode"]["profile"]
            st = pr["stages"].get(s, {"seconds": 0})
            ms = 1e3 * st["seconds"] / max(pr["tokens"], 1)
            share = 100 * st["seconds"] / pr["wall_seconds"] if pr["wall_seconds"] else 0
            cells.append(f"{ms:.1f} ({share:.0f}%)")
        print(f"| {s} | " + " | ".join(cells) + " |")
    print("| wall | " + " | ".join(f"{1e3 * d['decode']['profile']['wall_seconds'] / max(d['decode']['profile']['tokens'], 1):.1f}"
                                   for _, d in profiled) + " |")

io = load("io_only_full")
if io:
    print("\n### I/O-only replay (full arena)\n")
    print("| pass | records | rec/s | GB/s disk | hit % | record p50 us | p99 us | hit-layer round trip mean us | p50 | p99 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for i, p in enumerate(io["passes"], 1):
        l, h = p["record_latency"], p["hit_layer_round_trip"]
        print(f"| {i} | {p['records']} | {p['records_per_second']:.0f} | {p['disk_gb_per_second']:.2f} | "
              f"{100 * p['hit_rate']:.1f} | {l['p50_us']:.0f} | {l['p99_us']:.0f} | {h['mean_us']:.1f} | "
              f"{h['p50_us']:.1f} | {h['p99_us']:.1f} |")
io1 = load("io_only_1G")
if io1:
    p = io1["passes"][0]
    print(f"\n1G arena, cold: {p['records']} records, {p['records_per_second']:.0f} rec/s, "
          f"{p['disk_gb_per_second']:.2f} GB/s, hit {100 * p['hit_rate']:.1f}%, "
          f"record latency p50 {p['record_latency']['p50_us']:.0f} us p99 {p['record_latency']['p99_us']:.0f} us")

for name in ("clients1", "clients4"):
    c = load(name)
    if not c:
        continue
    print(f"\n### {name}\n")
    print("| process | decode tok/s | prefill tok/s | peak RSS MB | peak PSS MB | end RSS MB | end PSS MB |")
    print("|---|---|---|---|---|---|---|")
    for i, cl in enumerate(c["clients"]):
        e = cl.get("end_memory", {})
        print(f"| client {i} | {cl['decode_tokens_per_second']:.2f} | {cl['prefill_tokens_per_second']:.2f} | "
              f"{cl['peak_memory']['rss_bytes'] / 1e6:.0f} | {cl['peak_memory']['pss_bytes'] / 1e6:.0f} | "
              f"{e.get('rss_bytes', 0) / 1e6:.0f} | {e.get('pss_bytes', 0) / 1e6:.0f} |")
    dm = c["daemon_peak_memory"]
    print(f"| daemon | | | {dm['rss_bytes'] / 1e6:.0f} | {dm['pss_bytes'] / 1e6:.0f} | | |")
    print(f"\naggregate decode {c['aggregate_decode_tokens_per_second']:.2f} tok/s; peak total PSS "
          f"{c['peak_total_pss_bytes'] / 1e6:.0f} MB, RSS {c['peak_total_rss_bytes'] / 1e6:.0f} MB, "
          f"private+daemon {c['peak_total_private_bytes'] / 1e6:.0f} MB; wall {c['wall_seconds']:.1f} s")
