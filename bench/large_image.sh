#!/usr/bin/env bash
# Benchmark: large images on one host, beside PyTorch. The U-Net of
# examples/unet.toml at batch 1, one replica with 2 threads (the whole
# appliance on this host), and its PyTorch twin (bench/torch_twin.py: the
# same layers, loss, batch and threads) in the same script:
#
#   BENCH step_time_vs_pytorch_2048 <ratio> of_pytorch    (median step, 2048^2)
#   BENCH peak_bytes_per_pixel_vs_pytorch <ratio> of_pytorch  (peak memory of
#         every daemon together over PyTorch's process, 2048^2)
#   BENCH large_image_max_side_appliance <side> px  the largest square input
#         whose plan fits 20 GiB less what the other daemons took in the big
#         run (the plan holds the wse-node's peak within 10%: tests/cluster/peak.sh)
#   BENCH large_image_max_side_pytorch <side> px    where PyTorch's peak,
#         linear in the pixels from its peaks at 1024^2 and 2048^2, reaches 20 GiB
#   BENCH large_image_pixels_vs_pytorch <ratio> of_pytorch
#   BENCH large_image_step_sec_<big> <seconds> s     (median step, the big run)
#   BENCH large_image_iou_<big> <iou> after_<n>_steps (held-out synthetic images)
#   BENCH large_image_peak_<big> <GiB> GiB           every daemon together
#   BENCH large_image_max_side_appliance_bf16 <side> px  the same with
#         activation_dtype = "bfloat16"
#   with LARGE_IMAGE_STRETCH=<side> (default 0: skipped), a run at that side
#   with bfloat16 activations: BENCH large_image_step_sec_<side>_bf16 and
#   BENCH large_image_peak_<side>_bf16
#
# LARGE_IMAGE_BIG (default 5120; 0 skips the big run) and LARGE_IMAGE_STEPS
# (default 16; the job evaluates every quarter, the IoU curve is printed)
# size the big run; it takes tens of minutes. Without Debian's python3-torch
# the PyTorch figures are skipped, with a message.
set -euo pipefail
src=${SOURCE_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
build=${BUILD_ROOT:-$src/build}
py=/usr/bin/python3
big=${LARGE_IMAGE_BIG:-5120}
big_steps=${LARGE_IMAGE_STEPS:-16}
limit=$((20 << 30))
work=$(mktemp -d "${TMPDIR:-/tmp}/appliance-large.XXXXXX")
run="$work/run"
cleanup() {
  "$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
. "$src/bench/lib.sh"
bench_host_line

job() { # SIDE STEPS EVAL_SAMPLES NAME [bf16]: the example U-Net at SIDE^2, batch 1, one replica
  local dtype=""
  [ "${5:-}" = bf16 ] && dtype='activation_dtype = "bfloat16"'
  sed -e "s/^max_steps = .*/max_steps = $2/" -e "s/^log_steps = .*/log_steps = 1/" \
    -e "s/^loss = \(.*\)/loss = \1\n$dtype/" \
    -e "s/^eval_frequency = .*/eval_frequency = ${EVAL_EVERY:-0}/" -e "s/^num_csx = .*/num_csx = 1/" \
    -e "s/^batch_size = .*/batch_size = 1/" -e "s/^num_samples = 16/num_samples = $3/" \
    -e "s|^input_shape = .*|input_shape = [3, $1, $1]|" \
    -e "s|^model_dir = .*|model_dir = \"$work/$4\"|" "$src/examples/unet.toml" > "$work/$4.toml"
  echo "$work/$4.toml"
}

# appliance SIDE STEPS EVAL_SAMPLES NAME: runs the job on a fresh local cluster;
# prints "median_step_sec wse_node_peak_bytes all_daemons_peak_bytes iou"
appliance() {
  local file
  file=$(job "$@")
  "$src/deploy/local/appliance-up" --replicas 1 --threads 2 --wafer-memory 20G --dir "$run" \
    --build "$build" >/dev/null
  local out
  out=$(set -a; . "$run/env"; set +a; cd "$work" && "$build/client/appliance-submit" "$file" 2>&1) ||
    { echo "large_image: the $1^2 job failed: $out" >&2; exit 1; }
  local wse all
  read -r wse all < <(bench_daemon_peaks "$run")
  "$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null
  local step iou
  read -r step iou < <(echo "$out" | "$py" "$src/bench/step_times.py" --log "$run/logs/coordinator.log")
  rm -rf "$run"
  echo "$step $wse $all $iou"
}

read -r app_step app_wse app_all _ < <(appliance 2048 4 1 a2048)
echo "appliance 2048^2: $app_step s/step, wse-node peak $((app_wse >> 20)) MiB, every daemon $((app_all >> 20)) MiB"

have_torch=false
if "$py" -c "import torch" 2>/dev/null; then
  have_torch=true
  t2048=$("$py" "$src/bench/torch_twin.py" "$work/a2048.toml" --threads 2 --steps 4)
  t1024=$("$py" "$src/bench/torch_twin.py" "$work/a2048.toml" --side 1024 --threads 2 --steps 2)
  echo "pytorch 2048^2: $t2048"
  echo "pytorch 1024^2: $t1024"
  "$py" -c '
import json, sys
a_step, a_all = float(sys.argv[1]), int(sys.argv[2])
t = json.loads(sys.argv[3])
print("BENCH step_time_vs_pytorch_2048 %.3f of_pytorch" % (a_step / t["step_sec"]))
print("BENCH peak_bytes_per_pixel_vs_pytorch %.3f of_pytorch" % (a_all / t["peak_rss_bytes"]))
' "$app_step" "$app_all" "$t2048"
else
  echo "large_image: PyTorch (Debian's python3-torch) is not installed: the PyTorch figures are skipped"
fi

if [ "$big" -gt 0 ]; then
  read -r big_step big_wse big_all big_iou < <(EVAL_EVERY=$((big_steps / 4)) appliance "$big" "$big_steps" 2 "a$big")
  # the eval at the end: its IoU; every step's time
  echo "BENCH large_image_step_sec_$big $big_step s"
  echo "BENCH large_image_iou_$big $big_iou after_${big_steps}_steps"
  "$py" -c 'import sys; print("BENCH large_image_peak_%s %.2f GiB" % (sys.argv[1], int(sys.argv[2]) / 2**30))' "$big" "$big_all"
  others=$((big_all - big_wse))
else
  others=$((app_all - app_wse))
fi
plan=$("$build/client/appliance-submit" --plan --wafer-memory $((limit - others)) --threads 2 --json "$work/a2048.toml")
side=$(echo "$plan" | "$py" -c 'import json, sys; p = json.load(sys.stdin); print(max(m["largest_square_input"] for m in p["modes"]))')
echo "BENCH large_image_max_side_appliance $side px"
job 2048 1 1 b2048 bf16 >/dev/null
plan=$("$build/client/appliance-submit" --plan --wafer-memory $((limit - others)) --threads 2 --json "$work/b2048.toml")
echo "BENCH large_image_max_side_appliance_bf16 $(echo "$plan" | "$py" -c 'import json, sys; p = json.load(sys.stdin); print(max(m["largest_square_input"] for m in p["modes"]))') px"
if $have_torch; then
  "$py" -c '
import json, math, sys
side, limit = int(sys.argv[1]), int(sys.argv[2])
a, b = json.loads(sys.argv[3]), json.loads(sys.argv[4])
per_px = (a["peak_rss_bytes"] - b["peak_rss_bytes"]) / (a["side"] ** 2 - b["side"] ** 2)
base = b["peak_rss_bytes"] - per_px * b["side"] ** 2
t_side = int(math.sqrt((limit - base) / per_px)) // 16 * 16
print("pytorch: %.0f bytes per pixel over a base of %.0f MiB" % (per_px, base / 2**20))
print("BENCH large_image_max_side_pytorch %d px" % t_side)
print("BENCH large_image_pixels_vs_pytorch %.2f of_pytorch" % (side * side / (t_side * t_side)))
' "$side" "$limit" "$t2048" "$t1024"
fi

stretch=${LARGE_IMAGE_STRETCH:-0}
if [ "$stretch" -gt 0 ]; then
  read -r s_step _ s_all s_iou < <(appliance "$stretch" 3 1 "s$stretch" bf16)
  echo "BENCH large_image_step_sec_${stretch}_bf16 $s_step s"
  "$py" -c 'import sys; print("BENCH large_image_peak_%s_bf16 %.2f GiB" % (sys.argv[1], int(sys.argv[2]) / 2**30))' "$stretch" "$s_all"
fi
