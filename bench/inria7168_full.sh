#!/usr/bin/env bash
# The Model Zoo's Inria 7168 x 7168 gray U-Net config as it is
# (tests/client/modelzoo/params_inria_aerial_7168.yaml: 32 to 256 channels,
# group norm, bfloat16), at its full size on one wse-node of this host:
# Inria TIFFs of 7168 x 7168 gray (tools/mkmzdata), INRIA_STEPS steps
# (default 2), a wafer of INRIA_WAFER (default 22G, the host budget the
# issue sets). The plan takes the image's rows as depth and spills the
# bfloat16 copies of kept outputs to the wse-node's --spill-dir where it
# must (appliance-submit --plan says which). Prints:
#   BENCH inria7168_full_plan <GiB> GiB_per_replica      what the plan asks
#   BENCH inria7168_full_peak <GiB> GiB_all_daemons      every daemon's peak
#         resident memory (VmHWM) added up
#   BENCH inria7168_full_peak_vs_22g <ratio> of_22GiB    against the budget
#   BENCH inria7168_full_wse_peak_vs_plan <ratio> of_plan the wse-node's peak
#         over the plan's need
#   BENCH inria7168_full_step_sec <s> s                  median step
# and the losses, the evaluation and each daemon's peak. Not for CI: a
# step takes minutes on 2 cores.
set -euo pipefail
src=${SOURCE_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
build=${BUILD_ROOT:-$src/build}
py=/usr/bin/python3
steps=${INRIA_STEPS:-2}
wafer=${INRIA_WAFER:-22G}
. "$src/bench/lib.sh"
bench_work inria7168_full
bench_host_line
config="$src/tests/client/modelzoo/params_inria_aerial_7168.yaml"
submit="$build/client/appliance-submit"

sed -e "s|data_dir: .*|data_dir: \"$work/inria\"|" \
  -e "s|num_csx: 1|num_csx: 1\n    model_dir: \"$work/model\"|" \
  -e "s|max_steps: .*|max_steps: $steps|" -e "s|log_steps: .*|log_steps: 1|" \
  "$config" > "$work/inria.yaml"
"$build/tools/mkmzdata/mkmzdata" inria "$work/inria" --size 7168x7168 --channels 1 --count 4 \
  --compression lzw --tile 256 >/dev/null
plan=$(TMPDIR="$work" "$submit" --plan --wafer-memory "$wafer" --threads 2 --json "$work/inria.yaml")
need=$(echo "$plan" | "$py" -c '
import json, sys
p = json.load(sys.stdin)
assert p["fits"], p
print([m for m in p["modes"] if m["mode"] == p["mode"]][0]["bytes_per_replica"])')
echo "$plan" | "$py" -c '
import json, sys
p = json.load(sys.stdin)
print("plan: %s, rows as depth %s, %.1f GiB spilled, %d batch(es) in flight" % (p["mode"],
      p["rows_as_depth"], p["spill_bytes"] / 2**30, p["feed_credits"]))'
echo "BENCH inria7168_full_plan $("$py" -c "print('%.2f' % ($need / 2**30))") GiB_per_replica"
bench_one_wse_job inria7168_full "$wafer" inria.yaml
wse=$(awk '/^VmHWM:/ {printf "%.0f\n", $2 * 1024}' "/proc/$(cat "$run/pids/wse-node-1.pid")/status")
read -r _ all < <(bench_daemon_peaks "$run")
read -r step _ < <(echo "$out" | "$py" "$src/bench/step_times.py" --log "$run/logs/coordinator.log")
echo "the job took $(($(date +%s) - start)) s"
"$py" -c '
import sys
all_, step, wse, need = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
print("BENCH inria7168_full_peak %.2f GiB_all_daemons" % (all_ / 2**30))
print("BENCH inria7168_full_peak_vs_22g %.3f of_22GiB" % (all_ / (22 * 2**30)))
print("BENCH inria7168_full_wse_peak_vs_plan %.3f of_plan" % (wse / need))
print("BENCH inria7168_full_step_sec %.0f s" % step)
' "$all" "$step" "$wse" "$need"
