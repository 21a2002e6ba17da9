#!/usr/bin/env bash
# Warm speed side by side with llama.cpp at one container's shape (issue 26).
#   scripts/bench/vs_llama_cpp.sh LLAMA_CPP_DIR CONTAINER [THREADS]
# LLAMA_CPP_DIR: a llama.cpp source tree with its CPU build in build/bin (llama-bench, llama-quantize), fetched
#   and built outside this repository. Its gguf-py writes the GGUFs; Python needs numpy.
# CONTAINER: a kimi-linear WASTE container. From its manifest, scripts/bench/gguf_kimi_linear.py writes two
#   random-weight GGUFs of llama.cpp's `kimi-linear` architecture at the same shape, quantized by llama-quantize
#   to Q4_K_M and to IQ3_XXS (experts as random valid blocks of the recipe's types). Nothing is written into the
#   tree: the GGUFs go to $VS_WORKDIR (default: a new temporary directory, removed at the end; given, it is kept
#   and the GGUFs in it are reused for the same shape).
# Then, alternating for $VS_ROUNDS rounds (default 3), all with THREADS threads (default 2) and weights in RAM:
#   llama-bench on each GGUF: pp64, pp512, tg$VS_TG (-lm none: read into memory, not mapped; its default Q4_K
#     repacking stays on, as users get it);
#   waste bench --compute-only --in-process (every expert read at open): 64-token prompt + $VS_TG decoded tokens,
#     then a 512-token prompt (default prefill chunk).
# llama.cpp build: its CPU build with the machine's features. On a CPU with AMX, leave AMX out
#   (-DGGML_NATIVE=OFF with GGML_AVX512/_VBMI/_VNNI/_BF16 etc. ON, GGML_AMX_* OFF): in the release measured
#   (de3ff81) the AMX buffer type takes kimi-linear's F16 attn_k_b, whose MLA product has a permuted operand
#   that neither AMX nor the plain CPU backend then accepts, and the context aborts (ggml-backend.cpp,
#   GGML_ASSERT(*cur_backend_id != -1)); `-ot attn_k_b=CPU` does not help, the loader moves it back to AMX.
# VS_QUANTS (default "Q4_K_M IQ3_XXS") names the llama.cpp types to write and run: at the real Kimi-Linear shape
#   only IQ3_XXS (about 20 GB) fits a 24 GiB machine beside nothing else, so VS_QUANTS=IQ3_XXS runs that alone.
# Each engine's best round is reported (the machine may be shared). The last line is
#   ratio vs Q4_K_M: decode X.XX prefill64 X.XX prefill512 X.XX      (ours / theirs; > 1: WASTE is faster)
set -euo pipefail
llama=${1:?LLAMA_CPP_DIR (a llama.cpp tree with build/bin)}; model=${2:?CONTAINER}; threads=${3:-2}
here=$(cd "$(dirname "$0")/../.." && pwd)
waste=${WASTE_BIN:-$here/build/cli/waste}
rounds=${VS_ROUNDS:-3}; tg=${VS_TG:-64}
read -r -a quants <<<"${VS_QUANTS:-Q4_K_M IQ3_XXS}"
for q in "${quants[@]}"; do
  case "$q" in Q4_K_M|IQ3_XXS) ;; *) echo "vs_llama_cpp.sh: VS_QUANTS: '$q' is not Q4_K_M or IQ3_XXS" >&2; exit 2;; esac
done
bench=$llama/build/bin/llama-bench; quantize=$llama/build/bin/llama-quantize
for f in "$bench" "$quantize" "$waste"; do [ -x "$f" ] || { echo "vs_llama_cpp.sh: $f: not an executable" >&2; exit 2; }; done
[ -f "$model/manifest.json" ] || { echo "vs_llama_cpp.sh: $model/manifest.json: no such file" >&2; exit 2; }
# numpy: the Debian python3-numpy package lives with /usr/bin/python3, which may not be the first python3 on PATH
py=${PYTHON:-}
if [ -z "$py" ]; then
  for c in python3 /usr/bin/python3; do
    if PYTHONPATH=$llama/gguf-py "$c" -c 'import numpy, gguf' 2>/dev/null; then py=$c; break; fi
  done
  [ -n "$py" ] || { echo "vs_llama_cpp.sh: no python3 with numpy and $llama/gguf-py's gguf (set PYTHON)" >&2; exit 2; }
fi
gen() { PYTHONPATH=$llama/gguf-py nice -n 10 "$py" "$here/scripts/bench/gguf_kimi_linear.py" --container "$model" "$@"; }

