#!/usr/bin/env bash
# Cluster test: spatial partitions. Each 256x256 sample split into K
# horizontal stripes on K wse-nodes, which exchange halo rows over direct
# links and total their norms' and loss's sums on the swarmx tree, trains
# 5 steps to the weights of the unpartitioned run (each tensor within 1e-3
# of how far training moved it), K = 2 and K = 4, for a U-Net with batch norm, max pooling and transposed
# convolutions and one with group norm, average pooling and bilinear
# upsampling, both with the BCE + Dice loss. Synchronised batch norm over
# 2 replicas, of 2 stripes or of whole samples, equals 1 replica of the
# whole batch (the same bound). Stripes of unequal height (264 rows in 4) agree too;
# a height with fewer slices than stripes is refused with the numbers. A
# stripe's wse-node killed mid-training is recovered like any fault.
# Weight Streaming in stripes gives the Pipelined stripes' bits.
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-spatial
submit="$build/client/appliance-submit"

"$src/deploy/local/appliance-up" --replicas 4 --wafer-memory 1G --dir "$run" --build "$build" --restart >/dev/null
set -a; . "$run/env"; set +a

layers_bn='
[[model.layers]]
name = "e1"
type = "conv2d"
filters = 8
kernel_size = 3
padding = 1
bias = false
[[model.layers]]
name = "e1n"
type = "batch_norm"
[[model.layers]]
name = "e1r"
type = "relu"
[[model.layers]]
name = "p1"
type = "max_pool2d"
kernel_size = 2
[[model.layers]]
name = "e2"
type = "conv2d"
filters = 16
kernel_size = 3
padding = 1
bias = false
[[model.layers]]
name = "e2n"
type = "batch_norm"
[[model.layers]]
name = "e2r"
type = "relu"
[[model.layers]]
name = "p2"
type = "max_pool2d"
kernel_size = 2
[[model.layers]]
name = "b"
type = "conv2d"
filters = 16
kernel_size = 3
padding = 1
bias = false
[[model.layers]]
name = "bn"
type = "batch_norm"
[[model.layers]]
name = "br"
type = "relu"
[[model.layers]]
name = "u2"
type = "conv_transpose2d"
filters = 16
kernel_size = 2
stride = 2
bias = false
[[model.layers]]
name = "c2"
type = "concat"
inputs = ["u2", "e2r"]
[[model.layers]]
name = "d2"
type = "conv2d"
filters = 8
kernel_size = 3
padding = 1
bias = false
[[model.layers]]
name = "d2n"
type = "batch_norm"
[[model.layers]]
name = "d2r"
type = "relu"
[[model.layers]]
name = "u1"
type = "conv_transpose2d"
filters = 8
kernel_size = 2
stride = 2
[[model.layers]]
name = "c1"
type = "concat"
inputs = ["u1", "e1r"]
[[model.layers]]
name = "d1"
type = "conv2d"
filters = 8
kernel_size = 3
padding = 1
[[model.layers]]
name = "d1r"
type = "relu"
[[model.layers]]
name = "head"
type = "conv2d"
filters = 1
kernel_size = 1
'
# group norm, average pooling (a padded 3x3 window, then 2x2), bilinear upsampling
layers_gn=$(echo "$layers_bn" | sed -e 's/"batch_norm"/"group_norm"\ngroups = 4/' \
  -e 's/"max_pool2d"/"avg_pool2d"/' -e 's/"conv_transpose2d"/"upsample"\nmode = "bilinear"/' \
  -e '/^filters = 16$/{N;s/filters = 16\nkernel_size = 2/scale_factor = 2/}' \
  -e '/^filters = 8$/{N;s/filters = 8\nkernel_size = 2/scale_factor = 2/}' \
  -e '/^scale_factor = 2$/{N;s/scale_factor = 2\nstride = 2/scale_factor = 2/}' |
  sed -e '/^scale_factor = 2$/{n;/^bias = false$/d}')
