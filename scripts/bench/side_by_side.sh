#!/usr/bin/env bash
# Warm decode side by side with the public C engine on one container (issue 20).
#   scripts/bench/side_by_side.sh PUBLIC_SRC_DIR CONTAINER BUDGET_GIB [TOKENS]
# PUBLIC_SRC_DIR: a built checkout of sqliteai/warp (`make`), outside this tree.
# Both engines decode the same 16 prompt ids greedily with every expert they need in RAM:
#   public: its own cache, warmed by one identical generation (hits are printed; must be 100%);
#   ours (daemon): a daemon with the same budget, one cold `waste run`, then two warm ones;
#   ours (compute-only): `waste bench --compute-only`, every expert resident in-process.
# The token ids of both engines are compared; a mismatch fails the script.
set -euo pipefail
pub=${1:?public engine source dir}; model=${2:?container}; budget=${3:?budget GiB}; n=${4:-32}
here=$(cd "$(dirname "$0")/../.." && pwd)
waste=${WASTE_BIN:-$here/build/cli/waste}; ctl=${WASTE_CTL:-$here/build/cli/waste-ctl}
ids=9906,1332,2788,31415,2718,16180,4242,777,12345,54321,8888,100,20000,3000,65000,7
harness=$(mktemp -d)/public_engine_harness
cc -O2 -std=gnu11 -I"$pub/src" -o "$harness" "$here/scripts/bench/public_engine_harness.c" \
  "$pub/libwaste.a" -lm -lpthread
echo "== public engine ($(cd "$pub" && ./waste version 2>/dev/null | head -1))"
pub_out=$("$harness" "$model" "$budget" "$n" "$n" "$ids" 2)
echo "$pub_out" | grep '^round'
pub_tokens=$(echo "$pub_out" | grep '^tokens:' | tail -1 | cut -d: -f2)
pub_ms=$(echo "$pub_out" | awk '/^round [1-9]/{v=$6; if(best==""||v<best)best=v} END{print best}')

echo "== ours, through a daemon (budget ${budget}G)"
"$ctl" stop "$model" >/dev/null 2>&1 || true
"$ctl" start "$model" --budget "${budget}G" >/dev/null
trap '"$ctl" stop "$model" >/dev/null 2>&1 || true' EXIT
our_ms=""
for round in cold warm1 warm2; do
  j=$("$waste" run "$model" --ids "$ids" -n "$n" --json 2>/dev/null)
  line=$(python3 -c '
import json,sys
j=json.loads(sys.stdin.read()); s=j["stats"]
print(",".join(map(str,j["tokens"])), "%.1f" % (1000*s["generate_seconds"]/s["tokens"]), s["experts_hit"], s["experts_missed"])' <<<"$j")
  read -r tokens ms hit miss <<<"$line"
  echo "$round: decode $ms ms/token, hits $hit misses $miss"
  if [ "$round" != cold ]; then
    if [ -z "$our_ms" ] || python3 -c "import sys; sys.exit(0 if $ms < $our_ms else 1)"; then our_ms=$ms; fi
  fi
done
"$ctl" stop "$model" >/dev/null; trap - EXIT
if [ "$tokens" != "$pub_tokens" ]; then echo "token ids differ:"; echo " ours   $tokens"; echo " public $pub_tokens"; exit 1; fi
echo "identical greedy tokens ($n)"

echo "== ours, compute-only (every expert resident, in-process)"
co=$("$waste" bench "$model" --compute-only --in-process -n "$n" --prompt-tokens 16 --json 2>/dev/null)
co_ms=$(python3 -c 'import json,sys; j=json.loads(sys.stdin.read()); print("%.1f" % (1000.0/j["decode"]["tokens_per_second"]))' <<<"$co" 2>/dev/null || echo "?")
echo "compute-only: $co_ms ms/token"
python3 - "$pub_ms" "$our_ms" "$co_ms" <<'PY'
import sys
p, d, c = sys.argv[1:]
p, d = float(p), float(d)
print(f"public {p:.1f} ms/token ({1000/p:.2f} tok/s); ours via daemon {d:.1f} ms/token ({1000/d:.2f} tok/s): {p/d:.2f}x")
if c != "?": print(f"ours compute-only {float(c):.1f} ms/token: {p/float(c):.2f}x")
PY
