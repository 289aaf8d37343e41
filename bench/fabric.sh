#!/usr/bin/env bash
# Benchmark: the weight fabric over shaped links between hosts (network
# namespaces on a bridge, tests/cluster/netns-lib.sh). A memoryx host and 8
# wse-node hosts on 1 Gbit/s links, a swarmx host on an 8 Gbit/s link (a
# SwarmX node has more ports); bench/fabric broadcasts a 64 MiB tensor from
# memoryx through swarmx to the 8 wse-nodes and reduces 64 MiB from them
# back: first the connection layer alone (bench/fabric.c), then the daemons
# training a 64 MiB layer (below). The link bound is the largest, over all
# hosts, of the bytes its link carries over its rate: 64 MiB at 1 Gbit/s for
# memoryx and each wse-node, 8 x 64 MiB at 8 Gbit/s for swarmx. Prints the
# median of 5 iterations (steps):
#   BENCH fabric_broadcast_64MiB_8 <bound/time> of_link_bound
#   BENCH fabric_reduce_64MiB_8 <bound/time> of_link_bound
#   BENCH daemons_broadcast_64MiB_8 <bound/time> of_link_bound
#   BENCH daemons_reduce_64MiB_8 <bound/time> of_link_bound
# and, when Open MPI (mpicc, mpirun) is installed, MPI_Bcast and MPI_Reduce
# of the same bytes from the memoryx host to the 8 wse-node hosts.
# FABRIC_ITERS sets the iterations (5); FABRIC_KEEP=1 keeps the daemons' logs
# and traces. The links get no added delay unless FABRIC_DELAY_US says so
# (e.g. 200): without netem the delay is a user-space delay line in every
# host (netns-lib.sh), whose work per packet takes CPU from the daemons on a
# small machine and lowers the figures; where the kernel has netem it costs
# nothing. Needs root; prints a SKIP line otherwise.
set -euo pipefail
src=${SOURCE_ROOT:?}
build=${BUILD_ROOT:?}
py=/usr/bin/python3
export NETNS_DELAY_US=${FABRIC_DELAY_US:-0}
. "$src/tests/cluster/netns-lib.sh"
netns_usable || { echo "SKIP: fabric benchmark: $NETNS_WHY"; exit 0; }

bytes=$((64 << 20))
iters=${FABRIC_ITERS:-5}
leaves=8
NETNS_KEEP_WORK=${FABRIC_KEEP:-}
netns_work fabric