layers_gn=$(echo "$layers_gn" | sed -e '0,/name = "p1"/s//name = "p0"\ntype = "avg_pool2d"\nkernel_size = 3\nstride = 1\npadding = 1\n[[model.layers]]\nname = "p1"/')

job() { # NAME LAYERS NUM_CSX PARTS BATCH [EXTRA_RUNCONFIG] [STEPS]
  cat > "$work/$1.toml" <<TOML
[runconfig]
max_steps = ${7:-5}
log_steps = 5
seed = 6
save_initial_checkpoint = true
num_csx = $3
spatial_partitions = $4
model_dir = "$work/$1"
${6:-}
[train_input]
data_processor = "synthetic_segmentation"
batch_size = $5
num_classes = 2
num_samples = 64
[model]
input_shape = [3, 256, 256]
loss = "bce_dice"
$2
[optimizer]
optimizer_type = "sgd"
learning_rate = 0.02
momentum = 0.9
TOML
  echo "$work/$1.toml"
}

run_job() { # NAME ...job args: trains it, prints the final checkpoint
  local f out
  f=$(job "$@")
  out=$(cd "$work" && timeout 600 "$submit" --json "$f" 2>&1) || fail "$1: $out"
  [ "$(echo "$out" | field state)" = done ] || fail "$1: not done: $out"
  echo "$work/$1/checkpoint_5-shard1-of-1.safetensors"
}

# compare A B WHAT: each tensor of the two final checkpoints within a
# fraction of how far training moved it from the initial checkpoint of A's
# run (st-compare --moved): runs that sum in other orders (stripes,
# replicas, and oneDNN's kernels, which differ between processors) differ
# by rounding that grows with the steps, not with the weights' size; a
# wrong halo or sum differs by a share of the move itself. Or every
# element within 1e-6: a few ulps of a value near 1 that training barely
# moved (a norm's weight)
moved_rtol=${SPATIAL_MOVED_RTOL:-1e-3}
compare() {
  local init="${1%/*}/checkpoint_0-shard1-of-1.safetensors"
  "$build/client/st-compare" "$1" "$2" --rtol "$moved_rtol" --atol 1e-6 --moved "$init" >"$work/cmp" ||
    { cat "$work/cmp"; fail "$3"; }
  worst=$(sed 's/ rel=/ /; s/ maxabs=.*//' "$work/cmp" | sort -k2 -g | tail -1)
  echo "ok: $3 within $moved_rtol of how far training moved each tensor or 1e-6 (the worst: ${worst% *}, ${worst#* } of its move)"
}

for net in bn gn; do
  layers=layers_$net
  whole=$(run_job "${net}_whole" "${!layers}" 1 1 2)
  for k in 2 4; do
    parts=$(run_job "${net}_k$k" "${!layers}" "$k" "$k" 2)
    compare "$whole" "$parts" "$net: 5 steps in $k stripes agree with whole samples"
  done
done
grep -q "halo" "$run"/logs/wse-node-*.log || true

# synchronised batch norm: 2 replicas of 2 stripes, 2 samples each, against one of 4
one=$(run_job sync_one "$layers_bn" 2 2 4)
two=$(run_job sync_two "$layers_bn" 4 2 4 "sync_batchnorm = true")
compare "$one" "$two" "sync_batchnorm over 2 replicas of 2 stripes agrees with 1 replica of the whole batch"
# and without stripes: 2 replicas of whole samples
one=$(run_job sync1_one "$layers_bn" 1 1 4)
two=$(run_job sync1_two "$layers_bn" 2 1 4 "sync_batchnorm = true")
compare "$one" "$two" "sync_batchnorm over 2 replicas of whole samples agrees with 1 replica of the whole batch"

