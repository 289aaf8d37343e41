#!/usr/bin/env bash
# Cluster test: users. With a users file the coordinator authenticates
# clients by their own keys; two users each list, follow, read and cancel
# only their own jobs, another user's job being "no job" exactly like one
# that never existed; the cluster list hides the jobs of others; an operator
# (the cluster secret) sees and cancels everything; a wrong key, an unknown
# user and a user sending a daemon's message are refused and logged; the
# owners survive a restart of the coordinator, and a journal from before
# users existed is migrated, its jobs left to the operators. A user is one
# submitter for the queue limits. Jobs evicted from memory (past
# --max-job-history) keep their owners: lists, status, logs and cancel read
# from the journal show each user only their own. A users file or key file
# that others may read stops the coordinator from starting.
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-users
cleanup_extra() { for p in ${extra_pids:-}; do kill "$p" 2>/dev/null || true; done; }
extra_pids=""
submit="$build/client/appliance-submit"
coordinator="$build/coordinator/coordinator"
raw() { "$py" "$src/tests/cluster/wsap.py" "$@"; }

keys="$work/keys"
mkdir -m 700 "$keys"
(umask 077
 od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$keys/alice.key"
 od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$keys/bob.key"
 printf '[users.alice]\nkey_file = "alice.key"\n\n[users.bob]\nkey = "%s"\n' "$(cat "$keys/bob.key")" \
   >"$keys/users.toml")

# ---- Loose permissions: the coordinator refuses to start.
cp "$keys/users.toml" "$work/loose.toml"
chmod 644 "$work/loose.toml"
(umask 077; echo "0123456789abcdef0123456789abcdef" >"$work/secret")
set +e
msg=$("$coordinator" --listen 127.0.0.1:0 --secret-file "$work/secret" --users-file "$work/loose.toml" 2>&1); rc=$?
set -e
[ "$rc" = 1 ] && [[ "$msg" == *"users file $work/loose.toml has mode 0644: it holds keys and must be readable by its owner only (chmod 600 $work/loose.toml)"* ]] ||
  fail "a world-readable users file: $rc $msg"
mkdir -m 700 "$work/loosekey"
cp "$keys/alice.key" "$work/loosekey/alice.key"
chmod 640 "$work/loosekey/alice.key"
(umask 077; printf '[users.alice]\nkey_file = "alice.key"\n' >"$work/loosekey/users.toml")
set +e
msg=$("$coordinator" --listen 127.0.0.1:0 --secret-file "$work/secret" --users-file "$work/loosekey/users.toml" 2>&1); rc=$?
set -e
[ "$rc" = 1 ] && [[ "$msg" == *"key file $work/loosekey/alice.key has mode 0640"* ]] ||
  fail "a group-readable key file: $rc $msg"
set +e
msg=$("$coordinator" --insecure --users-file "$keys/users.toml" 2>&1); rc=$?
set -e
[ "$rc" = 2 ] && [[ "$msg" == *"--users-file needs authentication"* ]] || fail "--users-file with --insecure: $rc $msg"
echo "ok: users and key files others may read, and users without authentication, are refused"

# ---- Two users and an operator on one cluster.
echo "max_queued_per_submitter = 1" >"$work/coordinator.toml"
"$src/deploy/local/appliance-up" --replicas 1 --dir "$run" --build "$build" --users-file "$keys/users.toml" \
  --coordinator-config "$work/coordinator.toml" >/dev/null
set -a; . "$run/env"; set +a
grep -q "users file $keys/users.toml: 2 user(s)" "$run/logs/coordinator.log" || fail "users file not announced"
alice() { env -u APPLIANCE_SECRET_FILE APPLIANCE_USER=alice APPLIANCE_KEY_FILE="$keys/alice.key" "$submit" "$@"; }
bob() { "$submit" --user bob --key-file "$keys/bob.key" "$@"; }
job() { # job NAME STEPS
  sed -e "s/^max_steps = .*/max_steps = $2/" -e "s/^num_csx = .*/num_csx = 1/" \
    -e "s|^model_dir = .*|model_dir = \"$work/$1\"|" -e "s/^checkpoint_steps = .*/checkpoint_steps = 0/" \
    "$src/examples/quickstart.toml" >"$work/$1.toml"
  echo "$work/$1.toml"
}
ids() { "$py" -c 'import json,sys; print(" ".join(j["job_id"] for j in json.load(sys.stdin)["jobs"]))'; }
# refused WHO ARGS...: exit 2 with "no job ID"
refused() {
  local who="$1" id="${*: -1}" rc=0 msg
  shift
  msg=$("$who" "$@" 2>&1) || rc=$?
  [ "$rc" = 2 ] && [ "$msg" = "appliance-submit: no job $id" ] || fail "$who $*: exit $rc, $msg"
}

