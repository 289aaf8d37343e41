#!/usr/bin/env bash
# Cluster test: authentication and limits. A raw peer (wsap.py) that sends
# Register or JobSubmit before authenticating, a wrong proof, nothing at all,
# too many connections, an oversized header, or queries it never reads the
# answers of, is refused with an Error naming the problem or the limit, its
# connection closed and logged with its address, while the daemon goes on
# serving. --insecure: refused together with a secret, warned about at every
# start, a whole cluster runs a job without a secret, and secured and
# insecure peers refuse each other with a log line naming the peer. A
# secured cluster run at debug level through a job never shows the secret's
# bytes in its logs, command lines or environments.
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-security
cleanup_extra() {
  for p in ${extra_pids:-}; do kill "$p" 2>/dev/null || true; done
  "$src/deploy/local/appliance-down" --dir "$work/insecure" --quiet >/dev/null 2>&1 || true
}
submit="$build/client/appliance-submit"
coordinator="$build/coordinator/coordinator"
raw() { "$py" "$src/tests/cluster/wsap.py" "$@"; }
extra_pids=""

secret="$work/secret"
(umask 077; echo "5ec2e7c0ffee5ec2e7c0ffee5ec2e7c0ffee" >"$secret")

# start_coordinator NAME ARGS...: a coordinator of its own; sets addr.
start_coordinator() {
  local name="$1"
  shift
  "$coordinator" --listen 127.0.0.1:0 --port-file "$work/$name.port" --name "$name" "$@" \
    >"$work/$name.log" 2>&1 &
  extra_pids="$extra_pids $!"
  for _ in $(seq 1 100); do [ -s "$work/$name.port" ] && break; sleep 0.05; done
  [ -s "$work/$name.port" ] || { cat "$work/$name.log" >&2; fail "$name did not start"; }
  addr="127.0.0.1:$(cat "$work/$name.port")"
}
# logged FILE PATTERN: FILE shows PATTERN within 3 s
logged() {
  for _ in $(seq 1 30); do grep -q -- "$2" "$1" && return 0; sleep 0.1; done
  echo "---- $1" >&2; tail -n 20 "$1" >&2
  return 1
}
# refused_job ADDR FILE TEXT: submitting FILE exits 3 with TEXT
refused_job() {
  local rc=0 msg
  msg=$(env -u APPLIANCE_INSECURE APPLIANCE_SECRET_FILE="$secret" "$submit" --coordinator "$1" --detach "$2" 2>&1) || rc=$?
  [ "$rc" = 3 ] && [[ "$msg" == *"$3"* ]] || fail "submitting $2: exit $rc, $msg"
}
# serves ADDR: an operator's request still gets its answer
serves() {
  env -u APPLIANCE_INSECURE APPLIANCE_SECRET_FILE="$secret" "$submit" --coordinator "$1" list >/dev/null
}

# ---- Before authentication nothing passes; limits refuse, the daemon goes on.
start_coordinator limits --secret-file "$secret" --auth-timeout-ms 800 --max-connections 3 \
  --max-connections-per-address 2 --max-frame-header 64K --max-frame-payload 1M \
  --max-queued-bytes 4M --max-job-file 2K --max-steps 1000 --max-model-params 100
log="$work/limits.log"
raw "$addr" register-before-proof || fail "register before the proof"
logged "$log" "connection from 127.0.0.1:[0-9]* (wse-node \"raw-peer\"): register before authentication" ||
  fail "register before the proof not logged"
raw "$addr" submit-before-hello || fail "submit before hello"
logged "$log" "connection from 127.0.0.1:[0-9]*: job_submit before authentication" || fail "submit not logged"
raw "$addr" wrong-proof || fail "wrong proof"
logged "$log" "authentication failed: wrong cluster secret" || fail "wrong proof not logged"
serves "$addr" || fail "the coordinator stopped serving after the refused peers"
echo "ok: Register and JobSubmit before authentication and a wrong proof are refused and logged"

raw "$addr" silent --expect "not authenticated within 800 ms" --max-ms 3000 || fail "auth timeout"
logged "$log" "not authenticated within 800 ms" || fail "auth timeout not logged"
echo "ok: a silent peer is dropped after --auth-timeout-ms"

