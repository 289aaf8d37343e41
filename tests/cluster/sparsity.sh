#!/usr/bin/env bash
# Cluster test: [sparsity] through real daemons. The MLP of faults.toml at
# 90% static sparsity (the default patterns: fc1, fc2 and fc3's weights) on
# 2 replicas in Weight Streaming:
# - --plan shows each sparse tensor's density and what its zeros are;
# - its checkpoints are safetensors with each mask beside its weights
#   ("<name>.mask", uint8, 10% kept), pruned weights and momentum exact
#   zeros, the masks of step 4 those of step 0;
# - it equals dense training with the mask applied by hand (1e-5): a dense
#   job run one step at a time from the sparse job's first checkpoint, its
#   weights and momentum zeroed where the mask is 0 after each step;
# - resumed from its checkpoint of step 2 it ends at the same weights and
#   masks, bit for bit;
# - its weight and gradient streams travel packed (docs/sparsity.md): a
#   job with sparsity.compressed_streams = false streams them dense and
#   ends at the same weights, masks and momentum bit for bit; memoryx's
#   stream counters show the bytes at 90% at most 0.2 of dense, at 50%
#   between that and dense, with dense streams equal to dense;
# - a checkpoint whose mask disagrees with its weights is refused, naming
#   the file;
# - RigL through the daemons: its masks change at the schedule's steps (2
#   and 4), keep their density, and its pruned weights stay zeros.
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-sparsity
submit="$build/client/appliance-submit"
"$py" -c "import numpy" 2>/dev/null || { echo "numpy is missing (python3-numpy): skipped"; exit 77; }

"$src/deploy/local/appliance-up" --replicas 2 --metrics --dir "$run" --build "$build" >/dev/null
set -a; . "$run/env"; set +a

sparse_section='[sparsity]\ntype = "static"\nsparsity = 0.9\ninit_method = "random"'
job() { # job NAME STEPS SPARSE(0|1) [RESUME-FROM]
  local extra="" resume=""
  [ "$3" = 1 ] && extra="$sparse_section"
  [ -n "${4:-}" ] && resume="checkpoint_path = \"$4\"\\n"
  sed -e "s|^model_dir = .*|model_dir = \"$work/$1\"\nmode = \"weight_streaming\"\nsave_initial_checkpoint = true|" \
    -e "s/^max_steps = .*/max_steps = $2/" -e "s/^checkpoint_steps = .*/checkpoint_steps = 2/" \
    -e "s|^\\[runconfig\\]|[runconfig]\\n$resume|" \
    "$src/tests/cluster/jobs/faults.toml" > "$work/$1.toml"
  printf "\n$extra\n" >> "$work/$1.toml"
}
run_job() { # run_job NAME: the job to its end, its final status in $out
  out=$(cd "$work" && timeout 120 "$submit" --json "$work/$1.toml" 2>&1) || true
}
# mx_bytes: memoryx's stream counters now: weight bytes sent, their dense
# equivalent, gradient bytes received, theirs
mx_bytes() {
  local url
  url=$(awk '$1 == "memoryx-1" {print $2}' "$run/metrics")
  sleep 1.2 # the exposition is rendered once a second
  "$py" - "$url" <<'PY'
import re, sys, urllib.request
text = urllib.request.urlopen(sys.argv[1], timeout=5).read().decode()
print(" ".join(re.search(r"^appliance_%s_bytes_total (\S+)$" % k, text, re.M).group(1)
               for k in ("weight_stream", "weight_stream_dense", "grad_stream", "grad_stream_dense")))
PY
}
# run_counted NAME: run_job NAME, and the stream counters' growth over it in $bytes
run_counted() {
  local b0 b1
  b0=$(mx_bytes)
  run_job "$1"
  b1=$(mx_bytes)
  bytes=$(echo "$b0 $b1" | awk '{print $5 - $1, $6 - $2, $7 - $3, $8 - $4}')
}

