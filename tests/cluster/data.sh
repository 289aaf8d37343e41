#!/usr/bin/env bash
# Cluster test: the input workers read a data set from files. A small data
# set in MNIST's IDX format (8x8 images of four classes, written here) trains
# on 1 and 2 replicas with the weights agreeing; a damaged labels file fails
# the job with a message naming the file. When scripts/fetch-mnist has been
# run, a softmax regression on that MNIST trains too; an eval set smaller
# than the replicas evaluates. No network is used.
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-cluster

# Four classes: a bright quadrant on a noisy dark 8x8 image.
"$py" - "$work/idx" <<'PY'
import os, random, struct, sys
out = sys.argv[1]
os.makedirs(out)
rng = random.Random(5)
for split, n in (("train", 400), ("t10k", 100)):
    images, labels = bytearray(), bytearray()
    for i in range(n):
        y = rng.randrange(4)
        for r in range(8):
            for c in range(8):
                lit = (r >= 4) == bool(y & 2) and (c >= 4) == bool(y & 1)
                images.append(min(255, max(0, int(rng.gauss(170 if lit else 40, 40)))))
        labels.append(y)
    with open(os.path.join(out, split + "-images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 8, 8) + images)
    with open(os.path.join(out, split + "-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + labels)
PY

"$src/deploy/local/appliance-up" --replicas 2 --dir "$run" --build "$build" >/dev/null
set -a; . "$run/env"; set +a
submit="$build/client/appliance-submit"

job() { # job REPLICAS MODEL_DIR DATA_DIR CLASSES SIDE
  cat > "$work/job-$1.toml" <<TOML
[runconfig]
max_steps = 40
log_steps = 10
seed = 4
num_csx = $1
model_dir = "$2"
[train_input]
data_processor = "mnist"
data_dir = "$3"
batch_size = 32
num_classes = $4
[model]
input_shape = [1, $5, $5]
loss = "softmax_cross_entropy"
[[model.layers]]
name = "flatten"
type = "flatten"
[[model.layers]]
name = "classifier"
type = "dense"
units = $4
[optimizer]
learning_rate = 0.5
TOML
  echo "$work/job-$1.toml"
}

for r in 1 2; do
  out=$(cd "$work" && timeout 120 "$submit" --json "$(job $r "$work/m$r" "$work/idx" 4 8)") ||
    fail "IDX job on $r replica(s): $out"
  [ "$(echo "$out" | field state)" = done ] || fail "IDX job not done: $out"
  "$py" -c "import sys; l=float(sys.argv[1]); sys.exit(0 if 0 < l < 0.5 else 1)" \
    "$(echo "$out" | field final_loss)" || fail "loss did not fall below 0.5 (ln 4 = 1.386): $out"
done
"$build/client/st-compare" "$work/m1/checkpoint_40-shard1-of-1.safetensors" \
  "$work/m2/checkpoint_40-shard1-of-1.safetensors" --rtol 1e-5 || fail "1 and 2 replicas disagree"
echo "ok: IDX files, 1 and 2 replicas agree within 1e-5"

# Two workers taking turns at the steps of one replica: the same batches.
sed -e 's/^num_csx = 1$/num_csx = 1\nnum_workers_per_csx = 2/' -e "s|$work/m1|$work/m1w|" \
  "$(job 1 "$work/m1" "$work/idx" 4 8)" > "$work/job-1w.toml"
out=$(cd "$work" && timeout 120 "$submit" --json "$work/job-1w.toml") || fail "two workers: $out"
"$build/client/st-compare" "$work/m1/checkpoint_40-shard1-of-1.safetensors" \
  "$work/m1w/checkpoint_40-shard1-of-1.safetensors" --rtol 0 >/dev/null ||
  fail "two workers per replica changed the weights"
echo "ok: two workers per replica give the same weights as one"

# A label beyond num_classes: the workers refuse the data set, naming the file.
cp -r "$work/idx" "$work/bad"
printf '\x07' | dd of="$work/bad/train-labels-idx1-ubyte" bs=1 seek=20 conv=notrunc status=none
set +e
out=$(cd "$work" && timeout 120 "$submit" --json "$(job 2 "$work/m3" "$work/bad" 4 8)" 2>&1)
set -e
[ "$(echo "$out" | field state)" = failed ] || fail "damaged labels: job not failed: $out"
echo "$out" | has "bad/train-labels-idx1-ubyte: label 7 of sample 12 is not below num_classes 4" ||
  fail "damaged labels: message: $out"
echo "ok: a damaged labels file fails the job with a message naming it"

# A failed job's members come back idle shortly after.
members_idle 6

if [ -f "$src/data/mnist/train-images-idx3-ubyte" ]; then
  out=$(cd "$work" && timeout 120 "$submit" --json "$(job 2 "$work/m4" "$src/data/mnist" 10 28)") ||
    fail "MNIST job: $out"
  [ "$(echo "$out" | field state)" = done ] || fail "MNIST job not done: $out"
  "$py" -c "import sys; l=float(sys.argv[1]); sys.exit(0 if 0 < l < 1.2 else 1)" \
    "$(echo "$out" | field final_loss)" || fail "MNIST loss did not fall below 1.2 (ln 10 = 2.303): $out"
  echo "ok: MNIST from data/mnist trains (final loss $(echo "$out" | field final_loss))"
else
  echo "skip: no data/mnist (scripts/fetch-mnist makes it)"
fi
# An eval set smaller than the replicas: one replica's share is empty, its
# worker sends an empty eval batch, and the evaluation still completes.
sed -e "s|^model_dir = .*|model_dir = \"$work/tiny-eval\"|" "$src/examples/quickstart.toml" >"$work/tiny-eval.toml"
printf '\n[eval_input]\ndata_processor = "synthetic_classification"\nbatch_size = 4\nnum_classes = 4\nnum_samples = 1\n' \
  >>"$work/tiny-eval.toml"
out=$(cd "$work" && timeout 120 "$build/client/appliance-submit" --json "$work/tiny-eval.toml") ||
  fail "a 1-sample eval set on 2 replicas: $out"
[ "$(echo "$out" | field eval_step)" = 60 ] || fail "no evaluation at step 60: $out"
echo "ok: a 1-sample eval set on 2 replicas evaluates (one share empty)"
echo "passed"
