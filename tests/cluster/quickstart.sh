#!/usr/bin/env bash
# Cluster test: a real local cluster (coordinator, memoryx, swarmx, two
# workers, two wse-nodes) trains examples/quickstart.toml on 1 and on 2
# replicas; the final weights must agree within 1e-5 relative. Bad input
# (a misspelt key, a wrong secret, a garbage frame) is refused with a clear
# message and leaves the cluster serving.
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-cluster

"$src/deploy/local/appliance-up" --replicas 2 --dir "$run" --build "$build" >/dev/null
set -a; . "$run/env"; set +a
submit="$build/client/appliance-submit"

# The quickstart job with the replica count and model_dir of each run.
job() { # job REPLICAS MODEL_DIR
  sed -e "s/^num_csx = .*/num_csx = $1/" -e "s|^model_dir = .*|model_dir = \"$2\"|" \
    "$src/examples/quickstart.toml" > "$work/job-$1.toml"
  echo "$work/job-$1.toml"
}
# logged PATTERN: the coordinator logs it within 3 s (it logs as the connection closes)
logged() {
  for _ in $(seq 1 30); do grep -q "$1" "$run/logs/coordinator.log" && return 0; sleep 0.1; done
  return 1
}

out1=$(cd "$work" && timeout 120 "$submit" --json "$(job 1 "$work/m1")") || fail "1-replica job: $out1"
out2=$(cd "$work" && timeout 120 "$submit" --json "$(job 2 "$work/m2")") || fail "2-replica job: $out2"
for out in "$out1" "$out2"; do
  [ "$(echo "$out" | field state)" = done ] || fail "job not done: $out"
  [ "$(echo "$out" | field steps)" = 60 ] || fail "job did not run 60 steps: $out"
  "$py" -c "import sys; l=float(sys.argv[1]); sys.exit(0 if 0 < l < 0.3 else 1)" \
    "$(echo "$out" | field final_loss)" || fail "loss did not fall below 0.3 (ln 4 = 1.386 at start): $out"
  # A finished job reports its training rate: 60 steps of 64 samples over
  # its time from the first to the last step, so above 0 and at most 3840
  # samples in the job's elapsed time.
  "$py" -c "import sys; r, e = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if r > 0 and r * e >= 3840 * 0.5 else 1)" \
    "$(echo "$out" | field samples_per_sec)" "$(echo "$out" | field elapsed_sec)" ||
    fail "a finished job's samples/s is not its training rate: $out"
done
ck1="$work/m1/checkpoint_60-shard1-of-1.safetensors"
ck2="$work/m2/checkpoint_60-shard1-of-1.safetensors"
[ -f "$ck1" ] && [ -f "$ck2" ] || fail "checkpoints missing"
"$build/client/st-compare" "$ck1" "$ck2" --rtol 1e-5 || fail "1 and 2 replicas disagree"
echo "ok: 1 and 2 replicas give the same weights within 1e-5"
for s in 0 20 40 60; do
  [ -f "$work/m2/checkpoint_$s-shard1-of-1.safetensors" ] || fail "checkpoint of step $s missing"
done
"$build/client/st-compare" "$work/m1/checkpoint_0-shard1-of-1.safetensors" \
  "$work/m2/checkpoint_0-shard1-of-1.safetensors" --rtol 0 >/dev/null || fail "initial weights differ"
if "$build/client/st-compare" "$work/m2/checkpoint_0-shard1-of-1.safetensors" "$ck2" >/dev/null; then
  fail "the weights did not change during training"
fi
ls "$work/m2" | grep -Ev '^((checkpoint|optimizer)_[0-9]*-shard1-of-1.safetensors|events.out.tfevents.*)$' &&
  fail "stray files in model_dir"
echo "ok: checkpoints at steps 0, 20, 40 and 60; initial weights identical from the seed"

# Deeper models: an MLP with momentum, and a CNN (convolutions, group norm,
# pooling, a residual add, dropout) with AdamW, warm-up, cosine decay and
# clipping: 1 and 2 replicas agree too.
for model in mlp cnn; do
  steps=$(sed -n 's/^max_steps = //p' "$src/tests/cluster/jobs/$model.toml")
  for r in 1 2; do
    sed -e "s/^num_csx = .*/num_csx = $r/" -e "s|^model_dir = .*|model_dir = \"$work/$model$r\"\ncheckpoint_steps = 20|" \
      "$src/tests/cluster/jobs/$model.toml" > "$work/$model-$r.toml"
    out=$(cd "$work" && timeout 120 "$submit" --json "$work/$model-$r.toml") || fail "$model on $r replica(s): $out"
    [ "$(echo "$out" | field state)" = done ] || fail "$model not done: $out"
  done
  cmp=$("$build/client/st-compare" "$work/${model}1/checkpoint_$steps-shard1-of-1.safetensors" \
    "$work/${model}2/checkpoint_$steps-shard1-of-1.safetensors" --rtol 1e-5 2>&1) ||
    fail "$model: 1 and 2 replicas disagree: $cmp"
  echo "ok: $model, 1 and 2 replicas agree within 1e-5"
