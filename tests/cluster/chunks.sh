#!/usr/bin/env bash
# Cluster test: batches, weights and gradients in frames of 1 KiB. The
# U-Net of examples/unet.toml on 64x64 images (12 KiB of 8-bit pixels and
# 4 KiB of labels a sample, so every sample crosses in many frames) on two
# replicas, with evaluation, once on a cluster with the default 1 MiB chunks
# and once with --chunk-size 1K: the weights must be bitwise equal.
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-chunks
submit="$build/client/appliance-submit"

sed -e "s/^max_steps = .*/max_steps = 4/" -e "s/^eval_frequency = .*/eval_frequency = 2/" \
  -e "s|^input_shape = .*|input_shape = [3, 64, 64]|" \
  -e "s|^model_dir = .*|model_dir = \"model\"|" "$src/examples/unet.toml" > "$work/unet.toml"

train() { # NAME [coordinator config]: a cluster, the job, the cluster stopped
  local dir="$work/$1" args=()
  mkdir -p "$dir"
  cp "$work/unet.toml" "$dir/"
  if [ -n "${2:-}" ]; then printf '%s\n' "$2" > "$dir/coordinator.toml"; args=(--coordinator-config "$dir/coordinator.toml"); fi
  "$src/deploy/local/appliance-up" --replicas 2 --dir "$run" --build "$build" "${args[@]}" >/dev/null
  local out
  out=$(set -a; . "$run/env"; set +a; cd "$dir" && timeout 300 "$submit" --json unet.toml 2>&1) ||
    fail "$1: $out"
  [ "$(echo "$out" | field state)" = done ] || fail "$1: not done: $out"
  grep -q "12288 8-bit inputs and 4096 8-bit labels per sample" "$run"/logs/worker-1.log ||
    fail "$1: the worker did not send 8-bit pixels and labels"
  case $1 in *_k2) grep -q "stripe 2 of 2 of sample group 0 (32 of 64 rows)" "$run"/logs/wse-node-*.log ||
    fail "$1: no wse-node computed the second stripe";; esac
  "$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null
  rm -rf "$run"
}

train whole
train chunked 'chunk_size = "1K"'
"$build/client/st-compare" "$work/whole/model/checkpoint_4-shard1-of-1.safetensors" \
  "$work/chunked/model/checkpoint_4-shard1-of-1.safetensors" --rtol 0 >"$work/cmp" ||
  { cat "$work/cmp"; fail "the weights trained over 1 KiB frames differ from those over 1 MiB frames"; }
echo "ok: 4 steps with evaluation over 1 KiB frames (each sample in 16): weights bitwise equal"

# Spatial partitions: the same job as one replica of 2 stripes (32 rows of
# each sample on each wse-node), whose halo rows (8 channels x 64 columns of
# 4 samples a row at the first level: 8 KiB) also cross in 1 KiB frames.
sed -i -e '/^num_csx = /a spatial_partitions = 2' "$work/unet.toml"
train whole_k2
train chunked_k2 'chunk_size = "1K"'
"$build/client/st-compare" "$work/whole_k2/model/checkpoint_4-shard1-of-1.safetensors" \
  "$work/chunked_k2/model/checkpoint_4-shard1-of-1.safetensors" --rtol 0 >"$work/cmp" ||
  { cat "$work/cmp"; fail "2 stripes: the weights trained over 1 KiB frames differ from those over 1 MiB frames"; }
echo "ok: in 2 stripes, halo rows over 1 KiB frames: weights bitwise equal to 1 MiB frames"
echo "1 passed, 0 failed"
