#!/usr/bin/env bash
# Issue 6, daemon side and the budget sweep: IPC cost per decode step (trace replay on a fully
# resident arena), decode through the daemon, 1 vs 4 clients on one daemon, budget sweep.
#   scripts/bench/measure_daemon.sh WASTE_BIN MODEL OUT DOCS_PERF_DIR [DECODE_TOKENS]
set -euo pipefail
WASTE=${1:?waste binary}
MODEL=${2:?container}
OUT=${3:?output dir}
PERF=${4:?docs/perf dir}
N=${5:-32}
P=64
FULL=6G     # floor 856 MB + every record (1792 x 2.67 MB): the whole bank fits the arena
mkdir -p "$OUT" "$PERF"
drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || echo "warning: cannot drop the page cache" >&2; }

# Trace of the standard workload (greedy, so every run routes the same), then replay it twice
# through a daemon whose arena holds everything: pass 2 is all hits = the pure IPC round trip.
drop
"$WASTE" bench "$MODEL" --prompt-tokens $P -n "$N" --in-process --cache-records 1792 --lookahead 0 \
  --record-trace "$OUT/trace.txt" --json > "$OUT/trace_run.json"
drop
"$WASTE" bench "$MODEL" --io-only --trace "$OUT/trace.txt" --budget $FULL --passes 2 --json > "$OUT/io_only_full.json"
drop
"$WASTE" bench "$MODEL" --io-only --trace "$OUT/trace.txt" --budget 1G --passes 1 --json > "$OUT/io_only_1G.json"

# Decode through the daemon with the arena holding everything: profile io_wait = IPC + misses.
drop
"$WASTE" bench "$MODEL" --budget $FULL --prompt-tokens $P -n "$N" --profile --json > "$OUT/daemon_full.json"

# One client alone (2 threads), then 4 at once (1 thread each: 4 x 1 = the 2 cores, oversubscribed 2x).
drop
"$WASTE" bench "$MODEL" --clients 1 --threads 2 --budget $FULL --prompt-tokens $P -n 16 --json > "$OUT/clients1.json"
drop
"$WASTE" bench "$MODEL" --clients 4 --threads 1 --budget $FULL --prompt-tokens $P -n 16 --json > "$OUT/clients4.json"

# Budget sweep (fresh process and dropped page cache per point).
"$WASTE" bench "$MODEL" --sweep 1G,1.5G,2G,3G,4G,6G --drop-caches --prompt-tokens $P -n "$N" \
  --sweep-md "$PERF/sweep_kl8.md" --sweep-png "$PERF/sweep_kl8.png" --json > "$OUT/sweep.json"