done

# The modes: auto chose Pipelined for the CNN (it fits); Weight Streaming
# must end with the same weights.
grep -q "mode pipelined" <(cd "$work" && "$submit" --plan "$work/cnn-2.toml") || fail "auto did not choose pipelined"
sed -e "s|^model_dir = .*|model_dir = \"$work/cnn-ws\"\nmode = \"weight_streaming\"|" "$work/cnn-2.toml" > "$work/cnn-ws.toml"
grep -q "mode weight_streaming" <(cd "$work" && "$submit" --plan "$work/cnn-ws.toml") || fail "mode = weight_streaming not in the plan"
out=$(cd "$work" && timeout 120 "$submit" --json "$work/cnn-ws.toml") || fail "cnn in weight streaming: $out"
"$build/client/st-compare" "$work/cnn2/checkpoint_40-shard1-of-1.safetensors" \
  "$work/cnn-ws/checkpoint_40-shard1-of-1.safetensors" --rtol 1e-6 >/dev/null ||
  fail "weight streaming and pipelined disagree"
echo "ok: cnn in Weight Streaming and in Pipelined mode end with the same weights"

# Resume: the CNN (AdamW state, cosine schedule, dropout) restarted from its
# checkpoint of step 20 ends where the uninterrupted run ended.
sed -e "s|^model_dir = .*|model_dir = \"$work/resumed\"\ncheckpoint_path = \"$work/cnn2/checkpoint_20-shard1-of-1.safetensors\"|" \
  "$work/cnn-2.toml" > "$work/resume.toml"
out=$(cd "$work" && timeout 120 "$submit" --json "$work/resume.toml") || fail "resumed job: $out"
[ "$(echo "$out" | field steps)" = 40 ] || fail "resumed job did not end at step 40: $out"
[ ! -e "$work/resumed/checkpoint_20-shard1-of-1.safetensors" ] || fail "the resumed job re-ran step 20"
"$build/client/st-compare" "$work/cnn2/checkpoint_40-shard1-of-1.safetensors" \
  "$work/resumed/checkpoint_40-shard1-of-1.safetensors" --rtol 0 >/dev/null ||
  fail "the resumed job ended with other weights than the uninterrupted one"
ls "$work/resumed/optimizer_40-shard1-of-1.safetensors" >/dev/null || fail "no optimizer state beside the weights"
echo "ok: resumed from step 20, the same weights at step 40 as the uninterrupted run (bitwise)"

# The same job twice on the same replica count: bitwise identical.
out3=$(cd "$work" && timeout 120 "$submit" --json "$(job 2 "$work/m3")") || fail "repeat job: $out3"
"$build/client/st-compare" "$ck2" "$work/m3/checkpoint_60-shard1-of-1.safetensors" --rtol 0 >/dev/null ||
  fail "the same job twice gave different weights"
echo "ok: the same job twice gives the same weights"

# A misspelt key: refused with file:line:column, nothing changes.
sed -e 's/^log_steps = /log_step = /' "$src/examples/quickstart.toml" > "$work/bad.toml"
set +e
msg=$(cd "$work" && "$submit" bad.toml 2>&1); rc=$?
set -e
[ "$rc" = 3 ] || fail "misspelt key: exit $rc, expected 3 (refused): $msg"
echo "$msg" | has 'bad.toml:8:1: unknown key "log_step" in \[runconfig\] (did you mean "log_steps"?)' || fail "misspelt key message: $msg"
echo "ok: $msg"

# A wrong secret: refused, named as such.
echo "not the secret" > "$work/wrong"
set +e
msg=$("$submit" --cluster --secret-file "$work/wrong" 2>&1); rc=$?
set -e
[ "$rc" = 6 ] || fail "wrong secret: exit $rc, expected 6: $msg"
echo "$msg" | has "authentication failed" || fail "wrong secret message: $msg"
logged "authentication failed: wrong cluster secret" || fail "coordinator did not log the refusal"
echo "ok: wrong secret refused"

# A garbage frame: that connection is closed, the coordinator carries on.
port=${APPLIANCE_COORDINATOR##*:}
"$py" - "$port" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(range(256)) * 4)
try:
    while s.recv(4096):
        pass
except (ConnectionResetError, socket.timeout):
    pass
PY
list=$("$submit" --cluster --json) || fail "coordinator stopped serving after a garbage frame"
"$py" - "$list" <<'PY' || fail "cluster state changed: $list"
import json, sys
members = json.loads(sys.argv[1])["members"]
alive = [m for m in members if m["state"] == "alive" and not m["job"]]
sys.exit(0 if len(alive) == 6 else 1)
PY
logged "bad magic" || fail "coordinator did not log the garbage frame"
echo "ok: garbage frame refused, all 6 members alive and idle"
echo "1 passed, 0 failed"