# A wse-node of a partitioned job killed mid-training: the job restarts from
# its last checkpoint on a whole group of stripes and ends with the weights
# of the undisturbed run.
steps=40
every="checkpoint_steps = 10"
ref=$(job kill_ref "$layers_bn" 2 2 2 "$every" $steps)
out=$(cd "$work" && timeout 600 "$submit" --json "$ref" 2>&1) || fail "kill_ref: $out"
[ "$(echo "$out" | field state)" = done ] || fail "kill_ref: not done: $out"
id=$(cd "$work" && "$submit" --detach "$(job kill "$layers_bn" 2 2 2 "$every" $steps)" | grep -o 'job-[0-9]*' | head -n 1)
[ -n "$id" ] || fail "kill: no job id"
wait_step "$id" 14
victim=$(grep -l "job $id: replica 1 of 2: stripe 2 of 2" "$run"/logs/wse-node-*.log | head -n 1)
victim=$(basename "$victim" .log)
[ -n "$victim" ] || fail "kill: no wse-node computes the second stripe of $id"
echo "kill: kill -9 $victim (the second stripe) at step $(step_of "$id") of $id"
kill -KILL "$(cat "$run/pids/$victim.pid")"
out=$(finish "$id")
[ "$(echo "$out" | field state)" = done ] || fail "kill: job $id did not recover: $out"
"$submit" logs "$id" >"$work/kill.log"
grep -q "fault at step .*restart 1 of 3" "$work/kill.log" || fail "kill: no restart in the log of $id"
grep -E "fault at step|restarted" "$work/kill.log" | sed 's/^/  /'
compare "$work/kill_ref/checkpoint_$steps-shard1-of-1.safetensors" \
  "$work/kill/checkpoint_$steps-shard1-of-1.safetensors" \
  "kill: a stripe's wse-node killed, the job recovered to the undisturbed run's weights"

# Weight Streaming in stripes: the weights stream through the slots while
# the norms' partial sums go up to swarmx and their totals come down the
# stream the weight chunks come by (a stripe reads on past chunks that wait
# for a slot until its total has come: paused, the two waited for each
# other at the first norm). The U-Net of examples/unet.toml at 256x256 in
# 2 stripes, streamed, ends with the weights of the same stripes
# Pipelined, bit for bit (the same sums in the same order).
wsjob() { # NAME MODE
  sed -e "s/^num_csx = .*/num_csx = 2\nspatial_partitions = 2\nmode = \"$2\"\nsave_initial_checkpoint = true/" \
    -e "s/^max_steps = .*/max_steps = 3/" -e "s/^eval_frequency = .*/eval_frequency = 3/" \
    -e "s/^batch_size = .*/batch_size = 2/" -e "s|^input_shape = .*|input_shape = [3, 256, 256]|" \
    -e "s|^model_dir = .*|model_dir = \"$work/$1\"|" -e '/^\[optimizer\]/,$d' "$src/examples/unet.toml" > "$work/$1.toml"
  # SGD: Adam's first steps move each weight by about its rate whatever
  # its gradient's size, so that rounding flips the tiny ones
  printf '[optimizer]\noptimizer_type = "sgd"\nlearning_rate = 0.02\nmomentum = 0.9\n' >>"$work/$1.toml"
  local out
  out=$(cd "$work" && timeout 300 "$submit" --json "$work/$1.toml" 2>&1) || fail "$1: $out"
  [ "$(echo "$out" | field state)" = done ] || fail "$1: not done: $out"
}
wsjob pl_k2 pipelined
wsjob ws_k2 weight_streaming
grep -q "job .*: replica 1 of [0-9]*: stripe 2 of 2" "$run"/logs/wse-node-*.log ||
  fail "no wse-node computed the second stripe of the streamed U-Net"
"$build/client/st-compare" "$work/pl_k2/checkpoint_3-shard1-of-1.safetensors" \
  "$work/ws_k2/checkpoint_3-shard1-of-1.safetensors" --rtol 0 >"$work/cmp" ||
  { cat "$work/cmp"; fail "Weight Streaming in 2 stripes differs from Pipelined"; }
