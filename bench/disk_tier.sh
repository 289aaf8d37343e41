#!/usr/bin/env bash
# Benchmark: the largest model this host trains, with memoryx's disk tier.
# A 4.03-billion-parameter MLP (16384 inputs, fifteen dense layers of 16384
# units with ReLU, a 16-class head: 16.1 GB of float32 weights, 16.1 GB of
# momentum and 16.1 GB of gradients, more than the host's memory), SGD with
# momentum, batch 32, Weight Streaming, one wse-node with 2 threads, memoryx
# capped at 8 GiB of RAM (--memory 8G), the shard in files under its state
# directory. Three steps, then the final checkpoint.
#   BENCH largest_model_params <n> params       the model above, when its
#         3 steps train (the figure is the model's size, not a search)
#   BENCH disk_tier_step_sec <s> s              the median step
#   BENCH disk_tier_memoryx_peak <GiB> GiB      memoryx's peak resident memory
#   BENCH disk_tier_read_vs_dd <ratio> of_dd    memoryx's read rate from its
#         files while streaming (bytes over the time its reads took) over a
#         plain sequential read (dd, caches dropped first when root) of the
#         same bytes: the final checkpoint's weights file, which is the
#         tier's weights file renamed
#   BENCH disk_tier_loop_lag_p99_<daemon> <ms> ms
# DISK_TIER_LAYERS (default 15) sets the depth; it needs about 50 GB of
# free disk in the run directory's file system and most of the machine's
# memory, and takes about a quarter of an hour on a 2-core host.
set -euo pipefail
src=${SOURCE_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
build=${BUILD_ROOT:-$src/build}
py=/usr/bin/python3
layers=${DISK_TIER_LAYERS:-15}
. "$src/bench/lib.sh"
bench_work disk-tier
bench_host_line
echo "disk: $(df -h "$work" | awk 'NR == 2 {print $4 " free of " $2}')"

bench_wide_mlp "$layers" 3 0 "$work/m" sgd weight_streaming > "$work/big.toml"
params=$((layers * (16384 * 16384 + 16384) + 16 * 16384 + 16))

"$src/deploy/local/appliance-up" --replicas 1 --threads 2 --wafer-memory 6G --memoryx-memory 8G \
  --metrics --dir "$run" --build "$build" >/dev/null
mxpid=$(cat "$run/pids/memoryx-1.pid")
out=$(set -a; . "$run/env"; set +a; cd "$work" && "$build/client/appliance-submit" "$work/big.toml" 2>&1) ||
  { echo "disk_tier: the job failed: $out" >&2; tail -n 5 "$run"/logs/*.log >&2; exit 1; }
echo "$out" | tail -2
peak=$(awk '/^VmHWM:/ {printf "%.2f\n", $2 / 1048576}' "/proc/$mxpid/status")
sleep 1.2
lags=$(while read -r name url; do
  "$py" -c 'import sys, urllib.request
t = urllib.request.urlopen(sys.argv[2], timeout=5).read().decode()
v = {l.split()[0]: float(l.split()[1]) for l in t.splitlines() if l.startswith("appliance_loop_lag_")}
print("BENCH disk_tier_loop_lag_p99_%s %.1f ms" % (sys.argv[1], v["appliance_loop_lag_p99_seconds"] * 1e3))' "$name" "$url"
done < "$run/metrics")
"$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null
grep -E "disk tier|made in|checkpoint of step" "$run/logs/memoryx-1.log" | cut -c26- | sed 's/^/  memoryx: /'
step=$(echo "$out" | "$py" "$src/bench/step_times.py" --skip 1 --log "$run/logs/coordinator.log" | cut -d' ' -f1)

wfile=$(ls "$work"/m/checkpoint_3-shard1-of-1.safetensors)
sync
if [ "$(id -u)" = 0 ]; then echo 3 > /proc/sys/vm/drop_caches; fi
dd=$( { /usr/bin/time -f "%e" dd if="$wfile" of=/dev/null bs=8M status=none; } 2>&1 )
"$py" - "$params" "$step" "$peak" "$run/logs/memoryx-1.log" "$(stat -c %s "$wfile")" "$dd" <<'PY'
import re, sys
params, step, peak = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
log = open(sys.argv[4]).read()
size, dd = int(sys.argv[5]), float(sys.argv[6])
m = re.search(r"the weight stream read ([0-9.]+) GB from \S+ in ([0-9.]+) s", log)
read_gb, read_s = float(m.group(1)), float(m.group(2))
print("BENCH largest_model_params %.3g params" % params)
print("BENCH disk_tier_step_sec %.1f s" % step)
print("BENCH disk_tier_memoryx_peak %.2f GiB" % peak)
print("memoryx read %.1f GB in %.1f s (%.0f MB/s); dd read the %.1f GB weights file in %.1f s (%.0f MB/s)"
      % (read_gb, read_s, read_gb * 1e3 / read_s, size / 1e9, dd, size / 1e6 / dd))
print("BENCH disk_tier_read_vs_dd %.2f of_dd" % ((read_gb * 1e9 / read_s) / (size / dd)))
PY
echo "$lags"
