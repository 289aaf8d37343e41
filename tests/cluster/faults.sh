#!/usr/bin/env bash
# Cluster test of recovery: a supervised local cluster (appliance-up
# --restart) trains tests/cluster/jobs/faults.toml once undisturbed, then
# again while one daemon of each role is killed with SIGKILL at a random
# step (seeded: FAULT_SEED reproduces the steps). Every disturbed job must
# end done, with a restart in its log, and with the undisturbed run's
# weights within 1e-4 relative; so must a job whose wse-node stops
# answering (SIGSTOP) for 6 s. Then: a job whose restarts are used up
# fails with a message that says so; a coordinator that stops answering
# is noticed by the members, which let go and register again; the flight
# recorder's dump names the stream events before a fault and what the job
# waited for; a memoryx killed during a checkpoint write leaves the previous
# checkpoint loadable; a worker that does not come back leaves its share to
# the other; and a wse-node that does not come back leaves the job to the
# survivor.
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-faults

seed=${FAULT_SEED:-$(date +%s)}
echo "fault seed $seed (FAULT_SEED=$seed reproduces the kill steps)"
RANDOM=$seed

"$src/deploy/local/appliance-up" --replicas 2 --dir "$run" --build "$build" --restart >/dev/null
set -a; . "$run/env"; set +a
submit="$build/client/appliance-submit"
steps=$(sed -n 's/^max_steps = //p' "$src/tests/cluster/jobs/faults.toml")

job() { # job NAME [SED-EXPRESSION]: the job file with model_dir $work/NAME
  sed -e "s|^model_dir = .*|model_dir = \"$work/$1\"|" -e "${2:-}" \
    "$src/tests/cluster/jobs/faults.toml" >"$work/$1.toml"
  echo "$work/$1.toml"
}
out=$(cd "$work" && timeout 120 "$submit" --json "$(job ref)") || fail "undisturbed job: $out"
[ "$(echo "$out" | field state)" = done ] || fail "undisturbed job not done: $out"
ref="$work/ref/checkpoint_$steps-shard1-of-1.safetensors"
echo "ok: the undisturbed run: $steps steps"

# disturb NAME VICTIM [forever]: kills VICTIM at a random step of a job
disturb() {
  local name="$1" victim="$2" at id out pid s
  # (in the first fifth: a fast step, a few ms, must leave the coordinator
  # time to see the fault before the job ends, and a loaded host's status
  # poll (tens of ms under a sanitizer) time to see the step: from half way
  # the job could end before the signal)
  at=$((15 + RANDOM % (steps / 8)))
  id=$(cd "$work" && "$submit" --detach "$(job "$name")" | grep -o 'job-[0-9]*' | head -n 1)
  [ -n "$id" ] || fail "$name: no job id"
  # the pids read before: at a few ms a step, a loaded host's process
  # starts between the step seen and the signal let the job end first
  pid=$(cat "$run/pids/$victim.pid")
  local sup=""
  [ "${3:-}" != forever ] || sup=$(cat "$run/pids/$victim.supervisor")
  wait_step "$id" "$at"
  if [ -n "$sup" ]; then
    kill -KILL "$sup" "$pid"
  fi
  # the signal first, then the message (asking the step takes tens of ms;
  # without a coordinator, the step waited for)
  if [ "${3:-}" = stop ]; then
    kill -STOP "$pid"
    s=$(step_of "$id")
    echo "$name: SIGSTOP to $victim (pid $pid) for 6 s at step ${s:-$at} of $id"
    sleep 6
    kill -CONT "$pid"
  else
    [ -n "$sup" ] || kill -KILL "$pid"
    s=$(step_of "$id")
    echo "$name: kill -9 $victim (pid $pid) at step ${s:-$at} of $id"
  fi
  out=$(finish "$id")
  [ "$(echo "$out" | field state)" = done ] || fail "$name: job $id did not recover: $out"
  "$submit" logs "$id" >"$work/$name.log"
  grep -q "fault at step .*restart 1 of 3" "$work/$name.log" || fail "$name: no restart in the log of $id"
  grep -E "fault at step|restarted" "$work/$name.log" | sed 's/^/  /'
  "$build/client/st-compare" "$ref" "$work/$name/checkpoint_$steps-shard1-of-1.safetensors" \
    --rtol 1e-4 >"$work/$name.cmp" || { cat "$work/$name.cmp"; fail "$name: weights differ from the undisturbed run"; }
  if "$build/client/st-compare" "$ref" "$work/$name/checkpoint_$steps-shard1-of-1.safetensors" \
    --rtol 0 >/dev/null; then
    echo "ok: $name: recovered; the weights are bitwise those of the undisturbed run"
  else
    echo "ok: $name: recovered; the weights agree within 1e-4"
  fi
}

