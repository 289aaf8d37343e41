#!/usr/bin/env bash
# Cluster test: mixed precision. The MLP of jobs/wide_mlp.toml trains 10 steps in
# Weight Streaming on two replicas in float32, then with [model]
# mixed_precision = true on the same cluster shape but with memoryx's disk
# tier (4 MiB of RAM) and a 40 MiB wafer (layers in parts), so that every
# path a bfloat16 chunk takes is crossed: memoryx's read-ahead, swarmx's
# float32 sum of two replicas' gradients, the wse-node's in-place widening;
# and once more with the shard in memoryx's memory (its weights kept in
# bfloat16 beside them, rounded as they are updated), and in a memory too
# small for that (rounded for each stream in its thread pool): the same
# weights bit for bit, and the same losses as from the disk tier.
# Each step's loss stays within 2% of float32's (of 0.1 below it); the bytes between each
# wse-node and swarmx are half. The U-Net at 64x64 (bfloat16 convolutions on
# oneDNN where the processor has them) stays within 2% of its float32 losses.
# fp16_type = "float16" is refused by name.
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-mixed
submit="$build/client/appliance-submit"

sed -e 's/^max_steps = .*/max_steps = 10/' -e 's/^eval_frequency = .*/eval_frequency = 10/' \
  -e 's/^learning_rate = .*/learning_rate = 0.001/' \
  "$src/tests/cluster/jobs/wide_mlp.toml" > "$work/fp32.toml"
sed 's|^loss = \(.*\)|loss = \1\nmixed_precision = true\nfp16_type = "bfloat16"|' "$work/fp32.toml" > "$work/bf16.toml"
grep -q "mixed_precision = true" "$work/bf16.toml" || fail "no job file"

train() { # train NAME [appliance-up options]: losses by step to $work/NAME.loss, wire bytes to $work/NAME.wire
  "$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null 2>&1 || true
  rm -rf "$run"
  mkdir -p "$work/$1"
  cp "$work/$1.toml" "$work/$1/job.toml"
  # (the wse-nodes' own OpenMP wait, not the one scripts/test sets)
  env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT "$src/deploy/local/appliance-up" --replicas 2 --metrics --dir "$run" --build "$build" "${@:2}" >/dev/null
  local out
  out=$(set -a; . "$run/env"; set +a; cd "$work/$1" && timeout 300 "$submit" --json job.toml 2>&1) ||
    fail "$1: $out"
  [ "$(echo "$out" | field state)" = done ] || fail "$1: not done: $out"
  # oneDNN on OpenMP: the wse-nodes started again with a bounded spin
  # (the environment they were executed with, not a setenv)
  local says
  says=$(sed -n 's/.*wait between regions with OMP_WAIT_POLICY=\([^ ]*\) GOMP_SPINCOUNT=\([^ ]*\).*/\1 \2/p' \
    "$run/logs/wse-node-1.log" | head -n 1)
  if [ -n "$says" ]; then
    [ "$says" = "(unset) 100000" ] || fail "$1: the wse-node waits with $says, not a spin of 100000"
    tr '\0' '\n' < "/proc/$(cat "$run/pids/wse-node-1.pid")/environ" | has -x "GOMP_SPINCOUNT=100000" ||
      fail "$1: the wse-node says its threads spin 100000, its environment does not"
    # started again under its own name, as ps and pgrep show it
    [ "$(cat "/proc/$(cat "$run/pids/wse-node-1.pid")/comm")" = wse-node ] ||
      fail "$1: the wse-node started again as $(cat "/proc/$(cat "$run/pids/wse-node-1.pid")/comm")"
  elif ldd "$build/wse-node/wse-node" | has libgomp; then
    fail "$1: the wse-node runs oneDNN on OpenMP but names no wait"
  fi
  sleep 1.2 # the expositions are rendered once a second
  awk '$1 ~ /^wse-node/ {print $2}' "$run/metrics" | while read -r url; do
    "$py" -c 'import sys, urllib.request
t = urllib.request.urlopen(sys.argv[1], timeout=5).read().decode()
print(sum(float(l.split()[-1]) for l in t.splitlines()
          if l.startswith("appliance_peer_bytes_") and "peer_role=\"swarmx\"" in l))' "$url"
  done > "$work/$1.wire"
  sed -n 's/.*job job-1: step \([0-9]*\)\/[0-9]* loss \([0-9.e+-]*\).*/\1 \2/p' "$run/logs/coordinator.log" > "$work/$1.loss"
  [ "$(wc -l < "$work/$1.loss")" = 10 ] || fail "$1: $(wc -l < "$work/$1.loss") step losses logged"
}

train fp32 --wafer-memory 40M # the same schedule as the bfloat16 runs (parts, layers kept across the turn)
cp "$work/bf16.toml" "$work/bf16ram.toml"
train bf16ram --wafer-memory 40M
grep -q "the gradients in bfloat16 and the weights in bfloat16 for the wire" "$run/logs/memoryx-1.log" ||
  fail "memoryx did not keep the gradients as they come and the weights in bfloat16 beside them"
