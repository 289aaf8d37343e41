#!/usr/bin/env bash
# Cluster test: membership. Daemons register and heartbeat; the coordinator
# marks a silent member lost within its heartbeat timeout and a killed one at
# once; a daemon that comes back reconnects and registers again; a daemon's
# configuration file is read, and a bad one refused with file:line:column.
set -euo pipefail
src=${SOURCE_ROOT:?}
build=${BUILD_ROOT:?}
py=/usr/bin/python3
work=$(mktemp -d "${TMPDIR:-/tmp}/appliance-members.XXXXXX")
run="$work/run"
extra_pid=
cleanup() {
  [ -n "$extra_pid" ] && kill "$extra_pid" 2>/dev/null || true
  for p in "$run"/pids/*.pid; do [ -f "$p" ] && kill -CONT "$(cat "$p")" 2>/dev/null || true; done
  "$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null 2>&1 || true
  if [ "${KEEP_WORK:-}" = "" ]; then rm -rf "$work"; fi
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; for f in "$run"/logs/*.log; do echo "== $f" >&2; tail -n 15 "$f" >&2; done; exit 1; }

"$src/deploy/local/appliance-up" --replicas 2 --dir "$run" --build "$build" \
  --heartbeat-timeout-ms 1000 >/dev/null
set -a; . "$run/env"; set +a
submit="$build/client/appliance-submit"

# state NAME: the state of the newest member called NAME
state() {
  "$submit" --cluster --json | "$py" -c '
import json, sys
ms = [m for m in json.load(sys.stdin)["members"] if m["name"] == sys.argv[1]]
print(ms[-1]["state"] if ms else "absent")' "$1"
}
# wait_state NAME STATE SECONDS: polls every 0.1 s; prints the seconds taken
wait_state() {
  local start now
  start=$(date +%s.%N)
  for _ in $(seq 1 $(($3 * 10))); do
    if [ "$(state "$1")" = "$2" ]; then
      now=$(date +%s.%N)
      "$py" -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$start" "$now"
      return 0
    fi
    sleep 0.1
  done
  fail "$1 not $2 after $3 s (is $(state "$1"))"
}

n=$("$submit" --cluster --json | "$py" -c 'import json,sys; print(sum(m["state"] == "alive" for m in json.load(sys.stdin)["members"]))')
[ "$n" = 6 ] || fail "expected 6 alive members, found $n"

# Each wse-node registers its kernels' instruction set, which --cluster
# shows with what it makes of a job's layers (as its own log says)
isa=$(sed -n 's/.*INFO wse-node: instruction set \([a-z0-9_]*\): .*/\1/p' "$run/logs/wse-node-1.log" | head -n 1)
[ -n "$isa" ] || fail "wse-node-1 did not log its instruction set"
"$submit" --cluster --json | "$py" -c '
import json, sys
ws = [m for m in json.load(sys.stdin)["members"] if m["role"] == "wse-node"]
assert ws and all(m["isa"] == sys.argv[1] and m["conv_block"] in (8, 16) for m in ws), ws' "$isa" ||
  fail "the wse-nodes did not register instruction set $isa"
line=$("$submit" --cluster | grep -E "^processor $isa: blocked groups of (8|16) channels \(aBcd(8|16)b\), mixed precision in (bfloat16|float32):") ||
  fail "--cluster does not show the wse-nodes' processor: $("$submit" --cluster)"
names=$(echo "${line##*:}" | tr ' ' '\n' | sort | xargs)
[ "$names" = "wse-node-1 wse-node-2" ] || fail "the processor line names $names, not both wse-nodes: $line"
echo "ok: the wse-nodes registered their instruction set ($isa), shown by --cluster"

# A stopped process keeps its socket but stops heartbeating.
pid1=$(cat "$run/pids/wse-node-1.pid")
kill -STOP "$pid1"
t=$(wait_state wse-node-1 lost 5)
"$py" -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 2.5 else 1)" "$t" ||
  fail "a silent member took $t s to be noticed (timeout 1 s)"
echo "ok: silent wse-node-1 marked lost after $t s"
grep -q "no heartbeat for 1000 ms" "$run/logs/coordinator.log" || fail "coordinator did not say why"

# Resumed, it finds its connection closed, reconnects and registers again.
kill -CONT "$pid1"
t=$(wait_state wse-node-1 alive 15)
echo "ok: wse-node-1 reconnected and registered again after $t s"

# A killed process: its connection closes, it is lost at once.
kill -KILL "$(cat "$run/pids/wse-node-2.pid")"
t=$(wait_state wse-node-2 lost 3)
echo "ok: killed wse-node-2 marked lost after $t s"

# Configuration files.
printf 'name = "wse-config"\nwafer_memory = "1G"\nthreads = 1\n' > "$work/good.toml"
printf 'name = "x"\nwafer_memroy = "1G"\n' > "$work/bad.toml"
set +e
msg=$("$build/wse-node/wse-node" --config "$work/bad.toml" 2>&1); rc=$?
set -e
[ "$rc" = 2 ] || fail "bad config: exit $rc, expected 2: $msg"
grep -q "bad.toml:2:1: unknown key \"wafer_memroy\" for wse-node" <<<"$msg" || fail "bad config message: $msg"
echo "ok: $msg"
"$build/wse-node/wse-node" --config "$work/good.toml" 2>"$work/extra.log" &
extra_pid=$!
wait_state wse-config alive 10 >/dev/null
mem=$("$submit" --cluster --json | "$py" -c '
import json, sys
print([m for m in json.load(sys.stdin)["members"] if m["name"] == "wse-config"][-1]["wafer_memory"])')
[ "$mem" = 1073741824 ] || fail "wafer_memory from the config file: $mem"
kill -TERM "$extra_pid"
wait "$extra_pid" || fail "wse-node did not exit cleanly on SIGTERM"
extra_pid=
[ "$(state wse-config)" = gone ] || fail "a daemon stopped with SIGTERM should be gone, is $(state wse-config)"
echo "ok: configuration file read; SIGTERM deregisters cleanly"
echo "1 passed, 0 failed"
