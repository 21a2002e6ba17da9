#!/usr/bin/env bash
# README command 2: build and run every test (ctest), then the small tests under ASan+UBSan and
# the IPC tests under TSan. Exits non-zero on the first failing stage.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
jobs="${WASTE_JOBS:-$(nproc)}"
bash "$root/scripts/setup.sh"

echo "== release build and full test suite"
bash "$root/scripts/build.sh" "$root/build"
# No blanket retry: a hazard regression that fails half the time must fail here. A test that is
# timing-sensitive by design retries itself and says why (its ctest RETRY/REPEAT property or a loop
# inside the test, with the reason next to it).
ctest --test-dir "$root/build" --output-on-failure -j"$jobs" --timeout 900

if [[ "${WASTE_SKIP_SANITIZERS:-0}" != 1 ]]; then
  echo "== ASan+UBSan: container, kernels, forward-pass, tokenizer, grammar, daemon, serve and convert tests"
  WASTE_TARGETS="waste waste-ioserver waste-ctl test_shared test_compute test_tokenizer test_grammar waste_tokenize_corpus test_ioserver test_serve test_convert" \
    bash "$root/scripts/build.sh" "$root/build-asan" -DCMAKE_BUILD_TYPE=Debug -DWASTE_SANITIZE=address
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$root/build-asan" --output-on-failure -j"$jobs" --timeout 900 \
      -L 'shared|compute|tokenizer|grammar|ioserver|serve|convert' -LE 'oracle|slow|cli'

  echo "== TSan: IPC tests"
  WASTE_TARGETS="waste test_ioserver" \
    bash "$root/scripts/build.sh" "$root/build-tsan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWASTE_SANITIZE=thread
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/tsan.supp" \
    ctest --test-dir "$root/build-tsan" --output-on-failure -j1 --timeout 900 -L ioserver -LE 'slow'
fi

if [[ "${WASTE_SKIP_FUZZ:-0}" != 1 ]]; then
  echo "== libFuzzer harnesses"
  bash "$root/scripts/fuzz.sh" "${WASTE_FUZZ_SECONDS:-15}"
fi
