# Shared set-up of the cluster tests, sourced as
#   . "${SOURCE_ROOT:?}/tests/cluster/lib.sh" NAME
# It sets src, build, py, a fresh work directory $work (removed on exit
# unless KEEP_WORK is set) with the cluster's run directory $run (stopped on
# exit, then cleanup_extra runs if the test defines one), and defines fail
# (the message plus the tail of every daemon log), field (one key of a
# JSON object on stdin) and has (grep -q on stdin, safe in a pipe).
src=${SOURCE_ROOT:?}
build=${BUILD_ROOT:?}
py=/usr/bin/python3
work=$(mktemp -d "${TMPDIR:-/tmp}/${1:?test name}.XXXXXX")
run="$work/run"
cleanup() {
  "$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null 2>&1 || true
  if declare -F cleanup_extra >/dev/null; then cleanup_extra; fi
  if [ "${KEEP_WORK:-}" = "" ]; then rm -rf "$work"; fi
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; for f in "$run"/logs/*.log; do echo "== $f" >&2; tail -n 15 "$f" >&2; done; exit 1; }
field() { "$py" -c "import json,sys; print(json.loads(sys.stdin.read())['$1'])"; }
# has ARGS...: grep -q ARGS on stdin, read whole first. A grep -q in a pipe
# stops at its first match; under pipefail the writer can then die of
# SIGPIPE and fail the very pipeline that matched.
has() { local in; in=$(cat); grep -q "$@" <<<"$in"; }
# Following a job by its id (faults.sh, spatial.sh):
# step_of JOB: its committed steps (empty while the coordinator is away);
# read with a bash pattern, not field's Python: wait_step asks every 20 ms,
# and a Python a time took a core from the job it waited for
step_of() {
  local out re=', "steps": ([0-9]+), "max_steps": '
  out=$("$build/client/appliance-submit" status "$1" --json 2>/dev/null) || return 0
  [[ $out =~ $re ]] && echo "${BASH_REMATCH[1]}"
  return 0
}
# finish JOB: follows the job to its end, across a restart of the coordinator
finish() {
  local out state deadline=$((SECONDS + 180))
  while :; do
    out=$(timeout 120 "$build/client/appliance-submit" status "$1" --follow --json 2>&1 | tail -n 1) || true
    state=$(echo "$out" | field state 2>/dev/null) || state=""
    case "$state" in done|failed|cancelled) echo "$out"; return 0 ;; esac
    [ "$SECONDS" -lt "$deadline" ] || fail "job $1 did not end: $out"
    sleep 0.5
  done
}
# members_idle N: until N members are alive without a job (5 s at most)
members_idle() {
  local list
  for i in $(seq 50); do
    list=$("$build/client/appliance-submit" --cluster --json) || fail "cluster listing"
    "$py" - "$list" "$1" <<'PY' && return 0
import json, sys
members = json.loads(sys.argv[1])["members"]
sys.exit(0 if sum(m["state"] == "alive" and not m["job"] for m in members) == int(sys.argv[2]) else 1)
PY
    sleep 0.1
  done
  fail "members not idle: $list"
}
# wait_step JOB STEP: until the job has committed STEP steps
wait_step() {
  local s deadline=$((SECONDS + 60))
  while :; do
    s=$(step_of "$1")
    [ -n "$s" ] && [ "$s" -ge "$2" ] && return 0
    [ "$SECONDS" -lt "$deadline" ] || fail "job $1 did not reach step $2 (at ${s:-?})"
    sleep 0.02
  done
}
