# Shared by the benchmark scripts: the line that says which machine a
# figure comes from (processor, cores, memory and the vector flags that
# decide the kernels).
bench_host_line() {
  echo "host: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB;" \
    "flags: $(lscpu | sed -n 's/^Flags: *//p' | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_tile|fma)$' | tr '\n' ' ')"
}

# bench_work NAME: a fresh work directory $work (with the cluster's run
# directory $run in it), the cluster stopped and the directory removed on
# exit. Needs $src.
bench_work() {
  work=$(mktemp -d "${TMPDIR:-/tmp}/appliance-$1.XXXXXX")
  run="$work/run"
  trap bench__cleanup EXIT
}
bench__cleanup() {
  "$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null 2>&1 || true
  rm -rf "$work"
}

# bench_wide_mlp LAYERS STEPS CHECKPOINT_STEPS MODEL_DIR OPTIMIZER [MODE [UNITS]]:
# the job file of the big-model benchmarks on stdout: 16384 inputs, LAYERS
# dense layers of 16384 units (or UNITS) with ReLU, a 16-class head (268 M
# parameters a layer), batch 32, SGD with momentum (OPTIMIZER sgd) or Adam
# (adam).
bench_wide_mlp() {
  printf '[runconfig]\nmax_steps = %d\nlog_steps = 1\ncheckpoint_steps = %d\nseed = 5\nnum_csx = 1\n' "$2" "$3"
  [ -z "${6:-}" ] || printf 'mode = "%s"\n' "$6"
  printf 'model_dir = "%s"\n' "$4"
  printf '[train_input]\ndata_processor = "synthetic_classification"\nbatch_size = 32\nnum_classes = 16\nnum_samples = 4096\n'
  printf '[model]\ninput_shape = [1, 128, 128]\nloss = "softmax_cross_entropy"\n'
  printf '[[model.layers]]\nname = "flatten"\ntype = "flatten"\n'
  for i in $(seq 1 "$1"); do
    printf '[[model.layers]]\nname = "fc%d"\ntype = "dense"\nunits = %d\n' "$i" "${7:-16384}"
    printf '[[model.layers]]\nname = "relu%d"\ntype = "relu"\n' "$i"
  done
  printf '[[model.layers]]\nname = "head"\ntype = "dense"\nunits = 16\n'
  printf '[optimizer]\nlearning_rate = 0.0001\n'
  if [ "$5" = adam ]; then echo 'optimizer_type = "adam"'; else echo 'momentum = 0.9'; fi
}

# bench_one_wse_job NAME WAFER JOB: a local cluster in $run of one wse-node
# of 2 threads and WAFER, JOB (a file in $work) submitted there; sets $out
# (what appliance-submit said) and $start; exits naming NAME when the job
# fails. Then prints the steps and each daemon's peak.
bench_one_wse_job() {
  "$src/deploy/local/appliance-up" --replicas 1 --threads 2 --wafer-memory "$2" --dir "$run" \
    --build "$build" >/dev/null
  start=$(date +%s)
  out=$(set -a; . "$run/env"; set +a; cd "$work" && "$build/client/appliance-submit" "$3" 2>&1) ||
    { echo "$1: the job failed: $out" >&2; exit 1; }
  echo "$out" | grep -E "step [0-9]+/|eval at" || true
  local f
  for f in "$run"/pids/*.pid; do
    echo "peak of $(basename "$f" .pid): $(awk '/^VmHWM:/ {printf "%.2f GiB\n", $2 / 2^20}' \
      "/proc/$(cat "$f")/status")"
  done
}

# bench_daemon_peaks RUN_DIR: "wse_node_1_peak_bytes all_daemons_peak_bytes"
# of the local cluster in RUN_DIR (deploy/local/appliance-up), from each
# daemon's VmHWM; read before the cluster stops.
bench_daemon_peaks() {
  local wse=0 all=0 f k
  for f in "$1"/pids/*.pid; do
    k=$(awk '/^VmHWM:/ {printf "%.0f\n", $2 * 1024}' "/proc/$(cat "$f")/status" 2>/dev/null || echo 0)
    all=$((all + k))
    case "$f" in */wse-node-1.pid) wse=$k ;; esac
  done
  echo "$wse $all"
}
