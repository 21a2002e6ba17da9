#!/usr/bin/env bash
# Build the libFuzzer harnesses (tests/fuzz/fuzz_*.cpp) with clang in build-fuzz and run each for
# SECONDS (default 30) from its seed corpus, failing on the first crash, leak, timeout or
# sanitizer report. Usage: scripts/fuzz.sh [SECONDS] [NAMES...]   (names: fuzz_manifest, ...)
# Env: WASTE_FUZZ_BUILD (build dir), WASTE_JOBS, WASTE_FUZZ_JOBS (parallel fuzz workers, 1).
# New inputs found go to build-fuzz/corpus/<name>/ (never into the source tree); a crashing input
# is written to build-fuzz/artifacts/<name>/ and printed.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${1:-30}"
shift || true
build="${WASTE_FUZZ_BUILD:-$root/build-fuzz}"
cxx="${WASTE_FUZZ_CXX:-$(command -v clang++-14 || command -v clang++ || true)}"
cc="${WASTE_FUZZ_CC:-$(command -v clang-14 || command -v clang || true)}"
if [[ -z "$cxx" || -z "$cc" ]]; then
  echo "fuzz.sh: clang not found (apt-get install clang-14 libclang-rt-14-dev)" >&2
  exit 1
fi

names=("$@")
if [[ ${#names[@]} -eq 0 ]]; then
  for f in "$root"/tests/fuzz/fuzz_*.cpp; do names+=("$(basename "$f" .cpp)"); done
fi

# Debug for -g and assertions; the fuzz options add -O1 (CMakeLists.txt), quicker to build than -O3.
WASTE_TARGETS="${names[*]}" CC="$cc" CXX="$cxx" bash "$root/scripts/build.sh" "$build" \
  -DCMAKE_BUILD_TYPE=Debug -DWASTE_FUZZ=ON -DWASTE_BUILD_TESTS=OFF

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
status=0
for name in "${names[@]}"; do
  bin="$build/fuzz/$name"
  [[ -x "$bin" ]] || { echo "fuzz.sh: no harness $name" >&2; exit 1; }
  work="$build/corpus/$name"
  artifacts="$build/artifacts/$name"
  mkdir -p "$work" "$artifacts"
  args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536
        -print_final_stats=1 -artifact_prefix="$artifacts/")
  dict="$root/tests/fuzz/$name.dict"
  [[ -f "$dict" ]] && args+=(-dict="$dict")
  seeds=()
  [[ -d "$root/tests/fuzz/corpus/$name" ]] && seeds+=("$root/tests/fuzz/corpus/$name")
  echo "== $name: ${seconds}s"
  log="$build/$name.log"
  jobs="${WASTE_FUZZ_JOBS:-1}"
  [[ "$jobs" -gt 1 ]] && args+=(-jobs="$jobs" -workers="$jobs")
  if ! "$bin" "${args[@]}" "$work" "${seeds[@]}" >"$log" 2>&1; then
    echo "fuzz.sh: $name FAILED (log $log)" >&2
    tail -n 60 "$log" >&2
    ls -l "$artifacts" >&2 || true
    status=1
    continue
  fi
  grep -E "^stat::(number_of_executed_units|peak_rss_mb|new_units_added)|^Done " "$log" || true
done
exit "$status"