job sparse 4 1
plan=$(cd "$work" && "$submit" --plan "$work/sparse.toml") || fail "plan: $plan"
echo "$plan" | has "sparsity static, masks chosen by random" || fail "plan: no sparsity line: $plan"
echo "$plan" | has -E "^fc1.weight +0.1000 +131072 +13107 +460.8 KiB" || fail "plan: fc1.weight's row: $plan"
echo "$plan" | has -E "pruned \(density 0.10[0-9]+\)" || fail "plan: total: $plan"
echo "ok: --plan shows each sparse tensor's density and its zeros"
run_counted sparse
[ "$(echo "$out" | field state)" = done ] || fail "sparse job: $out"
packed_bytes=$bytes
# memoryx holds the static masks' tensors compact (their kept elements alone)
grep -q "3 sparse tensor(s) held compact" "$run/logs/memoryx-1.log" ||
  fail "memoryx holds no compact tensor: $(grep -h "compact" "$run/logs/memoryx-1.log" | tail -3)"
echo "ok: memoryx holds the 3 pruned tensors compact"

cat > "$work/st.py" <<'PY'
import json, struct, sys
import numpy as np
DT = {"F32": np.float32, "U8": np.uint8}
def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=DT[v["dtype"]]).reshape(v["shape"])
    return out
def mask_by_hand(src, dst, masks):
    """src with every tensor NAME or NAME.<state> zeroed where masks[NAME] is 0."""
    raw = bytearray(open(src, "rb").read())
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    for k, v in head.items():
        base = next((m for m in masks if k == m or k.startswith(m + ".") and not k.endswith(".mask")), None)
        if base is None or v["dtype"] != "F32":
            continue
        a, b = v["data_offsets"]
        x = np.frombuffer(bytes(raw[8 + n + a:8 + n + b]), dtype=np.float32).copy()
        x[masks[base].reshape(-1) == 0] = 0
        raw[8 + n + a:8 + n + b] = x.tobytes()
    open(dst, "wb").write(raw)
PY
# the checkpoints: masks beside the weights, 10% kept, zeros where pruned
"$py" - "$work" <<'PY' || fail "the sparse job's checkpoints"
import sys
sys.path.insert(0, sys.argv[1])
from st import load
d = sys.argv[1] + "/sparse"
c0, c4 = load(d + "/checkpoint_0-shard1-of-1.safetensors"), load(d + "/checkpoint_4-shard1-of-1.safetensors")
o4 = load(d + "/optimizer_4-shard1-of-1.safetensors")
names = sorted(k[:-5] for k in c0 if k.endswith(".mask"))
assert names == ["fc1.weight", "fc2.weight", "fc3.weight"], names
for k in names:
    m0, m4, w = c0[k + ".mask"], c4[k + ".mask"], c4[k]
    assert m0.shape == w.shape and m0.dtype.name == "uint8", (k, m0.shape, w.shape)
    n = m0.size
    assert int(m0.sum()) == n - int(round(0.9 * n)), (k, int(m0.sum()), n)
    assert (m0 == m4).all(), k + ": a static mask changed"
    assert (c0[k][m0 == 0] == 0).all() and (w[m4 == 0] == 0).all(), k + ": a pruned weight is not zero"
    assert (w[m4 == 1] != 0).mean() > 0.99, k + ": kept weights are zero"
    assert (o4[k + ".momentum_buffer"][m4 == 0] == 0).all(), k + ": momentum of a pruned weight"
print("masks: " + ", ".join("%s %d of %d" % (k, int(c0[k + ".mask"].sum()), c0[k].size) for k in names))
PY
echo "ok: the checkpoints hold each mask beside its weights (uint8, 10% kept); pruned weights and momentum are zeros"

# dense training, the mask applied by hand after each step
mkdir -p "$work/hand"
cp "$work/sparse/checkpoint_0-shard1-of-1.safetensors" "$work/sparse/optimizer_0-shard1-of-1.safetensors" "$work/hand/"
for s in 1 2 3 4; do
  job "dense$s" "$s" 0 "$work/hand/checkpoint_$((s - 1))-shard1-of-1.safetensors"
  run_job "dense$s"
  [ "$(echo "$out" | field state)" = done ] || fail "dense step $s: $out"
  "$py" - "$work" "$s" <<'PY' || fail "masking step $s by hand"
import sys
sys.path.insert(0, sys.argv[1])
from st import load, mask_by_hand
w, s = sys.argv[1], sys.argv[2]
masks = {k[:-5]: v for k, v in load(w + "/sparse/checkpoint_0-shard1-of-1.safetensors").items() if k.endswith(".mask")}
for f in ("checkpoint", "optimizer"):
    mask_by_hand("%s/dense%s/%s_%s-shard1-of-1.safetensors" % (w, s, f, s),
                 "%s/hand/%s_%s-shard1-of-1.safetensors" % (w, f, s), masks)
