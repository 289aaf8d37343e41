#!/usr/bin/env bash
# The whole SKM-TEA volume on this host: the Model Zoo's SKM-TEA layers
# (tests/client/modelzoo/params_skm_tea.yaml: its 3D U-Net, mixed
# precision) on synthetic 160x512x512 volumes with structure in them
# (synthetic_volume: shapes of each class), batch 1, trained for
# SKM_STEPS steps (default 4) on one wse-node whose wafer is a byte short
# of the leanest plan's need with two batches in flight (so it holds one:
# Plan.feed_credits 1), evaluated every SKM_EVAL steps (default 2) on a
# held-out volume. SKM_WAFER (e.g. 16G) gives the wafer instead, and the
# plan decides (spilling the bfloat16 copies to the wse-node's --spill-dir
# where only that fits). Prints, beside the plan's figure:
#   BENCH skm_tea_full_volume_plan <GiB> GiB_per_replica   what the plan asks
#   BENCH skm_tea_full_volume_peak <GiB> GiB_all_daemons    every daemon's peak
#         resident memory (VmHWM) added up
#   BENCH skm_tea_full_volume_peak_vs_22g <ratio> of_22GiB  the same against
#         the host budget the issue sets (below 1: it fits)
#   BENCH skm_tea_full_volume_step_sec <s> s               median step
#   BENCH skm_tea_full_volume_dice_<step> <Dice> mean_over_classes  the
#         held-out volume's Dice (the Model Zoo's DSC, background ignored)
# and each daemon's peak and the losses. A step takes about ten minutes
# on 2 cores (the step timeout the plan sets for such a step, runconfig.step_timeout_seconds unset: 90 minutes); not for CI.
set -euo pipefail
src=${SOURCE_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
build=${BUILD_ROOT:-$src/build}
py=/usr/bin/python3
steps=${SKM_STEPS:-4}
every=${SKM_EVAL:-2}
. "$src/bench/lib.sh"
bench_work skm_tea_full
bench_host_line

cat > "$work/skm.yaml" <<YAML
train_input:
    data_processor: "synthetic_volume"
    image_shape: [160, 512, 512]
    batch_size: 1
    num_classes: 5
    num_samples: 8
    normalize_data_method: "standard_score"
eval_input:
    data_processor: "synthetic_volume"
    image_shape: [160, 512, 512]
    batch_size: 1
    num_classes: 5
    num_samples: 1
    normalize_data_method: "standard_score"
model:
$(sed -n '/^model:/,/^optimizer:/p' "$src/tests/client/modelzoo/params_skm_tea.yaml" |
  sed -e '1d;$d' -e "s/^\( *mixed_precision:\).*/\1 true/" -e "s/^\( *use_bfloat16:\).*/\1 true/")
optimizer:
    optimizer_type: "AdamW"
    weight_decay: 0.0
    learning_rate: 5.0e-4
runconfig:
    max_steps: $steps
    eval_frequency: $every
    log_steps: 1
    seed: 1
    num_csx: 1
    model_dir: "$work/skm"
YAML

if [ -n "${SKM_WAFER:-}" ]; then # a wafer of the caller's: the plan decides (spills where it must)
  wafer=$SKM_WAFER
  need=$("$build/client/appliance-submit" --plan --wafer-memory "$wafer" --threads 2 --json \
    "$work/skm.yaml" | "$py" -c '
import json, sys
p = json.load(sys.stdin)
assert p["fits"], p
print("plan: %s, %.1f GiB spilled, %d batch(es) in flight" % (p["mode"], p["spill_bytes"] / 2**30,
      p["feed_credits"]), file=sys.stderr)
print([m for m in p["modes"] if m["mode"] == p["mode"]][0]["bytes_per_replica"])')
else
need=$("$build/client/appliance-submit" --plan --wafer-memory 64M --threads 2 --json "$work/skm.yaml" |
  "$py" -c 'import json, sys; print(min(m["bytes_per_replica"] for m in json.load(sys.stdin)["modes"]))')
wafer=$((need - 1))
need=$("$build/client/appliance-submit" --plan --wafer-memory "$wafer" --threads 2 --spill-room 0 \
  --json "$work/skm.yaml" |
  "$py" -c '
import json, sys
p = json.load(sys.stdin)
assert p["fits"] and p["feed_credits"] == 1, p
print([m for m in p["modes"] if m["mode"] == p["mode"]][0]["bytes_per_replica"])')
fi
echo "BENCH skm_tea_full_volume_plan $("$py" -c "print('%.2f' % ($need / 2**30))") GiB_per_replica"
bench_one_wse_job skm_tea_full "$wafer" skm.yaml
grep -o "evaluation at step [0-9]* over .*" "$run/logs/coordinator.log" | sed 's/^/  /' || true
read -r _ all < <(bench_daemon_peaks "$run")
read -r step _ < <(echo "$out" | "$py" "$src/bench/step_times.py" --log "$run/logs/coordinator.log")
echo "the job took $(($(date +%s) - start)) s"
"$py" -c '
import sys
all_, step = int(sys.argv[1]), float(sys.argv[2])
print("BENCH skm_tea_full_volume_peak %.2f GiB_all_daemons" % (all_ / 2**30))
print("BENCH skm_tea_full_volume_peak_vs_22g %.3f of_22GiB" % (all_ / (22 * 2**30)))
print("BENCH skm_tea_full_volume_step_sec %.0f s" % step)
' "$all" "$step"
grep -o "evaluation at step [0-9]* over .*Dice [0-9.]*" "$run/logs/coordinator.log" |
  sed 's/evaluation at step \([0-9]*\) .*Dice \([0-9.]*\)/BENCH skm_tea_full_volume_dice_\1 \2 mean_over_classes/' || true
