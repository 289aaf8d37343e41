#!/usr/bin/env bash
# Cluster test: an input worker fills each batch in parts over its threads.
# A job trained with workers of 3 threads (training and evaluation batches
# in 3 parts) ends with the weights of the same job with workers of one
# thread, bit for bit; a PNG data set with a bad mask in the last part of a
# batch fails the job with the message naming the file, and the members
# come back idle.
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-batch-parts
submit="$build/client/appliance-submit"

# 40 gray 64x64 images with masks of 3 classes (a bright square is class
# 1 or 2); a copy of the set where mask 25 has a label 7.
"$py" - "$work/png" "$work/bad" <<'PY'
import os, random, struct, sys, zlib
def png(path, rows):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = b"".join(b"\0" + bytes(r) for r in rows)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 64, 64, 8, 0, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
rng = random.Random(3)
for d in sys.argv[1:]:
    os.makedirs(os.path.join(d, "images"))
    os.makedirs(os.path.join(d, "masks"))
for i in range(40):
    cls, x0, y0 = 1 + i % 2, rng.randrange(40), rng.randrange(40)
    inside = lambda r, c: y0 <= r < y0 + 20 and x0 <= c < x0 + 20
    img = [[min(255, max(0, int(rng.gauss(200 if inside(r, c) else 50, 30)))) for c in range(64)]
           for r in range(64)]
    mask = [[cls if inside(r, c) else 0 for c in range(64)] for r in range(64)]
    for d in sys.argv[1:]:
        if d == sys.argv[2] and i == 25:
            mask[0][0] = 7
        png(os.path.join(d, "images", "img%02d.png" % i), img)
        png(os.path.join(d, "masks", "img%02d.png" % i), mask)
PY

# job NAME: float32 samples of 64x64 (16 KiB each), batches of 32 and eval
# batches of 32 (512 KiB: three parts of 64 KiB or more)
job() {
  cat > "$work/$1.toml" <<TOML
[runconfig]
max_steps = 12
log_steps = 12
seed = 7
num_csx = 1
eval_frequency = 6
model_dir = "$work/$1"
[train_input]
data_processor = "synthetic_classification"
batch_size = 32
num_classes = 4
num_samples = 200
[eval_input]
data_processor = "synthetic_classification"
batch_size = 32
num_classes = 4
num_samples = 70
[model]
input_shape = [1, 64, 64]
loss = "softmax_cross_entropy"
[[model.layers]]
name = "flatten"
type = "flatten"
[[model.layers]]
name = "fc1"
type = "dense"
units = 16
[[model.layers]]
name = "relu1"
type = "relu"
[[model.layers]]
name = "fc2"
type = "dense"
units = 4
[optimizer]
learning_rate = 0.05
momentum = 0.9
TOML
  echo "$work/$1.toml"
}

# png_job NAME DIR: 8-bit images of 64x64 and their masks in file order,
# batches of 32 (256 KiB: three parts)
png_job() {
  cat > "$work/$1.toml" <<TOML
[runconfig]
max_steps = 2
log_steps = 1
seed = 7
num_csx = 1
model_dir = "$work/$1"
[train_input]
data_processor = "png_segmentation"
data_dir = "$2"
batch_size = 32
num_classes = 3
shuffle = false
[model]
input_shape = [1, 64, 64]
loss = "pixel_softmax_cross_entropy"
[[model.layers]]
name = "conv"
type = "conv2d"
filters = 3
kernel_size = 3
padding = "same"
[optimizer]
learning_rate = 0.01
TOML
  echo "$work/$1.toml"
}

for wt in 3 1; do
  "$src/deploy/local/appliance-up" --replicas 1 --worker-threads "$wt" --dir "$run" \
    --build "$build" >/dev/null
  set -a; . "$run/env"; set +a
  out=$(cd "$work" && timeout 120 "$submit" --json "$(job "syn$wt")") || fail "workers of $wt: $out"
  [ "$(echo "$out" | field state)" = done ] || fail "workers of $wt: not done: $out"
  [ "$(echo "$out" | field eval_step)" = 12 ] || fail "workers of $wt: no evaluation: $out"
  if [ "$wt" = 3 ]; then
    grep -q "batches of 32 samples (524320 bytes) filled in 3 parts" "$run/logs/worker-1.log" ||
      fail "the worker did not fill its batches in 3 parts"
    out=$(cd "$work" && timeout 120 "$submit" --json "$(png_job png "$work/png")") ||
      fail "PNG job: $out"
    [ "$(echo "$out" | field state)" = done ] || fail "PNG job not done: $out"
    grep -q "batches of 32 samples (.* bytes) filled in 3 parts" "$run/logs/worker-1.log" ||
      fail "the PNG batches were not filled in 3 parts"
    set +e
    out=$(cd "$work" && timeout 120 "$submit" --json "$(png_job bad "$work/bad")" 2>&1)
    set -e
    [ "$(echo "$out" | field state)" = failed ] || fail "bad mask: job not failed: $out"
    echo "$out" | has "bad/masks/img25.png" || fail "bad mask: message: $out"
    echo "ok: a bad mask in the last part of a batch fails the job, naming the file"
    members_idle 4
  fi
  "$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null
done
"$build/client/st-compare" "$work/syn3/checkpoint_12-shard1-of-1.safetensors" \
  "$work/syn1/checkpoint_12-shard1-of-1.safetensors" --rtol 0 >/dev/null ||
  fail "workers of 3 threads and of 1 trained different weights"
echo "ok: batches filled in 3 parts train the weights of batches filled whole, bit for bit"
