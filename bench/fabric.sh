#!/usr/bin/env bash
# Benchmark: the weight fabric over shaped links between hosts (network
# namespaces on a bridge, tests/cluster/netns-lib.sh). A memoryx host and 8
# wse-node hosts on 1 Gbit/s links, a swarmx host on an 8 Gbit/s link (a
# SwarmX node has more ports); bench/fabric broadcasts a 64 MiB tensor from
# memoryx through swarmx to the 8 wse-nodes and reduces 64 MiB from them
# back. The link bound is the largest, over all hosts, of the bytes its link
# carries over its rate: 64 MiB at 1 Gbit/s for memoryx and each wse-node,
# 8 x 64 MiB at 8 Gbit/s for swarmx. Prints the median of 5 iterations:
#   BENCH fabric_broadcast_64MiB_8 <bound/time> of_link_bound
#   BENCH fabric_reduce_64MiB_8 <bound/time> of_link_bound
# and, when Open MPI (mpicc, mpirun) is installed, MPI_Bcast and MPI_Reduce
# of the same bytes from the memoryx host to the 8 wse-node hosts.
# Needs root; prints a SKIP line otherwise.
set -euo pipefail
src=${SOURCE_ROOT:?}
build=${BUILD_ROOT:?}
py=/usr/bin/python3
. "$src/tests/cluster/netns-lib.sh"
netns_usable || { echo "SKIP: fabric benchmark: $NETNS_WHY"; exit 0; }

bytes=$((64 << 20))
iters=${FABRIC_ITERS:-5}
leaves=8
work=$(mktemp -d "${TMPDIR:-/tmp}/appliance-fabric.XXXXXX")
chmod 755 "$work"
cleanup() {
  netns_teardown
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

net=10.77.0
netns_init "apfb$$"
netns_host mx "$net.2" 1gbit
netns_host swx "$net.3" 8gbit
for i in $(seq 1 $leaves); do netns_host "wse$i" "$net.$((10 + i))" 1gbit; done
if [ -n "$NETNS_DELAY" ]; then delay="$NETNS_DELAY delay at each link end"; else delay="no added delay ($NETNS_DELAY_WHY)"; fi
echo "fabric: memoryx and $leaves wse-node hosts at 1 Gbit/s, swarmx at 8 Gbit/s, $delay"
(umask 077; od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$work/secret"; echo >>"$work/secret")

# Bytes over bits per second, in seconds: the bound is the same on every host.
bound=$("$py" -c "print(max($bytes * 8 / 1e9, $leaves * $bytes * 8 / 8e9))")
median() { "$py" -c 'import statistics, sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
report() { # report NAME SECONDS
  "$py" -c 'import sys; print("BENCH %s %.3f of_link_bound" % (sys.argv[1], float(sys.argv[3]) / float(sys.argv[2])))' \
    "$1" "$2" "$bound"
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
