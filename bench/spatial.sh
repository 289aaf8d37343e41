#!/usr/bin/env bash
# Benchmark: spatial partitions on this host. The U-Net of
# examples/unet.toml at batch 1, each sample in K horizontal stripes on K
# wse-nodes of 1 thread each:
#
#   BENCH spatial_50mp_peak_per_wse_node <GiB> GiB   the 7168x7168 image (51
#         megapixels) in 4 stripes on 4 wse-nodes, 3 steps: the largest
#         wse-node peak (VmHWM)
#   BENCH spatial_50mp_peak_vs_plan <ratio> of_plan  that peak over what
#         --plan says a stripe needs
#   BENCH spatial_50mp_step_sec <seconds> s          its median step
#   BENCH halo_overhead <ratio> of_stripe_compute    2048x2048 in 2 stripes on
#         2 wse-nodes of 1 thread (the 2 cores): the step over the compute of
#         the slower stripe in it (its forward, loss, backward and update
#         phases from /metrics; the rest of a step is waiting: for the other
#         stripe's rows and sums, the weights, the batch). The stripes
#         compute at once, each on a core, so this is what the partition
#         adds to a step
#   BENCH halo_overhead_vs_sum <ratio> of_stripes_compute_sum  the same step
#         over the two stripes' compute added up (below 1: they overlap)
#   BENCH spatial_wait_stripes_share_2048 <ratio> of_step  of a stripe's
#         step, the time blocked on the other stripe
#   BENCH spatial_k2_vs_whole_2048 <ratio> of_whole  the same step over one
#         wse-node of 2 threads computing whole samples (the same cores)
#   BENCH spatial_weak_scaling_k<K> <ratio> of_k1    the step of K stripes of
#         (1024 K) x 1024 images over the step of one 1024^2 image on one
#         wse-node: 1 is perfect weak scaling; on one host the K wse-nodes
#         share its cores, so above 2 stripes on 2 cores this measures the
#         cores, not the halo exchange
#
# SPATIAL_BIG (default 7168; 0 skips the 51-megapixel run, which takes most
# of the machine's memory and tens of minutes); SPATIAL_SMALL=0 skips the
# rest.
set -euo pipefail
src=${SOURCE_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
build=${BUILD_ROOT:-$src/build}
py=/usr/bin/python3
big=${SPATIAL_BIG:-7168}
. "$src/bench/lib.sh"
bench_work spatial
bench_host_line

job() { # NAME HEIGHT WIDTH STRIPES STEPS: the example U-Net, batch 1, on STRIPES wse-nodes
  sed -e "s/^max_steps = .*/max_steps = $5/" -e "s/^log_steps = .*/log_steps = 1/" \
    -e "s/^eval_frequency = .*/eval_frequency = 0/" \
    -e "s/^num_csx = .*/num_csx = $4\nspatial_partitions = $4/" \
    -e "s/^batch_size = .*/batch_size = 1/" -e "s|^input_shape = .*|input_shape = [3, $2, $3]|" \
    -e '/^\[eval_input\]/,/^\[model\]/{/^\[model\]/!d}' \
    -e "s|^model_dir = .*|model_dir = \"$work/$1\"|" "$src/examples/unet.toml" > "$work/$1.toml"
  echo "$work/$1.toml"
}

# phases WSE: "<all phases> <compute phases>" of a wse-node, seconds, from /metrics
phases() {
  local url
  url=$(awk -v n="$1" '$1 == n {print $2}' "$run/metrics")
  "$py" -c 'import re, sys, urllib.request
t = urllib.request.urlopen(sys.argv[1], timeout=5).read().decode()
p = {m.group(1): float(m.group(2)) for m in re.finditer(
    r"^appliance_step_phase_seconds_total\{phase=\"(\w+)\"\} (\S+)$", t, re.M)}
print(sum(p.values()), sum(p[k] for k in ("forward", "loss", "backward", "update")), p.get("wait_stripes", 0))' "$url"
}

# train NAME H W K STEPS THREADS: runs the job on a fresh cluster of K
# wse-nodes; prints "median_step_sec largest_wse_peak_bytes plan_bytes
# wall_sec compute_sum_sec wait_stripes_sec compute_max_sec" (wall: one
# stripe's phases over the job; compute: the stripes' compute phases summed,
# and the largest)
train() {
  local file
  file=$(job "$1" "$2" "$3" "$4" "$5")
  "$src/deploy/local/appliance-up" --replicas "$4" --threads "$6" --wafer-memory 20G --metrics \
    --dir "$run" --build "$build" >/dev/null
  local plan
  plan=$("$build/client/appliance-submit" --plan --wafer-memory 20G --threads "$6" --json "$file")
  local out
  out=$(set -a; . "$run/env"; set +a; cd "$work" && "$build/client/appliance-submit" "$file" 2>&1) ||
    { echo "spatial: the $1 job failed: $out" >&2; exit 1; }
  sleep 1.2 # the exposition is rendered once a second
  local peak=0 wall=0 compute=0 wait=0 most=0 k a c w f
  for f in "$run"/pids/wse-node-*.pid; do
    k=$(awk '/^VmHWM:/ {printf "%.0f\n", $2 * 1024}' "/proc/$(cat "$f")/status" 2>/dev/null || echo 0)
    [ "$k" -gt "$peak" ] && peak=$k
    read -r a c w < <(phases "$(basename "$f" .pid)")
    wall=$a
    compute=$("$py" -c "print($compute + $c)")
    most=$("$py" -c "print(max($most, $c))")
    wait=$w
  done
  "$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null
  local step
  read -r step _ < <(echo "$out" | "$py" "$src/bench/step_times.py" --log "$run/logs/coordinator.log")
  rm -rf "$run"
  local need
  need=$(echo "$plan" | "$py" -c 'import json, sys; p = json.load(sys.stdin)
print(next(m["bytes_per_replica"] for m in p["modes"] if m["mode"] == p["mode"]))')
  echo "$step $peak $need $wall $compute $wait $most"
}

ratio() { "$py" -c "import sys; print('%.3f' % (float(sys.argv[1]) / float(sys.argv[2])))" "$1" "$2"; }
sec() { "$py" -c "import sys; print('%.2f' % float(sys.argv[1]))" "$1"; }

# 2048^2: 2 stripes against the stripes' compute and against whole samples
if [ "${SPATIAL_SMALL:-1}" != 0 ]; then
read -r k2_step _ _ k2_wall k2_compute k2_wait k2_most < <(train k2 2048 2048 2 5 1)
read -r w_step _ _ w_wall _ _ < <(train whole 2048 2048 1 5 2)
echo "2048^2: 2 stripes $(sec "$k2_step") s/step (5 steps: phases $(sec "$k2_wall") s, the stripes'" \
  "compute $(sec "$k2_compute") s, the slower $(sec "$k2_most") s, blocked on the other stripe" \
  "$(sec "$k2_wait") s); whole samples on one wse-node of 2 threads $(sec "$w_step") s/step"
echo "BENCH halo_overhead $(ratio "$k2_wall" "$k2_most") of_stripe_compute"
echo "BENCH halo_overhead_vs_sum $(ratio "$k2_wall" "$k2_compute") of_stripes_compute_sum"
echo "BENCH spatial_wait_stripes_share_2048 $(ratio "$k2_wait" "$k2_wall") of_step"
echo "BENCH spatial_k2_vs_whole_2048 $(ratio "$k2_wall" "$w_wall") of_whole"

# weak scaling: the image grows with the stripes
read -r s1 _ < <(train weak1 1024 1024 1 5 1)
for k in 2 4; do
  read -r sk _ < <(train "weak$k" $((1024 * k)) 1024 "$k" 5 1)
  echo "weak scaling: $k stripes of $((1024 * k)) x 1024: $(sec "$sk") s/step, one 1024^2 image $(sec "$s1") s/step"
  echo "BENCH spatial_weak_scaling_k$k $(ratio "$sk" "$s1") of_k1"
done
fi

if [ "$big" -gt 0 ]; then
  read -r b_step b_peak b_need _ < <(train big "$big" "$big" 4 3 1)
  echo "${big}^2 in 4 stripes: $(sec "$b_step") s/step, the largest wse-node peak $((b_peak >> 20)) MiB," \
    "the plan $((b_need >> 20)) MiB a stripe"
  "$py" -c 'import sys; print("BENCH spatial_50mp_peak_per_wse_node %.2f GiB" % (int(sys.argv[1]) / 2**30))' "$b_peak"
  echo "BENCH spatial_50mp_peak_vs_plan $(ratio "$b_peak" "$b_need") of_plan"
  echo "BENCH spatial_50mp_step_sec $b_step s"
fi
