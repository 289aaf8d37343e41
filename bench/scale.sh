#!/usr/bin/env bash
# Benchmark: weak scaling of the fabric with simulated compute. A local
# appliance with 1, then N = 8, 16, 32, 64, 128 wse-nodes, each with its
# own input worker, one memoryx and the swarmx tree the planner builds
# (swarmx_fanout 8: 2 levels up to 64 replicas, 3 at 128), trains the same
# job on each: a small CNN (3x64x64 images, three 3x3 convolutions of 32,
# 64 and 64 filters, one dense layer of 10; 0.22 M parameters, 0.88 MB of
# weights) at 16 samples per replica (weak scaling: the global batch grows
# with N), in Weight Streaming.
#
# The wse-nodes simulate their compute (--simulate-compute measured:TABLE):
# every layer's pass sleeps the seconds per sample measured first on the
# real kernels of this machine (one replica, one thread, SCALE_MEASURE_STEPS
# steps, from its /metrics), while the weights, batches, gradients, sums,
# losses and step accounting all happen for real. The model is chosen so
# that a replica's step is long (0.18 s on a 2-core EPYC) against its
# fabric work (0.88 MB down twice and up once a step, 0.8 MB of batch
# in): the step time then stays flat as long as the fabric
# (swarmx's forwards and sums, memoryx, the workers, the coordinator, all
# sharing this host's cores) keeps up, and what the figure loses is the
# fabric's. Prints, per N:
#   scale: N=.. swarmx nodes=.. levels=.. fanout=..   (the planner's tree)
#   BENCH weak_scaling_sim_N <t1/tN> of_1_replica      (median step times)
# t1 is one replica as the appliance runs it: memoryx streams to it
# directly, with no swarmx.
#
# Needs about 3 open files per daemon in the coordinator (ulimit -n of
# 1024 or more: appliance-up raises the coordinator's connection limits),
# a heartbeat timeout of 10 s (300 daemons starting on 2 cores: 143 s), and
# 128 wse-nodes with their workers and swarmx take about 5 GiB of memory.
# SCALE_COUNTS (default "8 16 32 64 128"), SCALE_STEPS (12),
# SCALE_BATCH (16 per replica), SCALE_FANOUT (8), SCALE_MEASURE_STEPS (20).
set -euo pipefail
src=${SOURCE_ROOT:?}
build=${BUILD_ROOT:?}
py=/usr/bin/python3
. "$src/bench/lib.sh"
bench_work scale
submit="$build/client/appliance-submit"
counts=${SCALE_COUNTS:-"8 16 32 64 128"}
steps=${SCALE_STEPS:-12}
batch=${SCALE_BATCH:-16}
fanout=${SCALE_FANOUT:-8}
measure_steps=${SCALE_MEASURE_STEPS:-20}

bench_host_line
# The coordinator admits a job by what its plan would hold on the host as
# if the replicas computed: 128 wse-nodes planned at 133 MiB each and 43
# swarmx nodes' buffer bounds come to 26 GiB, more than this 23 GiB host,
# while the simulated daemons take a fraction of it (the script prints
# their peaks). The simulated runs tell the daemons the host has
# SCALE_HOST_MEMORY (64G) so that the plan is the real one's.
host_memory=${SCALE_HOST_MEMORY:-64G}
need_fds=$((3 * (1 + 1 + 2 * 128 + 64) + 64))
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$need_fds" ]; then
  ulimit -n "$need_fds" 2>/dev/null || { echo "SKIP: scale: ulimit -n is $(ulimit -n), the coordinator needs about $need_fds"; exit 0; }
fi

# job N STEPS: the job file for N replicas
job() {
  cat <<TOML
[runconfig]
max_steps = $2
log_steps = 1
seed = 7
num_csx = $1
swarmx_fanout = $fanout
mode = "weight_streaming"
model_dir = "$work/model"

[train_input]
batch_size = $(($1 * batch))
num_classes = 10
num_samples = 100000

[model]
input_shape = [3, 64, 64]
loss = "softmax_cross_entropy"

[[model.layers]]
name = "conv1"
type = "conv2d"
filters = 32
kernel_size = 3
padding = 1

[[model.layers]]
name = "relu1"
type = "relu"

[[model.layers]]
name = "conv2"
type = "conv2d"
filters = 64
kernel_size = 3
padding = 1

[[model.layers]]
name = "relu2"
type = "relu"

[[model.layers]]
name = "pool2"
type = "max_pool2d"
kernel_size = 2

[[model.layers]]
name = "conv3"
type = "conv2d"
filters = 64
kernel_size = 3
padding = 1

[[model.layers]]
name = "relu3"
type = "relu"

[[model.layers]]
name = "pool3"
type = "max_pool2d"
kernel_size = 2

[[model.layers]]
name = "flat"
type = "flatten"

[[model.layers]]
name = "fc"
type = "dense"
units = 10

[optimizer]
learning_rate = 0.01
momentum = 0.9
TOML
}

