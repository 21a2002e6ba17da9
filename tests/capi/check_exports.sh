#!/usr/bin/env bash
# libwaste.so exports the C API only, under its versioned SONAME: every defined dynamic symbol is
# waste_* (a leaked C++ or dependency symbol would let hosts bind to internals), and the SONAME is
# libwaste.so.MAJOR. Usage: check_exports.sh LIBWASTE_SO EXPECTED_SONAME
set -euo pipefail
lib="$1" want_soname="$2"
nm -D --defined-only "$lib" >"${TMPDIR:-/tmp}/waste-exports.$$"
trap 'rm -f "${TMPDIR:-/tmp}/waste-exports.$$"' EXIT
symbols="$(awk '{print $NF}' "${TMPDIR:-/tmp}/waste-exports.$$")"
leaked="$(grep -v '^waste_' <<<"$symbols" || true)"
[[ -z "$leaked" ]] || { echo "libwaste.so exports non-waste_* symbols:"; head -20 <<<"$leaked"; exit 1; }
grep -qx 'waste_open' <<<"$symbols" || { echo "waste_open is not exported"; exit 1; }
soname="$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')"
[[ "$soname" == "$want_soname" ]] || { echo "SONAME is '$soname', not '$want_soname'"; exit 1; }
echo "ok: $(wc -l <<<"$symbols") waste_* symbols, SONAME $soname"
