#!/usr/bin/env bash
# Cold decode beyond RAM, three engines side by side (issue 26: "cold and beyond-RAM figures must not fall").
#   scripts/bench/beyond_ram.sh CONTAINER PUBLIC_SRC_DIR LLAMA_CPP_DIR GGUF [ROUNDS]
# CONTAINER: a WASTE container; PUBLIC_SRC_DIR: a checkout of sqliteai/warp built with its `make` (libwaste.a),
#   outside this tree; LLAMA_CPP_DIR: a llama.cpp tree with build/bin/llama-bench; GGUF: a llama.cpp model of the
#   container's shape (scripts/bench/vs_llama_cpp.sh writes one; IQ3_XXS is the like-for-like 3-bit one).
# Needs root: the page cache is dropped before every run, the disk's read-ahead is set for llama.cpp's two runs
#   and put back, and llama.cpp runs in a cgroup-v1 memory group (so its mmap must page).
# Each round, alternating: for each budget in $BR_BUDGETS (GiB, default "2 1")
#   ours:   waste bench CONTAINER --in-process --budget NG --threads T --prompt-tokens 16 -n 32
#   public: public_engine_harness CONTAINER N 32 32 IDS 0 (its first generation after the drop; ms/token without
#           the first token)
# then llama-bench -p 0 -n 16 -t T -r 1 --no-warmup inside a $BR_CGROUP_MB (default 2500) MB memory limit, with the
# read-ahead at 8192 KB and at 128 KB. T = $BR_THREADS (default 2).
set -euo pipefail
model=${1:?CONTAINER}; pub=${2:?PUBLIC_SRC_DIR}; llama=${3:?LLAMA_CPP_DIR}; gguf=${4:?GGUF}; rounds=${5:-2}
here=$(cd "$(dirname "$0")/../.." && pwd)
waste=${WASTE_BIN:-$here/build/cli/waste}; threads=${BR_THREADS:-2}
read -r -a budgets <<<"${BR_BUDGETS:-2 1}"
lbench=$llama/build/bin/llama-bench
for f in "$waste" "$lbench"; do [ -x "$f" ] || { echo "beyond_ram.sh: $f: not an executable" >&2; exit 2; }; done
[ -f "$pub/libwaste.a" ] || { echo "beyond_ram.sh: $pub/libwaste.a: no such file (run make there)" >&2; exit 2; }
[ -f "$gguf" ] || { echo "beyond_ram.sh: $gguf: no such file" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "beyond_ram.sh: needs root (drop_caches, read-ahead, cgroup)" >&2; exit 2; }
dev=$(lsblk -no pkname "$(df --output=source "$model" | tail -1)" 2>/dev/null | head -1)
[ -n "$dev" ] || dev=$(basename "$(df --output=source "$model" | tail -1)")
ra=/sys/block/$dev/queue/read_ahead_kb
[ -w "$ra" ] || { echo "beyond_ram.sh: $ra: not writable" >&2; exit 2; }
cgroot=/sys/fs/cgroup/memory
[ -d "$cgroot" ] || { echo "beyond_ram.sh: $cgroot: no cgroup-v1 memory controller" >&2; exit 2; }

tmp=$(mktemp -d); cg=$cgroot/waste-beyond-ram.$$; ra0=$(cat "$ra")
cleanup() { echo "$ra0" > "$ra"; rmdir "$cg" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
harness=$tmp/public_engine_harness
cc -O2 -std=gnu11 -I"$pub/src" -o "$harness" "$here/scripts/bench/public_engine_harness.c" "$pub/libwaste.a" -lm -lpthread
mkdir "$cg"; echo $(( ${BR_CGROUP_MB:-2500} * 1000 * 1000 )) > "$cg/memory.limit_in_bytes"
ids=9906,1332,2788,31415,2718,16180,4242,777,12345,54321,8888,100,20000,3000,65000,7
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; sleep 1; }
echo "== disk $dev, read-ahead ${ra0} KB; threads $threads; cgroup ${BR_CGROUP_MB:-2500} MB"
for ((r = 1; r <= rounds; ++r)); do
  for b in "${budgets[@]}"; do
    drop
    ours=$("$waste" bench "$model" --in-process --budget "${b}G" --threads "$threads" --prompt-tokens 16 -n 32 2>&1 \
           | awk '$1 == "decode" {print $4, "tok/s, hit", $7 "%,", $8, "GB read"}')
    echo "round $r ours ${b}G: $ours"
    drop
    "$harness" "$model" "$b" 32 32 "$ids" 0 | awk -v r="$r" -v b="$b" '/^round 0/ {
      printf "round %s public %sG: %.2f tok/s (%s ms/token), %s GB read\n", r, b, 1000 / $6, $6, $(NF-2) }'
  done
  for k in 8192 128; do
    echo "$k" > "$ra"; drop
    tg=$(sh -c "echo \$\$ > $cg/cgroup.procs; exec $lbench -m $gguf -p 0 -n 16 -t $threads -r 1 --no-warmup" 2>&1 \
         | awk -F'|' '/tg16/ {split($(NF-1), v, "±"); gsub(/ /, "", v[1]); print v[1]}')
    echo "round $r llama.cpp cgroup read-ahead ${k}KB: ${tg} tok/s"
  done
  echo "$ra0" > "$ra"
done
