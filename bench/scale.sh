#!/usr/bin/env bash
# Benchmark: weak scaling of the fabric with simulated compute. A local
# appliance with 1, then N = 8, 16, 32, 64, 128 wse-nodes, each with its
# own input worker, one memoryx and the swarmx tree the planner builds
# (swarmx_fanout 8: 2 levels up to 64 replicas, 3 at 128), trains the same
# job on each: the small CNN of tests/cluster/jobs/sim_cnn.toml (3x64x64
# images, three 3x3 convolutions of 32, 64 and 64 filters, one dense layer
# of 10; 0.22 M parameters, 0.88 MB of weights) at 16 samples per replica (weak scaling: the global batch grows
# with N), in Weight Streaming.
#
# The wse-nodes simulate their compute (--simulate-compute measured:TABLE):
# every layer's pass waits (a timer) the seconds per sample measured first on the
# real kernels of this machine (one replica, one thread, SCALE_MEASURE_STEPS
# steps, from its /metrics), while the weights, batches, gradients, sums,
# losses and step accounting all happen for real. The model is chosen so
# that a replica's step is long (0.18 s on a 2-core EPYC) against its
# fabric work (0.88 MB down twice and up once a step, 0.8 MB of batch
# in): the step time then stays flat as long as the fabric
# (swarmx's forwards and sums, memoryx, the workers, the coordinator, all
# sharing this host's cores) keeps up, and what the figure loses is the
# fabric's. Prints, per N:
#   scale: N=.. swarmx nodes=.. levels=.. fanout=..   (the planner's tree)
#   BENCH weak_scaling_sim_N <t1/tN> of_1_replica      (median step times)
# t1 is one replica as the appliance runs it: memoryx streams to it
# directly, with no swarmx.
#
# Where this user may (CAP_SYS_NICE or RLIMIT_RTPRIO), memoryx and swarmx
# run under SCHED_FIFO (appliance-up --fabric-realtime, the daemons'
# --realtime 1), at every N, 1 included: on these 2 cores the fabric
# shares the cores with N simulated replicas and their N workers, which on
# a cluster run on hosts of their own, and each of its hops would otherwise
# wait its turn behind them (64 replicas: 0.157 to 0.163 s a step at the
# default priority, 0.153 to 0.154 s under SCHED_FIFO; one replica, 0.143
# s either way). SCALE_REALTIME=0 measures without it.
#
# Needs about 3 open files per daemon in the coordinator (ulimit -n of
# 1024 or more: appliance-up raises the coordinator's connection limits),
# a heartbeat timeout of 10 s (300 daemons starting on 2 cores: 143 s), and
# 128 wse-nodes with their workers and swarmx take about 5 GiB of memory.
# The wse-nodes tell the coordinator they simulate (Register.simulated), so
# it counts each at what it holds (5.1 MiB), not at a real replica's plan
# (133 MiB): 128 of them fit this host's memory whole.
# SCALE_COUNTS (default "8 16 32 64 128"), SCALE_STEPS (12),
# SCALE_BATCH (16 per replica), SCALE_FANOUT (8), SCALE_MEASURE_STEPS (20).
#
# SCALE_HOSTS=K (default 0: one host, loopback) runs the simulated part over
# network-namespace hosts on a bridge (tests/cluster/netns-lib.sh), their
# links shaped as SCALE_LINK says, RATE/DELAY (default 1gbit/100us): a tbf
# at RATE each way on every link, and DELAY at each link end (netem where
# the kernel has it, else the user-space delay line; a packet between two
# hosts takes twice DELAY more). The replicas' wse-nodes go round robin on K
# hosts of RATE; the coordinator, memoryx and the swarmx tree on a "core"
# host, and the input workers on an "input" host, both with links of K x
# RATE (as a SwarmX or an input cluster has more ports), so that each
# wse-node host's link carries its replicas' weights, gradients and
# batches. The reference is 1 replica over the same links (memoryx on the
# core host streaming to it directly). Prints, per N:
#   scale: netns N=.. hosts=K link=RATE/DELAY ...
#   BENCH weak_scaling_sim_netns_N <t1/tN> of_1_replica_netns
# Needs root (skipped with a line saying why otherwise); nothing leaves the
# namespaces made, which are deleted on exit and on failure.
set -euo pipefail
src=${SOURCE_ROOT:?}
build=${BUILD_ROOT:?}
py=/usr/bin/python3
. "$src/bench/lib.sh"
bench_work scale
submit="$build/client/appliance-submit"
counts=${SCALE_COUNTS:-"8 16 32 64 128"}
steps=${SCALE_STEPS:-12}
batch=${SCALE_BATCH:-16}
fanout=${SCALE_FANOUT:-8}
measure_steps=${SCALE_MEASURE_STEPS:-20}

