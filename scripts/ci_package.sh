#!/usr/bin/env bash
# The Debian package, end to end (CI, after the tests): `cpack -G DEB` in BUILD, `apt-get install`
# of the .deb, the installed commands and examples run from a directory outside the tree with
# nothing of the build tree on PATH, then `apt-get remove`. Needs root (apt) and a built BUILD.
# Usage: scripts/ci_package.sh [BUILD_DIR]   (default: build)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
fail() { echo "ci_package: $*" >&2; exit 1; }
if dpkg-query -W -f '${Status}' waste 2>/dev/null | grep -q "install ok installed"; then
  fail "a waste package is already installed (apt-get remove waste first)"
fi

(cd "$build" && rm -f waste_*.deb && cpack -G DEB >/dev/null)
debs=("$build"/waste_*_*.deb)
[[ ${#debs[@]} -eq 1 && -f "${debs[0]}" ]] || fail "cpack made no single waste_<version>_<arch>.deb in $build"
deb="${debs[0]}"
echo "ci_package: $(basename "$deb"): Depends: $(dpkg-deb -f "$deb" Depends)"

tmp="$(mktemp -d /tmp/waste-deb-XXXXXX)"
cleanup() {
  /usr/bin/waste-ctl stop >/dev/null 2>&1 || true
  apt-get remove -y waste >/dev/null 2>&1 || true
  dpkg --purge waste >/dev/null 2>&1 || true  # no "rc" entry left in dpkg's database
  rm -rf "$tmp"
}
trap cleanup EXIT
apt-get install -y "$deb" >/dev/null
cd "$tmp"
export PATH=/usr/sbin:/usr/bin:/sbin:/bin WASTE_RUNTIME_DIR="$tmp/run" WASTE_LINGER_MS=1000
unset WASTE_IOSERVER WASTE_PRESETS_DIR WASTE_DATA_DIR LD_LIBRARY_PATH PKG_CONFIG_PATH
mkdir -p "$WASTE_RUNTIME_DIR"

/usr/bin/waste synth --preset tiny --tokenizer --out tiny.waste >/dev/null
ids="$(/usr/bin/waste run tiny.waste --ids 1,17,42 -n 4 -q)"
[[ "$ids" =~ ^[0-9]+\ [0-9]+\ [0-9]+\ [0-9]+$ ]] || fail "waste run --ids printed '$ids'"
/usr/bin/waste run tiny.waste "hello" -n 8 >text.out 2>text.err || fail "waste run (text) failed: $(cat text.err)"
pid="$(sed -n '1s/.*  pid \([0-9]*\)  .*/\1/p' <<<"$(/usr/bin/waste-ctl status)")"
[[ "$(readlink "/proc/$pid/exe")" == /usr/bin/waste-ioserver ]] || fail "the daemon is not /usr/bin/waste-ioserver"

# shellcheck disable=SC2046
cc -std=c11 -Wall -Werror "$root/examples/c/stream.c" $(pkg-config --cflags --libs waste) -o stream
./stream tiny.waste "hello" 8 >c.out 2>c.err || fail "the C example failed: $(cat c.err)"
python3 "$root/examples/python/stream.py" tiny.waste "hello" 8 >py.out 2>py.err || fail "the Python example failed: $(cat py.err)"
cmp -s c.out py.out || fail "the C and Python examples streamed different text"
/usr/bin/waste-ctl stop >/dev/null

apt-get remove -y waste >/dev/null
[[ ! -e /usr/bin/waste && ! -e /usr/lib/libwaste.so.0 ]] || fail "apt-get remove left files behind"
echo "ci_package: ok ($(basename "$deb") installed, ran, removed)"
