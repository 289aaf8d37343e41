# Shared set-up of the cluster tests, sourced as
#   . "${SOURCE_ROOT:?}/tests/cluster/lib.sh" NAME
# It sets src, build, py, a fresh work directory $work (removed on exit
# unless KEEP_WORK is set) with the cluster's run directory $run (stopped on
# exit, then cleanup_extra runs if the test defines one), and defines fail
# (the message plus the tail of every daemon log) and field (one key of a
# JSON object on stdin).
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