# 135 MiB: the shard (126 MiB of weights, Adam's state and the gradients
# kept in bfloat16 as they come; 144 MiB with float32 gradients) but not its
# bfloat16 weights: rounded for each step's stream instead
cp "$work/bf16.toml" "$work/bf16tight.toml"
train bf16tight --memoryx-memory 135M --wafer-memory 40M
grep -q "and the weights in bfloat16 for the wire" "$run/logs/memoryx-1.log" &&
  fail "memoryx kept the weights in bfloat16 in too little memory"
grep -q "is in the disk tier" "$run/logs/memoryx-1.log" && fail "135 MiB: memoryx used its disk tier"
grep -q "the gradients in bfloat16)" "$run/logs/memoryx-1.log" ||
  fail "135 MiB: memoryx did not keep the gradients in bfloat16"
"$build/client/st-compare" "$work/bf16ram/model/checkpoint_10-shard1-of-1.safetensors" \
  "$work/bf16tight/model/checkpoint_10-shard1-of-1.safetensors" --rtol 0 >/dev/null ||
  fail "bfloat16 weights kept and rounded for each stream trained different weights"
train bf16 --memoryx-memory 4M --wafer-memory 40M
grep -q "is in the disk tier" "$run/logs/memoryx-1.log" || fail "memoryx did not use its disk tier"
cmp "$work/bf16ram.loss" "$work/bf16.loss" ||
  fail "bfloat16 from memoryx's memory and from its disk tier differ: $(paste "$work/bf16ram.loss" "$work/bf16.loss")"
echo "ok: bfloat16 streams from memoryx's memory (its weights kept in bfloat16, or rounded for each stream: the same weights bit for bit) and from its disk tier give the same losses"
"$py" - "$work/fp32.loss" "$work/bf16.loss" "$work/fp32.wire" "$work/bf16.wire" <<'PY' || fail "mixed precision"
import sys
f = [float(l.split()[1]) for l in open(sys.argv[1])]
b = [float(l.split()[1]) for l in open(sys.argv[2])]
worst = max(abs(x - y) / max(abs(x), 0.1) for x, y in zip(f, b))
print("losses float32: %s" % " ".join("%.4f" % x for x in f))
print("losses bfloat16: %s" % " ".join("%.4f" % x for x in b))
wf = [float(l) for l in open(sys.argv[3])]
wb = [float(l) for l in open(sys.argv[4])]
ratio = sum(wb) / sum(wf)
print("largest relative loss difference %.4f; bytes between the wse-nodes and swarmx %.3f of float32's" % (worst, ratio))
sys.exit(0 if worst < 0.02 and 0.45 < ratio < 0.55 and len(wf) == len(wb) == 2 else 1)
PY
echo "ok: bfloat16 on the wire: each step's loss within 2% of float32's, half the bytes"

# A convolutional model: the U-Net of examples/unet.toml at 64x64, whose
# convolutions run on oneDNN's bfloat16 kernels where the processor has
# AMX or AVX512_BF16 (float32 elsewhere): its loss tracks float32's.
sed -e 's/^max_steps = .*/max_steps = 10/' -e 's/^log_steps = .*/log_steps = 1/' \
  -e 's/^eval_frequency = .*/eval_frequency = 0/' -e 's/^num_csx = .*/num_csx = 1/' \
  -e 's|^input_shape = .*|input_shape = [3, 64, 64]|' "$src/examples/unet.toml" > "$work/unet32.toml"
sed 's|^input_shape = \(.*\)|input_shape = \1\nmixed_precision = true|' "$work/unet32.toml" > "$work/unet16.toml"
grep -q "mixed_precision = true" "$work/unet16.toml" || fail "no U-Net job file"
train unet32
train unet16
rounds=0 # where the processor computes in bfloat16, the losses must show it
if grep -q "compute their dense layers and convolutions in bfloat16" "$run/logs/wse-node-1.log"; then
  rounds=1
else
  grep -q "compute in float32 here" "$run/logs/wse-node-1.log" ||
    fail "the wse-node does not say how it computes mixed precision"
fi
"$py" - "$work/unet32.loss" "$work/unet16.loss" "$rounds" <<'PY' || fail "mixed precision U-Net"
import sys
f = [float(l.split()[1]) for l in open(sys.argv[1])]
b = [float(l.split()[1]) for l in open(sys.argv[2])]
worst = max(abs(x - y) / max(abs(x), 0.1) for x, y in zip(f, b))
print("U-Net losses float32: %s" % " ".join("%.4f" % x for x in f))
print("U-Net losses bfloat16: %s" % " ".join("%.4f" % x for x in b))
print("largest relative loss difference %.4f" % worst)
rounded = f != b
print("bfloat16 computed here: %s; the losses differ from float32's: %s" % (sys.argv[3] == "1", rounded))
sys.exit(0 if worst < 0.02 and f[-1] < f[0] and b[-1] < b[0] and rounded >= (sys.argv[3] == "1") else 1)
PY
echo "ok: the U-Net in mixed precision: each step's loss within 2% of float32's, both falling"

sed 's/^fp16_type = .*/fp16_type = "float16"/' "$work/bf16.toml" > "$work/f16.toml"
set +e
msg=$("$submit" --plan "$work/f16.toml" --wafer-memory 1G 2>&1)
set -e
echo "$msg" | has "f16.toml:[0-9]*:[0-9]*: fp16_type = \"float16\" is not supported: mixed precision here is bfloat16" ||
  fail "fp16_type = \"float16\": $msg"
echo "ok: $msg"
echo "1 passed, 0 failed"