net=10.77.0
netns_init "apfb$$"
netns_host coord "$net.1" 1gbit
netns_host mx "$net.2" 1gbit
netns_host swx "$net.3" 8gbit
netns_host wk "$net.4" 1gbit
for i in $(seq 1 $leaves); do netns_host "wse$i" "$net.$((10 + i))" 1gbit; done
if [ -n "$NETNS_DELAY" ]; then delay="$NETNS_DELAY delay at each link end"; else delay="no added delay ($NETNS_DELAY_WHY)"; fi
echo "fabric: memoryx and $leaves wse-node hosts at 1 Gbit/s, swarmx at 8 Gbit/s, $delay, TCP $(netns_run mx sysctl -n net.ipv4.tcp_congestion_control)"
(umask 077; od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$work/secret"; echo >>"$work/secret")

# Bytes over bits per second, in seconds: the bound is the same on every host.
bound=$("$py" -c "print(max($bytes * 8 / 1e9, $leaves * $bytes * 8 / 8e9))")
median() { "$py" -c 'import statistics, sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
report() { # report NAME SECONDS [BOUND]: the bound (default $bound) over the time
  "$py" -c 'import sys; print("BENCH %s %.3f of_link_bound" % (sys.argv[1], float(sys.argv[3]) / float(sys.argv[2])))' \
    "$1" "$2" "${3:-$bound}"
}

fab="$build/bench/fabric"
common=(--secret-file "$work/secret" --bytes "$bytes" --leaves "$leaves")
netns_spawn swx "$work/relay.log" "$fab" relay --listen "$net.3:7200" --up "$net.2:7200" "${common[@]}"
for i in $(seq 1 $leaves); do
  netns_spawn "wse$i" "$work/leaf$i.log" "$fab" leaf --up "$net.3:7200" --index $((i - 1)) "${common[@]}"
done
if ! netns_run mx timeout 300 "$fab" root --listen "$net.2:7200" --iters "$iters" "${common[@]}" >"$work/root.out"; then
  cat "$work/root.out" "$work"/*.log >&2
  echo "fabric: the run failed" >&2
  exit 1
fi
sed 's/^/fabric: /' "$work/root.out"
b=$(median $(awk '{ print $4 }' "$work/root.out"))
r=$(median $(awk '{ print $6 }' "$work/root.out"))
echo "BENCH fabric_broadcast_64MiB_8_s $b s (link bound $bound s)"
echo "BENCH fabric_reduce_64MiB_8_s $r s (link bound $bound s)"
report fabric_broadcast_64MiB_8 "$b"
report fabric_reduce_64MiB_8 "$r"

# The same through the daemons: a coordinator, a worker, memoryx, swarmx and
# 8 wse-nodes on those hosts train a model whose one weight tensor is 64 MiB
# (dense 4096 -> 4096) in Weight Streaming, each daemon tracing its stream
# (--trace); bench/trace_phases.py measures, for each step, the forward
# weight broadcast (memoryx's first chunk out to the last wse-node's last
# chunk in) and the gradient reduction (the last wse-node's first gradient
# out to memoryx's last reduced chunk in). The first step is left out (warm-up).
dsteps=$((iters + 1))
mkdir -p "$work/d" "$work/d/coord" "$work/d/mx"
coord="$net.1:7070"
first_daemon=${#NETNS_PIDS[@]}   # netns_spawn records the daemons' pids from here
dnode() { # dnode HOST NAME BINARY ARGS...
  local h="$1" name="$2" bin="$3"
  shift 3
  netns_spawn "$h" "$work/d/$name.log" "$build/$bin" --name "$name" --secret-file "$work/secret" \
    --trace "$work/d/$name.trace" "$@"
}
dnode coord coordinator coordinator/coordinator --listen "$coord" --state-dir "$work/d/coord"
dnode mx memoryx memoryx/memoryx --listen "$net.2:7100" --coordinator "$coord" --state-dir "$work/d/mx"
dnode swx swarmx swarmx/swarmx --listen "$net.3:7100" --coordinator "$coord"
dnode wk worker worker/worker --listen "$net.4:7100" --coordinator "$coord"
for i in $(seq 1 $leaves); do
  dnode "wse$i" "wse-node-$i" wse-node/wse-node --listen "$net.$((10 + i)):7100" --coordinator "$coord"
done
dsubmit() { netns_run coord env APPLIANCE_COORDINATOR="$coord" APPLIANCE_SECRET_FILE="$work/secret" \
  "$build/client/appliance-submit" "$@"; }
alive=$(netns_wait_alive $((leaves + 3)) 120 dsubmit)
if [ "$alive" -lt $((leaves + 3)) ]; then
  tail -n 5 "$work/d"/*.log >&2
  echo "fabric: only $alive of $((leaves + 3)) daemons joined the coordinator" >&2
  exit 1
fi
cat >"$work/d/job.toml" <<TOML
[runconfig]
max_steps = $dsteps
log_steps = $dsteps
seed = 3
num_csx = $leaves
swarmx_fanout = $leaves
mode = "weight_streaming"
model_dir = "$work/d/model"
[train_input]
data_processor = "synthetic_classification"
batch_size = $leaves
num_classes = 4096
num_samples = 256
[model]
input_shape = [4096]
loss = "softmax_cross_entropy"
[[model.layers]]
name = "fc"
type = "dense"
units = 4096
[optimizer]
optimizer_type = "sgd"
learning_rate = 0.01
TOML
if ! dsubmit --json "$work/d/job.toml" >"$work/d/result.json" ||
   ! "$py" -c 'import json, sys; r = json.load(open(sys.argv[1])); sys.exit(r.get("state") != "done")' \
     "$work/d/result.json"; then
  cat "$work/d/result.json" >&2
  tail -n 20 "$work/d"/*.log >&2
  echo "fabric: the job through the daemons failed" >&2
  exit 1
fi
# TCP's losses over the whole run, for the record: retransmissions and
# retransmission timeouts of every host.
for h in coord mx swx wk $(seq -f 'wse%g' 1 $leaves); do
  netns_run "$h" nstat -az TcpRetransSegs TcpExtTCPTimeouts TcpExtTCPLostRetransmit 2>/dev/null |
    awk -v h="$h" '/^Tcp/ { printf "%s %s=%s ", h, $1, $2 } END { print "" }'
done | sed 's/^/daemons: tcp: /'
kill -TERM "${NETNS_PIDS[@]:$first_daemon}" 2>/dev/null || true   # flush the traces
for _ in $(seq 1 50); do
  left=0
  for pid in "${NETNS_PIDS[@]:$first_daemon}"; do kill -0 "$pid" 2>/dev/null && left=1; done
  [ "$left" -eq 0 ] && break
  sleep 0.1
done
wse_traces=()
for i in $(seq 1 $leaves); do wse_traces+=("$work/d/wse-node-$i.trace"); done
"$py" "$src/bench/trace_phases.py" "$work/d/memoryx.trace" "${wse_traces[@]}" >"$work/d/phases"
first=$(awk 'NR == 1 { print $2 }' "$work/d/phases")
awk -v f="$first" '$2 != f' "$work/d/phases" | sed 's/^/daemons: /'
dbytes=$(awk -v f="$first" '$2 != f { print $6; exit }' "$work/d/phases")
rbytes=$(awk -v f="$first" '$2 != f { print $10; exit }' "$work/d/phases")
db=$(median $(awk -v f="$first" '$2 != f { print $4 }' "$work/d/phases"))
dr=$(median $(awk -v f="$first" '$2 != f { print $8 }' "$work/d/phases"))
# The bound of what the daemons moved: the weight tensor and its bias.
dbound=$("$py" -c "print(max($dbytes * 8 / 1e9, $leaves * $dbytes * 8 / 8e9))")
rbound=$("$py" -c "print(max($rbytes * 8 / 1e9, $leaves * $rbytes * 8 / 8e9))")
echo "BENCH daemons_broadcast_64MiB_8_s $db s (link bound $dbound s, $dbytes bytes)"
echo "BENCH daemons_reduce_64MiB_8_s $dr s (link bound $rbound s, $rbytes bytes)"
report daemons_broadcast_64MiB_8 "$db" "$dbound"
report daemons_reduce_64MiB_8 "$dr" "$rbound"

# Open MPI beside it: rank 0 on the memoryx host, one rank on each wse-node
# host. mpirun runs in the memoryx namespace and starts its daemons through
# an "rsh agent" that enters the namespace of the address it is given; each
# rank gets a host name of its own (a UTS namespace), so that Open MPI does
# not take the hosts for one machine, and only TCP over eth0 is allowed.
if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
  echo "MPI: skipped: mpicc or mpirun is not installed (apt-get install openmpi-bin libopenmpi-dev)"
  exit 0
fi
if ! command -v unshare >/dev/null; then
  echo "MPI: skipped: unshare (util-linux) is needed to give each host its own name"
  exit 0
fi
mpicc -O2 -o "$work/fabric_mpi" "$src/bench/fabric_mpi.c"
declare -A nsof=(["$net.2"]="$NETNS_PREFIX-mx")
hosts="$net.2"
for i in $(seq 1 $leaves); do nsof["$net.$((10 + i))"]="$NETNS_PREFIX-wse$i"; hosts+=",$net.$((10 + i))"; done
{
  echo '#!/bin/bash'
  echo '# rsh agent: agent [options] HOST COMMAND...: runs COMMAND in the namespace of HOST.'
  echo 'while [ "${1#-}" != "$1" ]; do shift; done'
  echo 'h="$1"; shift'
  echo 'case "$h" in'
  for a in "${!nsof[@]}"; do echo "  $a) ns=${nsof[$a]} ;;"; done
  echo '  *) echo "no namespace for $h" >&2; exit 1 ;;'
  echo 'esac'
  echo 'exec ip netns exec "$ns" unshare --uts /bin/sh -c "hostname h-$h; $*"'
} >"$work/agent"
chmod 755 "$work/agent"
mpi_ok=0
if netns_run mx unshare --uts /bin/sh -c "hostname h-$net.2; exec timeout 300 mpirun --allow-run-as-root \
     --host $hosts --np $((leaves + 1)) --map-by node --bind-to none \
     --mca plm_rsh_agent $work/agent --mca btl tcp,self --mca btl_tcp_if_include eth0 \
     --mca oob_tcp_if_include eth0 --mca plm_rsh_no_tree_spawn 1 \
     $work/fabric_mpi $bytes $iters" >"$work/mpi.out" 2>"$work/mpi.err"; then
  mpi_ok=1
fi
if [ "$mpi_ok" -eq 0 ] || [ "$(grep -c '^iter' "$work/mpi.out")" -ne "$iters" ]; then
  echo "MPI: Open MPI did not run across the namespaces: $(grep -v '^$' "$work/mpi.err" | head -n 3 | tr '\n' ' ')"
  exit 0
fi
sed 's/^/MPI: /' "$work/mpi.out"
b=$(median $(awk '{ print $4 }' "$work/mpi.out"))
r=$(median $(awk '{ print $6 }' "$work/mpi.out"))
echo "BENCH mpi_bcast_64MiB_8_s $b s (link bound $bound s)"
echo "BENCH mpi_reduce_64MiB_8_s $r s (link bound $bound s)"
report mpi_bcast_64MiB_8 "$b"
report mpi_reduce_64MiB_8 "$r"
