#!/usr/bin/env bash
# Cluster test: the alert rules of deploy/prometheus against real daemons.
# A Prometheus server (Debian's prometheus) scrapes a one-replica cluster
# every second and evaluates appliance.rules.yml as checked in. A long job
# shows the coordinator's appliance_job_last_step_timestamp_seconds close to
# the clock (the stalled-job rule's expression stays far under its bound)
# and the gauge goes with the job; a job whose checkpoint of step 20 cannot
# be written (its file's path is a directory) fails, memoryx counts it in
# appliance_checkpoint_failures_total, and ApplianceCheckpointFailed fires.
# Skipped without prometheus.
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-alerts
command -v prometheus >/dev/null 2>&1 || { echo "SKIP: prometheus not found (apt-get install prometheus)"; exit 77; }

"$src/deploy/local/appliance-up" --replicas 1 --metrics --dir "$run" --build "$build" >/dev/null
set -a; . "$run/env"; set +a
submit="$build/client/appliance-submit"

# Prometheus: one scrape job per role, as deploy/prometheus/prometheus.yml
# names them, over the ports this cluster picked.
prom_port=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$py" - "$run/metrics" "$src/deploy/prometheus/appliance.rules.yml" > "$work/prometheus.yml" <<'PY'
import collections, re, sys
jobs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, url = line.split()
    role = re.sub(r"-[0-9]+$", "", name)
    jobs["appliance-" + role].append(url.split("//")[1].split("/")[0])
print("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - %s\nscrape_configs:" % sys.argv[2])
for job, targets in sorted(jobs.items()):
    print("  - job_name: %s\n    static_configs:\n      - targets: [%s]" % (job, ", ".join('"%s"' % t for t in targets)))
PY
promtool check config "$work/prometheus.yml" >/dev/null || fail "the generated configuration: $(cat "$work/prometheus.yml")"
prometheus --config.file "$work/prometheus.yml" --storage.tsdb.path "$work/tsdb" \
  --web.listen-address "127.0.0.1:$prom_port" > "$work/prometheus.log" 2>&1 &
prom_pid=$!
cleanup_extra() { kill "$prom_pid" 2>/dev/null || true; wait "$prom_pid" 2>/dev/null || true; }

# api PATH: Prometheus's JSON answer, its data part
api() {
  "$py" - "http://127.0.0.1:$prom_port/api/v1/$1" <<'PY'
import json, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=5) as r:
    out = json.load(r)
assert out["status"] == "success", out
print(json.dumps(out["data"]))
PY
}
# metric DAEMON NAME: the value of NAME (its first series) in DAEMON's /metrics, empty if absent
metric() {
  "$py" - "$(awk -v n="$1" '$1 == n { print $2 }' "$run/metrics")" "$2" <<'PY'
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=5) as r:
    for line in r.read().decode().splitlines():
        if line.startswith(sys.argv[2] + " ") or line.startswith(sys.argv[2] + "{"):
            print(line)
            break
PY
}
# until every target is up
for i in $(seq 100); do
  ups=$(api "query?query=up" 2>/dev/null) || ups=""
  [ -n "$ups" ] && "$py" -c 'import json,sys; r=json.loads(sys.argv[1])["result"]; sys.exit(0 if len(r)==5 and all(x["value"][1]=="1" for x in r) else 1)' "$ups" && break
  [ "$i" -lt 100 ] || fail "Prometheus did not scrape the 5 daemons: $ups $(tail -5 "$work/prometheus.log")"
  sleep 0.2
done

# 1. A long job: its last step is seconds old while it trains.
sed -e "s|^model_dir = .*|model_dir = \"$work/long\"|" -e 's/^max_steps = .*/max_steps = 1000000/' \
  -e 's/^num_csx = .*/num_csx = 1/' -e 's/^checkpoint_steps = .*/checkpoint_steps = 0/' \
  -e 's/^save_initial_checkpoint = .*/save_initial_checkpoint = false/' \
  "$src/examples/quickstart.toml" > "$work/long.toml"