if [ -n "${VS_WORKDIR:-}" ]; then work=$VS_WORKDIR; mkdir -p "$work"
else work=$(mktemp -d "${TMPDIR:-/tmp}/vs-llama.XXXXXX"); trap 'rm -rf "$work"' EXIT; fi
case "$(cd "$work" && pwd)/" in "$here"/*) echo "vs_llama_cpp.sh: $work is inside the tree" >&2; exit 2;; esac
key=$(gen --recipe q4_k_m --print-shape | sha256sum | cut -c1-12)
echo "== shape $(gen --recipe q4_k_m --print-shape)"

declare -A gguf=([Q4_K_M]=$work/kl-$key-q4_k_m.gguf [IQ3_XXS]=$work/kl-$key-iq3_xxs.gguf)
for q in "${quants[@]}"; do
  out=${gguf[$q]}; [ -s "$out" ] && { echo "== reusing $out"; continue; }
  recipe=${q,,}; base=$work/base-$recipe.gguf; imat=()
  if [ "$q" = IQ3_XXS ]; then gen --recipe "$recipe" --imatrix-out "$work/ones.imatrix"; imat=(--imatrix "$work/ones.imatrix"); fi
  [ -s "$base" ] || { gen --recipe "$recipe" --out "$base.part" && mv "$base.part" "$base"; }
  nice -n 10 "$quantize" "${imat[@]}" "$base" "$out.part" "$q" "$threads" > "$work/quantize-$recipe.log" 2>&1 \
    || { tail -20 "$work/quantize-$recipe.log" >&2; exit 1; }
  mv "$out.part" "$out"; rm -f "$base"
  echo "== $q: $(du -h "$out" | cut -f1) ($out)"
done

results=$work/results.tsv; : > "$results"          # engine round test tok/s
run_llama() {  # $1 label, $2 round
  local j
  j=$("$bench" -m "${gguf[$1]}" -p 64,512 -n "$tg" -t "$threads" -r 1 -lm none -lzm off -o json 2>"$work/bench.err") \
    || { grep -v '^#\|^\[' "$work/bench.err" | tail -5 >&2; echo "vs_llama_cpp.sh: llama-bench failed on $1" >&2; exit 1; }
  "$py" -c '
import json, sys
for t in json.loads(sys.stdin.read()):
    name = "pp%d" % t["n_prompt"] if t["n_gen"] == 0 else "tg"
    print(sys.argv[1], sys.argv[2], name, "%.2f" % t["avg_ts"], sep="\t")' "$1" "$2" <<<"$j" >> "$results"
}
run_waste() {  # $1 round
  local a b
  a=$("$waste" bench "$model" --compute-only --in-process --threads "$threads" --prompt-tokens 64 -n "$tg" --json 2>/dev/null)
  b=$("$waste" bench "$model" --compute-only --in-process --threads "$threads" --prompt-tokens 512 -n 4 --json 2>/dev/null)
  "$py" -c '
import json, sys
a, b = (json.loads(x) for x in sys.argv[2:4])
for name, v in (("pp64", a["prefill"]), ("pp512", b["prefill"]), ("tg", a["decode"])):
    print("WASTE", sys.argv[1], name, "%.2f" % v["tokens_per_second"], sep="\t")' "$1" "$a" "$b" >> "$results"
}
for r in $(seq 1 "$rounds"); do
  # alternate the order too, so that no engine always runs right after the same other one
  if (( r % 2 )); then order=("${quants[@]}" WASTE); else order=(WASTE); for (( i = ${#quants[@]} - 1; i >= 0; i-- )); do order+=("${quants[i]}"); done; fi
  for e in "${order[@]}"; do
    if [ "$e" = WASTE ]; then run_waste "$r"; else run_llama "$e" "$r"; fi
    echo "round $r $e: $(awk -F'\t' -v e="$e" -v r="$r" '$1==e && $2==r {printf "%s %s  ", $3, $4}' "$results")"
  done
done

"$py" - "$results" "$threads" "$tg" <<'PY'
import sys, collections
best = collections.defaultdict(float)
for line in open(sys.argv[1]):
    e, _, t, v = line.split("\t")
    best[e, t] = max(best[e, t], float(v))
engines, tests = ("Q4_K_M", "IQ3_XXS", "WASTE"), ("tg", "pp64", "pp512")
label = {"tg": f"decode (tg{sys.argv[3]})", "pp64": "prefill 64", "pp512": "prefill 512"}
ran = [e for e in engines if any(best[e, t] for t in tests)]
print(f"\nbest of rounds, tok/s, {sys.argv[2]} threads | " + " | ".join(("llama.cpp " + e) if e != "WASTE" else e for e in ran))
for t in tests:
    print(f"{label[t]:>16} | " + " | ".join(f"{best[e, t]:7.2f}" for e in ran))
for e in ("IQ3_XXS", "Q4_K_M"):  # Q4_K_M's line last, when it ran
    if e in ran:
        print(f"ratio vs {e}: decode %.2f prefill64 %.2f prefill512 %.2f" % tuple(best["WASTE", t] / best[e, t] for t in tests))
PY