# Under the sanitizers (APPLIANCE_TEST_LIGHT) two roles stand for all.
victims=(wse-node-2 memoryx-1 swarmx-1 worker-1 coordinator)
[ -z "${APPLIANCE_TEST_LIGHT:-}" ] || victims=(memoryx-1 coordinator)
for victim in "${victims[@]}"; do
  disturb "kill-$victim" "$victim"
done

# The flight recorder: memoryx logged the stream events before the fault.
grep -q "flight recorder, job" "$run/logs/memoryx-1.log" || fail "no flight recorder dump in the memoryx log"
# (the job is Pipelined: what comes up to memoryx is the first replica's
# weights and optimizer state for each checkpoint)
grep -Eq "flight: -[0-9.]+s weight_chunk from swarmx-1 step [0-9]+ layer [0-9]+ tensor [0-9]+ chunk" \
  "$run/logs/memoryx-1.log" || fail "the flight recorder dump does not name the weight chunks from swarmx"
grep -Eq "flight recorder, job job-[0-9.r]+ \(.*; it was waiting for (the reduced gradients|step [0-9]+|its own compute task)" \
  "$run/logs/wse-node-1.log" || fail "the flight recorder's dump does not say what wse-node-1 waited for"
echo "ok: the flight recorder's dump names step, layer, tensor, chunk, peer and what the job waited for"

# No restarts allowed: the fault fails the job and says why.
id=$(cd "$work" && "$submit" --detach "$(job norestart 's/^max_num_restarts = .*/max_num_restarts = 0/')" |
  grep -o 'job-[0-9]*' | head -n 1)
wait_step "$id" 20
kill -KILL "$(cat "$run/pids/worker-2.pid")"
out=$(finish "$id")
[ "$(echo "$out" | field state)" = failed ] || fail "a job without restarts did not fail: $out"
echo "$out" | field message | has -F "no restarts left: runconfig.max_num_restarts = 0" ||
  fail "the failure does not say the restarts are used up: $out"
echo "ok: with max_num_restarts = 0 a fault fails the job: $(echo "$out" | field message)"

# A job that makes no progress although every member is alive (here: steps
# far slower than its step_timeout_seconds) has stalled: a fault, and with
# its restarts used up it fails, saying so.
slow='s/^units = 512/units = 8192/; s/^units = 256/units = 8192/; s/^batch_size = .*/batch_size = 4096/; s/^max_num_restarts = .*/max_num_restarts = 1\nstep_timeout_seconds = 1/'
out=$(cd "$work" && timeout 120 "$submit" --json "$(job stall "$slow")") && fail "a stalled job did not fail: $out"
echo "$out" | field message | has "no progress for 1 s after step [0-9]* (runconfig.step_timeout_seconds): the job stalled (no restarts left" ||
  fail "the stalled job's failure does not say it stalled: $out"
"$submit" logs "$(echo "$out" | field job_id)" | has "fault at step [0-9]*: no progress for 1 s.*restart 1 of 1" ||
  fail "the stall was not recovered once before the job failed"
echo "ok: a stalled job (no step within step_timeout_seconds) is a fault: restarted once, then failed"

# A coordinator that stops answering: the members notice within the
# timeout, let go, and register again once it answers.
wait_members() { # wait_members N: until N members are alive
  local deadline=$((SECONDS + 30)) n
  while :; do
    n=$("$submit" --cluster --json 2>/dev/null | "$py" -c \
      "import json,sys; print(sum(m['state'] == 'alive' for m in json.load(sys.stdin)['members']))" 2>/dev/null || echo 0)
    [ "$n" -ge "$1" ] && return 0
    [ "$SECONDS" -lt "$deadline" ] || fail "only $n of $1 members alive: $("$submit" --cluster 2>&1)"
    sleep 0.2
  done
}
wait_members 6
cpid=$(cat "$run/pids/coordinator.pid")
kill -STOP "$cpid"
sleep 5
kill -CONT "$cpid"
grep -q "the coordinator has not answered for" "$run/logs/wse-node-1.log" ||
  fail "wse-node-1 did not notice the silent coordinator"
