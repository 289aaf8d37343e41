#!/usr/bin/env bash
# Benchmark: one replica of the appliance beside PyTorch on the same host,
# same layers, batch, loss and threads (2), in one run:
#   BENCH step_time_vs_pytorch_mlp_pipelined <ratio> of_pytorch   784-2048-2048-10, batch 1024
#   BENCH step_time_vs_pytorch_mlp_ws <ratio> of_pytorch          the same in Weight Streaming
#   BENCH step_time_vs_pytorch_unet512 <ratio> of_pytorch         examples/unet.toml, 512^2, batch 4
#   BENCH step_time_vs_pytorch_resnet_small <ratio> of_pytorch    examples/resnet_small.toml, batch 32
# and each again in mixed precision ([model] mixed_precision = true,
# bfloat16) against the twin under PyTorch's CPU autocast to bfloat16
# (BENCH step_time_vs_pytorch_<model>_bf16 <ratio> of_pytorch_autocast),
# and the floor under the MLP's mixed-precision step, its GEMMs alone
# (BENCH mlp_bf16_gemm_floor_vs_pytorch <ratio> of_pytorch_autocast, and
# the appliance's step over it, of_gemm_floor).
# Each appliance run is the whole appliance on this host (one wse-node with
# --threads 2); its step is the job's own rate (the first step, with its
# start-up, left out): the mean step, and the twin's is its mean step too
# (the first left out), the same statistic on both sides. Each side runs
# three times (RUNS), interleaved, and the fastest run of each counts.
# After each, where the wse-node's time went (its appliance_step_phase_seconds_total,
# the slowest layers and the layers' share spent moving operands into and
# out of oneDNN's layouts, appliance_layout_seconds_total, from /metrics). The PyTorch twin (bench/torch_twin.py)
# needs Debian's python3-torch: without it the benchmark says so and stops.
set -euo pipefail
src=${SOURCE_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
build=${BUILD_ROOT:-$src/build}
py=/usr/bin/python3
work=$(mktemp -d "${TMPDIR:-/tmp}/appliance-vs-pytorch.XXXXXX")
run="$work/run"
cleanup() {
  "$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
. "$src/bench/lib.sh"
bench_host_line
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "vs_pytorch: PyTorch (Debian's python3-torch) is not installed: nothing to compare with, skipped"
  exit 0
fi

# edit NAME FILE STEPS BATCH [MODE]: a copy of FILE training one replica for
# STEPS steps at BATCH, progress every step, no evaluation
edit() {
  local mode=${5:-auto}
  sed -e "s/^max_steps = .*/max_steps = $3/" -e "s/^log_steps = .*/log_steps = 1/" \
    -e "s/^eval_frequency = .*/eval_frequency = 0/" -e "s/^num_csx = .*/num_csx = 1/" \
    -e "0,/^batch_size = .*/s//batch_size = $4/" \
    -e "s|^model_dir = .*|model_dir = \"$work/$1\"\nmode = \"$mode\"|" "$2" > "$work/$1.toml"
}

# appliance NAME BATCH: runs $work/NAME.toml on a fresh local cluster;
# prints the mean step from the first step's end to the last's (the job's
# training rate); the wse-node's phases and layers go to $work/NAME.metrics
appliance() {
  rm -rf "${work:?}/$1" # the job's model_dir: a second run starts afresh, not from its checkpoint
  "$src/deploy/local/appliance-up" --replicas 1 --threads 2 --wafer-memory 16G --metrics \
    --dir "$run" --build "$build" >/dev/null
  local out url
  out=$(set -a; . "$run/env"; set +a; cd "$work" && "$build/client/appliance-submit" --json "$work/$1.toml" 2>&1) ||
    { echo "vs_pytorch: the $1 job failed: $out" >&2; exit 1; }
  url=$(awk '$1 == "wse-node-1" {print $2}' "$run/metrics")
  sleep 1.2 # the exposition is rendered once a second
  "$py" -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
    "$url" > "$work/$1.metrics"
  "$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null
  cat "$run"/logs/wse-node-*.log > "$work/last-wse-node.log" 2>/dev/null || true # for blas_core
  rm -rf "$run"
  echo "$out" | "$py" -c 'import json, sys; print(int(sys.argv[1]) / json.load(sys.stdin)["samples_per_sec"])' "$2"
}

# breakdown NAME: where the wse-node's time went
breakdown() {
  "$py" - "$work/$1.metrics" "$1" <<'PY'
import re, sys
ph, layers, layout = {}, {}, 0.0
for l in open(sys.argv[1]):
    m = re.match(r'appliance_layout_seconds_total ([0-9.e+-]+)', l)
    if m:
        layout = float(m.group(1))
    m = re.match(r'appliance_step_phase_seconds_total\{phase="([a-z_]+)"\} ([0-9.e+-]+)', l)
    if m:
        ph[m.group(1)] = float(m.group(2))
    m = re.match(r'appliance_layer_seconds_total\{layer="([^"]+)",pass="([a-z]+)"\} ([0-9.e+-]+)', l)
    if m:
        layers[m.group(1) + " " + m.group(2)] = float(m.group(3))
ev = ph.pop("evaluation", 0.0)
total = sum(ph.values()) or 1
print("  %s: the wse-node's training time (%.1f s; evaluation %.1f s more): %s" % (sys.argv[2], total, ev, ", ".join(
    "%s %.0f%%" % (k, 100 * v / total) for k, v in sorted(ph.items(), key=lambda kv: -kv[1]) if v / total >= 0.005)))
top = sorted(layers.items(), key=lambda kv: -kv[1])[:6]
print("  %s: slowest layers: %s" % (sys.argv[2], ", ".join("%s %.0f%%" % (k, 100 * v / total) for k, v in top)))
if layout > 0:
    print("  %s: within the layers, moving operands into and out of oneDNN's layouts and bfloat16 (reorders, rounding): %.0f%% (evaluation included)" % (
        sys.argv[2], 100 * layout / (total + ev)))
PY
}

# bf16 NAME: $work/NAME_bf16.toml, NAME's job in mixed precision
bf16() {
  sed -e "s|^\[model\]$|[model]\nmixed_precision = true\nfp16_type = \"bfloat16\"|" \
    -e "s|^model_dir = \"\(.*\)\"|model_dir = \"\1_bf16\"|" "$work/$1.toml" > "$work/$1_bf16.toml"
}

# blas_core: the OpenBLAS core type the wse-node of the last appliance run
# computed on, from its log (the guard's line, kept by appliance)
blas_core() {
  sed -n -e 's/.*the kernels run on core type \([A-Za-z0-9]*\).*/\1/p' \
    -e 's/.*OpenBLAS core \([A-Za-z0-9]*\) passed its start-up self-check.*/\1/p' \
    "$work/last-wse-node.log" 2>/dev/null | tail -n 1 || true
}

# pair NAME BATCH FIGURE UNIT TWIN_ARGS...: the appliance's run of
# $work/NAME.toml and the twin's, RUNS times each (3 unless set),
# interleaved; the faster of each counts (this host's speed drifts between
# runs: PyTorch's MLP step took 0.12 to 0.23 s in runs of this script, and
# 0.217 against 0.348 s in two runs of one invocation)
pair() {
  local name=$1 batch=$2 figure=$3 unit=$4 as=() ts=() i core
  shift 4
  for ((i = 0; i < ${RUNS:-3}; i++)); do
    as+=("$(appliance "$name" "$batch")")
    # the twin on the OpenBLAS core the wse-node runs (its start-up guard
    # picks the fastest that computes right: where the library names an
    # older core, as Debian's 0.3.21 names Prescott on AMX Xeons, a user
    # would set it too), unless the environment names one
    core=${OPENBLAS_CORETYPE:-$(blas_core)}
    ts+=("$(OPENBLAS_CORETYPE=$core "$py" "$src/bench/torch_twin.py" "$@" | "$py" -c 'import json, sys; print(json.load(sys.stdin)["mean_step_sec"])')")
  done
  echo "$figure: the twin's OpenBLAS core $core" >&2
  "$py" - "$figure" "$unit" "${as[*]}" "${ts[*]}" "$work/$figure.best" <<'PY'
import sys
a = [float(x) for x in sys.argv[3].split()]
t = [float(x) for x in sys.argv[4].split()]
open(sys.argv[5], "w").write("%.6f %.6f\n" % (min(a), min(t)))
runs = lambda v: ", ".join("%.3f" % x for x in v)
print("%s: appliance %.3f s/step (runs %s), PyTorch %.3f s/step (runs %s)" % (
    sys.argv[1], min(a), runs(a), min(t), runs(t)))
print("BENCH step_time_vs_pytorch_%s %.3f %s" % (sys.argv[1], min(a) / min(t), sys.argv[2]))
PY
  breakdown "$name"
}

# compare NAME FIGURE BATCH TWIN_ARGS...: the appliance against the twin;
# then the same in mixed precision against the twin's autocast
compare() {
  local name=$1 figure=$2 batch=$3
  shift 3
  pair "$name" "$batch" "$figure" of_pytorch "$work/$name.toml" --threads 2 "$@"
  bf16 "$name"
  pair "${name}_bf16" "$batch" "${figure}_bf16" of_pytorch_autocast "$work/$name.toml" \
    --threads 2 --bf16 "$@"
}

cat > "$work/mlp-src.toml" <<'TOML'
[runconfig]
max_steps = 20
log_steps = 1
seed = 1
num_csx = 1
model_dir = "x"
[train_input]
data_processor = "synthetic_classification"
batch_size = 1024
num_classes = 10
num_samples = 60000
[model]
input_shape = [1, 28, 28]
loss = "softmax_cross_entropy"
[[model.layers]]
name = "flatten"
type = "flatten"
[[model.layers]]
name = "fc1"
type = "dense"
units = 2048
[[model.layers]]
name = "relu1"
type = "relu"
[[model.layers]]
name = "fc2"
type = "dense"
units = 2048
[[model.layers]]
name = "relu2"
type = "relu"
[[model.layers]]
name = "fc3"
type = "dense"
units = 10
[optimizer]
learning_rate = 0.01
momentum = 0.9
TOML
# The floor under the MLP's step in mixed precision: its eight GEMMs alone
# (the forward pass's three, each weight gradient, the data gradients but
# the first layer's), in bfloat16 on oneDNN's matmul with their operands
# already rounded and in the layouts it picks (bench/bounds gemm-bf16:
# nothing else a step does is counted), against PyTorch's step under
# autocast and the appliance's. Above 0.8 of PyTorch's step, the goal is
# below what these GEMMs take on this processor. floor prints the eight
# GEMMs' seconds (each the fastest of several), or nothing where there is
# no bfloat16 GEMM; it is measured after each MLP pair and once more, and
# the least counts, as the pairs' fastest runs do.
floor() {
  local ts=() shape
  for shape in "1024 2048 784" "1024 2048 2048" "1024 10 2048" "10 2048 1024" "1024 2048 10" \
    "2048 2048 1024" "1024 2048 2048" "2048 784 1024"; do
    # shellcheck disable=SC2086 # M N K as three words
    ts+=("$(OMP_NUM_THREADS=2 "$build/bench/bounds" gemm-bf16 $shape)") || return 0
  done
  "$py" -c 'import sys; print(sum(float(t) for t in sys.argv[1:]))' "${ts[@]}"
}
edit mlp_pipelined "$work/mlp-src.toml" 20 1024 pipelined
compare mlp_pipelined mlp_pipelined 1024 --batch 1024 --steps 10
floor_1=$(floor)
edit mlp_ws "$work/mlp-src.toml" 20 1024 weight_streaming
compare mlp_ws mlp_ws 1024 --batch 1024 --steps 10
floor_2=$(floor)
floor_sum=$("$py" -c 'import sys; v = [float(x) for x in sys.argv[1:] if x]; print(min(v) if v else "")' \
  "$floor_1" "$floor_2" "$(floor)")
if [ -n "$floor_sum" ]; then
  "$py" - "$floor_sum" "$work/mlp_pipelined_bf16.best" "$work/mlp_ws_bf16.best" <<'PY'
import sys
floor = float(sys.argv[1])
p, w = ([float(x) for x in open(f).read().split()] for f in sys.argv[2:4])
torch = min(p[1], w[1])
print("mlp_bf16: its GEMMs alone in bfloat16 %.3f s (%.0f GFLOP/s); PyTorch's step %.3f s, the appliance's %.3f (Pipelined), %.3f (Weight Streaming)" % (
    floor, 2 * 1024 * (784 * 2048 * 2 + 2048 * 2048 * 3 + 2048 * 10 * 3) / floor / 1e9, torch, p[0], w[0]))
print("BENCH mlp_bf16_gemm_floor_vs_pytorch %.3f of_pytorch_autocast" % (floor / torch))
print("BENCH step_time_vs_gemm_floor_mlp_pipelined_bf16 %.3f of_gemm_floor" % (p[0] / floor))
print("BENCH step_time_vs_gemm_floor_mlp_ws_bf16 %.3f of_gemm_floor" % (w[0] / floor))
PY
else
  echo "vs_pytorch: no bfloat16 GEMM here (bench/bounds gemm-bf16): the MLP's floor is not measured"
fi
edit unet512 "$src/examples/unet.toml" 7 4
compare unet512 unet512 4 --batch 4 --steps 4
# resnet_small's steps take 11 to 20 ms: 240 of them (120 for the twin) so
# that each run spans seconds of the host's noise, not a few hundred ms
edit resnet_small "$src/examples/resnet_small.toml" 240 32
compare resnet_small resnet_small 32 --batch 32 --steps 120
echo "vs_pytorch: in mixed precision the appliance computes its dense layers and its convolutions of 8 outputs or more in bfloat16 (oneDNN, where the processor has AVX512_BF16 or AMX), the rest in float32; PyTorch's autocast runs its convolutions and matrix products in bfloat16"
