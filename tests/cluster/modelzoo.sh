#!/usr/bin/env bash
# Cluster test: a Model Zoo params.yaml as it is. A small U-Net written
# with the Model Zoo's keys (GroupNorm, max pooling, transposed
# convolutions up, ssce), its data in the Inria layout (tiled LZW TIFFs
# that tools/mkmzdata writes), trained on 2 replicas: the loss falls, the
# held-out IoU is high, the checkpoints open as safetensors with the Model
# Zoo's tensor names and shapes. Before it, what must be refused is: a
# YAML indented with a tab, a billion laughs, a mask whose size is not its
# image's; the coordinator carries on.
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-modelzoo

"$build/tools/mkmzdata/mkmzdata" inria "$work/inria" --size 64x64 --channels 1 --count 24 \
  --compression lzw --tile 32 >/dev/null
"$src/deploy/local/appliance-up" --replicas 2 --threads 1 --dir "$run" --build "$build" >/dev/null
set -a; . "$run/env"; set +a
submit="$build/client/appliance-submit"

cat > "$work/params.yaml" <<YAML
# the Model Zoo's layout: an anchor, a merge, flow and block styles
train_input: &train_input
    data_processor: InriaAerialDataProcessor
    data_dir: "$work/inria"
    image_shape: [64, 64, 1]
    normalize_data_method: "zero_centered"
    augment_data: True
    shuffle: True
    batch_size: 4
    num_classes: 2
    num_workers: 4
    use_worker_cache: True
eval_input:
    <<: *train_input
    augment_data: False
    shuffle: False
model:
    nonlinearity: "ReLU"
    skip_connect: True
    enable_bias: False
    downscale_method: "max_pool"
    convs_per_block: ["3x3_conv", "3x3_conv"]
    encoder_filters: [8, 16, 32]
    decoder_filters: [16, 8]
    norm_layer: "group"
    norm_kwargs:
        num_groups: 4
    initializer:
        name: "glorot_uniform"
        gain: 1.0
    bias_initializer: "zeros"
    loss: "ssce"
optimizer:
    optimizer_type: "Adam"
    learning_rate:
        - {scheduler: "Linear", initial_learning_rate: 0.0, end_learning_rate: 0.004, total_iters: 4}
        - {scheduler: "Linear", initial_learning_rate: 0.004, end_learning_rate: 0.0005, total_iters: 20}
    loss_scaling_factor: 1.0
runconfig:
    max_steps: 24
    log_steps: 2
    checkpoint_steps: 12
    eval_frequency: 12
    seed: 1
    num_csx: 2
    num_act_servers: 1
    num_wgt_servers: 1
    model_dir: "$work/mz"
    compile_crd_memory_gi: 90
YAML

# refused where it is wrong, nothing run
printf 'runconfig:\n\tmax_steps: 3\n' > "$work/tab.yaml"
out=$(cd "$work" && "$submit" tab.yaml 2>&1) && fail "a tab was accepted: $out"
echo "$out" | has 'tab.yaml:2:1: a tab indents this line: YAML indents with spaces only' ||
  fail "tab: $out"
echo "ok: a tab refused: $out"
"$py" - "$work/laughs.yaml" <<'PY'
import sys
lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
for i in range(1, 10):
    lines.append("a%d: &a%d [%s]" % (i, i, ", ".join(["*a%d" % (i - 1)] * 9)))
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
PY
out=$(cd "$work" && timeout 60 "$submit" laughs.yaml 2>&1) && fail "a billion laughs accepted: $out"
echo "$out" | has 'laughs.yaml:[0-9]*:[0-9]*: .*expands to more than 1000000 values' ||
  fail "laughs: $out"
