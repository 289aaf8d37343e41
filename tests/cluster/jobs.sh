#!/usr/bin/env bash
# Cluster test: jobs as a user handles them. Detached submissions queue by
# priority (p1 before p3, FIFO within), list shows the queue positions,
# cancel stops a running job and the next one starts, logs and status tell
# what happened, Ctrl-C on a following client without a terminal detaches,
# a restarted coordinator still knows every job, and the TensorBoard event
# file of a job decodes (CRCs checked) to the values the job reported.
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-jobs
cleanup_extra() { [ -n "${coord_pid:-}" ] && kill "$coord_pid" 2>/dev/null || true; }

"$src/deploy/local/appliance-up" --replicas 1 --dir "$run" --build "$build" >/dev/null
set -a; . "$run/env"; set +a
submit="$build/client/appliance-submit"
job() { # job NAME STEPS PRIORITY
  sed -e "s/^max_steps = .*/max_steps = $2/" -e "s/^num_csx = .*/num_csx = 1\njob_priority = \"$3\"/" \
    -e "s|^model_dir = .*|model_dir = \"$work/$1\"|" -e "s/^checkpoint_steps = .*/checkpoint_steps = 0/" \
    -e "s/^log_steps = .*/log_steps = 5/" "$src/examples/quickstart.toml" > "$work/$1.toml"
  echo "$work/$1.toml"
}
state() { "$submit" status "$1" --json | field state; }
wait_state() { # wait_state JOB STATE SECONDS
  for _ in $(seq 1 $(($3 * 10))); do [ "$(state "$1")" = "$2" ] && return 0; sleep 0.1; done
  fail "$1 not $2 after $3 s: $("$submit" status "$1" --json)"
}

a=$("$submit" --detach "$(job long 2000000 p2)") || fail "submit long"
[ "$a" = job-1 ] || fail "first job id $a"
wait_state job-1 running 10
b=$("$submit" --detach "$(job low 40 p3)")
c=$("$submit" --detach "$(job high 40 p1)")
list=$("$submit" list --json)
echo "$list" | "$py" -c '
import json, sys
jobs = {j["job_id"]: j for j in json.load(sys.stdin)["jobs"]}
assert jobs["job-1"]["state"] == "running", jobs["job-1"]
assert jobs["job-2"]["state"] == "queued" and jobs["job-2"]["queue_position"] == 2, jobs["job-2"]
assert jobs["job-3"]["state"] == "queued" and jobs["job-3"]["queue_position"] == 1, jobs["job-3"]
assert jobs["job-3"]["priority"] == "p1" and jobs["job-2"]["priority"] == "p3"
' || fail "queue: $list"
echo "ok: $b (p3) and $c (p1) queued behind job-1, p1 first"
"$submit" list | has "^job-3 *queued *p1 *1 " || fail "list table: $("$submit" list)"

# Ctrl-C on a following client without a terminal: it detaches, the job goes on.
"$submit" status job-1 --follow </dev/null >"$work/follow.out" 2>"$work/follow.err" &
fpid=$!
sleep 0.5
"$submit" status job-1 --json | field state | has running || fail "job-1 stopped"
"$submit" --detach "$(job extra 5 p3)" >/dev/null # something to follow with submit too
"$submit" "$work/extra.toml" </dev/null >"$work/sub.out" 2>"$work/sub.err" &
spid=$!
sleep 0.5
kill -INT "$spid"
wait "$spid" || fail "submit after Ctrl-C exited $?: $(cat "$work/sub.err")"
grep -q "detached from job-5" "$work/sub.err" || fail "no detach message: $(cat "$work/sub.err")"
kill "$fpid" 2>/dev/null || true
echo "ok: Ctrl-C without a terminal detaches"

set +e
"$submit" cancel job-1 >/dev/null; rc=$?
set -e
[ "$rc" = 5 ] || fail "cancel job-1: exit $rc, expected 5 (the job's state: cancelled)"
wait_state job-1 cancelled 5
set +e
msg=$("$submit" cancel job-1 2>&1); rc=$?
set -e
[ "$rc" = 2 ] && echo "$msg" | has "job job-1 has already ended: cancelled" || fail "second cancel: $rc $msg"
out=$("$submit" status job-3 --follow --json) || fail "following job-3: $out"
[ "$(echo "$out" | field state)" = done ] || fail "job-3: $out"
wait_state job-2 done 60
"$submit" logs job-1 | has "cancelled at step [0-9]*: cancelled by a client" || fail "logs of job-1: $("$submit" logs job-1)"
"$submit" logs job-3 | has "started: 1 replica(s)" || fail "logs of job-3"
# job-3 (p1) started before job-2 (p3), though submitted after it.
t3=$("$submit" logs job-3 | awk '/started/ && t == "" { t = $1 } END { print t }')
t2=$("$submit" logs job-2 | awk '/started/ && t == "" { t = $1 } END { print t }')
[[ "$t3" < "$t2" || "$t3" == "$t2" ]] || fail "p1 job started after the p3 one ($t3, $t2)"
echo "ok: cancel, then p1 before p3, logs tell it"

