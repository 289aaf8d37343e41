#!/usr/bin/env bash
# Cluster test: topology. The CNN job on 4 replicas gives the same weights
# with one memoryx and one swarmx as with two memoryx shards and a two-level
# swarmx tree (fan-out 2: a root over two leaves of two replicas), in
# Pipelined and in Weight Streaming mode, and the same as on one replica.
# A swarmx killed for good mid-job: the job recovers on a tree without it.
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-topology

"$src/deploy/local/appliance-up" --replicas 4 --memoryx 2 --swarmx 3 --dir "$run" --build "$build" >/dev/null
set -a; . "$run/env"; set +a
submit="$build/client/appliance-submit"

# run NAME REPLICAS SHARDS [FANOUT [MODE [RUNCONFIG LINE]]]
run_job() {
  sed -e "s/^num_csx = .*/num_csx = $2\nnum_wgt_servers = $3${4:+\nswarmx_fanout = $4}${5:+\nmode = \"$5\"}${6:+\n$6}/" \
    -e "s|^model_dir = .*|model_dir = \"$work/$1\"|" -e '/^max_gradient_norm/d' \
    "$src/tests/cluster/jobs/cnn.toml" > "$work/$1.toml"
  local out
  out=$(cd "$work" && timeout 120 "$submit" --json "$work/$1.toml") || fail "$1: $out"
  [ "$(echo "$out" | field state)" = done ] || fail "$1 not done: $out"
}
run_job flat 4 1
run_job tree 4 2 2
run_job one 1 1
run_job tree-ws 4 2 2 weight_streaming
grep -q "tree node 0, root, 2 children" "$run"/logs/swarmx-*.log || fail "no swarmx root over two children"
[ "$(grep -l "tree node [12], inner, 2 children" "$run"/logs/swarmx-*.log | wc -l)" = 2 ] ||
  fail "no two leaves of two replicas"
ls "$work/tree"/checkpoint_40-shard1-of-2.safetensors "$work/tree"/checkpoint_40-shard2-of-2.safetensors >/dev/null ||
  fail "two shards should write two files"
"$build/client/st-compare" "$work/flat/checkpoint_40-shard1-of-1.safetensors" \
  "$work/tree/checkpoint_40-shard1-of-2.safetensors,$work/tree/checkpoint_40-shard2-of-2.safetensors" \
  --rtol 1e-5 >/dev/null || fail "two shards and a two-level tree disagree with one memoryx and one swarmx"
echo "ok: 2 memoryx shards and a 2-level swarmx tree (fan-out 2, 4 replicas) agree with 1 and 1"
"$build/client/st-compare" "$work/one/checkpoint_40-shard1-of-1.safetensors" \
  "$work/flat/checkpoint_40-shard1-of-1.safetensors" --rtol 1e-5 >/dev/null ||
  fail "4 replicas disagree with 1"
echo "ok: 4 replicas agree with 1 within 1e-5"
# One replica and one shard: memoryx streams to the wse-node itself, no
# swarmx in the job; bit for bit what a swarmx between them gives.
run_job one-ws 1 1 "" weight_streaming
run_job one-relay 1 1 "" weight_streaming "swarmx_relay = true"
[ "$(cat "$run"/logs/memoryx-*.log | grep -c "wse-node wse-node-[0-9]* connected from")" = 2 ] ||
  fail "the one-replica jobs did not stream from memoryx directly: $(grep -h "connected from" "$run"/logs/memoryx-*.log)"
grep -q "tree node 0, root, 1 children" "$run"/logs/swarmx-*.log || fail "swarmx_relay = true: no swarmx over the replica"
"$build/client/st-compare" "$work/one-ws/checkpoint_40-shard1-of-1.safetensors" \
  "$work/one-relay/checkpoint_40-shard1-of-1.safetensors" --rtol 0 >/dev/null ||
  fail "one replica streaming from memoryx directly disagrees with the same through a swarmx"
echo "ok: one replica streams from memoryx directly, bit for bit as through a swarmx (swarmx_relay)"
"$build/client/st-compare" "$work/flat/checkpoint_40-shard1-of-1.safetensors" \
  "$work/tree-ws/checkpoint_40-shard1-of-2.safetensors,$work/tree-ws/checkpoint_40-shard2-of-2.safetensors" \
  --rtol 1e-5 >/dev/null || fail "weight streaming from 2 shards through a 2-level tree disagrees"
echo "ok: weight streaming from 2 shards (chunks merged in schedule order) through a 2-level tree agrees"
grep -q "job job-4: the backward pass starts on the 2 layer(s) whose weights the forward pass left in the slots" \
  "$run"/logs/wse-node-1.log || fail "weight streaming streamed every layer's weights again: $(grep "job job-4" "$run"/logs/wse-node-1.log)"
echo "ok: weight streaming's backward pass starts on the 2 layers the forward pass left in the slots"
# A swarmx lost for good: the job recovers on a tree without it (the two
# swarmx nodes left as one level of fan-out 4), from its last checkpoint,
# and ends where the flat run ends.
sed -e "s/^num_csx = .*/num_csx = 4\nnum_wgt_servers = 2\nswarmx_fanout = 2\ncheckpoint_steps = 10/" \
  -e "s/^max_steps = .*/max_steps = 200/" -e "s|^model_dir = .*|model_dir = \"$work/lost\"|" \
  -e '/^max_gradient_norm/d' "$src/tests/cluster/jobs/cnn.toml" > "$work/lost.toml"
sed -e "s/^num_csx = .*/num_csx = 4/" -e "s/^max_steps = .*/max_steps = 200/" \
  -e "s|^model_dir = .*|model_dir = \"$work/lost-ref\"|" -e '/^max_gradient_norm/d' \
  "$src/tests/cluster/jobs/cnn.toml" > "$work/lost-ref.toml"
out=$(cd "$work" && timeout 120 "$submit" --json "$work/lost-ref.toml") || fail "lost-ref: $out"
id=$(cd "$work" && "$submit" --detach "$work/lost.toml" | grep -o 'job-[0-9]*' | head -n 1)
# the victim first (its log names it as the job starts), then the step: a
# step takes a few ms, and the kill must come before the job's end
victim=""
for _ in $(seq 1 500); do
  victim=$(grep -l "job $id: tree node [12], inner" "$run"/logs/swarmx-*.log 2>/dev/null | head -n 1) || true
  [ -n "$victim" ] && break
  sleep 0.02
done
[ -n "$victim" ] || fail "no inner swarmx node of $id in the logs"
victim=$(basename "$victim" .log)
wait_step "$id" 5
s=$(step_of "$id")
kill -KILL "$(cat "$run/pids/$victim.pid")"
out=$(timeout 120 "$submit" status "$id" --follow --json) || fail "the job did not recover from the loss of $victim: $out"
"$submit" logs "$id" | has "restarted: 4 replica(s)" || fail "no restart on 4 replicas"
grep -q "job $id.r1: tree node 0, root, 4 children" "$run"/logs/swarmx-*.log ||
  fail "the tree was not rebuilt as one node over 4 replicas"
"$build/client/st-compare" "$work/lost-ref/checkpoint_200-shard1-of-1.safetensors" \
  "$work/lost/checkpoint_200-shard1-of-2.safetensors,$work/lost/checkpoint_200-shard2-of-2.safetensors" \
  --rtol 1e-4 >/dev/null || fail "after the tree was rebuilt the weights differ from the flat run"
echo "ok: $victim killed at step $s: the job recovered on a tree without it and agrees with the flat run"
echo "1 passed, 0 failed"