echo "ok: Weight Streaming: the U-Net in 2 stripes ends with the Pipelined stripes' weights, bit for bit"

# the plan: with a cluster, and "auto" choosing stripes for a sample that fits no wafer
plan=$(cd "$work" && "$submit" --plan "$(job plan4 "$layers_bn" 4 4 2)") || fail "plan: $plan"
echo "$plan" | has "spatial partitions: each sample in 4 stripes, one per wse-node: 1 replica(s) of 4 stripes" ||
  fail "the plan does not show the stripes: $plan"
# "auto": whole samples while every wse-node has one; a batch of one
# sample on 4 wse-nodes goes in 4 stripes, and one that fits no stripe is
# refused with the reason
sed -e 's/^spatial_partitions = .*/spatial_partitions = "auto"/' "$(job auto "$layers_bn" 4 4 4)" > "$work/auto4.toml"
auto=$("$submit" --plan --wafer-memory 1G --json "$work/auto4.toml") || fail "auto: $auto"
[ "$(echo "$auto" | field spatial_partitions)" = 1 ] || fail "auto splits a batch of 4 on 4 wse-nodes: $auto"
sed -e 's/^batch_size = .*/batch_size = 1/' "$work/auto4.toml" > "$work/auto1.toml"
auto=$("$submit" --plan --wafer-memory 1G --json "$work/auto1.toml") || fail "auto: $auto"
[ "$(echo "$auto" | field spatial_partitions)" = 4 ] || fail "auto does not split 1 sample over 4 wse-nodes: $auto"
set +e
msg=$("$submit" --plan --wafer-memory 1M "$work/auto1.toml" 2>&1); rc=$?
set -e
[ "$rc" = 3 ] && echo "$msg" | has "no count of stripes per sample .* fits" || fail "auto on 1 MiB wafers: exit $rc: $msg"
echo "ok: spatial_partitions = \"auto\": a batch of 4 on 4 wse-nodes stays whole, a batch of 1 goes in 4 stripes; on wafers too small: $msg"

# stripes of unequal height: 264 rows go in slices of 4 (the model's two
# poolings), 66 slices in 4 stripes of 68, 68, 64 and 64 rows
odd() { sed -e 's/^input_shape = .*/input_shape = [3, 264, 264]/' "$(job "$@")" > "$work/$1.2.toml"; }
run_odd() { # NAME ...job args
  local out
  odd "$@"
  out=$(cd "$work" && timeout 600 "$submit" --json "$work/$1.2.toml" 2>&1) || fail "$1: $out"
  [ "$(echo "$out" | field state)" = done ] || fail "$1: not done: $out"
}
run_odd odd_whole "$layers_bn" 1 1 2
run_odd odd_k4 "$layers_bn" 4 4 2
grep -q "stripe 4 of 4 of sample group 0 (64 of 264 rows)" "$run"/logs/wse-node-*.log ||
  fail "no wse-node computed the last stripe's 64 rows"
compare "$work/odd_whole/checkpoint_5-shard1-of-1.safetensors" "$work/odd_k4/checkpoint_5-shard1-of-1.safetensors" \
  "264 rows in 4 stripes of 68, 68, 64 and 64 agree with whole samples"

# more stripes than the height has slices of the model's downsampling
sed -e 's/^input_shape = .*/input_shape = [3, 8, 64]/' "$(job thin "$layers_bn" 4 4 2)" > "$work/thin2.toml"
set +e
msg=$(cd "$work" && "$submit" "$work/thin2.toml" 2>&1); rc=$?
set -e
[ "$rc" = 3 ] || fail "8 rows in 4 stripes: exit $rc: $msg"
echo "$msg" | has "the input's 8 rows make 2 slice(s) of 4 rows, the model's downsampling: at most 2 stripes, not 4" ||
  fail "8 rows in 4 stripes: $msg"
echo "ok: $msg"
echo "1 passed, 0 failed"