wait_members 6
echo "ok: a silent coordinator is noticed by its members, which register again"

# A memoryx killed while it writes a checkpoint: the checkpoint before
# stays intact and loadable, the partial files go, and the job recovers
# from it. A wider model (72 MB of weights, as much momentum) so that a
# write takes long enough to be caught.
wide='s/^units = 512/units = 4096/; s/^units = 256/units = 4096/; s/^max_steps = .*/max_steps = 12/; s/^checkpoint_steps = .*/checkpoint_steps = 3/'
id=$(cd "$work" && "$submit" --detach "$(job ckpt "$wide")" | grep -o 'job-[0-9]*' | head -n 1)
partial=""
deadline=$((SECONDS + 120))
while [ -z "$partial" ]; do
  partial=$(cd "$work/ckpt" 2>/dev/null && ls -- *_[69]-shard1-of-1.safetensors.tmp-* 2>/dev/null | head -n 1) || true
  [ "$SECONDS" -lt "$deadline" ] || fail "no checkpoint write of step 6 or 9 was seen"
  [ -n "$partial" ] || sleep 0.005
done
kill -KILL "$(cat "$run/pids/memoryx-1.pid")"
# the partial files the kill left: the checkpoint's and the optimizer
# state's are written side by side, and the one listed may have ended
# (renamed into place) before the kill landed
sleep 0.2
at=${partial#*_}; at=${at%%-*}
left=$(cd "$work/ckpt" && ls -- *_"$at"-shard1-of-1.safetensors.tmp-* 2>/dev/null) || true
prev=$((at - 3))
echo "checkpoint: memoryx killed while writing $partial"
for f in checkpoint optimizer; do
  "$build/client/st-compare" "$work/ckpt/${f}_$prev-shard1-of-1.safetensors" \
    "$work/ckpt/${f}_$prev-shard1-of-1.safetensors" --rtol 0 >/dev/null ||
    fail "the $f file of step $prev does not load after the kill"
done
out=$(finish "$id")
[ "$(echo "$out" | field state)" = done ] || fail "the job did not recover from the kill during a checkpoint: $out"
"$submit" logs "$id" | has "fault at step [0-9]*: .*restart [1-3] of 3 from the checkpoint of step $prev" ||
  fail "the job did not restart from the checkpoint of step $prev: $("$submit" logs "$id" | grep -E 'fault|restart')"
for f in $left; do
  grep -q "removed .*$f, a partial checkpoint file" "$run/logs/memoryx-1.log" ||
    fail "the partial file $f was not removed"
done
[ -n "$left" ] || echo "checkpoint: the writes of step $at ended before the kill landed: nothing partial to remove"
ls "$work/ckpt" | has 'tmp-' && fail "partial files left in model_dir: $(ls "$work/ckpt")"
echo "ok: a memoryx killed while writing the checkpoint of step $at: step $prev stays loadable, the job recovers from it"

# A wse-node that stops answering (SIGSTOP) mid-stream: the coordinator
# notices within its heartbeat timeout and the job recovers; the wse-node,
# continued 6 s later, finds its coordinator link closed, lets the job go
# and registers again.
if [ -z "${APPLIANCE_TEST_LIGHT:-}" ]; then
  disturb stopped wse-node-1 stop
  grep -q "(wse-node wse-node-1 at [0-9.:]*) lost: no heartbeat for" "$run/logs/coordinator.log" ||
    fail "the coordinator did not notice the stopped wse-node by its heartbeats"

  # A worker that does not come back: its share moves to the other worker.
  disturb worker-gone worker-2 forever
  grep -q "restarted: 2 replica(s)" "$work/worker-gone.log" || fail "the job did not restart on 2 replicas"
fi

# A wse-node that does not come back: after the wait for a replacement the
# job goes on with the survivor (min_num_csx = 1), the same global batch.
disturb survivor wse-node-2 forever
grep -q "1 of 2 replica(s) available: going on with them" "$work/survivor.log" ||
  fail "the job did not go on with the survivor"
echo "ok: the job went on with the surviving replica"
