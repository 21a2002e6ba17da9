#!/usr/bin/env bash
# Issue 6, "every expert cached" as a user gets it: one shared daemon (waste-ctl start) whose
# arena holds the whole expert bank; the first bench run warms it, the second runs with every
# routed expert already in the arena (the standard workload is greedy, so it routes the same).
#   scripts/bench/measure_warm.sh BIN_DIR MODEL OUT [DECODE_TOKENS]
set -euo pipefail
BIN=${1:?directory with waste and waste-ctl}
MODEL=${2:?container}
OUT=${3:?output dir}
N=${4:-128}
P=64
mkdir -p "$OUT"
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || echo "warning: cannot drop the page cache" >&2
"$BIN/waste-ctl" start "$MODEL" --budget 6G
trap '"$BIN/waste-ctl" stop "$MODEL" || true' EXIT
"$BIN/waste" bench "$MODEL" --prompt-tokens $P -n "$N" --json > "$OUT/warm_pass1.json"
"$BIN/waste" bench "$MODEL" --prompt-tokens $P -n "$N" --profile --json > "$OUT/warm_pass2.json"
"$BIN/waste-ctl" stats "$MODEL" --json > "$OUT/warm_stats.json"