echo "ok: a billion laughs refused: $out"
cp -r "$work/inria" "$work/inria-bad"
"$build/tools/mkmzdata/mkmzdata" inria "$work/small" --size 32x32 --channels 1 --count 4 >/dev/null
mask=$(ls "$work/inria-bad/train/gt" | head -n 1)
cp "$work/small/train/gt/$(ls "$work/small/train/gt" | head -n 1)" "$work/inria-bad/train/gt/$mask"
sed "s|$work/inria\"|$work/inria-bad\"|" "$work/params.yaml" > "$work/bad-mask.yaml"
out=$(cd "$work" && "$submit" bad-mask.yaml 2>&1) && fail "a mask of another size accepted: $out"
echo "$out" | has "$mask" || fail "the bad mask is not named: $out"
echo "ok: a mask of another size fails its job, named: $(echo "$out" | tail -n 1)"

# --format toml on a YAML file: what TOML makes of it, nothing sent
out=$(cd "$work" && "$submit" --format toml params.yaml 2>&1) && fail "--format toml accepted YAML: $out"
echo "$out" | has '^params.yaml:2:12: ' || fail "--format toml: $out"
echo "ok: --format toml on YAML: $out"

# the job, read as YAML by its text too (another name, --format yaml)
cp "$work/params.yaml" "$work/params.conf"
out=$(cd "$work" && timeout 600 "$submit" --format yaml params.conf 2>&1) || fail "modelzoo: $out"
echo "$out" | "$py" -c '
import re, sys
text = sys.stdin.read()
# the logged steps (log_steps 2): a line where only the phase changed
# (back to training once a checkpoint is in) may stand between them
by_step = {int(st): float(l) for st, l in re.findall(r"step (\d+)/\d+ \(\d+%\) loss ([0-9.]+)", text) if int(st) > 0 and int(st) % 2 == 0}
losses = [by_step[k] for k in sorted(by_step)]
evals = [float(m) for m in re.findall(r"eval at step \d+: loss [0-9.]+, IoU ([0-9.]+)", text)]
assert len(losses) == 12, ("progress lines", losses)
first, last = losses[0], sum(losses[-3:]) / 3
assert last < 0.7 * first, ("the loss did not fall", losses)
assert len(evals) == 2 and evals[-1] > 0.6, ("IoU", evals)
print("ok: the Model Zoo U-Net on Inria TIFFs: loss %.3f -> %.3f (mean of the last three), "
      "held-out IoU %s" % (first, last, " -> ".join("%.3f" % e for e in evals)))
' || fail "modelzoo: $out"
"$py" - "$work/mz" <<'PY' || fail "checkpoints"
import json, math, os, struct, sys
d = sys.argv[1]
def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        assert t["dtype"] == "F32" and b - a == 4 * math.prod(t["shape"]), (name, t)
        vals = struct.unpack("<%df" % ((b - a) // 4), data[a:b])
        assert all(math.isfinite(v) for v in vals), name
        out[name] = t["shape"]
    return out
for step in (12, 24):
    w = load(os.path.join(d, "checkpoint_%d-shard1-of-1.safetensors" % step))
    o = load(os.path.join(d, "optimizer_%d-shard1-of-1.safetensors" % step))
    # the Model Zoo's state dict: names and shapes
    expect = {
        "encoder.unet_blocks.0.layers.0.conv.weight": [8, 1, 3, 3],
        "encoder.unet_blocks.0.layers.0.norm_layer.weight": [8],
        "encoder.unet_blocks.1.layers.1.conv.weight": [16, 16, 3, 3],
        "bottleneck.layers.0.conv.weight": [32, 16, 3, 3],
        "decoder.transpose_layers.0.weight": [32, 16, 2, 2],
        "decoder.unet_blocks.0.layers.0.conv.weight": [16, 32, 3, 3],
        "decoder.unet_blocks.1.layers.1.norm_layer.bias": [8],
        "final_conv.conv.weight": [2, 8, 1, 1],
        "final_conv.conv.bias": [2],
    }
    for name, shape in expect.items():
        assert w.get(name) == shape, (step, name, w.get(name))
    assert len(w) == 34, (step, len(w), sorted(w))
    assert "final_conv.conv.weight.exp_avg" in o, sorted(o)[:5]
print("ok: checkpoints at steps 12 and 24 open: %d tensors named as the Model Zoo's U-Net" % len(w))
PY
echo "1 passed, 0 failed"