hosts=${SCALE_HOSTS:-0}
link=${SCALE_LINK:-1gbit/100us}
case "$hosts" in
  ''|*[!0-9]*) echo "scale: SCALE_HOSTS=$hosts: want a number of hosts (0: loopback)" >&2; exit 2 ;;
esac
if [ "$hosts" -gt 0 ]; then
  # RATE/DELAY: the rate as tc writes it, the delay in us or ms
  if ! read -r rate_bits delay_us < <("$py" -c '
import re, sys
m = re.fullmatch(r"([0-9.]+)([kmg]?)bit(?:/([0-9.]+)(us|ms))?", sys.argv[1].lower())
if not m or float(m.group(1)) <= 0: sys.exit(1)
bits = int(float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)])
us = round(float(m.group(3) or 0) * (1000 if m.group(4) == "ms" else 1))
print(bits, us)' "$link"); then
    echo "scale: SCALE_LINK=$link: want RATE/DELAY, e.g. 1gbit/100us or 500mbit/0.2ms" >&2
    exit 2
  fi
  export NETNS_DELAY_US=$delay_us
  . "$src/tests/cluster/netns-lib.sh"
  netns_usable || { echo "SKIP: scale over namespace hosts: $NETNS_WHY"; exit 0; }
  scale__cleanup() { netns_teardown; bench__cleanup; }
  trap scale__cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
fi

bench_host_line
fabric_up=() fabric_rt=()
if [ "${SCALE_REALTIME:-1}" != 0 ] && chrt -f 1 true 2>/dev/null; then
  fabric_up=(--fabric-realtime) fabric_rt=(--realtime 1)
  echo "scale: memoryx and swarmx under SCHED_FIFO at priority 1 (--fabric-realtime)"
else
  echo "scale: memoryx and swarmx at the default priority" \
       "($([ "${SCALE_REALTIME:-1}" = 0 ] && echo SCALE_REALTIME=0 || echo "SCHED_FIFO not permitted to this user"))"
fi
need_fds=$((3 * (1 + 1 + 2 * 128 + 64) + 64))
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$need_fds" ]; then
  ulimit -n "$need_fds" 2>/dev/null || { echo "SKIP: scale: ulimit -n is $(ulimit -n), the coordinator needs about $need_fds"; exit 0; }
fi

# job N STEPS: the job file for N replicas (tests/cluster/jobs/sim_cnn.toml)
job() {
  sed -e "s/^num_csx = .*/num_csx = $1\nswarmx_fanout = $fanout/" -e "s/^max_steps = .*/max_steps = $2/" \
    -e "s/^batch_size = .*/batch_size = $(($1 * batch))/" -e "s|^model_dir = .*|model_dir = \"$work/model\"|" \
    "$src/tests/cluster/jobs/sim_cnn.toml"
}

