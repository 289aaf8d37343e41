#!/usr/bin/env bash
# Benchmark: volumes on one host, beside PyTorch. The Model Zoo's SKM-TEA
# 3D U-Net (tests/client/modelzoo/params_skm_tea.yaml's [model] and
# optimizer, on synthetic_volume's volumes of one channel and 5 classes) at
# batch 1 on one replica with 2 threads, and its PyTorch twin
# (bench/volumes/skm_tea_twin.py: the same layers, loss, optimizer, batch
# and threads) in the same script:
#
#   BENCH volume_peak_bytes_per_voxel_vs_pytorch <ratio> of_pytorch
#         every daemon's peak together over PyTorch's process, 128^3, float32,
#         the appliance in its leanest plan (wse-nodes of the memory it needs,
#         the outputs they do not hold computed again)
#   BENCH volume_step_time_lean_vs_pytorch_128 <ratio> of_pytorch  that run's step
#   BENCH volume_step_time_vs_pytorch_128 <ratio> of_pytorch   median step, float32
#   BENCH volume_step_time_vs_pytorch_128_bf16 <ratio> of_pytorch_autocast
#         the appliance's mixed precision (the config's own) against autocast
#   BENCH volume_max_voxels_appliance <voxels> voxels  the largest cube whose
#         plan fits 20 GiB less what the other daemons took (--plan)
#   BENCH volume_max_voxels_pytorch <voxels> voxels  where PyTorch's peak,
#         linear in the voxels from its peaks at 64^3 and 128^3, reaches 20 GiB
#   BENCH volume_max_voxels_vs_pytorch <ratio> of_pytorch
#   BENCH volume_peak_bytes_per_voxel_vs_pytorch_bf16 <ratio> of_pytorch_autocast
#         the same in mixed precision (the config's own: bfloat16 compute and
#         kept outputs) in its leanest plan, against autocast's peak
#   BENCH volume_max_voxels_vs_pytorch_bf16 <ratio> of_pytorch_autocast
#         the largest cube in mixed precision against autocast's, as above
#   BENCH skm_tea_full_volume_plan <GiB> GiB_per_replica  what the plan asks
#         for the whole 160x512x512 volume (mixed precision)
#
# VOLUME_SIDE (default 128) and VOLUME_STEPS (default 3) size the runs; a
# step at 128^3 takes tens of seconds on 2 cores. Without Debian's
# python3-torch the PyTorch figures are skipped, with a message.
set -euo pipefail
src=${SOURCE_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
build=${BUILD_ROOT:-$src/build}
py=/usr/bin/python3
side=${VOLUME_SIDE:-128}
steps=${VOLUME_STEPS:-3}
limit=$((20 << 30))
. "$src/bench/lib.sh"
bench_work volumes
bench_host_line

job() { # SIDE STEPS NAME MIXED(true|false) [D H W]: the SKM-TEA U-Net as params.yaml
  local d=$1 h=$1 w=$1
  [ $# -ge 7 ] && { d=$5; h=$6; w=$7; }
  cat > "$work/$3.yaml" <<YAML
train_input:
    data_processor: "synthetic_volume"
    image_shape: [$d, $h, $w]
    batch_size: 1
    num_classes: 5
    num_samples: 64
    normalize_data_method: "standard_score"
model:
$(sed -n '/^model:/,/^optimizer:/p' "$src/tests/client/modelzoo/params_skm_tea.yaml" |
  sed -e '1d;$d' -e "s/^\( *mixed_precision:\).*/\1 $4/" -e "s/^\( *use_bfloat16:\).*/\1 $4/" |
  grep -v 'eval_')
optimizer:
    optimizer_type: "AdamW"
    weight_decay: 0.0
    learning_rate: 5.0e-4
runconfig:
    max_steps: $2
    log_steps: 1
    seed: 1
    num_csx: 1
    model_dir: "$work/$3"
YAML
  echo "$work/$3.yaml"
}

# lean FILE: the bytes a replica of the job needs in its leanest plan (the
# outputs the wafer does not hold computed again), 5% more, in whole MiB
lean() {
  "$build/client/appliance-submit" --plan --wafer-memory 64M --threads 2 --json "$1" |
    "$py" -c 'import json, sys; p = json.load(sys.stdin); print("%dM" % (min(m["bytes_per_replica"] for m in p["modes"]) * 1.05 / 2**20 + 1))'
}

# appliance SIDE STEPS NAME MIXED [WAFER]: runs the job on a fresh local
# cluster with wse-nodes of WAFER (default 20G: every output kept where it
# fits; "lean": the leanest plan's need); prints "median_step_sec
# wse_node_peak_bytes all_daemons_peak_bytes"
appliance() {
  local file out wafer=${5:-20G}
  file=$(job "$1" "$2" "$3" "$4")
  [ "$wafer" = lean ] && wafer=$(lean "$file")
  "$src/deploy/local/appliance-up" --replicas 1 --threads 2 --wafer-memory "$wafer" --dir "$run" \
    --build "$build" >/dev/null
  out=$(set -a; . "$run/env"; set +a; cd "$work" && "$build/client/appliance-submit" "$file" 2>&1) ||
    { echo "volumes: the $1^3 job failed: $out" >&2; exit 1; }
  local wse all
  read -r wse all < <(bench_daemon_peaks "$run")
  "$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null
  local step
  read -r step _ < <(echo "$out" | "$py" "$src/bench/step_times.py" --log "$run/logs/coordinator.log")
  rm -rf "$run"
  echo "$step $wse $all"
}

read -r f_step f_wse f_all < <(appliance "$side" "$steps" f$side false)
echo "appliance ${side}^3 float32: $f_step s/step, wse-node peak $((f_wse >> 20)) MiB, every daemon $((f_all >> 20)) MiB"
read -r l_step l_wse l_all < <(appliance "$side" "$steps" l$side false lean)
echo "appliance ${side}^3 float32, the lean plan ($(lean "$work/l$side.yaml") a wse-node): $l_step s/step, wse-node peak $((l_wse >> 20)) MiB, every daemon $((l_all >> 20)) MiB"
read -r b_step b_wse b_all < <(appliance "$side" "$steps" b$side true)
echo "appliance ${side}^3 mixed precision: $b_step s/step, wse-node peak $((b_wse >> 20)) MiB, every daemon $((b_all >> 20)) MiB"
read -r lb_step lb_wse lb_all < <(appliance "$side" "$steps" lb$side true lean)
echo "appliance ${side}^3 mixed precision, the lean plan ($(lean "$work/lb$side.yaml") a wse-node): $lb_step s/step, wse-node peak $((lb_wse >> 20)) MiB, every daemon $((lb_all >> 20)) MiB"
others=$((f_all - f_wse))
voxels=$(build_plan() { "$build/client/appliance-submit" --plan --wafer-memory $((limit - others)) --threads 2 --json "$1"; }
  build_plan "$work/f$side.yaml" | "$py" -c 'import json, sys; p = json.load(sys.stdin); print(max(m.get("largest_cube_input", 0) for m in p["modes"]) ** 3)')
echo "BENCH volume_max_voxels_appliance $voxels voxels"
voxels_bf16=$("$build/client/appliance-submit" --plan --wafer-memory $((limit - others)) --threads 2 --json "$work/b$side.yaml" |
  "$py" -c 'import json, sys; p = json.load(sys.stdin); print(max(m.get("largest_cube_input", 0) for m in p["modes"]) ** 3)')
echo "BENCH volume_max_voxels_appliance_bf16 $voxels_bf16 voxels"
full=$(job 160 1 full true 160 512 512)
"$build/client/appliance-submit" --plan --wafer-memory 1T --threads 2 --json "$full" |
  "$py" -c 'import json, sys; p = json.load(sys.stdin); print("BENCH skm_tea_full_volume_plan %.1f GiB_per_replica" % (min(m["bytes_per_replica"] for m in p["modes"]) / 2**30))'

if "$py" -c "import torch" 2>/dev/null; then
  t=$("$py" "$src/bench/volumes/skm_tea_twin.py" --side "$side" --steps "$steps")
  tb=$("$py" "$src/bench/volumes/skm_tea_twin.py" --side "$side" --steps "$steps" --bf16)
  ts=$("$py" "$src/bench/volumes/skm_tea_twin.py" --side $((side / 2)) --steps 2)
  tsb=$("$py" "$src/bench/volumes/skm_tea_twin.py" --side $((side / 2)) --steps 2 --bf16)
  echo "pytorch ${side}^3: $t"
  echo "pytorch ${side}^3 autocast: $tb"
  echo "pytorch $((side / 2))^3: $ts"
  "$py" -c '
import json, sys
f_step, f_all, b_step, app_vox, limit = (float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]),
                                         int(sys.argv[4]), int(sys.argv[5]))
