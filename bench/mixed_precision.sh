#!/usr/bin/env bash
# Benchmark: mixed precision ([model] mixed_precision = true, bfloat16 on
# the wire) against float32, each pair in this script on fresh local
# clusters, Weight Streaming:
#   BENCH wire_bytes_bf16_vs_fp32 <ratio> of_fp32     bytes between the
#         wse-node and its stream peer per step (weights down, gradients up), MLP
#         784-2048-2048-10, batch 1024, one replica
#   BENCH step_time_bf16_vs_fp32_mlp <ratio> of_fp32  its step
#   BENCH step_time_bf16_vs_fp32_1b <ratio> of_fp32   the 1.07B MLP of
#         bench/big_model.sh (batch 32, a 2 GiB wafer), with BENCH_1B=1
#   BENCH fc_mnist_accuracy_bf16 <acc> accuracy       examples/fc_mnist.toml
#         on two replicas (and _fp32), when data/mnist is there
#   BENCH unet_iou_bf16_minus_fp32 <d> iou            examples/unet.toml at
#         128^2, 48 steps, evaluated on 16 images
set -euo pipefail
src=${SOURCE_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
build=${BUILD_ROOT:-$src/build}
py=/usr/bin/python3
. "$src/bench/lib.sh"
bench_work mixed
bench_host_line

# wire: the wse-node's bytes to and from its stream peer so far (swarmx, or
# memoryx itself when one replica streams directly)
wire() {
  local url
  url=$(awk '$1 == "wse-node-1" {print $2}' "$run/metrics")
  "$py" -c 'import re, sys, urllib.request
t = urllib.request.urlopen(sys.argv[1], timeout=5).read().decode()
print(sum(float(l.split()[-1]) for l in t.splitlines()
          if l.startswith("appliance_peer_bytes_") and
          ("peer_role=\"swarmx\"" in l or "peer_role=\"memoryx\"" in l)))' "$url"
}

# job NAME FILE REPLICAS [WAFER]: trains FILE on a fresh cluster; prints
# "<step seconds> <wire bytes per step> <eval accuracy> <eval IoU>"
job() {
  "$src/deploy/local/appliance-up" --replicas "$3" --threads 2 --wafer-memory "${4:-16G}" --metrics \
    --dir "$run" --build "$build" >/dev/null
  local out steps
  out=$(set -a; . "$run/env"; set +a; cd "$work" && "$build/client/appliance-submit" --json "$2" 2>&1) ||
    { echo "mixed_precision: the $1 job failed: $out" >&2; exit 1; }
  sleep 1.2 # the exposition is rendered once a second
  local bytes
  bytes=$(wire)
  "$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null
  # the median step from the coordinator's log (milliseconds), the first left out
  echo "$out" | "$py" -c 'import datetime, json, re, statistics, sys
o = json.load(sys.stdin)
t = [datetime.datetime.strptime(l.split()[0], "%Y-%m-%dT%H:%M:%S.%fZ")
     for l in open(sys.argv[2]) if re.search(r"job job-1: step \d+/\d+ loss", l)]
d = [(b - a).total_seconds() for a, b in zip(t[1:], t[2:])]
print(statistics.median(d) if d else float("nan"), float(sys.argv[1]) / o["steps"], o.get("eval_accuracy", -1), o.get("eval_iou", -1))' \
    "$bytes" "$run/logs/coordinator.log"
  rm -rf "$run"
}

# variant FILE NAME EXPR...: FILE with model_dir NAME, Weight Streaming and the sed expressions
variant() {
  local in="$1" name="$2"
  shift 2
  local args=()
  for e in "$@"; do args+=(-e "$e"); done
  sed -e "s|^model_dir = .*|model_dir = \"$work/$name\"\nmode = \"weight_streaming\"|" "${args[@]}" "$in" \
    > "$work/$name.toml"
  echo "$work/$name.toml"
}

mlp="$work/mlp-base.toml"
cat > "$mlp" <<'TOML'
[runconfig]
max_steps = 30
log_steps = 1
seed = 1
num_csx = 1
model_dir = "m"
[train_input]
data_processor = "synthetic_classification"
batch_size = 1024
num_classes = 10
num_samples = 65536
[model]
input_shape = [784]
loss = "softmax_cross_entropy"
[[model.layers]]
name = "fc1"
type = "dense"
units = 2048
[[model.layers]]
name = "r1"
type = "relu"
[[model.layers]]
name = "fc2"
type = "dense"
units = 2048
[[model.layers]]
name = "r2"
type = "relu"
[[model.layers]]
name = "fc3"
type = "dense"
units = 10
[optimizer]
learning_rate = 0.01
momentum = 0.9
TOML
mp='s|^loss = \(.*\)|loss = \1\nmixed_precision = true\nfp16_type = "bfloat16"|'
read -r f_step f_wire _ _ <<<"$(job mlp32 "$(variant "$mlp" mlp32)" 1)"
read -r b_step b_wire _ _ <<<"$(job mlp16 "$(variant "$mlp" mlp16 "$mp")" 1)"
"$py" -c 'import sys
fs, fw, bs, bw = map(float, sys.argv[1:])
print("MLP 784-2048-2048-10, batch 1024: float32 %.1f ms and %.1f MB a step, bfloat16 %.1f ms and %.1f MB"
      % (fs * 1e3, fw / 1e6, bs * 1e3, bw / 1e6))
print("BENCH wire_bytes_bf16_vs_fp32 %.3f of_fp32" % (bw / fw))
print("BENCH step_time_bf16_vs_fp32_mlp %.3f of_fp32" % (bs / fs))' "$f_step" "$f_wire" "$b_step" "$b_wire"

if [ -n "${BENCH_1B:-}" ]; then
  big="$work/big-base.toml"
  bench_wide_mlp 4 4 0 m sgd > "$big"
  read -r f_step _ _ _ <<<"$(job big32 "$(variant "$big" big32)" 1 2G)"
  read -r b_step _ _ _ <<<"$(job big16 "$(variant "$big" big16 "$mp")" 1 2G)"
  "$py" -c 'import sys
fs, bs = map(float, sys.argv[1:])
print("1.07B MLP, batch 32, 2 GiB wafer: float32 %.2f s a step, bfloat16 %.2f s" % (fs, bs))
print("BENCH step_time_bf16_vs_fp32_1b %.3f of_fp32" % (bs / fs))' "$f_step" "$b_step"
fi

if [ -s "$src/data/mnist/t10k-labels-idx1-ubyte" ]; then
  fc=(-e "s|^data_dir = .*|data_dir = \"$src/data/mnist\"|")
  sed "${fc[@]}" "$src/examples/fc_mnist.toml" > "$work/fc-base.toml"
  read -r _ _ f_acc _ <<<"$(job fc32 "$(variant "$work/fc-base.toml" fc32)" 2)"
  read -r _ _ b_acc _ <<<"$(job fc16 "$(variant "$work/fc-base.toml" fc16 "s|^input_shape = \(.*\)|input_shape = \1\nmixed_precision = true|")" 2)"
  echo "BENCH fc_mnist_accuracy_fp32 $f_acc accuracy"
  echo "BENCH fc_mnist_accuracy_bf16 $b_acc accuracy"
else
  echo "fc_mnist: no data/mnist (scripts/fetch-mnist): skipped"
fi

unet=(-e "s/^max_steps = .*/max_steps = 48/" -e "s/^log_steps = .*/log_steps = 8/"
      -e "s/^eval_frequency = .*/eval_frequency = 48/" -e "s/^num_csx = .*/num_csx = 1/"
      -e "s|^input_shape = .*|input_shape = [3, 128, 128]|")
sed "${unet[@]}" "$src/examples/unet.toml" > "$work/unet-base.toml"
read -r _ _ _ f_iou <<<"$(job unet32 "$(variant "$work/unet-base.toml" unet32)" 1)"
read -r _ _ _ b_iou <<<"$(job unet16 "$(variant "$work/unet-base.toml" unet16 "s|^input_shape = \(.*\)|input_shape = \1\nmixed_precision = true|")" 1)"
"$py" -c 'import sys
f, b = map(float, sys.argv[1:])
print("U-Net 128^2, 48 steps: IoU float32 %.4f, bfloat16 %.4f" % (f, b))
print("BENCH unet_iou_bf16_minus_fp32 %.4f iou" % (b - f))' "$f_iou" "$b_iou"
