#!/usr/bin/env bash
# Benchmark: sparse training ([sparsity], docs/sparsity.md) against dense,
# each pair in this script on fresh local clusters, Weight Streaming:
#   BENCH fc_mnist_sparse90_accuracy_delta <points> of_dense   test accuracy
#         of examples/fc_mnist.toml (2 replicas), trained to convergence
#         (2400 steps, 30 epochs, at learning rate 0.01: the example's 800
#         steps at 0.001 leave even the dense net short), at 90% static
#         sparsity of its hidden layers (fc1 and fc2's weights, 90% of its
#         parameters; random masks; the 10-way head dense, as sparse
#         training usually keeps the last layer; sparsity.init_scale =
#         "fan_in") minus the dense job's, in percentage points, the mean
#         over 6 seeds (and _sd, the standard deviation; goal >= -1.0),
#         when data/mnist is there (scripts/fetch-mnist)
#   BENCH fc_mnist_sparse90_unscaled_accuracy_delta <points> of_dense   the
#         same with the kept weights as initialised (init_scale "none")
#   BENCH fc_mnist_sparse90_all_layers_accuracy_delta <points> of_dense
#         the default patterns (the head at 90% too), init_scale "fan_in"
#   FC_MNIST_LR=X trains every fc_mnist job at learning rate X (0.01
#   otherwise), FC_MNIST_STEPS=N for N steps (2400 otherwise; the cosine
#   decay over them), FC_MNIST_SEEDS="N ..." with each runconfig.seed N (the
#   initial weights, the order of the digits and the masks; 1 to 6 otherwise);
#   BENCH_SPARSITY_PARTS="fc_mnist largest bytes" (the default) chooses the
#   parts
#   BENCH sparse90_largest_params_memoryx_8g <n> params, and _vs_dense
#         <ratio> of_dense_largest   (part "largest") the largest 4-layer
#         MLP (dense-equivalent parameters) that the plan admits and that
#         trains 3 steps at 90% static sparsity with memoryx's RAM capped at
#         8 GiB (SPARSE_LARGEST_MEMORYX) and no disk tier, over the largest
#         dense one under the same cap
#   BENCH ws_mlp4096_sparse90_bytes_vs_dense <ratio> of_dense   bytes on the
#         wire per step (memoryx's weight chunks sent and gradient chunks
#         received, their payloads) of the wide MLP of bench/big_model.sh
#         with 4096 units a layer (117 M parameters) at 90% static sparsity
#         (every dense layer's weights), streams packed, over the same job
#         with sparsity.compressed_streams = false (goal <= 0.2)
#   BENCH ws_mlp4096_sparse90_step_vs_dense <ratio> of_dense   the median
#         step of the same sparse job (packed streams, the sparse kernels
#         where the executor takes them) over the same MLP trained dense
#         (no sparsity section), 4 steps each, the first left out
#   BENCH ws_1b_sparse90_bytes_vs_dense, ws_1b_sparse90_step_vs_dense
#         the same for the 1.07B MLP itself (16384 units), with
#         BENCH_SPARSE_1B=1, on a 6 GiB wafer so that its layers stream
#         whole and the sparse kernels can take them (about 21 GB of memory;
#         SPARSE_1B_WAFER=2G streams them in parts, on the GEMMs, in about
#         16 GB), some minutes
set -euo pipefail
src=${SOURCE_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
build=${BUILD_ROOT:-$src/build}
py=/usr/bin/python3
. "$src/bench/lib.sh"
bench_work sparsity
bench_host_line

# job NAME FILE REPLICAS: trains FILE on a fresh cluster; prints its
# evaluation accuracy and its median step in seconds
job() {
  "$src/deploy/local/appliance-up" --replicas "$3" --threads 1 --dir "$run" --build "$build" >/dev/null
  local out
  out=$(set -a; . "$run/env"; set +a; cd "$work" && "$build/client/appliance-submit" --json "$2" 2>&1) ||
    { echo "sparsity: the $1 job failed: $out" >&2; exit 1; }
  echo "$out" | "$py" -c 'import datetime, json, re, statistics, sys
o = json.load(sys.stdin)
t = [(datetime.datetime.strptime(l.split()[0], "%Y-%m-%dT%H:%M:%S.%fZ"), int(m.group(1)))
     for l in open(sys.argv[1]) for m in [re.search(r"job job-1: step (\d+)/\d+ loss", l)] if m]
# per step, between logged steps (the first interval left out)
d = [(b[0] - a[0]).total_seconds() / (b[1] - a[1]) for a, b in zip(t[1:], t[2:]) if b[1] > a[1]]
print(o.get("eval_accuracy", -1), statistics.median(d) if d else float("nan"))' "$run/logs/coordinator.log"
  "$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null
  rm -rf "$run"
}

parts=${BENCH_SPARSITY_PARTS:-fc_mnist largest bytes}
if [[ " $parts " != *" fc_mnist "* ]]; then
  echo "fc_mnist: not in BENCH_SPARSITY_PARTS: skipped"
elif [ -s "$src/data/mnist/t10k-labels-idx1-ubyte" ]; then
  lr=${FC_MNIST_LR:-0.01} steps=${FC_MNIST_STEPS:-2400}
  : > "$work/fc_mnist.acc"
  for seed in ${FC_MNIST_SEEDS:-1 2 3 4 5 6}; do
    base=(-e "s|^data_dir = .*|data_dir = \"$src/data/mnist\"|"
          -e "s|^learning_rate = .*|learning_rate = $lr|" -e "s|^seed = .*|seed = $seed|"
          -e "s|^max_steps = .*|max_steps = $steps|")
    for v in dense sparse all unscaled; do
      sed "${base[@]}" -e "s|^model_dir = .*|model_dir = \"$work/$v\"\nmode = \"weight_streaming\"|" \
        "$src/examples/fc_mnist.toml" > "$work/$v.toml"
    done
    printf '\n[sparsity]\ntype = "static"\nsparsity = 0.9\ninit_method = "random"\ninit_scale = "fan_in"\n' >> "$work/all.toml"
    printf '\n[sparsity]\ntype = "static"\nsparsity = 0.9\ninit_method = "random"\ninit_scale = "fan_in"\nparam_name_patterns = ["fc[12]\\\\.weight"]\n' >> "$work/sparse.toml"
    printf '\n[sparsity]\ntype = "static"\nsparsity = 0.9\ninit_method = "random"\nparam_name_patterns = ["fc[12]\\\\.weight"]\n' >> "$work/unscaled.toml"
    read -r d_acc d_step <<<"$(job dense "$work/dense.toml" 2)"
    read -r s_acc s_step <<<"$(job sparse "$work/sparse.toml" 2)"
    read -r u_acc u_step <<<"$(job unscaled "$work/unscaled.toml" 2)"
    read -r a_acc a_step <<<"$(job all "$work/all.toml" 2)"
    echo "$seed $d_acc $s_acc $u_acc $a_acc $d_step $s_step $a_step" >> "$work/fc_mnist.acc"
    rm -rf "$work"/{dense,sparse,all,unscaled}
  done
  "$py" - "$steps" "$lr" "$work/fc_mnist.acc" <<'PY'
import statistics as st, sys
steps, lr = sys.argv[1:3]
rows = [list(map(float, l.split())) for l in open(sys.argv[3])]
for r in rows:
    print("fc_mnist, seed %d, %s steps on 2 replicas, learning rate %s: test accuracy dense %.4f, "
          "90%% static sparsity of fc1 and fc2 %.4f (init_scale fan_in) and %.4f (none), of every "
          "layer %.4f (fan_in); median step %.1f ms dense, %.1f and %.1f ms sparse"
          % (r[0], steps, lr, r[1], r[2], r[3], r[4], r[5] * 1e3, r[6] * 1e3, r[7] * 1e3))
def delta(col):
    d = [100 * (r[col] - r[1]) for r in rows]
    return st.mean(d), (st.stdev(d) if len(d) > 1 else 0.0)
print("fc_mnist over %d seed(s): dense %.4f on average" % (len(rows), st.mean(r[1] for r in rows)))
for name, col in (("", 2), ("_unscaled", 3), ("_all_layers", 4)):
    m, sd = delta(col)
    print("BENCH fc_mnist_sparse90%s_accuracy_delta %.2f of_dense" % (name, m))
    print("BENCH fc_mnist_sparse90%s_accuracy_delta_sd %.2f points" % (name, sd))
PY
else
  echo "fc_mnist: no data/mnist (scripts/fetch-mnist): skipped"
fi

sparse90='\n[sparsity]\ntype = "static"\nsparsity = 0.9\ninit_method = "random"\n'

# The largest model that trains with memoryx's RAM capped and no disk
# tier: the 4-layer MLP of bench_wide_mlp, its units the most (a multiple
# of 256) that the coordinator's plan admits, dense and at 90% (every dense
# layer's weights), against the live cluster; then the sparse one trained
# for 3 steps.
if [[ " $parts " == *" largest "* ]]; then
  cap=${SPARSE_LARGEST_MEMORYX:-8G}
  "$src/deploy/local/appliance-up" --replicas 1 --threads 2 --wafer-memory 2G \
    --memoryx-memory "$cap" --memoryx-disk 0 --dir "$run" --build "$build" >/dev/null
  mlp() { # mlp UNITS SPARSE: the job file
    bench_wide_mlp 4 3 100 "$work/largest" sgd weight_streaming "$1"
    [ "$2" = 0 ] || printf "$sparse90"
  }
  fits() { # fits UNITS SPARSE: whether the cluster's plan admits it
    mlp "$1" "$2" > "$work/largest.toml"
    (set -a; . "$run/env"; set +a; cd "$work" &&
      "$build/client/appliance-submit" --plan "$work/largest.toml" >"$work/plan.out" 2>&1)
  }
  most() { # most SPARSE: the most units that fit
    local lo=256 hi=65536 mid
    fits "$lo" "$1" || { echo "sparsity: 256 units do not fit: $(cat "$work/plan.out")" >&2; exit 1; }
    while [ $((hi - lo)) -gt 256 ]; do
      mid=$(((lo + hi) / 512 * 256))
      if fits "$mid" "$1"; then lo=$mid; else hi=$mid; fi
    done
    echo "$lo"
  }
  params() { echo $((16384 * $1 + $1 + 3 * ($1 * $1 + $1) + 16 * $1 + 16)); }
  ud=$(most 0)
  us=$(most 1)
  fits $((us + 256)) 1 || echo "largest: $((us + 256)) units at 90%: $(tail -n 1 "$work/plan.out")"
  mlp "$us" 1 > "$work/largest.toml"
  out=$(set -a; . "$run/env"; set +a; cd "$work" && "$build/client/appliance-submit" --json "$work/largest.toml" 2>&1) ||
    { echo "sparsity: the largest sparse job failed: $out" >&2; exit 1; }
  hwm=$(awk '/^VmHWM:/ {printf "%.2f\n", $2 / 1048576}' "/proc/$(cat "$run/pids/memoryx-1.pid")/status")
  "$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null
  rm -rf "$run" "$work/largest"
  "$py" - "$cap" "$ud" "$us" "$(params "$ud")" "$(params "$us")" "$hwm" "$(echo "$out" | tail -n 1)" <<'PY'
import json, sys
cap, ud, us, pd, ps, hwm = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
o = json.loads(sys.argv[7])
assert o["state"] == "done" and o["steps"] == 3, o
print("memoryx capped at %s, no disk tier: the 4-layer MLP fits with %d units dense (%.0f M parameters) "
      "and %d units at 90%% static sparsity (%.0f M dense-equivalent parameters); the sparse one "
      "trained 3 steps, memoryx's peak %.2f GiB" % (cap, ud, pd / 1e6, us, ps / 1e6, hwm))
print("BENCH sparse90_largest_params_memoryx_%s %d params" % (cap.lower(), ps))
print("BENCH sparse90_largest_params_memoryx_%s_vs_dense %.3f of_dense_largest" % (cap.lower(), ps / pd))
PY
fi

[[ " $parts " == *" bytes "* ]] || exit 0

# Bytes on the wire: the wide MLP at 90% static sparsity, packed streams
# against dense ones (sparsity.compressed_streams = false), 3 steps each on
# a fresh cluster of one replica; memoryx's stream counters (docs/sparsity.md)
if [ "${BENCH_SPARSE_1B:-0}" = 1 ]; then units=16384 name=ws_1b wafer=${SPARSE_1B_WAFER:-6G}
else units=4096 name=ws_mlp4096 wafer=2G; fi
steps=4
# stream_job NAME FILE: prints memoryx's weight bytes sent, their dense
# equivalent, gradient bytes received and theirs, and the median step in
# seconds (the first left out)
stream_job() {
  "$src/deploy/local/appliance-up" --replicas 1 --threads 2 --wafer-memory "$wafer" --metrics \
    --dir "$run" --build "$build" >/dev/null
  local out url
  out=$(set -a; . "$run/env"; set +a; cd "$work" && "$build/client/appliance-submit" --json "$2" 2>&1) ||
    { echo "sparsity: the $1 job failed: $out" >&2; exit 1; }
  sleep 1.2 # the exposition is rendered once a second
  url=$(awk '$1 == "memoryx-1" {print $2}' "$run/metrics")
  local step
  read -r step _ < <(echo "$out" | "$py" "$src/bench/step_times.py" --skip 1 --log "$run/logs/coordinator.log")
  grep -h -o 'layer fc1: [a-z-]* path[^"]*' "$run"/logs/wse-node-1.log | head -1 | sed "s/^/  $1: /" >&2 || true
  "$py" - "$url" "$step" <<'PY'
import re, sys, urllib.request
text = urllib.request.urlopen(sys.argv[1], timeout=5).read().decode()
print(" ".join(re.search(r"^appliance_%s_bytes_total (\S+)$" % k, text, re.M).group(1)
               for k in ("weight_stream", "weight_stream_dense", "grad_stream", "grad_stream_dense")),
      sys.argv[2])
PY
  "$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null
  rm -rf "$run"
}
{ bench_wide_mlp 4 $steps 100 "$work/packed" sgd weight_streaming "$units"; printf "$sparse90"; } > "$work/packed.toml"
{ bench_wide_mlp 4 $steps 100 "$work/densestream" sgd weight_streaming "$units"
  printf "${sparse90}compressed_streams = false\n"; } > "$work/densestream.toml"
bench_wide_mlp 4 $steps 100 "$work/dense" sgd weight_streaming "$units" > "$work/dense.toml"
packed=$(stream_job packed "$work/packed.toml")
densestream=$(stream_job densestream "$work/densestream.toml")
dense=$(stream_job dense "$work/dense.toml")
"$py" - "$packed" "$densestream" "$dense" "$name" "$units" "$steps" <<'PY'
import sys
p, d, dd = ([float(x) for x in a.split()] for a in sys.argv[1:4])
name, units, steps = sys.argv[4], sys.argv[5], int(sys.argv[6])
print("wide MLP of %s units, 90%% static sparsity, %d steps: per step, packed weights %.1f MB and "
      "gradients %.1f MB; dense streams %.1f and %.1f MB (weights %.3f, gradients %.3f of dense)"
      % (units, steps, p[0] / steps / 1e6, p[2] / steps / 1e6, d[0] / steps / 1e6,
         d[2] / steps / 1e6, p[0] / d[0], p[2] / d[2]))
print("median step: sparse, packed streams %.2f s; sparse, dense streams %.2f s; dense job %.2f s"
      % (p[4], d[4], dd[4]))
print("BENCH %s_sparse90_bytes_vs_dense %.3f of_dense" % (name, (p[0] + p[2]) / (d[0] + d[2])))
print("BENCH %s_sparse90_step_vs_dense %.3f of_dense" % (name, p[4] / dd[4]))
PY
