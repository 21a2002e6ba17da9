#!/usr/bin/env bash
# The install, checked from outside the tree: `cmake --install BUILD` into a temp prefix, the
# prefix moved elsewhere (relocatable), then only the installed files are used:
#   - data: a preset that exists only in the moved prefix's share/waste/presets must be found
#     (the build tree's configs/ does not have it, so this fails if the build tree were used);
#   - waste-ioserver: the daemon `waste run` starts must be the moved prefix's binary;
#   - the C example built with pkg-config (shared), with libwaste.a (static) and with
#     find_package(waste); the Python ctypes example on the moved libwaste.so;
#   - the C and the Python example at once on one daemon (`waste-ctl status`: 2 clients).
# Usage: scripts/install_test.sh BUILD_DIR   (ctest label `install`)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:?usage: install_test.sh BUILD_DIR}" && pwd)"
tmp="$(mktemp -d /tmp/waste-install-XXXXXX)"
c_pid="" py_pid=""
cleanup() {
  # The examples, if a check failed while they waited at the barrier (they are ours: $! pids).
  for p in $c_pid $py_pid; do kill "$p" 2>/dev/null || true; done
  if [[ -x "$tmp/moved/bin/waste-ctl" ]]; then "$tmp/moved/bin/waste-ctl" stop >/dev/null 2>&1 || true; fi
  rm -rf "$tmp"
}
[[ -n "${KEEP:-}" ]] || trap cleanup EXIT
fail() { echo "install_test: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$tmp/stage" >/dev/null
mv "$tmp/stage" "$tmp/moved"
P="$tmp/moved"
# Nothing of the build tree on the way: no PATH entry, no overrides; private daemons.
export PATH=/usr/bin:/bin
unset WASTE_IOSERVER WASTE_PRESETS_DIR WASTE_DATA_DIR WASTE_BIN_DIR WASTE_SOURCE_DIR LD_LIBRARY_PATH
export WASTE_RUNTIME_DIR="$tmp/run" WASTE_LINGER_MS=2000
mkdir -p "$WASTE_RUNTIME_DIR" "$tmp/work"
cd "$tmp/work"

cp "$P/share/waste/presets/tiny.json" "$P/share/waste/presets/only-installed.json"
[[ ! -e "$root/configs/presets/only-installed.json" ]] || fail "the source tree has only-installed.json"
"$P/bin/waste" synth --preset only-installed --tokenizer --out model.waste >/dev/null \
  || fail "the installed waste did not find its prefix's share/waste/presets"

out="$("$P/bin/waste" run model.waste --ids 1,17,42 -n 4 -q)" || fail "waste run through the daemon failed"
[[ "$out" =~ ^[0-9]+\ [0-9]+\ [0-9]+\ [0-9]+$ ]] || fail "waste run printed '$out', not 4 ids"
status="$("$P/bin/waste-ctl" status)"
pid="$(sed -n '1s/.*  pid \([0-9]*\)  .*/\1/p' <<<"$status")"
[[ -n "$pid" ]] || fail "no daemon in waste-ctl status: $status"
[[ "$(readlink "/proc/$pid/exe")" == "$P/bin/waste-ioserver" ]] \
  || fail "the daemon runs $(readlink "/proc/$pid/exe"), not $P/bin/waste-ioserver"
"$P/bin/waste-ctl" stop >/dev/null

export PKG_CONFIG_PATH="$P/lib/pkgconfig"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Werror "$root/examples/c/stream.c" $(pkg-config --cflags --libs waste) -Wl,-rpath,"$P/lib" \
  -o stream
ldd ./stream >ldd.txt  # (a file, not a pipe: grep -q closing early would fail the pipeline)
grep -q "$P/lib/libwaste.so.0" ldd.txt || fail "stream does not load $P/lib/libwaste.so.0"
# shellcheck disable=SC2046
cc -std=c11 "$root/examples/c/stream.c" $(pkg-config --cflags waste) "$P/lib/libwaste.a" \
  $(pkg-config --static --libs-only-l waste | sed 's/-lwaste //') -o stream-static
ldd ./stream-static >ldd-static.txt
! grep -q libwaste ldd-static.txt || fail "stream-static loads libwaste.so"
cmake -S "$root/examples/c" -B cmake-example -DCMAKE_PREFIX_PATH="$P" >/dev/null
cmake --build cmake-example >/dev/null
# A host with libwaste.a inside has no libwaste.so to look beside: waste-ioserver comes from PATH.
PATH="$P/bin:$PATH" ./stream-static model.waste "hello" 4 >/dev/null 2>&1 || fail "stream-static failed"
./cmake-example/stream model.waste "hello" 4 >/dev/null 2>&1 || fail "the find_package(waste) build failed"

# The C and the Python example at once: both attach, waste-ctl sees both, then both stream.
mkdir barrier
./stream model.waste "hello world" 12 barrier >c.out 2>c.err &
c_pid=$!
WASTE_LIB="$P/lib/libwaste.so.0" python3 "$root/examples/python/stream.py" model.waste "hello world" 12 barrier \
  >py.out 2>py.err &
py_pid=$!
for _ in $(seq 600); do
  [[ "$(find barrier -name 'ready.*' | wc -l)" -ge 2 ]] && break
  sleep 0.05
done
[[ "$(find barrier -name 'ready.*' | wc -l)" -ge 2 ]] || fail "the examples did not both attach: $(cat c.err py.err)"
status="$("$P/bin/waste-ctl" status)"
grep -q ", 2 client(s)" <<<"$status" || fail "waste-ctl status does not show 2 clients: $status"
grep -q "pid $c_pid " <<<"$status" && grep -q "pid $py_pid " <<<"$status" \
  || fail "waste-ctl status does not list both examples ($c_pid, $py_pid): $status"
# Started from libwaste.so (neither example has waste-ioserver beside it): the lib's ../bin one.
pid="$(sed -n '1s/.*  pid \([0-9]*\)  .*/\1/p' <<<"$status")"
[[ "$(readlink "/proc/$pid/exe")" == "$P/bin/waste-ioserver" ]] \
  || fail "the examples' daemon runs $(readlink "/proc/$pid/exe"), not $P/bin/waste-ioserver"
touch barrier/go
wait "$c_pid" || fail "the C example failed: $(cat c.err)"
wait "$py_pid" || fail "the Python example failed: $(cat py.err)"
c_daemon="$(sed -n 's/.*daemon pid \([0-9]*\).*/\1/p' c.err)"
py_daemon="$(sed -n 's/.*daemon pid \([0-9]*\).*/\1/p' py.err)"
[[ -n "$c_daemon" && "$c_daemon" == "$py_daemon" ]] || fail "not one daemon: C '$c_daemon', Python '$py_daemon'"
cmp -s c.out py.out || fail "the C and Python examples streamed different text"
[[ "$(wc -c <c.out)" -gt 1 ]] || fail "the C example streamed nothing"
echo "install_test: ok ($P; daemon $c_daemon served the C and the Python example)"