# up N ARGS...: a local appliance of N wse-nodes and the swarmx nodes the
# planner needs for them
swarm_nodes() { # the planner's tree (coordinator/planner.c): "nodes levels"
  "$py" -c '
import sys
n, f = int(sys.argv[1]), int(sys.argv[2])
if n == 1: print(0, 0); sys.exit()
k, tot, lv = -(-n // f), 0, 0
while True:
    tot += k; lv += 1
    if k == 1: break
    k = -(-k // f)
print(tot, lv)' "$1" "$fanout"
}
up() {
  local n=$1
  shift
  read -r nsw _ < <(swarm_nodes "$n")
  "$src/deploy/local/appliance-up" --replicas "$n" --swarmx "$nsw" --dir "$run" --build "$build" \
    --heartbeat-timeout-ms 10000 \
    "$@" >"$work/up.log" 2>&1 || { cat "$work/up.log" >&2; exit 1; }
}
down() {
  "$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null 2>&1 || true
  rm -rf "$run" "$work/model"
}
# client ARGS...: appliance-submit against the cluster that is up
client() { (set -a; . "$run/env"; set +a; timeout 900 "$submit" "$@"); }
logs="$run/logs" # the daemons' logs of the cluster that is up
# train N STEPS: runs the job; the median step time (s) after 2 warm-up steps
train() {
  job "$1" "$2" >"$work/job.toml"
  if ! client --json "$work/job.toml" >"$work/out.json" 2>&1 ||
     [ "$(tail -n 1 "$work/out.json" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["state"])')" != done ]; then
    echo "scale: the job on $1 replicas failed: $(tail -n 3 "$work/out.json")" >&2
    tail -n 20 "$logs/coordinator.log" >&2
    exit 1
  fi
  "$py" "$src/bench/step_times.py" --skip 2 --log "$logs/coordinator.log" </dev/null | cut -d' ' -f1
}

# 1. Each layer's time on the real kernels: one replica, one thread; the
# layers' seconds from its /metrics between step 2 (past the warm-up) and
# the end.
up 1 --metrics
url=$(awk '$1 == "wse-node-1" {print $2}' "$run/metrics")
scrape() { "$py" -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$url"; }
job 1 "$measure_steps" >"$work/job.toml"
(set -a; . "$run/env"; set +a; timeout 600 "$submit" --json "$work/job.toml") >"$work/out.json" 2>&1 &
client=$!
for _ in $(seq 600); do
  scrape >"$work/m0" 2>/dev/null || true
  s=$(awk '$1 == "appliance_steps_total" {print $2}' "$work/m0")
  [ -n "$s" ] && [ "$s" -ge 2 ] && break
  sleep 0.2
done
wait "$client" || { echo "scale: the measuring job failed: $(tail -n 3 "$work/out.json")" >&2; exit 1; }
sleep 1.2 # the metrics are rendered once a second
scrape >"$work/m1"
"$py" - "$work/m0" "$work/m1" "$batch" >"$work/table" <<'PY'
import re, sys
def read(path):
    text = open(path).read()
    steps = float(re.search(r"^appliance_steps_total (\S+)", text, re.M).group(1))
    sec = {}
    for layer, ps, v in re.findall(r'^appliance_layer_seconds_total\{layer="([^"]+)",pass="(\w+)"\} (\S+)', text, re.M):
        sec[(layer, ps)] = float(v)
    return steps, sec
(s0, a), (s1, b) = read(sys.argv[1]), read(sys.argv[2])
assert s1 > s0, "no step measured past the warm-up"
per = (s1 - s0) * int(sys.argv[3])
print("# layer, forward and backward seconds per sample on the kernels (steps %d to %d)" % (s0, s1))
for layer in dict.fromkeys(l for l, _ in b):
    f, g = [(b.get((layer, p), 0) - a.get((layer, p), 0)) / per for p in ("forward", "backward")]
    print(layer, "%.9g" % f, "%.9g" % g)
PY
down
echo "scale: measured on the kernels (seconds per sample; $batch samples a step):"
sed 's/^/scale:   /' "$work/table"
table_step=$("$py" -c '
import sys
t = sum(float(a) + float(b) for l in open(sys.argv[1]) if not l.startswith("#") for a, b in [l.split()[1:3]])
print("%.4f" % (t * int(sys.argv[2])))' "$work/table" "$batch")
echo "scale: a replica's compute per step: $table_step s"

# 2. Simulated: 1 replica, then N.
if [ "$hosts" -gt 0 ]; then
  # 2'. Over namespace hosts: core (coordinator, memoryx, swarmx), input
  # (the workers), h1..hK (the wse-nodes).
  net=10.79.0
  coord="$net.1:7070"
  netns_init "apsc$$"
  netns_host core "$net.1" "$((rate_bits * hosts))bit"
  netns_host input "$net.2" "$((rate_bits * hosts))bit"
  for k in $(seq 1 "$hosts"); do netns_host "h$k" "$net.$((10 + k))" "${rate_bits}bit"; done
  if [ -n "$NETNS_DELAY" ]; then delay="$NETNS_DELAY at each link end"; else delay="no added delay ($NETNS_DELAY_WHY)"; fi
  echo "scale: netns: $hosts wse-node hosts at $link (${rate_bits} bit/s each way, $delay)," \
       "core and input hosts at $((rate_bits * hosts)) bit/s, TCP $(netns_run core sysctl -n net.ipv4.tcp_congestion_control)"
  (umask 077; od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$work/secret"; echo >>"$work/secret")
  logs="$work/ns/logs"
  client() {
    netns_run core env APPLIANCE_COORDINATOR="$coord" APPLIANCE_SECRET_FILE="$work/secret" \
      timeout 900 "$submit" "$@"
  }
  # ns_up N: the daemons of N replicas on the hosts; ns_down stops them
  ns_up() {
    local n=$1 nsw i k a
    read -r nsw _ < <(swarm_nodes "$n")
    first_daemon=${#NETNS_PIDS[@]}
    rm -rf "$work/ns" "$work/model"
    mkdir -p "$logs" "$work/ns/coordinator" "$work/ns/memoryx"
    d() { # d HOST NAME ADDR:PORT BINARY ARGS...
      local h=$1 name=$2 at=$3 bin=$4
      shift 4
      netns_spawn "$h" "$logs/$name.log" "$build/$bin" --name "$name" --listen "$at" --advertise "$at" \
        --secret-file "$work/secret" "$@"
    }
    d core coordinator "$coord" coordinator/coordinator --state-dir "$work/ns/coordinator" \
      --heartbeat-timeout-ms 10000 --max-connections-per-address $((2 * n + 64)) \
      --max-connections $((3 * n + 1024))
    d core memoryx-1 "$net.1:7100" memoryx/memoryx --coordinator "$coord" --state-dir "$work/ns/memoryx" \
      "${fabric_rt[@]}"
    for i in $(seq 1 "$nsw"); do
      d core "swarmx-$i" "$net.1:$((7200 + i))" swarmx/swarmx --coordinator "$coord" "${fabric_rt[@]}"
    done
    for i in $(seq 1 "$n"); do
      d input "worker-$i" "$net.2:$((7300 + i))" worker/worker --coordinator "$coord" --threads 1 --nice 10
    done
    for i in $(seq 1 "$n"); do
      k=$(((i - 1) % hosts + 1))
      a="$net.$((10 + k)):$((7300 + i))"
      d "h$k" "wse-node-$i" "$a" wse-node/wse-node --coordinator "$coord" --threads 1 \
        --simulate-compute "measured:$work/table" --wafer-share "0.8/$n"
      [ "$i" != 1 ] || wse1_pid=${NETNS_PIDS[-1]}
    done
    local want=$((1 + nsw + 2 * n)) alive
    alive=$(netns_wait_alive "$want" $((80 + 4 * want)) client)
    if [ "$alive" -lt "$want" ]; then
      tail -n 3 "$logs"/*.log >&2
      echo "scale: only $alive of $want daemons joined the coordinator at $coord" >&2
      exit 1
    fi
  }
  ns_down() {
    local pid
    for pid in "${NETNS_PIDS[@]:first_daemon}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for _ in $(seq 1 50); do
      local left=0
      for pid in "${NETNS_PIDS[@]:first_daemon}"; do kill -0 "$pid" 2>/dev/null && left=1; done
      [ "$left" -eq 0 ] && break
      sleep 0.2
    done
    for pid in "${NETNS_PIDS[@]:first_daemon}"; do kill -KILL "$pid" 2>/dev/null || true; done
    NETNS_PIDS=("${NETNS_PIDS[@]:0:first_daemon}")
  }
  t1=""
  for n in 1 $counts; do
    read -r nsw levels < <(swarm_nodes "$n")
    start=$SECONDS
    ns_up "$n"
    started=$((SECONDS - start))
    t=$(train "$n" "$steps")
    wse=$(awk '/^VmHWM:/ {printf "%.0f\n", $2 * 1024}' "/proc/$wse1_pid/status" 2>/dev/null || echo 0)
    ns_down
    echo "scale: netns N=$n hosts=$hosts link=$link swarmx nodes=$nsw levels=$levels step $(printf '%.3f' "$t") s;" \
         "started in $started s; wse-node-1 peak $((wse >> 20)) MiB"
    if [ "$n" = 1 ]; then
      t1=$t
    else
      "$py" -c 'import sys; print("BENCH weak_scaling_sim_netns_%s %.3f of_1_replica_netns" % (sys.argv[1], float(sys.argv[2]) / float(sys.argv[3])))' "$n" "$t1" "$t"
    fi
  done
  exit 0
fi
t1=""
for n in 1 $counts; do
  read -r nsw levels < <(swarm_nodes "$n")
  start=$SECONDS
  up "$n" --simulate-compute "measured:$work/table" "${fabric_up[@]}"
  started=$((SECONDS - start))
  t=$(train "$n" "$steps")
  tree=$(grep -h "tree node [0-9]*, [a-z]*, [0-9]* children" "$logs"/swarmx-*.log 2>/dev/null |
         sed 's/.*tree node [0-9]*, \([a-z]*\), \([0-9]*\) children/\1 \2/' | sort | uniq -c | tr '\n' ';' || true)
  read -r wse all < <(bench_daemon_peaks "$run")
  down
  echo "scale: N=$n swarmx nodes=$nsw levels=$levels fanout=$( [ "$n" -gt 1 ] && echo "$fanout" || echo "- (memoryx streams to the replica)")" \
       "(swarmx logs: ${tree:-none}) step $t s; started in $started s;" \
       "wse-node-1 peak $((wse >> 20)) MiB, all daemons $((all >> 20)) MiB"
  if [ "$n" = 1 ]; then
    t1=$t
  else
    "$py" -c 'import sys; print("BENCH weak_scaling_sim_%s %.3f of_1_replica" % (sys.argv[1], float(sys.argv[2]) / float(sys.argv[3])))' "$n" "$t1" "$t"
  fi
done
