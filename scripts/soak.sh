#!/usr/bin/env bash
# Soak test of the shared daemon (not in CI): N clients of one container for a while, with kill -9
# and SIGSTOP/SIGCONT cycles, every finished client's output byte-compared to a solo run; at the
# end the daemon's RSS and what is left in /dev/shm and the runtime dir are checked.
#
#   scripts/soak.sh [--model DIR] [--minutes M] [--clients N] [--tokens T] [--budget B] [--build DIR]
#
# Defaults: an 8-layer Kimi-Linear-shaped container (made under the build dir when missing, 5 GB),
# 30 minutes, 4 clients, 32 tokens per run, automatic budget. Loopback/local IPC only; it stops by
# itself. Exit status 0 only when every compared output matched and nothing was left behind.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build"
model=""
minutes=30
clients=4
tokens=32
budget=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --minutes) minutes="$2"; shift 2 ;;
    --clients) clients="$2"; shift 2 ;;
    --tokens) tokens="$2"; shift 2 ;;
    --budget) budget="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    *) echo "soak.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
waste="$build/cli/waste"
[[ -x "$waste" ]] || { echo "soak.sh: $waste not built (bash scripts/build.sh $build)" >&2; exit 2; }
if [[ -z "$model" ]]; then
  model="$build/kl8.waste"
  [[ -d "$model" ]] || "$waste" synth --preset kimi-linear --layers 8 --out "$model"
fi

work="$(mktemp -d /tmp/waste-soak-XXXXXX)"
export WASTE_RUNTIME_DIR="$work/run"
mkdir -m 700 "$WASTE_RUNTIME_DIR"
trap 'pkill -KILL -f "waste run $model" 2>/dev/null || true; rm -rf "$work"' EXIT
budget_args=()
[[ -n "$budget" ]] && budget_args=(--budget "$budget")

# Each client has its own prompt (ids), so a wrong record shows as a byte difference.
prompt_of() { local c=$1; echo "$((c * 7 + 1)),$((c * 11 + 2)),$((c * 13 + 3)),$((c + 4))"; }

echo "== solo runs (the reference outputs)"
for ((c = 0; c < clients; c++)); do
  "$waste" run "$model" --ids "$(prompt_of $c)" -n "$tokens" -q "${budget_args[@]}" > "$work/solo-$c.txt"
done

declare -A pids
runs=0 matched=0 mismatched=0 killed=0 stopped=0
start_client() {
  local c=$1
  "$waste" run "$model" --ids "$(prompt_of $c)" -n "$tokens" -q "${budget_args[@]}" > "$work/out-$c.txt" 2> "$work/err-$c.txt" &
  pids[$c]=$!
}
finish_client() {
  local c=$1 st=0
  wait "${pids[$c]}" || st=$?
  runs=$((runs + 1))
  if [[ $st -eq 0 ]]; then
    if cmp -s "$work/out-$c.txt" "$work/solo-$c.txt"; then
      matched=$((matched + 1))
    else
      mismatched=$((mismatched + 1))
      echo "MISMATCH client $c run $runs:"; diff "$work/solo-$c.txt" "$work/out-$c.txt" || true
    fi
  elif [[ $st -ne 137 ]]; then
    mismatched=$((mismatched + 1))
    echo "FAILED client $c (exit $st):"; cat "$work/err-$c.txt"
  fi
}

echo "== $clients clients for $minutes min with kill -9 and SIGSTOP/SIGCONT cycles"
deadline=$(( $(date +%s) + minutes * 60 ))
for ((c = 0; c < clients; c++)); do start_client $c; done
cycle=0
while [[ $(date +%s) -lt $deadline ]]; do
  sleep 1
  cycle=$((cycle + 1))
  victim=$((RANDOM % clients))
  pid=${pids[$victim]}
  if kill -0 "$pid" 2>/dev/null; then
    case $((cycle % 10)) in
      3) kill -KILL "$pid" 2>/dev/null && killed=$((killed + 1)) ;;
      7) kill -STOP "$pid" 2>/dev/null && { stopped=$((stopped + 1)); sleep 10; kill -CONT "$pid" 2>/dev/null || true; } ;;
    esac
  fi
  for ((c = 0; c < clients; c++)); do
    if ! kill -0 "${pids[$c]}" 2>/dev/null; then finish_client $c; start_client $c; fi
  done
done
for ((c = 0; c < clients; c++)); do finish_client $c; done

echo "== daemon and leftovers"
info="$(ls "$WASTE_RUNTIME_DIR"/waste-*.json 2>/dev/null | head -1 || true)"
if [[ -n "$info" ]]; then
  dpid="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$info" 2>/dev/null || echo)"
  [[ -n "$dpid" ]] && echo "daemon pid $dpid RSS $(awk '/VmRSS/ {print $2, $3}' /proc/$dpid/status 2>/dev/null)"
fi
# The auto-started daemon exits a linger after its last client: wait for it.
for _ in $(seq 1 60); do
  [[ -z "$(ls "$WASTE_RUNTIME_DIR" 2>/dev/null)" ]] && break
  sleep 1
done
left_run="$(ls -A "$WASTE_RUNTIME_DIR" 2>/dev/null || true)"
left_shm="$(ls /dev/shm | grep "^waste_$(id -u)_" || true)"
echo "runs $runs  matched $matched  mismatched $mismatched  killed $killed  stopped $stopped"
echo "left in the runtime dir: ${left_run:-nothing}"
echo "left in /dev/shm: ${left_shm:-nothing}"
[[ $mismatched -eq 0 && -z "$left_run" && -z "$left_shm" ]]
