#!/usr/bin/env bash
# Benchmark: the Model Zoo's Inria 7168 gray U-Net config as it is
# (tests/client/modelzoo/params_inria_aerial_7168.yaml: 32 to 256 channels,
# group norm, bfloat16), on this host.
#
#   BENCH modelzoo_inria7168_plan_vs_host <ratio> of_host_memory  what its
#         plan needs for one 7168x7168 sample (all stripes together, 4
#         wse-nodes) over this host's memory: above 1, it cannot train here
#   BENCH modelzoo_inria_<side>_peak_vs_plan <ratio> of_plan  the same
#         config on the largest square side that fits this host in 4
#         stripes (MZ_SIDE), Inria TIFFs of that size (tools/mkmzdata), 2
#         steps: the largest wse-node peak (VmHWM) over what --plan says a
#         stripe needs
#   BENCH modelzoo_inria_<side>_step_sec <seconds> s  its second step
#
# MZ_SIDE overrides the side; MZ_STRIPES the stripes (default 4).
set -euo pipefail
src=${SOURCE_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
build=${BUILD_ROOT:-$src/build}
py=/usr/bin/python3
stripes=${MZ_STRIPES:-4}
. "$src/bench/lib.sh"
bench_work modelzoo
bench_host_line
config="$src/tests/client/modelzoo/params_inria_aerial_7168.yaml"
submit="$build/client/appliance-submit"
host=$(awk '/^MemTotal:/ {printf "%.0f\n", $2 * 1024}' /proc/meminfo)

job() { # SIDE: the config on SIDE x SIDE tiles in $work/inria, $stripes stripes, 2 steps
  sed -e "s|data_dir: .*|data_dir: \"$work/inria\"|" \
    -e "s|image_shape: .*|image_shape: [$1, $1, 1]|" \
    -e "s|num_csx: 1|num_csx: $stripes\n    spatial_partitions: $stripes\n    model_dir: \"$work/model\"|" \
    -e "s|max_steps: .*|max_steps: 2|" -e "s|log_steps: .*|log_steps: 1|" \
    -e "s|save_initial_checkpoint: True|save_initial_checkpoint: False|" \
    "$config" > "$work/inria-$1.yaml"
  echo "$work/inria-$1.yaml"
}
# need SIDE: bytes a stripe needs, by the plan
need() {
  "$submit" --plan --wafer-memory 1T --json "$(job "$1")" | "$py" -c 'import json, sys
p = json.load(sys.stdin)
print(next(m["bytes_per_replica"] for m in p["modes"] if m["mode"] == p["mode"]))'
}

full=$(need 7168)
echo "7168x7168 in $stripes stripes: $((full >> 20)) MiB a stripe, $(((full * stripes) >> 30)) GiB in all; this host has $((host >> 30)) GiB"
echo "BENCH modelzoo_inria7168_plan_vs_host $("$py" -c "print('%.2f' % ($full * $stripes / $host))") of_host_memory"

side=${MZ_SIDE:-}
if [ -z "$side" ]; then # the largest multiple of 256 whose stripes fit 3/4 of the host
  side=7168
  while [ "$side" -gt 256 ] && [ $(( $(need "$side") * stripes )) -gt $((host * 3 / 4)) ]; do
    side=$((side - 256))
  done
fi
per=$(need "$side")
echo "training ${side}x${side} (the largest that fits): $((per >> 20)) MiB a stripe by the plan"
"$build/tools/mkmzdata/mkmzdata" inria "$work/inria" --size "${side}x${side}" --channels 1 \
  --count 4 --compression lzw --tile 256 >/dev/null
wafer=$(( (per + (1 << 30)) >> 30 ))G
"$src/deploy/local/appliance-up" --replicas "$stripes" --threads 1 --wafer-memory "$wafer" \
  --dir "$run" --build "$build" >/dev/null
out=$(set -a; . "$run/env"; set +a; cd "$work" && "$submit" "$(job "$side")" 2>&1) ||
  { echo "modelzoo_inria: the job failed: $out" >&2; exit 1; }
peak=0
for f in "$run"/pids/wse-node-*.pid; do
  k=$(awk '/^VmHWM:/ {printf "%.0f\n", $2 * 1024}' "/proc/$(cat "$f")/status" 2>/dev/null || echo 0)
  [ "$k" -gt "$peak" ] && peak=$k
done
read -r step _ < <(echo "$out" | "$py" "$src/bench/step_times.py" --log "$run/logs/coordinator.log" 2>/dev/null)
echo "$out" | grep -E "step [0-9]+/2|done" | sed 's/^/  /'
echo "the largest wse-node peak $((peak >> 20)) MiB"
echo "BENCH modelzoo_inria_${side}_peak_vs_plan $("$py" -c "print('%.3f' % ($peak / $per))") of_plan"
echo "BENCH modelzoo_inria_${side}_step_sec $("$py" -c "print('%.2f' % $step)") s"