# TensorBoard: an independent reader (CRC32C checked, protobuf decoded by hand).
final=$(echo "$out" | field final_loss)
"$py" - "$work/high" "$final" <<'PY' || fail "TensorBoard events of job-3"
import glob, struct, sys
def crc32c(data):
    crc = 0xffffffff
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82f63b78 if crc & 1 else crc >> 1
    return crc ^ 0xffffffff
def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xa282ead8) & 0xffffffff
def varint(b, i):
    v = s = 0
    while True:
        x = b[i]; i += 1; v |= (x & 0x7f) << s; s += 7
        if x < 0x80: return v, i
def fields(b):
    i = 0
    while i < len(b):
        key, i = varint(b, i); num, wt = key >> 3, key & 7
        if wt == 0: v, i = varint(b, i)
        elif wt == 1: v = b[i:i + 8]; i += 8
        elif wt == 5: v = b[i:i + 4]; i += 4
        elif wt == 2: n, i = varint(b, i); v = b[i:i + n]; i += n
        else: raise ValueError("wire type %d" % wt)
        yield num, v
files = glob.glob(sys.argv[1] + "/events.out.tfevents.*")
assert len(files) == 1, files
data = open(files[0], "rb").read()
i, scalars, version = 0, {}, None
while i < len(data):
    hdr = data[i:i + 8]
    (n,) = struct.unpack("<Q", hdr)
    assert struct.unpack("<I", data[i + 8:i + 12])[0] == masked(hdr), "length CRC"
    rec = data[i + 12:i + 12 + n]
    assert struct.unpack("<I", data[i + 12 + n:i + 16 + n])[0] == masked(rec), "data CRC"
    i += 16 + n
    step = 0
    for num, v in fields(rec):
        if num == 2: step = v
        if num == 3: version = v.decode()
        if num == 5:
            for vn, vv in fields(v):
                if vn == 1:
                    tag, val = None, None
                    for fn, fv in fields(vv):
                        if fn == 1: tag = fv.decode()
                        if fn == 2: val = struct.unpack("<f", fv)[0]
                    scalars.setdefault(tag, []).append((step, val))
assert version == "brain.Event:2", version
loss = scalars["loss"]
assert [s for s, _ in loss] == list(range(5, 41, 5)), loss
assert abs(loss[-1][1] - float(sys.argv[2])) <= 1e-6 * max(1.0, abs(float(sys.argv[2]))), (loss[-1], sys.argv[2])
for tag in ("learning_rate", "samples_per_sec", "step_compute_sec/replica_0"):
    assert len(scalars[tag]) == 8, (tag, scalars.get(tag))
assert all(abs(v - 0.1) < 1e-6 for _, v in scalars["learning_rate"]), scalars["learning_rate"]
print("ok: TensorBoard file: %d records, loss at steps 5..40, last %.6f" % (sum(map(len, scalars.values())) + 1, loss[-1][1]))
PY

# A restarted coordinator still knows every job and its log.
cpid=$(cat "$run/pids/coordinator.pid")
cmdline=$(tr '\0' '\n' < "/proc/$cpid/cmdline")
kill -TERM "$cpid"
for _ in $(seq 1 50); do kill -0 "$cpid" 2>/dev/null || break; sleep 0.1; done
mapfile -t argv <<< "$cmdline"
for i in "${!argv[@]}"; do # the same port again: clients know it
  [ "${argv[$i]}" = --listen ] && argv[$((i + 1))]="$APPLIANCE_COORDINATOR"
done
setsid "${argv[@]}" >>"$run/logs/coordinator.log" 2>&1 < /dev/null &
coord_pid=$!
for _ in $(seq 1 50); do "$submit" list --json >/dev/null 2>&1 && break; sleep 0.1; done
"$submit" list --json | "$py" -c '
import json, sys
st = {j["job_id"]: j["state"] for j in json.load(sys.stdin)["jobs"]}
assert st["job-1"] == "cancelled" and st["job-2"] == "done" and st["job-3"] == "done", st
' || fail "after a restart: $("$submit" list)"
"$submit" logs job-3 | has "done: 40 steps" || fail "logs after a restart"
set +e
"$submit" status job-1 >/dev/null; rc=$?
set -e
[ "$rc" = 5 ] || fail "status of a cancelled job: exit $rc, expected 5"
echo "ok: after a coordinator restart, list, logs and status know every job"
echo "1 passed, 0 failed"
