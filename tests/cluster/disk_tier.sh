#!/usr/bin/env bash
# Cluster test: memoryx's disk tier. A 6.3M-parameter MLP (24 MiB of
# weights, 72 MiB with its gradients and momentum) trains in Weight
# Streaming once with memoryx holding it in memory and once with memoryx
# capped at 4 MiB, so that the shard lives in files under its state
# directory. Both give bitwise the same weights and optimizer state at every
# checkpoint; so do a disk-tier run resumed from a checkpoint, a disk-tier
# run whose memoryx is killed mid-step (recovered from the last checkpoint),
# and Adam with gradient clipping. memoryx's peak memory stays far under the
# shard's. Bad input: a disk too small is refused by the planner, a state
# directory that cannot take files fails the job naming the file, and a
# truncated checkpoint is refused at resume naming it.
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-disk-tier
submit="$build/client/appliance-submit"
steps=6

cat > "$work/mlp.toml" <<TOML
[runconfig]
max_steps = $steps
log_steps = 1
checkpoint_steps = 2
seed = 3
num_csx = 1
mode = "weight_streaming"
model_dir = "model"
max_num_restarts = 2
[train_input]
data_processor = "synthetic_classification"
batch_size = 8
num_classes = 10
num_samples = 64
[model]
input_shape = [1, 64, 64]
loss = "softmax_cross_entropy"
[[model.layers]]
name = "flatten"
type = "flatten"
[[model.layers]]
name = "fc1"
type = "dense"
units = 1024
[[model.layers]]
name = "relu1"
type = "relu"
[[model.layers]]
name = "fc2"
type = "dense"
units = 1024
[[model.layers]]
name = "relu2"
type = "relu"
[[model.layers]]
name = "fc3"
type = "dense"
units = 1024
[[model.layers]]
name = "relu3"
type = "relu"
[[model.layers]]
name = "fc4"
type = "dense"
units = 10
[optimizer]
learning_rate = 0.01
momentum = 0.9
TOML
echo 'chunk_size = "256K"' > "$work/coordinator.toml"

# The daemons share no memory (--shm-ring 0): memoryx's peak below is the
# shard's, and the pages of its shared-memory rings with the wse-node (up to
# 32 MiB each way, outside --memory as the sockets' buffers are) would count
# in it.
up() { # up [appliance-up options]: a fresh cluster
  "$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null 2>&1 || true
  rm -rf "$run"
  "$src/deploy/local/appliance-up" --replicas 1 --wafer-memory 256M --dir "$run" --build "$build" \
    --coordinator-config "$work/coordinator.toml" --shm-ring 0 "$@" >/dev/null
  set -a; . "$run/env"; set +a
}
train() { # train NAME JOBFILE: the job into $work/NAME, done
  local out
  out=$(cd "$work" && timeout 300 "$submit" --json "$2" 2>&1) ||
    fail "$1: $out"
  [ "$(echo "$out" | field state)" = done ] && [ "$(echo "$out" | field steps)" = "$steps" ] ||
    fail "$1: not done: $out"
}
hwm() { awk '/^VmHWM:/ {printf "%.0f\n", $2 / 1024}' "/proc/$(cat "$run/pids/memoryx-1.pid")/status"; }
same() { # same A B [STEPS...]: weights and optimizer state bitwise equal at those checkpoints
  local a="$1" b="$2" s f
  shift 2
  for s in "$@"; do
    for f in checkpoint optimizer; do
      "$build/client/st-compare" "$work/$a/${f}_$s-shard1-of-1.safetensors" \
        "$work/$b/${f}_$s-shard1-of-1.safetensors" --rtol 0 >"$work/cmp" ||
        { cat "$work/cmp"; fail "$b: the $f file of step $s differs from $a's"; }
    done
  done
}
job() { # job NAME [SED-EXPRESSION]: the job file with model_dir NAME
  sed -e "s|^model_dir = .*|model_dir = \"$1\"|" -e "${2:-}" "$work/mlp.toml" > "$work/$1.toml"
  echo "$1.toml"
}