# up N ARGS...: a local appliance of N wse-nodes and the swarmx nodes the
# planner needs for them
swarm_nodes() { # the planner's tree (coordinator/planner.c): "nodes levels"
  "$py" -c '
import sys
n, f = int(sys.argv[1]), int(sys.argv[2])
if n == 1: print(0, 0); sys.exit()
k, tot, lv = -(-n // f), 0, 0
while True:
    tot += k; lv += 1
    if k == 1: break
    k = -(-k // f)
print(tot, lv)' "$1" "$fanout"
}
up() {
  local n=$1
  shift
  read -r nsw _ < <(swarm_nodes "$n")
  "$src/deploy/local/appliance-up" --replicas "$n" --swarmx "$nsw" --dir "$run" --build "$build" \
    --heartbeat-timeout-ms 10000 \
    "$@" >"$work/up.log" 2>&1 || { cat "$work/up.log" >&2; exit 1; }
}
down() {
  "$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null 2>&1 || true
  rm -rf "$run" "$work/model"
}
# train N STEPS: runs the job; the median step time (s) after 2 warm-up steps
train() {
  job "$1" "$2" >"$work/job.toml"
  if ! (set -a; . "$run/env"; set +a; timeout 900 "$submit" --json "$work/job.toml") >"$work/out.json" 2>&1 ||
     [ "$(tail -n 1 "$work/out.json" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["state"])')" != done ]; then
    echo "scale: the job on $1 replicas failed: $(tail -n 3 "$work/out.json")" >&2
    tail -n 20 "$run/logs/coordinator.log" >&2
    exit 1
  fi
  "$py" "$src/bench/step_times.py" --skip 2 --log "$run/logs/coordinator.log" </dev/null | cut -d' ' -f1
}

# 1. Each layer's time on the real kernels: one replica, one thread; the
# layers' seconds from its /metrics between step 2 (past the warm-up) and
# the end.
up 1 --metrics
url=$(awk '$1 == "wse-node-1" {print $2}' "$run/metrics")
scrape() { "$py" -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$url"; }
job 1 "$measure_steps" >"$work/job.toml"
(set -a; . "$run/env"; set +a; timeout 600 "$submit" --json "$work/job.toml") >"$work/out.json" 2>&1 &
client=$!
for _ in $(seq 600); do
  scrape >"$work/m0" 2>/dev/null || true
  s=$(awk '$1 == "appliance_steps_total" {print $2}' "$work/m0")
  [ -n "$s" ] && [ "$s" -ge 2 ] && break
  sleep 0.2
done
wait "$client" || { echo "scale: the measuring job failed: $(tail -n 3 "$work/out.json")" >&2; exit 1; }
sleep 1.2 # the metrics are rendered once a second
scrape >"$work/m1"
"$py" - "$work/m0" "$work/m1" "$batch" >"$work/table" <<'PY'
import re, sys
def read(path):
    text = open(path).read()
    steps = float(re.search(r"^appliance_steps_total (\S+)", text, re.M).group(1))
    sec = {}
    for layer, ps, v in re.findall(r'^appliance_layer_seconds_total\{layer="([^"]+)",pass="(\w+)"\} (\S+)', text, re.M):
        sec[(layer, ps)] = float(v)
    return steps, sec
(s0, a), (s1, b) = read(sys.argv[1]), read(sys.argv[2])
assert s1 > s0, "no step measured past the warm-up"
per = (s1 - s0) * int(sys.argv[3])
print("# layer, forward and backward seconds per sample on the kernels (steps %d to %d)" % (s0, s1))
for layer in dict.fromkeys(l for l, _ in b):
    f, g = [(b.get((layer, p), 0) - a.get((layer, p), 0)) / per for p in ("forward", "backward")]
    print(layer, "%.9g" % f, "%.9g" % g)
PY
down
echo "scale: measured on the kernels (seconds per sample; $batch samples a step):"
sed 's/^/scale:   /' "$work/table"
table_step=$("$py" -c '
import sys
t = sum(float(a) + float(b) for l in open(sys.argv[1]) if not l.startswith("#") for a, b in [l.split()[1:3]])
print("%.4f" % (t * int(sys.argv[2])))' "$work/table" "$batch")
echo "scale: a replica's compute per step: $table_step s"

# 2. Simulated: 1 replica, then N.
t1=""
for n in 1 $counts; do
  read -r nsw levels < <(swarm_nodes "$n")
  start=$SECONDS
  up "$n" --simulate-compute "measured:$work/table" --host-memory "$host_memory"
  started=$((SECONDS - start))
  t=$(train "$n" "$steps")
  tree=$(grep -h "tree node [0-9]*, [a-z]*, [0-9]* children" "$run"/logs/swarmx-*.log 2>/dev/null |
         sed 's/.*tree node [0-9]*, \([a-z]*\), \([0-9]*\) children/\1 \2/' | sort | uniq -c | tr '\n' ';' || true)
  read -r wse all < <(bench_daemon_peaks "$run")
  down
  echo "scale: N=$n swarmx nodes=$nsw levels=$levels fanout=$( [ "$n" -gt 1 ] && echo "$fanout" || echo "- (memoryx streams to the replica)")" \
       "(swarmx logs: ${tree:-none}) step $t s; started in $started s;" \
       "wse-node-1 peak $((wse >> 20)) MiB, all daemons $((all >> 20)) MiB"
  if [ "$n" = 1 ]; then
    t1=$t
  else
    "$py" -c 'import sys; print("BENCH weak_scaling_sim_%s %.3f of_1_replica" % (sys.argv[1], float(sys.argv[2]) / float(sys.argv[3])))' "$n" "$t1" "$t"
  fi
done
