#!/usr/bin/env bash
# Token-for-token equality of our encoder with the real tiktoken (npm package, WASM build) on the
# corpus in data/corpus.jsonl, in plain and markup mode.
#
#   tiktoken_equality.sh CASE HELPER SOURCE_DIR WORK_DIR
#   CASE: cl100k | o200k             tiktoken's ranks with their own pattern
#         kimi-cl100k | kimi-o200k   the same ranks under the Kimi pattern
#         synthetic                  our synthetic tokenizer under the Kimi pattern
#
# Exit 77 (ctest: skipped) when node or the tiktoken package is unavailable, unless CI is set,
# where that is a failure.
set -euo pipefail

case_name=$1 helper=$2 src=$3 work=$4
npm_dir="$src/tests/tokenizer/npm"
data="$src/tests/tokenizer/data"
mkdir -p "$work"

unavailable() {
  echo "tiktoken oracle unavailable: $1" >&2
  if [[ -n "${CI:-}" ]]; then
    echo "CI is set: a missing oracle is a failure, not a skip" >&2
    exit 1
  fi
  echo "skipping (run 'npm ci --prefix tests/tokenizer/npm' with network access to enable)" >&2
  exit 77
}

command -v node >/dev/null 2>&1 || unavailable "node is not installed"
if [[ ! -f "$npm_dir/node_modules/tiktoken/package.json" ]]; then
  command -v npm >/dev/null 2>&1 || unavailable "npm is not installed"
  # Concurrent ctest jobs share $work; the lock makes one of them install.
  (
    flock 9
    if [[ ! -f "$npm_dir/node_modules/tiktoken/package.json" ]]; then
      npm ci --prefix "$npm_dir" --no-audit --no-fund >"$work/npm-ci.log" 2>&1
    fi
  ) 9>"$work/.lock" || unavailable "'npm ci' failed (offline?), see $work/npm-ci.log"
fi
oracle=(node "$npm_dir/oracle.mjs")

# Rank file, node-side pattern file, specials file and our pattern name for each case.
export_encoding() {  # ENCODING -> $work/ENCODING.tiktoken (+ .pat, .specials.json)
  local out="$work/$1.tiktoken"
  (
    flock 9
    # .specials.json is written last, so its presence means the export is complete.
    [[ -f "$out.specials.json" ]] || "${oracle[@]}" export "$1" "$out"
  ) 9>"$work/.lock"
  echo "$out"
}
case "$case_name" in
  cl100k | o200k)
    ranks=$(export_encoding "${case_name}_base")
    pattern_file="$ranks.pat" specials="$ranks.specials.json" ours_pattern=$case_name ;;
  kimi-cl100k | kimi-o200k)
    ranks=$(export_encoding "${case_name#kimi-}_base")
    pattern_file="$data/kimi_pat_str.txt" specials="$ranks.specials.json" ours_pattern=kimi ;;
  synthetic)
    mkdir -p "$work/synthetic"
    "$helper" synthetic "$work/synthetic" 0
    ranks="$work/synthetic/tokenizer.model"
    pattern_file="$data/kimi_pat_str.txt" specials="$work/synthetic/specials.json" ours_pattern=kimi ;;
  *) echo "unknown case $case_name" >&2; exit 2 ;;
esac

status=0
for mode in plain markup; do
  ours="$work/$case_name.$mode.json"
  "$helper" encode --ranks "$ranks" --pattern "$ours_pattern" --specials "$specials" --mode "$mode" \
    --corpus "$data/corpus.jsonl" >"$ours"
  "${oracle[@]}" compare "$ranks" "$pattern_file" "$specials" "$mode" "$data/corpus.jsonl" "$ours" || status=1
done
exit $status