raw "$addr" hold --held 127.0.0.1,127.0.0.1 --source 127.0.0.1 \
  --expect "too many connections from 127.0.0.1: 2 open, the limit (max_connections_per_address)" ||
  fail "per-address limit"
logged "$log" "connection from 127.0.0.1:[0-9]*: too many connections from 127.0.0.1" ||
  fail "per-address refusal not logged"
raw "$addr" hold --held 127.0.0.1,127.0.0.1,127.0.0.2 --source 127.0.0.3 \
  --expect "too many connections: 3 open, the limit (max_connections)" || fail "total limit"
logged "$log" "connection from 127.0.0.3:[0-9]*: too many connections: 3 open" || fail "total refusal not logged"
serves "$addr" || fail "the coordinator stopped serving after the connection limits"
echo "ok: connections beyond --max-connections-per-address and --max-connections are refused"

raw "$addr" big-header --key-file "$secret" --expect "header 10485760 bytes (limit 65536)" ||
  fail "oversized header"
logged "$log" "(client \"raw-peer\"): frame too large: header 10485760 bytes (limit 65536)" ||
  fail "oversized header not logged"
raw "$addr" spam-list 400000 --key-file "$secret" || fail "a peer that does not read"
logged "$log" "(client \"raw-peer\"): peer does not read: [0-9]* bytes queued for it, more than the limit of 4194304 (max_queued_bytes)" ||
  fail "the dropped reader not logged"
serves "$addr" || fail "the coordinator stopped serving after the frame and queue limits"
echo "ok: an oversized header and a peer that does not read its answers are dropped"

# Job sizes, refused at submission with the limit named (the quickstart
# model has 32 x 4 + 4 = 132 parameters).
job_at() { # job_at NAME STEPS: the quickstart job with that many steps
  sed -e "s/^max_steps = .*/max_steps = $2/" "$src/examples/quickstart.toml" >"$work/$1.toml"
  echo "$work/$1.toml"
}
refused_job "$addr" "$(job_at steps 5000)" \
  "steps.toml: runconfig.max_steps = 5000 is more than this coordinator accepts (max_steps = 1000)"
refused_job "$addr" "$(job_at params 1000)" \
  "params.toml: the model has 132 trainable parameters (528 B of float32 weights), more than this coordinator accepts (max_model_params = 100)"
{ cat "$work/params.toml"; for i in $(seq 1 40); do echo "# padding line $i of a job file that is too long"; done; } >"$work/long.toml"
refused_job "$addr" "$work/long.toml" \
  "long.toml: the job file has $(wc -c <"$work/long.toml") bytes, more than this coordinator accepts (max_job_file = 2048 bytes)"
logged "$log" "job file .*long.toml from 127.0.0.1:[0-9]* refused: .*(max_job_file = 2048 bytes)" ||
  fail "the long job file not logged"
echo "ok: job files, step counts and models beyond the limits are refused at submission"

# ---- Long replies go in bounded frames: a list and a log each larger than
# the 1 MiB header limit arrive whole, and a client that does not read a
# long log holds it back instead of being dropped for queued bytes.
mkdir -p "$work/big"
"$py" - "$work/big/journal.sqlite" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.executescript("""
CREATE TABLE jobs(id TEXT PRIMARY KEY, seq INTEGER NOT NULL, state INTEGER NOT NULL,
 priority INTEGER NOT NULL, file TEXT, toml TEXT, base_dir TEXT, model_dir TEXT,
 message TEXT, submitted_at REAL, steps INTEGER, max_steps INTEGER, loss REAL,
 eval_step INTEGER, eval_loss REAL, eval_accuracy REAL, eval_iou REAL);
CREATE TABLE job_log(job_id TEXT NOT NULL, line INTEGER NOT NULL, text TEXT NOT NULL,
 PRIMARY KEY(job_id, line));""")
db.executemany("INSERT INTO jobs VALUES(?,?,3,2,'old.toml','','/','/tmp/old',?,1.0e9,10,10,0.5,0,0,-1,-1)",
               [("job-%d" % i, i, "done " + "x" * 900) for i in range(1, 2501)])
db.executemany("INSERT INTO job_log VALUES('job-1',?,?)",
               [(i, "2001-09-09T01:46:40Z line %06d %s" % (i, "y" * 220)) for i in range(60000)])
