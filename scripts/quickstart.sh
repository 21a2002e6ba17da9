#!/usr/bin/env bash
# README command 1: install what WASTE needs, build it, convert the small model trained here on the
# King James Bible (models/kjv-mini, a Kimi-Linear checkpoint in Hugging Face layout; seconds) and
# run the main job on it: a verse continued in English (a private ioserver is started for the run
# and stopped afterwards).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/scripts/setup.sh"
# The programs and libwaste only (the `waste-shipped` target, what `cmake --install` ships): the
# tests are built by scripts/test.sh, in the same build directory.
WASTE_TARGETS="${WASTE_TARGETS:-waste-shipped}" bash "$root/scripts/build.sh" "$root/build"
model="$root/build/kjv-mini.waste"
rm -rf "$model"
"$root/build/cli/waste" convert "$root/models/kjv-mini" --out "$model"
"$root/build/cli/waste" info "$model"
"$root/build/cli/waste" run "$model" "And God said unto Moses," -n 48
