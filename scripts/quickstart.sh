#!/usr/bin/env bash
# README command 1: install what WASTE needs, build it, make a small synthetic container and
# run the main job on it (a private ioserver is started for the run and stopped afterwards).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh" "$root/build"
model="$root/build/tiny.waste"
rm -rf "$model"
"$root/build/cli/waste" synth --preset tiny --tokenizer --out "$model"
"$root/build/cli/waste" info "$model"
"$root/build/cli/waste" run "$model" --ids 1,2,3 -n 16