db.commit()
PY
start_coordinator big --secret-file "$secret" --state-dir "$work/big" --max-queued-bytes 4M --max-frame-payload 1M
n=$(env -u APPLIANCE_INSECURE APPLIANCE_SECRET_FILE="$secret" "$submit" --coordinator "$addr" list --json |
    "$py" -c 'import json,sys; print(len(json.load(sys.stdin)["jobs"]))') || fail "a list of 2500 jobs"
[ "$n" = 2500 ] || fail "the list has $n jobs, expected 2500"
n=$(env -u APPLIANCE_INSECURE APPLIANCE_SECRET_FILE="$secret" "$submit" --coordinator "$addr" logs job-1 | wc -l)
[ "$n" = 60000 ] || fail "the log has $n lines, expected 60000"
raw "$addr" slow-log job-1 60000 --key-file "$secret" || fail "a slow reader of a long log"
! grep -q "peer does not read" "$work/big.log" || fail "the slow log reader was dropped: $(grep "does not read" "$work/big.log")"
echo "ok: a 2.5 MB list and a 14 MB log arrive whole; a slow reader holds the log back"

# ---- --insecure
set +e
msg=$("$coordinator" --insecure --secret-file "$secret" 2>&1); rc=$?
set -e
[ "$rc" = 2 ] && [[ "$msg" == *"the command line gives both a cluster secret and insecure mode: choose one"* ]] ||
  fail "--insecure with --secret-file: $rc $msg"
printf 'insecure = true\nsecret_file = "%s"\n' "$secret" >"$work/both.toml"
set +e
msg=$("$coordinator" --config "$work/both.toml" 2>&1); rc=$?
set -e
[ "$rc" = 2 ] && [[ "$msg" == *"$work/both.toml gives both a cluster secret and insecure mode"* ]] ||
  fail "insecure and secret_file in one config: $rc $msg"
set +e
msg=$("$submit" --coordinator "$addr" --insecure --secret-file "$secret" list 2>&1); rc=$?
set -e
[ "$rc" = 2 ] && [[ "$msg" == *"gives both insecure mode and a cluster secret"* ]] ||
  fail "appliance-submit --insecure --secret-file: $rc $msg"
echo "ok: --insecure together with a secret is refused"

irun="$work/insecure"
"$src/deploy/local/appliance-up" --insecure --dir "$irun" --build "$build" >/dev/null 2>"$work/up.err" ||
  fail "appliance-up --insecure: $(cat "$work/up.err")"
grep -q "WARNING: --insecure: the cluster is unauthenticated" "$work/up.err" || fail "appliance-up did not warn"
[ ! -e "$irun/secret" ] || fail "an insecure cluster has a secret file"
grep -qx "APPLIANCE_INSECURE=1" "$irun/env" || fail "env: $(cat "$irun/env")"
for f in "$irun"/logs/{coordinator,memoryx-1,swarmx-1,worker-1,wse-node-1}.log; do
  grep -q "WARN .*running --insecure: no cluster secret, the cluster is unauthenticated" "$f" ||
    fail "no warning in $f"
done
sed -e "s/^num_csx = .*/num_csx = 1/" -e "s/^max_steps = .*/max_steps = 10/" \
  -e "s/^checkpoint_steps = .*/checkpoint_steps = 0/" -e "s|^model_dir = .*|model_dir = \"$work/mi\"|" \
  "$src/examples/quickstart.toml" >"$work/small.toml"
out=$( (set -a; . "$irun/env"; set +a; unset APPLIANCE_SECRET_FILE; timeout 120 "$submit" --json "$work/small.toml") 2>"$work/insecure-submit.err") ||
  fail "job on the insecure cluster: $out $(cat "$work/insecure-submit.err")"
[ "$(echo "$out" | field state)" = done ] || fail "insecure job: $out"
grep -q "WARN appliance-submit: --insecure: no cluster secret" "$work/insecure-submit.err" ||
  fail "appliance-submit did not warn: $(cat "$work/insecure-submit.err")"
icoord=$(. "$irun/env"; echo "$APPLIANCE_COORDINATOR")
set +e
msg=$(env -u APPLIANCE_INSECURE APPLIANCE_SECRET_FILE="$secret" "$submit" --coordinator "$icoord" list 2>&1); rc=$?
set -e
[ "$rc" = 6 ] && [[ "$msg" == *"refused \"coordinator\": it runs --insecure (no cluster secret), and authentication is required here"* ]] ||
  fail "a secured client against an insecure coordinator: $rc $msg"
