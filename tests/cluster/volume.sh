#!/usr/bin/env bash
# Cluster test: volumes end to end. tests/cluster/volume.toml, a small 3D
# U-Net, on 2 replicas reading synthetic_volume's 32^3 volumes: every
# daemon carries the four-size samples, the wse-nodes compute the 3D
# layers, the training loss falls and the held-out volumes' mean IoU
# is above 0.6 at the end. Then the same U-Net in 2 slabs of its depth
# (spatial_partitions = 2: two wse-nodes exchanging halo planes and
# totalling the group norms' and the loss's sums) trains 5 steps to the
# weights of the whole volume on one wse-node: each tensor within 1% of how
# far training moved it, or 1e-6. Last, the Model Zoo's own SKM-TEA
# params.yaml (its 3D U-Net: 32-64-128-256, strided convolutions down,
# group_instance norm, ssce_dice, AdamW, mixed precision) reads HDF5
# volumes in the SKM-TEA layout that tools/mkmzdata writes, 32^3, and
# trains through the daemons with the worker's SkmDataProcessor; its
# evaluation reports the Dice of the classes it does not ignore.
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-volume

steps=40
"$src/deploy/local/appliance-up" --replicas 2 --threads 1 --dir "$run" --build "$build" >/dev/null
set -a; . "$run/env"; set +a

sed -e "s/^max_steps = .*/max_steps = $steps/" \
  -e "s|^model_dir = .*|model_dir = \"$work/volume\"|" "$src/tests/cluster/volume.toml" \
  > "$work/volume.toml"
out=$(cd "$work" && timeout 400 "$build/client/appliance-submit" volume.toml 2>&1) ||
  fail "volume: $out"
echo "$out" | "$py" -c '
import re, sys
text = sys.stdin.read()
steps = int(sys.argv[1])
# the logged steps (log_steps 2): a line where only the phase changed
# (back to training after an evaluation) may stand between them
by_step = {int(st): float(l) for st, l in re.findall(r"step (\d+)/\d+ \(\d+%\) loss ([0-9.]+)", text) if int(st) > 0 and int(st) % 2 == 0}
losses = [by_step[k] for k in sorted(by_step)]
assert len(losses) == steps // 2, ("progress lines", losses)
first, last = losses[0], sum(losses[-3:]) / 3
assert last < 0.85 * first, ("the loss did not fall", losses)
evals = [float(m) for m in re.findall(r"eval at step \d+: loss [0-9.]+, IoU ([0-9.]+)", text)]
assert len(evals) == 2 and evals[-1] > 0.6, ("IoU", evals)
print("ok: 3D U-Net on 32^3 volumes, 2 replicas: loss %.3f -> %.3f (mean of the last three), "
      "held-out IoU %s" % (first, last, " -> ".join("%.3f" % e for e in evals)))
' "$steps" || fail "volume: $out"

slab_job() { # NAME NUM_CSX PARTS
  sed -e "s/^max_steps = .*/max_steps = 5/" -e "s/^num_csx = .*/num_csx = $2\nspatial_partitions = $3\nsave_initial_checkpoint = true/" \
    -e "s|^model_dir = .*|model_dir = \"$work/$1\"|" "$src/tests/cluster/volume.toml" > "$work/$1.toml"
  out=$(cd "$work" && timeout 300 "$build/client/appliance-submit" --json "$1.toml" 2>&1) ||
    fail "$1: $out"
  [ "$(echo "$out" | field state)" = done ] || fail "$1: not done: $out"
}
slab_job vol_whole 1 1
slab_job vol_slabs 2 2
grep -q "slab\|stripe 2 of 2" "$run"/logs/wse-node-*.log || fail "no wse-node computed a second slab"
"$build/client/st-compare" "$work/vol_whole/checkpoint_5-shard1-of-1.safetensors" \
  "$work/vol_slabs/checkpoint_5-shard1-of-1.safetensors" --rtol 1e-2 --atol 1e-6 \
  --moved "$work/vol_whole/checkpoint_0-shard1-of-1.safetensors" >"$work/cmp" ||
  { cat "$work/cmp"; fail "2 slabs differ from the whole volume"; }
worst=$(sed 's/ rel=/ /; s/ maxabs=.*//' "$work/cmp" | sort -k2 -g | tail -1)
echo "ok: 5 steps in 2 slabs of 16 planes agree with the whole 32^3 volume within 1% of how far training moved each tensor or 1e-6 (the worst: ${worst% *}, ${worst#* } of its move)"

"$build/tools/mkmzdata/mkmzdata" skm "$work/skm" --size 32x32x32 --count 8 --chunk 16 >/dev/null
sed -e "s|^\( *data_dir:\).*|\1 \"$work/skm\"|" -e "s/^\( *image_shape:\).*/\1 [32, 32, 32]/" \
  -e "s/^\( *max_steps:\).*/\1 12/" -e "s/^\( *checkpoint_steps:\).*/\1 12/" \
  -e "s/^\( *num_csx:\).*/\1 1\n    eval_frequency: 12\n    model_dir: \"${work//\//\\/}\/skm_run\"/" \
  "$src/tests/client/modelzoo/params_skm_tea.yaml" > "$work/skm.yaml"
out=$(cd "$work" && timeout 300 "$build/client/appliance-submit" skm.yaml 2>&1) || fail "skm: $out"
echo "$out" | grep -q "eval at step 12" || fail "skm: no evaluation: $out"
echo "ok: the Model Zoo's SKM-TEA params.yaml on HDF5 volumes: $(echo "$out" | grep "eval at step 12" | head -n 1)"
echo "3 passed, 0 failed"
