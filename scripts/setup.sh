#!/usr/bin/env bash
# Installs everything WASTE needs to build and test on Debian 12 (run as root or with sudo).
set -euo pipefail
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; fi
packages=(
  build-essential cmake ninja-build pkg-config git ccache
  libboost-dev libzmq3-dev cppzmq-dev libcli11-dev catch2 libspdlog-dev nlohmann-json3-dev
  zlib1g-dev libicu-dev liburing-dev libpng-dev libjpeg62-turbo-dev
  # waste serve's HTTP is Boost.Beast (libboost-dev above); test-time only: nginx in front of two servers (tests/serve)
  nginx
  # test-time only: the PyTorch oracle (with a fast BLAS), the libFuzzer runtime, plots
  python3 python3-torch python3-numpy libopenblas0-pthread clang libclang-rt-14-dev gnuplot-nox
  # test-time only: the validator of the grammar tests' outputs (tests/grammar/random_schemas.py)
  python3-jsonschema
  # test-time only: the random-read ceiling of `waste bench --reader-sweep` (tests/cli/test_bench_reader_sweep.cpp)
  fio
  # models/kjv-mini: the King James Bible its train.py and measure.py read (the ctest needs only the committed files)
  bible-kjv
  # test-time only: the NEON kernels, cross-compiled and run under qemu (tests/cross/)
  g++-12-aarch64-linux-gnu qemu-user
  )
export DEBIAN_FRONTEND=noninteractive
if ! dpkg -s "${packages[@]}" >/dev/null 2>&1; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${packages[@]}"
fi
# The tokenizer cross-check runs npm's tiktoken (WASM); node may come from nodesource, so only add Debian's when absent.
if ! command -v npm >/dev/null 2>&1; then
  $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi
# tests/serve drives `waste serve` with the official openai npm client (versions pinned by its package-lock.json).
(cd "$(dirname "$0")/../tests/serve/js" && npm ci --no-audit --no-fund --silent)
