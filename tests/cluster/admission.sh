#!/usr/bin/env bash
# Cluster test: the coordinator's admission limits and job history, with low
# limits (4 queued jobs, 2 per submitter, 2 finished jobs in memory, 4 KiB
# job files). While a long job runs, a submitter's third queued job is
# refused naming the limit (exit 3); load clients filling the queue are
# refused naming theirs, and every job they submitted is accounted for; an
# oversized job file is refused. Once the jobs ran, the finished ones evicted
# from memory still answer status, logs and list from the journal.
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-admission

cat > "$work/coordinator.toml" <<'TOML'
max_queued_jobs = 4
max_queued_per_submitter = 2
max_job_history = 2
max_job_file = "4K"
TOML
"$src/deploy/local/appliance-up" --replicas 1 --metrics --dir "$run" --build "$build" \
  --coordinator-config "$work/coordinator.toml" >/dev/null
set -a; . "$run/env"; set +a
submit="$build/client/appliance-submit"
job() { # job NAME STEPS
  sed -e "s/^max_steps = .*/max_steps = $2/" -e "s/^num_csx = .*/num_csx = 1/" \
    -e "s|^model_dir = .*|model_dir = \"$work/$1\"|" -e "s/^checkpoint_steps = .*/checkpoint_steps = 0/" \
    -e "s/^save_initial_checkpoint = .*/save_initial_checkpoint = false/" \
    "$src/examples/quickstart.toml" > "$work/$1.toml"
  echo "$work/$1.toml"
}
state() { "$submit" status "$1" --json | field state; }
wait_state() { # wait_state JOB STATE SECONDS
  for _ in $(seq 1 $(($3 * 10))); do [ "$(state "$1")" = "$2" ] && return 0; sleep 0.1; done
  fail "$1 not $2 after $3 s: $("$submit" status "$1" --json)"
}
refused() { # refused PATTERN JOBFILE: the submission exits 3 with PATTERN in its message
  local out rc=0
  out=$("$submit" --detach "$2" 2>&1) || rc=$?
  [ "$rc" = 3 ] || fail "expected exit 3 (refused), got $rc: $out"
  echo "$out" | has -- "$1" || fail "the refusal does not name $1: $out"
}

[ "$("$submit" --detach "$(job long 2000000)")" = job-1 ] || fail "first job"
wait_state job-1 running 10
"$submit" --detach "$(job a 5)" >/dev/null || fail "job-2"
"$submit" --detach "$(job b 5)" >/dev/null || fail "job-3"
refused "--max-queued-per-submitter 2" "$(job c 5)"
echo "ok: a submitter's third queued job is refused"

# Three more submitters (the load generator's clients), two jobs each: one
# fits in the queue, the others find it full.
"$build/bench/load" --train job-1 --clients 3 --jobs 6 --seconds 2 --poll-ms 100 \
  --job-file "$(job small 5)" > "$work/load.out" 2> "$work/load.err" ||
  fail "load: $(cat "$work/load.out" "$work/load.err")"
val() { awk -v k="$1" '$1 == k {print $2}' "$work/load.out"; }
[ "$(val accepted)" = 2 ] && [ "$(val refused)" = 4 ] && [ "$(val refused_queue_full)" = 4 ] &&
  [ "$(val final_queued)" = 2 ] && [ "$(val unaccounted)" = 0 ] ||
  fail "load clients: $(cat "$work/load.out")"
grep -q "the queue is full, 4 jobs are waiting (--max-queued-jobs 4)" "$work/load.err" ||
  fail "no queue-full message: $(cat "$work/load.err")"
echo "ok: a full queue refuses, naming the limit; every job the load clients submitted is accounted for"

{ cat "$(job big 5)"; for _ in $(seq 1 80); do echo "# padding padding padding padding padding padding"; done; } > "$work/big2.toml"
refused "max_job_file = 4096 bytes" "$work/big2.toml"
echo "ok: an oversized job file is refused"

"$submit" cancel job-1 >/dev/null || [ $? = 5 ] || fail "cancel job-1"
for j in job-2 job-3 job-4 job-5; do wait_state "$j" done 60; done
# The next submission evicts the finished jobs past the two kept in memory.
out=$("$submit" --json "$(job e 5)") || fail "job-6: $out"
[ "$(echo "$out" | field job_id)" = job-6 ] || fail "job-6: $out"
sleep 1.2 # the metrics are rendered once a second
url=$(awk '$1 == "coordinator" {print $2}' "$run/metrics")
"$py" - "$url" <<'PY' || fail "metrics: $(curl -s "$url" 2>/dev/null | grep -E 'jobs|evicted')"
import re, sys, urllib.request
text = urllib.request.urlopen(sys.argv[1], timeout=5).read().decode()
def val(name):
    return float(re.search(r"^%s (\S+)$" % re.escape(name), text, re.M).group(1))
assert val("appliance_jobs_evicted_total") >= 3, text
assert val('appliance_jobs{state="done"}') + val('appliance_jobs{state="cancelled"}') <= 3, text
assert val("appliance_jobs_refused_total") == 6, text
PY
[ "$(state job-1)" = cancelled ] || fail "status of evicted job-1: $("$submit" status job-1 --json)"
[ "$(state job-2)" = done ] || fail "status of evicted job-2"
"$submit" logs job-2 | has "done: 5 steps" || fail "logs of evicted job-2: $("$submit" logs job-2)"
msg=$("$submit" cancel job-1 2>&1) && fail "cancel of an evicted job succeeded"
echo "$msg" | has "has already ended: cancelled" || fail "cancel of evicted job-1: $msg"
"$submit" list --json | "$py" -c '
import json, sys
l = json.load(sys.stdin)
states = {j["job_id"]: j["state"] for j in l["jobs"]}
assert l["omitted"] == 0, l["omitted"]
assert states == {"job-1": "cancelled", "job-2": "done", "job-3": "done", "job-4": "done",
                  "job-5": "done", "job-6": "done"}, states
' || fail "list: $("$submit" list)"
echo "ok: finished jobs evicted from memory answer status, logs, cancel and list from the journal"