up
train ram "$(job ram)"
ram_hwm=$(hwm)
echo "ok: in memory: $steps steps, memoryx's peak ${ram_hwm} MiB"

up --memoryx-memory 4M
train tier "$(job tier)"
tier_hwm=$(hwm)
grep -q "shard 0 is in the disk tier: 72.2 MiB in .*, through a window of 4.0 MiB of RAM" \
  "$run/logs/memoryx-1.log" || fail "memoryx did not say it used its disk tier"
same ram tier 2 4 6
# (under the sanitizers, APPLIANCE_TEST_LIGHT, shadow memory is not the shard's)
[ -n "${APPLIANCE_TEST_LIGHT:-}" ] || { [ "$tier_hwm" -lt 40 ] && [ "$ram_hwm" -gt 72 ]; } ||
  fail "memoryx's peak: ${tier_hwm} MiB with the disk tier, ${ram_hwm} MiB in memory"
ls "$run/state/memoryx-1" | has tier- && fail "the tier files outlived the job: $(ls "$run/state/memoryx-1")"
echo "ok: in the disk tier (4 MiB of RAM): bitwise the same weights and momentum at steps 2, 4, 6; memoryx's peak ${tier_hwm} MiB"

train resumed "$(job resumed "s|^max_num_restarts|checkpoint_path = \"tier/checkpoint_2-shard1-of-1.safetensors\"\nmax_num_restarts|")"
same ram resumed 4 6
echo "ok: resumed in the disk tier from step 2: bitwise the same at steps 4 and 6"

train adam "$(job adam 's/^momentum = .*/optimizer_type = "adam"\nmax_gradient_norm = 0.5/')"
up
train adam-ram "$(job adam-ram 's/^momentum = .*/optimizer_type = "adam"\nmax_gradient_norm = 0.5/')"
same adam-ram adam 2 4 6
echo "ok: Adam with gradient clipping: the disk tier's weights and moments bitwise those in memory"

# memoryx killed in the middle of a step: the job restarts from its newest
# checkpoint, in the disk tier again
up --memoryx-memory 4M --restart
id=$(cd "$work" && "$submit" --detach "$(job killed)" | grep -o 'job-[0-9]*' | head -n 1)
deadline=$((SECONDS + 60))
until s=$("$submit" status "$id" --json 2>/dev/null | field steps 2>/dev/null) && [ "${s:-0}" -ge 3 ]; do
  [ "$SECONDS" -lt "$deadline" ] || fail "job $id did not reach step 3"
  sleep 0.02
done
kill -KILL "$(cat "$run/pids/memoryx-1.pid")"
out=$(timeout 120 "$submit" status "$id" --follow --json 2>&1 | tail -n 1) || true
[ "$(echo "$out" | field state)" = done ] || fail "the job did not recover from memoryx's death: $out"
"$submit" logs "$id" | has "fault at step .*restart 1 of 2" || fail "no restart in the job's log"
same ram killed 6
echo "ok: memoryx killed at step $s with its shard on disk: recovered, bitwise the same weights"

# bad input: a disk tier too small for the shard is refused by the planner
up --memoryx-memory 4M --memoryx-disk 50M
set +e
msg=$(cd "$work" && "$submit" "$(job small)" 2>&1)
set -e
echo "$msg" | has "they need 72.2 MiB, more than the memoryx members of this cluster hold (50.0 MiB in all, in memory or in their disk tiers)" ||
  fail "a disk tier too small: $msg"
echo "ok: a disk tier too small is refused: ${msg#*: }"

# bad input: a state directory that takes no files fails the job, naming the file
cleanup_extra() { chattr -i "$run/state/memoryx-1" 2>/dev/null || true; }
up --memoryx-memory 4M
if chattr +i "$run/state/memoryx-1" 2>/dev/null; then
  out=$(cd "$work" && "$submit" --json "$(job readonly 's/^max_num_restarts = .*/max_num_restarts = 0/')" 2>&1) || true
  chattr -i "$run/state/memoryx-1"
  echo "$out" | has "tier-job-1-shard1-weights.safetensors: cannot create it: Operation not permitted" ||
    fail "a state directory that takes no files: $out"
  echo "ok: a state directory that takes no files fails the job: $(echo "$out" | field message)"
