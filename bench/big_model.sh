#!/usr/bin/env bash
# Benchmark: a 1.07-billion-parameter model in Weight Streaming on this host.
# The MLP of 16384 inputs, four dense layers of 16384 units with ReLU and a
# 16-class head (4.3 GB of float32 weights), SGD with momentum, batch 32,
# one wse-node with 2 threads, one memoryx shard, the whole appliance here:
#   BENCH ws_1b_step_vs_bound <ratio> of_bound   the median step over
#         max(the same GEMMs timed in this script's process, the time to
#         move the weights twice and the gradients once over loopback TCP,
#         timed here too)
#   BENCH ws_1b_load_sec <s> s                  memoryx making 12.9 GB of
#         weights, gradients and momentum (from the seed)
#   BENCH ws_1b_checkpoint_vs_dd <ratio> of_dd  a checkpoint's write rate
#         (weights and momentum, fsynced) over dd's with conv=fsync of as
#         many bytes to the same disk
#   BENCH ws_1b_loop_lag_p99_<daemon> <ms> ms   every daemon's event loop
#         lag during the run (and _max_)
# BIG_MODEL_WAFER (default 2G) is the wse-node's wafer: whole-layer Weight
# Streaming slots would take 4 GiB here (two layers of weights, two of
# gradients), so the plan streams the layers in parts. BIG_MODEL_OPTIMIZER=adam
# trains with Adam instead (memoryx then holds 17.2 GB).
# It takes a few minutes and most of the machine's memory (about 17 GB).
set -euo pipefail
src=${SOURCE_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
build=${BUILD_ROOT:-$src/build}
py=/usr/bin/python3
wafer=${BIG_MODEL_WAFER:-2G}
optimizer=${BIG_MODEL_OPTIMIZER:-sgd}
. "$src/bench/lib.sh"
bench_work big
bench_host_line

bench_wide_mlp 4 6 3 "$work/m" "$optimizer" weight_streaming > "$work/big.toml"

"$src/deploy/local/appliance-up" --replicas 1 --threads 2 --wafer-memory "$wafer" --metrics \
  --dir "$run" --build "$build" >/dev/null
out=$(set -a; . "$run/env"; set +a; cd "$work" && "$build/client/appliance-submit" "$work/big.toml" 2>&1) ||
  { echo "big_model: the job failed: $out" >&2; exit 1; }
echo "$out" | tail -2
sleep 1.2 # the expositions are rendered once a second
lags=$(while read -r name url; do
  "$py" -c 'import sys, urllib.request
t = urllib.request.urlopen(sys.argv[2], timeout=5).read().decode()
v = {l.split()[0]: float(l.split()[1]) for l in t.splitlines() if l.startswith("appliance_loop_lag_")}
print("BENCH ws_1b_loop_lag_p99_%s %.1f ms" % (sys.argv[1], v["appliance_loop_lag_p99_seconds"] * 1e3))
print("BENCH ws_1b_loop_lag_max_%s %.1f ms" % (sys.argv[1], v["appliance_loop_lag_max_seconds"] * 1e3))' "$name" "$url"
done < "$run/metrics")
cp "$run/logs/memoryx-1.log" "$work/memoryx.log"
cp "$run/logs/coordinator.log" "$work/coordinator.log"
"$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null
step=$(echo "$out" | "$py" "$src/bench/step_times.py" --skip 1 --log "$work/coordinator.log" | cut -d' ' -f1)

# the bounds, in this process: the GEMMs of a step (each dense layer's
# forward, input gradient and weight gradient) and the bytes on loopback
gemm=$("$build/bench/bounds" gemm 32 16384 16384)
head=$("$build/bench/bounds" gemm 32 16 16384)
weights=$((4 * (16384 * 16384 * 4 + 16384 * 4 + 16 * 16384 + 16)))
wire=$("$build/bench/bounds" loopback $((3 * weights)))
ckbytes=$(du -cb "$work"/m/checkpoint_6-* "$work"/m/optimizer_6-* | tail -1 | cut -f1)
dd=$( { /usr/bin/time -f "%e" dd if=/dev/zero of="$work/dd" bs=64M count=$((ckbytes >> 26)) conv=fsync status=none; } 2>&1 )
rm -f "$work/dd"
"$py" - "$step" "$gemm" "$head" "$wire" "$work/memoryx.log" "$ckbytes" "$dd" <<'PY'
import re, sys
step, gemm, head, wire = map(float, sys.argv[1:5])
log = open(sys.argv[5]).read()
compute = 3 * (4 * gemm + head)
bound = max(compute, wire)
print("step %.2f s; the GEMMs alone %.2f s, the weights twice and gradients once over loopback %.2f s" % (step, compute, wire))
print("BENCH ws_1b_step_vs_bound %.2f of_bound" % (step / bound))
load = float(re.search(r"holds \d+ tensors \((\d+) bytes with optimizer state\), made in ([0-9.]+) s", log).group(2))
print("BENCH ws_1b_load_sec %.1f s" % load)
ck = [float(x) for x in re.findall(r"checkpoint of step 6 written to \S+ in ([0-9.]+) s", log)]
ckbytes, dd = int(sys.argv[6]), float(sys.argv[7])
print("checkpoint: %.1f GB in %.1f s; dd with conv=fsync %.1f s" % (ckbytes / 1e9, ck[0], dd))
print("BENCH ws_1b_checkpoint_vs_dd %.2f of_dd" % (dd / ck[0]))
PY
echo "$lags"