PY
done
"$py" - "$work" <<'PY' || fail "sparse training differs from dense training masked by hand"
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from st import load
w = sys.argv[1]
worst = 0.0
for f in ("checkpoint", "optimizer"):
    a = load("%s/sparse/%s_4-shard1-of-1.safetensors" % (w, f))
    b = load("%s/hand/%s_4-shard1-of-1.safetensors" % (w, f))
    for k, x in a.items():
        if k.endswith(".mask"):
            continue
        y = b[k]
        err = float(np.max(np.abs(x - y) / (np.abs(y) + 1e-6)))
        assert np.allclose(x, y, rtol=1e-5, atol=1e-7), "%s %s: %g" % (f, k, err)
        worst = max(worst, err)
moved = float(np.abs(load(w + "/sparse/checkpoint_4-shard1-of-1.safetensors")["fc1.weight"] - load(w + "/sparse/checkpoint_0-shard1-of-1.safetensors")["fc1.weight"]).max())
assert moved > 1e-4, "the weights did not train"
print("largest relative difference %.3g (weights moved up to %.3g)" % (worst, moved))
PY
echo "ok: 4 steps at 90% static sparsity equal dense training with the mask applied by hand (1e-5)"

# resumed from step 2: the same weights and masks at step 4
job resumed 4 1 "$work/sparse/checkpoint_2-shard1-of-1.safetensors"
run_job resumed
[ "$(echo "$out" | field state)" = done ] || fail "resumed: $out"
"$build/client/st-compare" "$work/sparse/checkpoint_4-shard1-of-1.safetensors" \
  "$work/resumed/checkpoint_4-shard1-of-1.safetensors" --rtol 0 >"$work/cmp" ||
  { cat "$work/cmp"; fail "resumed from step 2: the weights or masks differ at step 4"; }
echo "ok: resumed from the checkpoint of step 2: the same weights and masks at step 4, bit for bit"

# packed and dense streams: the same training bit for bit; bytes with the density
job densestream 4 1
sed -i 's/^\[sparsity\]$/[sparsity]\ncompressed_streams = false/' "$work/densestream.toml"
run_counted densestream
[ "$(echo "$out" | field state)" = done ] || fail "dense streams: $out"
dense_bytes=$bytes
for f in checkpoint optimizer; do
  "$build/client/st-compare" "$work/sparse/${f}_4-shard1-of-1.safetensors" \
    "$work/densestream/${f}_4-shard1-of-1.safetensors" --rtol 0 >"$work/cmp" ||
    { cat "$work/cmp"; fail "packed and dense streams: the ${f}s differ at step 4"; }
done
# a layer wide enough for the sparse kernels (2048 x 2048, 64 samples a
# replica): packed, the wse-nodes take its kept values alone (streamed,
# computed and sent without their zeros); with dense streams they expand
# them and gather them again. The same training, bit for bit.
for w in wide widedense; do
  job $w 3 1
  sed -i -e 's/^input_shape = \[256\]$/input_shape = [2048]/' -e '0,/^units = 512$/s//units = 2048/' \
    "$work/$w.toml"
done
sed -i 's/^\[sparsity\]$/[sparsity]\ncompressed_streams = false/' "$work/widedense.toml"
run_job wide
[ "$(echo "$out" | field state)" = done ] || fail "wide sparse job: $out"
ko=$(grep -h "layer fc1: its weight streams, computes and goes back as its kept values alone" \
  "$run"/logs/wse-node-*.log | wc -l || true)
[ "$ko" -ge 2 ] || fail "wide job: fc1 does not take its kept values alone on both wse-nodes: $(grep -h "layer fc1" "$run"/logs/wse-node-*.log | tail -4)"
run_job widedense
[ "$(echo "$out" | field state)" = done ] || fail "wide job, dense streams: $out"
[ "$(grep -h "layer fc1: its weight streams, computes and goes back as its kept values alone" \
  "$run"/logs/wse-node-*.log | wc -l || true)" = "$ko" ] || fail "the dense-stream job took kept values alone"
for f in checkpoint optimizer; do
  "$build/client/st-compare" "$work/wide/${f}_3-shard1-of-1.safetensors" \
    "$work/widedense/${f}_3-shard1-of-1.safetensors" --rtol 0 >"$work/cmp" ||
    { cat "$work/cmp"; fail "a 2048-wide layer's kept values alone and dense streams: the ${f}s differ at step 3"; }