job=$("$submit" --detach "$work/long.toml") || fail "submit: $job"
wait_step "$job" 20
sleep 1.2 # the expositions are rendered once a second
line=$(metric coordinator appliance_job_last_step_timestamp_seconds)
"$py" - "$line" "$job" <<'PY' || fail "the running job's last step: '$line'"
import re, sys, time
m = re.match(r'appliance_job_last_step_timestamp_seconds\{job_id="([^"]+)"\} ([0-9.]+)$', sys.argv[1])
assert m and m.group(1) == sys.argv[2], sys.argv[1]
age = time.time() - float(m.group(2))
assert -1 < age < 3, age
PY
# the stalled-job rule's expression, evaluated by Prometheus on the scraped series
for i in $(seq 50); do
  stale=$(api "query?query=time()-appliance_job_last_step_timestamp_seconds") || fail "query"
  "$py" -c 'import json,sys; r=json.loads(sys.argv[1])["result"]; sys.exit(0 if r else 1)' "$stale" && break
  sleep 0.2
done
"$py" - "$stale" "$job" <<'PY' || fail "Prometheus's view of the job's last step: $stale"
import json, sys
r = json.loads(sys.argv[1])["result"]
assert len(r) == 1 and r[0]["metric"]["job_id"] == sys.argv[2], r
assert -2 < float(r[0]["value"][1]) < 10, r   # far under the rule's 600 s
PY
"$submit" cancel "$job" >/dev/null 2>&1 || true
[ "$(finish "$job" | field state)" = cancelled ] || fail "$job not cancelled"
sleep 1.2
[ -z "$(metric coordinator appliance_job_last_step_timestamp_seconds)" ] ||
  fail "the gauge outlived the job: $(metric coordinator appliance_job_last_step_timestamp_seconds)"

# 2. A checkpoint that cannot be written.
before=$(metric memoryx-1 appliance_checkpoint_failures_total)
[ "$before" = "appliance_checkpoint_failures_total 0" ] || fail "before: '$before'"
alerts=$(api alerts)
"$py" -c 'import json,sys; a=json.loads(sys.argv[1])["alerts"]; sys.exit(1 if any(x["labels"]["alertname"]=="ApplianceCheckpointFailed" for x in a) else 0)' "$alerts" ||
  fail "ApplianceCheckpointFailed before any failure: $alerts"
members_idle 4
mkdir -p "$work/bad/checkpoint_20-shard1-of-1.safetensors"
sed -e "s|^model_dir = .*|model_dir = \"$work/bad\"|" -e 's/^num_csx = .*/num_csx = 1/' \
  -e 's/^save_initial_checkpoint = .*/save_initial_checkpoint = false/' \
  "$src/examples/quickstart.toml" > "$work/bad.toml"
rc=0; "$submit" --json "$work/bad.toml" > "$work/bad.json" 2>&1 || rc=$?
[ "$rc" = 4 ] || fail "the job with an unwritable checkpoint: exit $rc, $(cat "$work/bad.json")"
msg=$(field message < "$work/bad.json")
echo "$msg" | has "checkpoint of step 20 failed" || fail "the job's message: $msg"
sleep 1.2
after=$(metric memoryx-1 appliance_checkpoint_failures_total)
[ "$after" = "appliance_checkpoint_failures_total 1" ] || fail "after: '$after'"
mx=$(awk '$1 == "memoryx-1" { print $2 }' "$run/metrics" | sed -e 's|^http://||' -e 's|/.*||')
for i in $(seq 100); do
  alerts=$(api alerts) || fail "alerts"
  "$py" - "$alerts" "$mx" <<'PY' && break
import json, sys
a = [x for x in json.loads(sys.argv[1])["alerts"] if x["labels"]["alertname"] == "ApplianceCheckpointFailed"]
sys.exit(0 if len(a) == 1 and a[0]["state"] == "firing" and a[0]["labels"]["instance"] == sys.argv[2]
         and a[0]["labels"]["job"] == "appliance-memoryx" else 1)
PY
  [ "$i" -lt 100 ] || fail "ApplianceCheckpointFailed did not fire for $mx: $alerts"
  sleep 0.2
done
echo "ok: a running job's last step $("$py" -c 'import json,sys; print("%.1f" % float(json.loads(sys.argv[1])["result"][0]["value"][1]))' "$stale") s old in Prometheus; a failed checkpoint ($msg) counted by memoryx and ApplianceCheckpointFailed firing for $mx"
echo "1 passed, 0 failed"
