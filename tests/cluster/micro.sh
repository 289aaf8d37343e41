#!/usr/bin/env bash
# Cluster test: micro-batches. On 2 replicas (a share of 6 samples each),
# a convolutional job without batch norm (with dropout) trained 5 steps in
# micro-batches of 4 (4 + 2 per share) ends within 1e-5 of the same job
# computing each share at once. With micro_batch_size = "auto" on wse-nodes
# whose wafer cannot hold a whole share, the plan picks the largest
# micro-batch that fits, says so, and the job trains; a micro-batch asked
# for in Weight Streaming is refused with the reason.
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-micro
submit="$build/client/appliance-submit"

"$src/deploy/local/appliance-up" --replicas 2 --wafer-memory 24M --dir "$run" --build "$build" >/dev/null
set -a; . "$run/env"; set +a

job() { # NAME MICRO_LINE [MODE]: a small U-Net-like job on 64x64 images
  cat > "$work/$1.toml" <<TOML
[runconfig]
max_steps = 5
log_steps = 5
seed = 4
num_csx = 2
model_dir = "$work/$1"
mode = "${3:-auto}"
[train_input]
data_processor = "synthetic_segmentation"
batch_size = 12
num_classes = 2
num_samples = 64
$2
[model]
input_shape = [3, 64, 64]
loss = "bce_dice"
[[model.layers]]
name = "c1"
type = "conv2d"
filters = 8
kernel_size = 3
padding = 1
[[model.layers]]
name = "r1"
type = "relu"
[[model.layers]]
name = "p1"
type = "max_pool2d"
kernel_size = 2
[[model.layers]]
name = "drop"
type = "dropout"
rate = 0.2
[[model.layers]]
name = "c2"
type = "conv2d"
filters = 8
kernel_size = 3
padding = 1
[[model.layers]]
name = "r2"
type = "relu"
[[model.layers]]
name = "up"
type = "upsample"
scale_factor = 2
[[model.layers]]
name = "head"
type = "conv2d"
filters = 1
kernel_size = 1
[optimizer]
optimizer_type = "sgd"
learning_rate = 0.05
momentum = 0.9
TOML
  echo "$work/$1.toml"
}

for name in whole parts; do
  line=""; [ "$name" = parts ] && line="micro_batch_size = 4"
  out=$(cd "$work" && timeout 300 "$submit" --json "$(job "$name" "$line")" 2>&1) || fail "$name: $out"
  [ "$(echo "$out" | field state)" = done ] || fail "$name: not done: $out"
done
grep -q "6 samples per step, in 2 micro-batches of 4" "$run/logs/wse-node-1.log" ||
  fail "the wse-node did not compute its share in micro-batches"
"$build/client/st-compare" "$work/whole/checkpoint_5-shard1-of-1.safetensors" \
  "$work/parts/checkpoint_5-shard1-of-1.safetensors" --rtol 1e-5 >"$work/cmp" ||
  { cat "$work/cmp"; fail "micro-batches of 4 differ from whole shares of 6"; }
echo "ok: 5 steps in micro-batches of 4 (4 + 2 a share) agree with whole shares of 6 within 1e-5"

# "auto": a share of 64x64 images too large for a 24 MiB wafer at once
sed -e "s/^batch_size = 12/batch_size = 192/" -e "s/^max_steps = 5/max_steps = 2/" \
  "$(job auto 'micro_batch_size = "auto"')" > "$work/auto2.toml"
plan=$(cd "$work" && "$submit" --plan auto2.toml) || fail "plan auto: $plan"
echo "$plan" | has "mode pipelined" || fail "auto micro-batches: not pipelined: $plan"
micro=$(echo "$plan" | sed -n 's/^micro-batches of \([0-9]*\) samples.*/\1/p')
[ -n "$micro" ] && [ "$micro" -lt 96 ] || fail "auto micro-batches: none chosen: $plan"
offline=$("$submit" --plan --wafer-memory 24M --json "$work/auto2.toml") || fail "offline: $offline"
[ "$(echo "$offline" | field micro_batch)" = "$micro" ] ||
  fail "offline plan picks $(echo "$offline" | field micro_batch), the cluster $micro"
out=$(cd "$work" && timeout 300 "$submit" --json auto2.toml 2>&1) || fail "auto: $out"
[ "$(echo "$out" | field state)" = done ] || fail "auto: not done: $out"
echo "ok: micro_batch_size = \"auto\": shares of 96 in micro-batches of $micro (the plan with and without a cluster agree), trained"

set +e
msg=$(cd "$work" && "$submit" "$(job ws 'micro_batch_size = 2' weight_streaming)" 2>&1); rc=$?
set -e
[ "$rc" = 3 ] || fail "micro-batches in weight streaming: exit $rc: $msg"
echo "$msg" | has "train_input.micro_batch_size: micro-batches run in Pipelined execution" ||
  fail "micro-batches in weight streaming: $msg"
echo "ok: $msg"
echo "1 passed, 0 failed"