else
  echo "skip: the state directory's file system has no immutable flag"
fi

# bad input: a state directory that filled up after memoryx registered its
# room: the job fails at its start naming the directory and the numbers;
# and a model_dir that fills up at a checkpoint fails the job naming the
# file, while the checkpoint before it stays whole and resumes. Both on
# small tmpfs mounts in a mount namespace of the cluster's own (root only).
if [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
  "$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null 2>&1 || true
  rm -rf "$run"
  mkdir -p "$run/state/memoryx-1" "$work/small"
  unshare -m --propagation private bash -c '
    mount -t tmpfs -o size=128M tmpfs "$1/state/memoryx-1" &&
    mount -t tmpfs -o size=64M tmpfs "$2" &&
    shift 2 && exec "$@"' _ "$run" "$work/small" \
    "$src/deploy/local/appliance-up" --replicas 1 --wafer-memory 256M --dir "$run" --build "$build" \
    --coordinator-config "$work/coordinator.toml" --memoryx-memory 4M >/dev/null
  set -a; . "$run/env"; set +a
  mxpid=$(cat "$run/pids/memoryx-1.pid")
  nsenter -t "$mxpid" -m dd if=/dev/zero of="$run/state/memoryx-1/filler" bs=1M count=80 status=none
  out=$(cd "$work" && "$submit" --json "$(job full 's/^max_num_restarts = .*/max_num_restarts = 0/')" 2>&1) || true
  echo "$out" | has "its disk tier 72.2 MiB, more than the 48.0 MiB free in $run/state/memoryx-1" ||
    fail "a full state directory: $out"
  echo "ok: a state directory that filled up fails the job: $(echo "$out" | field message)"
  nsenter -t "$mxpid" -m rm "$run/state/memoryx-1/filler"
  # 64 MiB of model_dir: the checkpoint of step 2 (48 MiB) fits, step 4's does not
  out=$(cd "$work" && "$submit" --json "$(job "small/m" 's/^max_num_restarts = .*/max_num_restarts = 0/')" 2>&1) || true
  echo "$out" | has "small/m/optimizer_4-shard1-of-1.safetensors.*No space left on device" ||
    fail "a model_dir that fills up: $out"
  echo "ok: a model_dir that fills up fails the job: $(echo "$out" | field message | cut -c1-160)"
  nsenter -t "$mxpid" -m ls "$work/small/m" | has "tmp" && fail "a partial checkpoint file was left"
  nsenter -t "$mxpid" -m cp "$work/small/m/checkpoint_2-shard1-of-1.safetensors" \
    "$work/small/m/optimizer_2-shard1-of-1.safetensors" "$work/"
  mkdir -p "$work/full2" && mv "$work"/checkpoint_2-shard1-of-1.safetensors "$work"/optimizer_2-shard1-of-1.safetensors "$work/full2/"
  same ram full2 2
  echo "ok: the checkpoint before the full disk is whole: bitwise the in-memory run's"
else
  echo "skip: a full disk needs root and mount namespaces"
fi

# bad input: a truncated checkpoint is refused at resume, naming the file
mkdir -p "$work/cut"
cp "$work/tier/checkpoint_2-shard1-of-1.safetensors" "$work/tier/optimizer_2-shard1-of-1.safetensors" "$work/cut/"
truncate -s -4096 "$work/cut/checkpoint_2-shard1-of-1.safetensors"
set +e
out=$(cd "$work" && "$submit" --json "$(job cutres "s|^max_num_restarts|checkpoint_path = \"cut/checkpoint_2-shard1-of-1.safetensors\"\nmax_num_restarts|")" 2>&1)
set -e
echo "$out" | has "cut/checkpoint_2-shard1-of-1.safetensors: .*" ||
  fail "a truncated checkpoint: $out"
echo "ok: a truncated checkpoint is refused: $(echo "$out" | grep -o 'cut/checkpoint_2[^"]*' | head -n 1)"
echo "1 passed, 0 failed"