done
echo "ok: a 2048-wide layer on its kept values alone trains as with dense streams, bit for bit"
job half 4 1
sed -i 's/^sparsity = 0.9$/sparsity = 0.5/' "$work/half.toml"
run_counted half
[ "$(echo "$out" | field state)" = done ] || fail "50% sparse: $out"
half_bytes=$bytes
"$py" - "$packed_bytes" "$half_bytes" "$dense_bytes" <<'PY' || fail "stream bytes: 90% $packed_bytes, 50% $half_bytes, dense streams $dense_bytes"
import sys
p90, p50, dn = ([float(x) for x in a.split()] for a in sys.argv[1:])
r = lambda b, i: b[i] / b[i + 1]
assert dn[0] == dn[1] and dn[2] == dn[3], "dense streams sent other than dense: %s" % dn
assert p90[1] == dn[1] and p90[3] == dn[3], "the dense equivalents differ: %s %s" % (p90, dn)
w90, g90, w50, g50 = r(p90, 0), r(p90, 2), r(p50, 0), r(p50, 2)
t90 = (p90[0] + p90[2]) / (p90[1] + p90[3])
assert w90 <= 0.2 and g90 <= 0.2, (w90, g90)
assert w90 < w50 < 1.0 and g90 < g50 < 1.0, (w90, w50, g90, g50)
print("stream bytes over dense: 90%% sparse: weights %.3f, gradients %.3f, both %.3f; "
      "50%%: weights %.3f, gradients %.3f" % (w90, g90, t90, w50, g50))
PY
echo "ok: packed and dense streams end at the same weights, masks and momentum, bit for bit; bytes scale with density"

# a mask that disagrees with its weights: one pruned position marked kept
mkdir -p "$work/bad"
cp "$work/sparse/checkpoint_2-shard1-of-1.safetensors" "$work/sparse/optimizer_2-shard1-of-1.safetensors" "$work/bad/"
"$py" - "$work/bad/checkpoint_2-shard1-of-1.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]
raw = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
v = json.loads(raw[8:8 + n])["fc2.weight.mask"]
a, b = v["data_offsets"]
i = bytes(raw[8 + n + a:8 + n + b]).index(0)
raw[8 + n + a + i] = 1
open(p, "wb").write(raw)
PY
job bad 4 1 "$work/bad/checkpoint_2-shard1-of-1.safetensors"
run_job bad
[ "$(echo "$out" | field state)" = failed ] || fail "bad mask: job not failed: $out"
msg=$(echo "$out" | field message)
echo "$msg" | has "bad/checkpoint_2-shard1-of-1.safetensors: mask \"fc2.weight.mask\" keeps 13108 of 131072 elements" ||
  fail "bad mask: message: $msg"
echo "ok: a mask that disagrees with its weights is refused: $msg"
# RigL: the masks change at steps 2 and 4 (checkpoints 0, 2, 4, 6)
sparse_section='[sparsity]\ntype = "rigl"\nsparsity = 0.9\nschedule = {freq = 2, stop = 5}\ndrop_fraction = 0.2'
job rigl 6 1
run_job rigl
[ "$(echo "$out" | field state)" = done ] || fail "rigl: $out"
"$py" - "$work" <<'PY' || fail "RigL's masks"
import sys
sys.path.insert(0, sys.argv[1])
from st import load
c = [load("%s/rigl/checkpoint_%d-shard1-of-1.safetensors" % (sys.argv[1], s)) for s in (0, 2, 4, 6)]
for k in ("fc1.weight", "fc2.weight", "fc3.weight"):
    m = [x[k + ".mask"] for x in c]
    n = m[0].size
    for x, mk in zip(c, m):
        assert int(mk.sum()) == n - int(round(0.9 * n)), (k, int(mk.sum()))
        assert (x[k][mk == 0] == 0).all(), k + ": a pruned weight is not zero"
    changed = [int((a != b).sum()) for a, b in zip(m, m[1:])]
    # steps 1-2 and 3-4 hold an update each; 5-6 none (stop = 5)
    assert changed[0] > 0 and changed[1] > 0 and changed[2] == 0, (k, changed)
    print("%s: %s positions changed between checkpoints 0-2, 2-4, 4-6" % (k, changed))
PY
echo "ok: RigL's masks change at steps 2 and 4 only, keep 10% of each tensor, pruned weights zeros"
echo "7 passed, 0 failed"