t, tb, ts = (json.loads(a) for a in sys.argv[6:9])
l_step, l_all = float(sys.argv[9]), int(sys.argv[10])
print("pytorch: %.0f bytes a voxel at %d^3 (its peak over the voxels); the appliance %.0f, %.0f "
      "in its lean plan" % (t["peak_rss_bytes"] / t["voxels"], t["shape"][0], f_all / t["voxels"],
                            l_all / t["voxels"]))
print("BENCH volume_peak_bytes_per_voxel_vs_pytorch %.3f of_pytorch" % (l_all / t["peak_rss_bytes"]))
print("BENCH volume_peak_bytes_per_voxel_kept_vs_pytorch %.3f of_pytorch" % (f_all / t["peak_rss_bytes"]))
print("BENCH volume_step_time_lean_vs_pytorch_%d %.3f of_pytorch" % (t["shape"][0], l_step / t["step_sec"]))
print("BENCH volume_step_time_vs_pytorch_%d %.3f of_pytorch" % (t["shape"][0], f_step / t["step_sec"]))
print("BENCH volume_step_time_vs_pytorch_%d_bf16 %.3f of_pytorch_autocast" % (t["shape"][0], b_step / tb["step_sec"]))
per = (t["peak_rss_bytes"] - ts["peak_rss_bytes"]) / (t["voxels"] - ts["voxels"])
base = ts["peak_rss_bytes"] - per * ts["voxels"]
t_vox = int((limit - base) / per)
print("BENCH volume_max_voxels_pytorch %d voxels" % t_vox)
print("BENCH volume_max_voxels_vs_pytorch %.2f of_pytorch" % (app_vox / t_vox))
tsb, lb_all, app_vox_bf16 = json.loads(sys.argv[11]), int(sys.argv[12]), int(sys.argv[13])
print("BENCH volume_peak_bytes_per_voxel_vs_pytorch_bf16 %.3f of_pytorch_autocast" % (lb_all / tb["peak_rss_bytes"]))
per = (tb["peak_rss_bytes"] - tsb["peak_rss_bytes"]) / (tb["voxels"] - tsb["voxels"])
base = tsb["peak_rss_bytes"] - per * tsb["voxels"]
tb_vox = int((limit - base) / per)
print("BENCH volume_max_voxels_pytorch_bf16 %d voxels" % tb_vox)
print("BENCH volume_max_voxels_vs_pytorch_bf16 %.2f of_pytorch_autocast" % (app_vox_bf16 / tb_vox))
' "$f_step" "$f_all" "$b_step" "$voxels" "$limit" "$t" "$tb" "$ts" "$l_step" "$l_all" "$tsb" "$lb_all" "$voxels_bf16"
else
  echo "volumes: PyTorch (Debian's python3-torch) is not installed: the PyTorch figures are skipped"
fi
