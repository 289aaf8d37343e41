#!/usr/bin/env bash
# Benchmark: Weight Streaming against Pipelined on the same model and batch,
# one replica on loopback, measured in the same run: FC-MNIST widened to 4096
# units (784 -> 4096 -> 4096 -> 10, 20 M parameters), batch 1024, a
# compute-bound model. Prints the step time of each mode and their ratio:
#   BENCH ws_over_pipelined_fc4096_b1024 <ratio> of_pipelined
#   BENCH ws_bf16_over_pipelined_fc4096_b1024 <ratio> of_pipelined  (mixed precision)
# and Weight Streaming again on a second appliance whose daemons keep every
# payload on their sockets (--shm-ring 0), the daemons on one host sharing
# no memory:
#   BENCH ws_sockets_over_pipelined_fc4096_b1024 <ratio> of_pipelined
#   BENCH ws_shm_over_sockets_fc4096_b1024 <ratio> of_sockets
# Each runs twice, interleaved, and the faster run of each counts.
set -euo pipefail
src=${SOURCE_ROOT:?}
build=${BUILD_ROOT:?}
py=/usr/bin/python3
work=$(mktemp -d "${TMPDIR:-/tmp}/appliance-bench.XXXXXX")
run="$work/run"
sockets="$work/sockets"
cleanup() {
  "$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null 2>&1 || true
  "$src/deploy/local/appliance-down" --dir "$sockets" --quiet >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
threads=$(nproc)
"$src/deploy/local/appliance-up" --replicas 1 --threads "$threads" --dir "$run" --build "$build" >/dev/null
"$src/deploy/local/appliance-up" --replicas 1 --threads "$threads" --dir "$sockets" \
  --build "$build" --shm-ring 0 >/dev/null

steps=12
job() { # job MODE NAME [MIXED]: MIXED true puts bfloat16 on the wire
  cat > "$work/$2.toml" <<TOML
[runconfig]
max_steps = $steps
log_steps = $steps
seed = 1
num_csx = 1
mode = "$1"
model_dir = "$work/$2"
[train_input]
data_processor = "synthetic_classification"
batch_size = 1024
num_classes = 10
num_samples = 65536
[model]
input_shape = [1, 28, 28]
loss = "softmax_cross_entropy"
mixed_precision = ${3:-false}
[[model.layers]]
name = "flatten"
type = "flatten"
[[model.layers]]
name = "fc1"
type = "dense"
units = 4096
[[model.layers]]
name = "relu1"
type = "relu"
[[model.layers]]
name = "fc2"
type = "dense"
units = 4096
[[model.layers]]
name = "relu2"
type = "relu"
[[model.layers]]
name = "fc3"
type = "dense"
units = 10
[optimizer]
optimizer_type = "sgd"
learning_rate = 0.01
momentum = 0.9
TOML
  (set -a; . "${4:-$run}/env"; set +a
   "$build/client/appliance-submit" --json "$work/$2.toml") |
    "$py" -c 'import json,sys; r=json.load(sys.stdin); assert r["state"]=="done", r; print(1024.0 / r["samples_per_sec"])'
}
best() { "$py" -c 'import sys; print(min(float(x) for x in sys.argv[1:]))' "$@"; }
ratio() { "$py" -c 'import sys; print("BENCH %s %.3f %s" % (sys.argv[1], float(sys.argv[2]) / float(sys.argv[3]), sys.argv[4]))' "$@"; }
p1=$(job pipelined p1); w1=$(job weight_streaming w1); m1=$(job weight_streaming m1 true)
s1=$(job weight_streaming s1 false "$sockets")
p2=$(job pipelined p2); w2=$(job weight_streaming w2); m2=$(job weight_streaming m2 true)
s2=$(job weight_streaming s2 false "$sockets")
pipe=$(best "$p1" "$p2"); ws=$(best "$w1" "$w2"); mixed=$(best "$m1" "$m2"); sock=$(best "$s1" "$s2")
echo "BENCH pipelined_step_fc4096_b1024 $pipe s"
echo "BENCH ws_step_fc4096_b1024 $ws s"
echo "BENCH ws_bf16_step_fc4096_b1024 $mixed s"
echo "BENCH ws_sockets_step_fc4096_b1024 $sock s"
ratio ws_over_pipelined_fc4096_b1024 "$ws" "$pipe" of_pipelined
ratio ws_bf16_over_pipelined_fc4096_b1024 "$mixed" "$pipe" of_pipelined
ratio ws_sockets_over_pipelined_fc4096_b1024 "$sock" "$pipe" of_pipelined
ratio ws_shm_over_sockets_fc4096_b1024 "$ws" "$sock" of_sockets