logged "$irun/logs/coordinator.log" \
  "connection from 127.0.0.1:[0-9]* (client \"appliance-submit\"): refused \"appliance-submit\": it authenticates with a secret" ||
  fail "the insecure coordinator did not log the secured peer"
"$src/deploy/local/appliance-down" --dir "$irun" --quiet
echo "ok: an insecure cluster warns at every start, runs a job, and refuses secured peers"

# ---- A secured cluster at debug level through a job: no secret anywhere.
"$src/deploy/local/appliance-up" --replicas 1 --log-level debug --dir "$run" --build "$build" >/dev/null
set -a; . "$run/env"; set +a
sed -i "s|^model_dir = .*|model_dir = \"$work/ms\"|" "$work/small.toml"
out=$(timeout 120 "$submit" --json "$work/small.toml" 2>"$work/submit.err") || fail "job: $out"
[ "$(echo "$out" | field state)" = done ] || fail "job: $out"
"$submit" logs job-1 >"$work/job.log"
# An insecure daemon meets the secured coordinator: refused, and the
# coordinator's log names it.
"$build/wse-node/wse-node" --insecure --coordinator "$APPLIANCE_COORDINATOR" --name sneaky-node \
  --listen 127.0.0.1:0 >"$work/sneaky.log" 2>&1 &
sneaky=$!
extra_pids="$extra_pids $sneaky"
logged "$run/logs/coordinator.log" \
  "connection from 127.0.0.1:[0-9]* (wse-node \"sneaky-node\"): refused \"sneaky-node\": it runs --insecure (no cluster secret), and authentication is required here" ||
  fail "the secured coordinator did not log the insecure peer"
logged "$work/sneaky.log" "coordinator 127.0.0.1:[0-9]* not reached: refused \"coordinator\": it authenticates with a secret, and authentication is off here (--insecure); retrying" || fail "the insecure wse-node did not say why"
kill "$sneaky"
"$submit" --cluster --json | "$py" -c '
import json, sys
names = {m["name"] for m in json.load(sys.stdin)["members"]}
assert "sneaky-node" not in names, names
' || fail "the insecure wse-node joined"
echo "ok: an insecure daemon is refused by a secured coordinator, which names it"

secret_raw=$(head -n 1 "$APPLIANCE_SECRET_FILE")
secret_hex=$(printf '%s' "$secret_raw" | od -An -tx1 | tr -d ' \n')
[ ${#secret_raw} -ge 32 ] || fail "the secret is too short to look for: ${#secret_raw}"
leaks=""
check() { # check WHAT FILE
  if grep -aqF -e "$secret_raw" -e "$secret_hex" -e "${secret_raw:0:16}" "$2"; then leaks="$leaks $1"; fi
}
lines=0
for f in "$run"/logs/*.log; do
  check "$f" "$f"
  lines=$((lines + $(wc -l <"$f")))
done
[ "$lines" -gt 100 ] || fail "debug logs too short to mean anything: $lines lines"
grep -q " DEBUG " "$run/logs/coordinator.log" || fail "the coordinator did not log at debug level"
check "appliance-submit output" "$work/submit.err"
check "job log" "$work/job.log"
for pf in "$run"/pids/*.pid; do
  pid=$(cat "$pf")
  [ -r "/proc/$pid/cmdline" ] || fail "$pf: no process $pid"
  tr '\0' '\n' <"/proc/$pid/cmdline" >"$work/cmdline"
  check "command line of $(basename "$pf" .pid)" "$work/cmdline"
  grep -q -- "--secret-file" "$work/cmdline" || fail "$pf: the secret is not given by file"
  tr '\0' '\n' <"/proc/$pid/environ" >"$work/environ"
  check "environment of $(basename "$pf" .pid)" "$work/environ"
  check "process name of $(basename "$pf" .pid)" "/proc/$pid/comm"
done
[ -z "$leaks" ] || fail "the secret's bytes appear in:$leaks"
echo "ok: after a job at debug level the secret is in no log, command line or environment"
echo "1 passed, 0 failed"
