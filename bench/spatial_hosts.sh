#!/usr/bin/env bash
# Benchmark: weak scaling of spatial partitions across hosts. Hosts are
# network namespaces on a bridge with links shaped to 1 Gbit/s
# (tests/cluster/netns-lib.sh): a coordinator, memoryx, swarmx and worker
# host and 4 wse-node hosts (1 thread each). The U-Net of
# examples/unet.toml at batch 1 trains with each sample in K stripes on K
# hosts, the image growing with K ((1024 K) x 1024), so every wse-node has
# the same rows to compute:
#
#   BENCH spatial_hosts_weak_efficiency_k<K> <ratio> of_k1   the step of one
#         1024^2 image on one host over the step of K stripes on K hosts
#         (1 is perfect weak scaling)
#   BENCH spatial_hosts_weak_efficiency_k<K>_cores <ratio> of_core_bound  the
#         same over what the machine's cores allow (cores / K) when K
#         wse-nodes of 1 thread outnumber them
#
# The hosts share this machine's cores: with more wse-nodes than cores the
# figure measures the cores as much as the partition (the script says how
# many there are). SPATIAL_HOSTS_STEPS (default 5) steps a run, the first
# left out; SPATIAL_HOSTS_DELAY_US (default 0) adds a delay at each link end
# (netns-lib.sh: without netem it costs CPU). Needs root; prints a SKIP
# line otherwise.
set -euo pipefail
src=${SOURCE_ROOT:?}
build=${BUILD_ROOT:?}
py=/usr/bin/python3
export NETNS_DELAY_US=${SPATIAL_HOSTS_DELAY_US:-0}
. "$src/tests/cluster/netns-lib.sh"
. "$src/bench/lib.sh"
netns_usable || { echo "SKIP: spatial_hosts benchmark: $NETNS_WHY"; exit 0; }
bench_host_line
steps=${SPATIAL_HOSTS_STEPS:-5}
netns_work spatial-hosts

net=10.77.0
netns_init "apsh$$"
netns_host coord "$net.1" 1gbit
netns_host mx "$net.2" 1gbit
netns_host swx "$net.3" 1gbit
netns_host wk "$net.4" 1gbit
for i in 1 2 3 4; do netns_host "wse$i" "$net.$((10 + i))" 1gbit; done
if [ -n "$NETNS_DELAY" ]; then delay="$NETNS_DELAY delay at each link end"; else delay="no added delay ($NETNS_DELAY_WHY)"; fi
echo "spatial_hosts: 8 hosts on links of 1 Gbit/s, $delay, on $(nproc) cores"
(umask 077; od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$work/secret"; echo >>"$work/secret")

coord="$net.1:7070"
mkdir -p "$work/coord" "$work/mx"
daemon() { # daemon HOST NAME BINARY ARGS...
  local h="$1" name="$2" bin="$3"
  shift 3
  netns_spawn "$h" "$work/$name.log" "$build/$bin" --name "$name" --secret-file "$work/secret" "$@"
}
daemon coord coordinator coordinator/coordinator --listen "$coord" --state-dir "$work/coord"
daemon mx memoryx memoryx/memoryx --listen "$net.2:7100" --coordinator "$coord" --state-dir "$work/mx"
daemon swx swarmx swarmx/swarmx --listen "$net.3:7100" --coordinator "$coord"
daemon wk worker worker/worker --listen "$net.4:7100" --coordinator "$coord"
for i in 1 2 3 4; do
  daemon "wse$i" "wse-node-$i" wse-node/wse-node --listen "$net.$((10 + i)):7100" \
    --coordinator "$coord" --threads 1 --wafer-memory 4G
done
submit() { netns_run coord env APPLIANCE_COORDINATOR="$coord" APPLIANCE_SECRET_FILE="$work/secret" \
  "$build/client/appliance-submit" "$@"; }
alive=$(netns_wait_alive 7 120 submit)
if [ "$alive" -lt 7 ]; then
  tail -n 5 "$work"/*.log >&2
  echo "spatial_hosts: only $alive of 7 daemons joined the coordinator" >&2
  exit 1
fi

step() { # step K: the median step of K stripes of (1024 K) x 1024 on K hosts
  sed -e "s/^max_steps = .*/max_steps = $steps/" -e "s/^log_steps = .*/log_steps = 1/" \
    -e "s/^eval_frequency = .*/eval_frequency = 0/" \
    -e "s/^num_csx = .*/num_csx = $1\nspatial_partitions = $1/" \
    -e "s/^batch_size = .*/batch_size = 1/" -e "s|^input_shape = .*|input_shape = [3, $((1024 * $1)), 1024]|" \
    -e '/^\[eval_input\]/,/^\[model\]/{/^\[model\]/!d}' \
    -e "s|^model_dir = .*|model_dir = \"$work/k$1\"|" "$src/examples/unet.toml" > "$work/k$1.toml"
  local out
  out=$(submit "$work/k$1.toml" 2>&1) || { echo "$out" >&2; tail -n 20 "$work"/*.log >&2; exit 1; }
  echo "$out" | "$py" "$src/bench/step_times.py" --skip 1 | awk '{printf "%.2f\n", $1}'
}

t1=$(step 1)
echo "spatial_hosts: one 1024^2 image on one host: $t1 s/step"
for k in 2 4; do
  tk=$(step "$k")
  echo "spatial_hosts: $k stripes of $((1024 * k)) x 1024 on $k hosts: $tk s/step"
  "$py" -c 'import sys
k, t1, tk, cores = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
print("BENCH spatial_hosts_weak_efficiency_k%d %.3f of_k1" % (k, t1 / tk))
if k > cores:  # the hosts share the cores: the best they can do is cores / k
    print("BENCH spatial_hosts_weak_efficiency_k%d_cores %.3f of_core_bound" % (k, t1 / tk / (cores / k)))' \
    "$k" "$t1" "$tk" "$(nproc)"
done