a=$(alice --detach "$(job alice 2000000)") || fail "alice submits: $a"
[ "$a" = job-1 ] || fail "alice's job is $a"
for _ in $(seq 1 100); do [ "$(alice status job-1 --json | field state)" = running ] && break; sleep 0.1; done
[ "$(alice status job-1 --json | field state)" = running ] || fail "job-1 is not running"
b=$(bob --detach "$(job bob 40)") || fail "bob submits: $b"
[ "$b" = job-2 ] || fail "bob's job is $b"
rc=0; msg=$(bob --detach "$(job bob2 40)" 2>&1) || rc=$?
[ "$rc" = 3 ] && [[ "$msg" == *"user bob already has 1 jobs queued, the most one submitter may have (--max-queued-per-submitter 1)"* ]] ||
  fail "bob's second queued job: exit $rc, $msg"
echo "ok: a user is one submitter for the queue limits"

[ "$(alice list --json | ids)" = "job-1" ] || fail "alice lists: $(alice list)"
[ "$(bob list --json | ids)" = "job-2" ] || fail "bob lists: $(bob list)"
[ "$("$submit" list --json | ids)" = "job-1 job-2" ] || fail "the operator lists: $("$submit" list)"
[ "$(alice status --json | field job_id)" = job-1 ] || fail "alice's newest job"
[ "$(bob status --json | field job_id)" = job-2 ] || fail "bob's newest job"
echo "ok: each user lists only their own jobs, the operator all of them"

refused alice status job-2
refused alice status --follow job-2
refused alice logs job-2
refused alice cancel job-2
refused alice status job-99   # the same answer as for a job that never was
refused bob cancel job-1
refused bob logs --follow job-1
[ "$("$submit" status job-2 --json | field state)" = queued ] || fail "job-2 changed"
[ "$("$submit" status job-1 --json | field state)" = running ] || fail "job-1 changed"
bob --cluster --json | "$py" -c '
import json, sys
m = {x["name"]: x for x in json.load(sys.stdin)["members"]}
assert m["wse-node-1"]["job"] == "", m["wse-node-1"]
' || fail "bob sees alice's job in the cluster list: $(bob --cluster)"
alice --cluster --json | "$py" -c '
import json, sys
m = {x["name"]: x for x in json.load(sys.stdin)["members"]}
assert m["wse-node-1"]["job"] == "job-1", m["wse-node-1"]
' || fail "alice does not see her job in the cluster list"
alice logs job-1 | has "submitted from 127.0.0.1:[0-9]* by user alice: .*alice.toml, priority p2" ||
  fail "alice's log: $(alice logs job-1)"
echo "ok: another user's job is 'no job' for status, logs, cancel and the cluster list"

rc=0; alice cancel job-1 >/dev/null || rc=$?
[ "$rc" = 5 ] || fail "alice cancels job-1: exit $rc"
out=$(bob status job-2 --follow --json) || fail "bob follows job-2: $out"
[ "$(echo "$out" | field state)" = done ] || fail "job-2: $out"
bob logs job-2 | has "done: 40 steps" || fail "bob's log: $(bob logs job-2)"
alice logs job-1 | has "cancelled at step [0-9]*: cancelled by user alice at 127.0.0.1" ||
  fail "alice's cancel in the log: $(alice logs job-1)"
c=$("$submit" --detach "$(job op 2000000)") || fail "the operator submits"
refused alice status "$c"
rc=0; "$submit" cancel "$c" >/dev/null || rc=$?
[ "$rc" = 5 ] || fail "the operator cancels $c: exit $rc"
echo "ok: users cancel and follow their own jobs; the operator's jobs are hidden from users"

# ---- Refusals.
rc=0; msg=$("$submit" --user alice --key-file "$keys/bob.key" list 2>&1) || rc=$?
[ "$rc" = 6 ] && [[ "$msg" == *"authentication failed: wrong key for user \"alice\", or no such user"* ]] ||
  fail "a wrong key: $rc $msg"
