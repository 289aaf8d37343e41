#!/usr/bin/env bash
# Benchmark: sparse training ([sparsity], docs/sparsity.md) against dense,
# each pair in this script on fresh local clusters, Weight Streaming:
#   BENCH fc_mnist_sparse90_accuracy_delta <points> of_dense   test accuracy
#         of examples/fc_mnist.toml (2 replicas, 800 steps) at 90% static
#         sparsity of its hidden layers (fc1 and fc2's weights, 90% of its
#         parameters; random masks; the 10-way head dense, as sparse
#         training usually keeps the last layer) minus the dense job's, in
#         percentage points (goal >= -1.0), when data/mnist is there
#         (scripts/fetch-mnist)
#   BENCH fc_mnist_sparse90_all_layers_accuracy_delta <points> of_dense
#         the same with the default patterns: the head at 90% too
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

if [ -s "$src/data/mnist/t10k-labels-idx1-ubyte" ]; then
  base=(-e "s|^data_dir = .*|data_dir = \"$src/data/mnist\"|")
  sed "${base[@]}" -e "s|^model_dir = .*|model_dir = \"$work/dense\"\nmode = \"weight_streaming\"|" \
    "$src/examples/fc_mnist.toml" > "$work/dense.toml"
  sed "${base[@]}" -e "s|^model_dir = .*|model_dir = \"$work/sparse\"\nmode = \"weight_streaming\"|" \
    "$src/examples/fc_mnist.toml" > "$work/sparse.toml"
  sed "s|$work/sparse|$work/all|" "$work/sparse.toml" > "$work/all.toml"
  printf '\n[sparsity]\ntype = "static"\nsparsity = 0.9\ninit_method = "random"\n' >> "$work/all.toml"
  printf '\n[sparsity]\ntype = "static"\nsparsity = 0.9\ninit_method = "random"\nparam_name_patterns = ["fc[12]\\\\.weight"]\n' >> "$work/sparse.toml"
  read -r d_acc d_step <<<"$(job dense "$work/dense.toml" 2)"
  read -r s_acc s_step <<<"$(job sparse "$work/sparse.toml" 2)"
  read -r a_acc a_step <<<"$(job all "$work/all.toml" 2)"
  "$py" -c 'import sys
d, s, a, ds, ss, sa = map(float, sys.argv[1:])
print("fc_mnist, 800 steps on 2 replicas: test accuracy dense %.4f, 90%% static sparsity of fc1 and "
      "fc2 %.4f, of every layer %.4f; median step %.1f ms dense, %.1f and %.1f ms sparse (weights "
      "still stream dense)" % (d, s, a, ds * 1e3, ss * 1e3, sa * 1e3))
print("BENCH fc_mnist_sparse90_accuracy_delta %.2f of_dense" % (100 * (s - d)))
print("BENCH fc_mnist_sparse90_all_layers_accuracy_delta %.2f of_dense" % (100 * (a - d)))' \
    "$d_acc" "$s_acc" "$a_acc" "$d_step" "$s_step" "$a_step"
else
  echo "fc_mnist: no data/mnist (scripts/fetch-mnist): skipped"
fi
