#!/usr/bin/env bash
# Issue 6 measurements on a Kimi-Linear-shaped container. Every run is a fresh process with the
# page cache dropped first (root) so "cold" means cold. JSON per run lands in $OUT.
#   scripts/bench/measure_targets.sh WASTE_BIN MODEL OUT [DECODE_TOKENS]
set -euo pipefail
WASTE=${1:?waste binary}
MODEL=${2:?container}
OUT=${3:?output dir}
N=${4:-32}
P=64
mkdir -p "$OUT"
drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || echo "warning: cannot drop the page cache" >&2; }
bench() {  # NAME ARGS...
  local name=$1; shift
  drop
  echo "== $name: $*" >&2
  "$WASTE" bench "$MODEL" --prompt-tokens $P -n "$N" --json "$@" > "$OUT/$name.json"
  python3 - "$OUT/$name.json" <<'PY' >&2
import json, sys
d = json.load(open(sys.argv[1]))
def hit(p): t = p["experts_hit"] + p["experts_missed"]; return 100.0 * p["experts_hit"] / t if t else 0
print(f'   prefill {d["prefill"]["tokens_per_second"]:.2f} tok/s  decode {d["decode"]["tokens_per_second"]:.2f} tok/s  '
      f'hit {hit(d["decode"]):.1f}%  lookahead {d["lookahead"]}  GB read {d["decode"]["bytes_read"]/1e9:.2f}')
PY
}
# 1. a 500 MB expert cache (187 records of 2,666,496 bytes; the budget floor is 856 MB, so the
#    reference's "500M" can only be its cache): lookahead widths
for L in 0 2 4 6 8 -1; do bench "c500M_la${L}" --in-process --cache-records 187 --lookahead "$L" --profile; done
# 2. every expert cached: 1792 records = all 7x256, then resident (compute only)
for L in 0 -1; do bench "full_la${L}" --in-process --cache-records 1792 --lookahead "$L" --profile; done
bench "compute_only" --compute-only --profile
# 3. prefill token by token vs chunked (same budget)
bench "c500M_chunk1" --in-process --cache-records 187 --prefill-chunk 1