rc=0; msg=$("$submit" --user mallory --key-file "$keys/bob.key" list 2>&1) || rc=$?
[ "$rc" = 6 ] && [[ "$msg" == *"authentication failed: wrong key for user \"mallory\", or no such user"* ]] ||
  fail "an unknown user: $rc $msg"
for _ in $(seq 1 30); do grep -q "user mallory): authentication failed" "$run/logs/coordinator.log" && break; sleep 0.1; done
grep -q "connection from 127.0.0.1:[0-9]* (client \"appliance-submit\", user mallory): authentication failed" \
  "$run/logs/coordinator.log" || fail "the unknown user is not logged"
raw "$APPLIANCE_COORDINATOR" user-register --user bob --key-file "$keys/bob.key" \
  --expect "register is not allowed for user \"bob\"" || fail "a user registering as a daemon"
grep -q "register from 127.0.0.1:[0-9]* (user bob) refused: users may not send it" "$run/logs/coordinator.log" ||
  fail "the user's register is not logged"
"$submit" --cluster --json | "$py" -c '
import json, sys
names = {m["name"] for m in json.load(sys.stdin)["members"]}
assert "raw-peer" not in names, names
' || fail "the user joined as a member"
rc=0; msg=$("$submit" --user alice list 2>&1) || rc=$?
[ "$rc" = 2 ] && [[ "$msg" == *"a user needs a key file"* ]] || fail "--user without a key: $rc $msg"
echo "ok: a wrong key, an unknown user and a user speaking for a daemon are refused"
for k in alice bob; do
  ! grep -aqF "$(cat "$keys/$k.key")" "$run"/logs/*.log || fail "$k's key is in a log"
done

# ---- Owners survive a restart; an old journal is migrated.
"$src/deploy/local/appliance-down" --dir "$run" --quiet
"$coordinator" --listen 127.0.0.1:0 --port-file "$work/c2.port" --secret-file "$APPLIANCE_SECRET_FILE" \
  --state-dir "$run/state/coordinator" --users-file "$keys/users.toml" >"$work/c2.log" 2>&1 &
extra_pids="$extra_pids $!"
for _ in $(seq 1 100); do [ -s "$work/c2.port" ] && break; sleep 0.05; done
export APPLIANCE_COORDINATOR="127.0.0.1:$(cat "$work/c2.port")"
[ "$(alice list --json | ids)" = "job-1" ] || fail "alice after a restart: $(alice list)"
[ "$(bob list --json | ids)" = "job-2" ] || fail "bob after a restart: $(bob list)"
[ "$("$submit" list --json | ids)" = "job-1 job-2 job-3" ] || fail "the operator after a restart"
echo "ok: owners survive a restart of the coordinator"

mkdir -p "$work/old"
"$py" - "$work/old/journal.sqlite" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.executescript("""
CREATE TABLE jobs(id TEXT PRIMARY KEY, seq INTEGER NOT NULL, state INTEGER NOT NULL,
 priority INTEGER NOT NULL, file TEXT, toml TEXT, base_dir TEXT, model_dir TEXT,
 message TEXT, submitted_at REAL, steps INTEGER, max_steps INTEGER, loss REAL,
 eval_step INTEGER, eval_loss REAL, eval_accuracy REAL, eval_iou REAL);
CREATE TABLE job_log(job_id TEXT NOT NULL, line INTEGER NOT NULL, text TEXT NOT NULL,
 PRIMARY KEY(job_id, line));
INSERT INTO jobs VALUES('job-1', 1, 3, 2, 'old.toml', '', '/', '/tmp/old', 'done', 1.0e9, 10, 10,
 0.5, 0, 0, -1, -1);
INSERT INTO job_log VALUES('job-1', 0, '2001-09-09T01:46:40Z done: 10 steps, final loss 0.500000');
""")
db.commit()
PY
"$coordinator" --listen 127.0.0.1:0 --port-file "$work/c3.port" --secret-file "$APPLIANCE_SECRET_FILE" \
  --state-dir "$work/old" --users-file "$keys/users.toml" >"$work/c3.log" 2>&1 &
extra_pids="$extra_pids $!"
for _ in $(seq 1 100); do [ -s "$work/c3.port" ] && break; sleep 0.05; done
export APPLIANCE_COORDINATOR="127.0.0.1:$(cat "$work/c3.port")"
[ "$("$submit" list --json | ids)" = "job-1" ] || fail "the operator and an old journal: $(cat "$work/c3.log")"
"$submit" logs job-1 | has "done: 10 steps" || fail "the old job's log"
[ "$(alice list --json | ids)" = "" ] || fail "alice sees an old job: $(alice list)"
refused alice status job-1
grep -q "journal: schema version 0 -> 1" "$work/c3.log" || fail "no migration logged: $(cat "$work/c3.log")"
grep -q "journal: schema version 1 -> 2" "$work/c3.log" || fail "no migration to 2 logged: $(cat "$work/c3.log")"
[ "$("$py" -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("PRAGMA user_version").fetchone()[0])' "$work/old/journal.sqlite")" = 2 ] ||
  fail "the old journal's schema version"
echo "ok: a journal from before users is migrated; its jobs belong to the operators"

# ---- Jobs evicted from memory keep their owners: alice 5010 jobs, bob 89,
# one of an operator; the coordinator keeps 2 finished jobs in memory (and
# up to 64 more while it loads), so alice's are all read from the journal.
mkdir -p "$work/hist"
"$py" - "$work/hist/journal.sqlite" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.executescript("""
CREATE TABLE jobs(id TEXT PRIMARY KEY, seq INTEGER NOT NULL, state INTEGER NOT NULL,
 priority INTEGER NOT NULL, file TEXT, toml TEXT, base_dir TEXT, model_dir TEXT,
 message TEXT, submitted_at REAL, steps INTEGER, max_steps INTEGER, loss REAL,
 eval_step INTEGER, eval_loss REAL, eval_accuracy REAL, eval_iou REAL);
CREATE TABLE job_log(job_id TEXT NOT NULL, line INTEGER NOT NULL, text TEXT NOT NULL,
 PRIMARY KEY(job_id, line));
CREATE TABLE job_owner(job_id TEXT PRIMARY KEY, owner TEXT NOT NULL);
PRAGMA user_version = 1;""")
db.executemany("INSERT INTO jobs VALUES(?,?,3,2,'old.toml','','/','/tmp/old','done',1.0e9,10,10,0.5,0,0,-1,-1)",
               [("job-%d" % i, i) for i in range(1, 5101)])
db.executemany("INSERT INTO job_owner VALUES(?,?)",
               [("job-%d" % i, "alice" if i <= 5010 else "bob") for i in range(1, 5100)])
db.execute("INSERT INTO job_log VALUES('job-3', 0, '2001-09-09T01:46:40Z done: 10 steps, alice')")
db.commit()
PY
"$coordinator" --listen 127.0.0.1:0 --port-file "$work/c4.port" --secret-file "$APPLIANCE_SECRET_FILE" \
  --state-dir "$work/hist" --users-file "$keys/users.toml" --max-job-history 2 >"$work/c4.log" 2>&1 &
extra_pids="$extra_pids $!"
for _ in $(seq 1 100); do [ -s "$work/c4.port" ] && break; sleep 0.05; done
export APPLIANCE_COORDINATOR="127.0.0.1:$(cat "$work/c4.port")"
# listed WHO N FIRST LAST OMITTED: WHO's list has N jobs, FIRST..LAST, OMITTED left out
listed() {
  "$1" list --json | "$py" -c '
import json, sys
l = json.load(sys.stdin)
ids = [j["job_id"] for j in l["jobs"]]
want = (int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]))
got = (len(ids), ids[0], ids[-1], l["omitted"])
assert got == want, (got, want)
' "${@:2}" || fail "$1 lists: $("$1" list | tail -n 3)"
}
op() { "$submit" "$@"; }
listed alice 5000 job-11 job-5010 10
listed bob 89 job-5011 job-5099 0
listed op 5000 job-101 job-5100 100
[ "$(alice status --json | field job_id)" = job-5010 ] || fail "alice's newest job, from the journal"
[ "$(alice status job-3 --json | field state)" = done ] || fail "alice's evicted job-3"
alice logs job-3 | has "done: 10 steps, alice" || fail "alice's log of job-3: $(alice logs job-3)"
rc=0; msg=$(alice cancel job-3 2>&1) || rc=$?
[ "$rc" = 2 ] && [[ "$msg" == *"job job-3 has already ended: done"* ]] || fail "alice cancels job-3: $rc $msg"
refused bob status job-3
refused bob logs job-3
refused bob cancel job-3
refused alice status job-5100
[ "$(op status job-3 --json | field state)" = done ] || fail "the operator's status of job-3"
echo "ok: jobs evicted from memory keep their owners: each user lists, reads and cancels only their own"
echo "1 passed, 0 failed"
