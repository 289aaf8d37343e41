#!/usr/bin/env bash
# Deployment test: the appliance under Slurm (deploy/slurm/appliance.sbatch).
# Debian's MUNGE, slurmctld and slurmd, configured here (slurm-lib.sh): a
# controller host and four compute hosts n1..n4, each a network namespace on
# the bridge of netns-lib.sh with its own slurmd. Every job goes in with
# sbatch, from the controller's host:
#  - an allocation too small for the job's roles is refused before any
#    daemon starts, with the counts (in nodes, and in tasks with --wse-per
#    task);
#  - a job whose user cannot read the secret it names fails saying so;
#  - a heterogeneous job (1 node : 3 nodes) brings the appliance up; scancel
#    in the middle of its training stops every daemon on every host (the
#    namespaces are searched for what is left);
#  - one allocation of 4 nodes runs two job files on the same daemons:
#    FC-MNIST on 3 replicas reaches 94% test accuracy (the synthetic job of
#    the fault tests when MNIST is not fetched, and the output says so),
#    then the fault tests' job, during which host n4 is killed (slurmd, its
#    steps and its wse-node, and its link cut): the appliance goes on with
#    the 2 surviving replicas (min_num_csx = 2), the job ends done, and so
#    does the Slurm job;
#  - inside salloc, a node killed during start-up fails the start, naming
#    it.
# Needs root (namespaces); skipped without Slurm, MUNGE or namespaces.
set -euo pipefail
src=${SOURCE_ROOT:?}
build=${BUILD_ROOT:?}
py=/usr/bin/python3
# no delay on the links: the delay lines' CPU would slow the daemons, and
# what is tested here is Slurm's part
export NETNS_DELAY_US=${NETNS_DELAY_US:-0}
. "$src/tests/cluster/netns-lib.sh"
. "$src/tests/slurm/slurm-lib.sh"
sbatch_script="$src/deploy/slurm/appliance.sbatch"

netns_usable || { echo "SKIP: $NETNS_WHY"; exit 77; }
slurm_usable || { echo "SKIP: $SLURM_WHY"; exit 77; }
for b in coordinator/coordinator memoryx/memoryx swarmx/swarmx worker/worker wse-node/wse-node \
         client/appliance-submit; do
  [ -x "$build/$b" ] || { echo "SKIP: $build/$b is not built"; exit 77; }
done

NETNS_KEEP_WORK=${KEEP_WORK:-}
netns_work slurm
netns_before_teardown() {
  [ -z "$SLURM_DIR" ] || slurm_cmd scancel --quiet --full --state=RUNNING,PENDING --user=root 2>/dev/null || true
  slurm_teardown
}
fail() {
  echo "FAIL: $*" >&2
  for f in "$work"/*.out "$work"/run-*/logs/*.log "$work/slurm/log/slurmctld.log"; do
    [ -e "$f" ] || continue
    echo "== $f" >&2; tail -n 15 "$f" >&2
  done
  exit 1
}
field() { "$py" -c "import json,sys; print(json.loads(sys.stdin.read())['$1'])"; }

t0=$SECONDS
netns_init "apsl$$"
hosts=(n1 n2 n3 n4)
slurm_init "$work/slurm" 10.78.0 "${hosts[@]}" || fail "$SLURM_WHY"
echo "ok: slurmctld and ${#hosts[@]} slurmd in ${#hosts[@]} namespace hosts, every node idle ($((SECONDS - t0)) s)"
echo "note: what this sandbox changes: slurmctld and slurmd enter their hosts with nsenter --net, not" \
  "ip netns exec, whose own sysfs over /sys hides /sys/fs/cgroup: slurmd $(slurmd -V | awk '{print $2}')" \
  "loads its cgroup plugin at start (to learn the cgroup version) even with proctrack/linuxproc and" \
  "task/none, and exits without it; no cgroup is made. Links without added delay (NETNS_DELAY_US=$NETNS_DELAY_US)."

data="$src/data/mnist"
mnist=1
if [ ! -s "$data/train-images-idx3-ubyte" ] || [ ! -s "$data/t10k-labels-idx1-ubyte" ]; then
  mnist=""
  echo "note: no MNIST in $data (scripts/fetch-mnist): the first job is the fault tests' synthetic one"
fi
mkjob() { # mkjob NAME NUM_CSX [SED...]: a job file under $work, model_dir beside it
  local name="$1" csx="$2"
  shift 2
  if [ -n "$mnist" ] && [ "$name" != faults ] && [ "$name" != long ]; then
    sed -e "s/^num_csx = .*/num_csx = $csx/" -e "s|^model_dir = .*|model_dir = \"$work/m-$name\"|" \
      -e "s|^data_dir = .*|data_dir = \"$data\"|" "$@" "$src/examples/fc_mnist.toml" >"$work/$name.toml"
  else
    sed -e "s/^num_csx = .*/num_csx = $csx/" -e "s|^model_dir = .*|model_dir = \"$work/m-$name\"|" \
      "$@" "$src/tests/cluster/jobs/faults.toml" >"$work/$name.toml"
  fi
}
# sb OUT SBATCH-ARGS... -- SCRIPT-ARGS...: submits the appliance script,
# prints the Slurm job id
sb() {
  local out="$1" a=()
  shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do a+=("$1"); shift; done
  shift
  (cd "$work" && slurm_cmd sbatch --parsable --output="$out" "${a[@]}" "$sbatch_script" --build "$build" --wafer-memory 1G "$@") |
    cut -d';' -f1
}
# left HOSTS...: the appliance's processes still running on those hosts
left() {
  local h
  for h in "$@"; do
    slurm_node_pids "$h" | grep -E ' (coordinator|memoryx|swarmx|worker|wse-node|srun|slurmstepd|appliance-submi)$' |
      sed "s/^/$h: /" || true
  done
}
ended() { slurm_wait_state "$1" 'COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY' "$2"; }

t1=$SECONDS
# 1. Too small: 4 nodes leave 3 for wse-nodes; a job of 4 replicas is
# refused before anything starts.
mkjob four 4
id=$(sb "$work/small.out" -N4 -- --rundir "$work/run-small" "$work/four.toml")
st=$(ended "$id" 30)
[ "$st" = FAILED ] || fail "the too-small allocation's job ended $st, not FAILED"
grep -q "too small for the job's roles" "$work/small.out" &&
  grep -q "wants num_csx = 4 wse-node(s), the allocation has 3 node(s) for them (n2 n3 n4)" "$work/small.out" ||
  fail "the refusal does not give the counts: $(cat "$work/small.out")"
[ ! -e "$work/run-small" ] || fail "a run directory was made for a refused allocation"
grep -q "ExitCode=2:0" <(slurm_cmd scontrol show job "$id") || fail "the refused job's exit code is not 2"
echo "ok: a 4-replica job in 4 nodes (3 for wse-nodes) refused before any daemon: $(grep -o 'wants num_csx.*' "$work/small.out") ($((SECONDS - t1)) s)"

# ... and counted in tasks: 2 nodes of 2 tasks leave 2 tasks (on n2) for
# wse-nodes with --wse-per task; 3 replicas do not fit.
t1=$SECONDS
mkjob three 3
id=$(sb "$work/tasks.out" -N2 --ntasks-per-node=2 -- --wse-per task --rundir "$work/run-tasks" "$work/three.toml")
st=$(ended "$id" 30)
[ "$st" = FAILED ] || fail "the too-small allocation in tasks ended $st, not FAILED"
grep -Eq "wants num_csx = 3 wse-node\(s\), the allocation has 2 task\(s\) for them \(n[0-9]\)" "$work/tasks.out" ||
  fail "the refusal in tasks does not give the counts: $(cat "$work/tasks.out")"
echo "ok: with --wse-per task, 3 replicas in 2 nodes of 2 tasks refused: $(grep -o 'wants num_csx.*' "$work/tasks.out") ($((SECONDS - t1)) s)"

# 2. A secret the job's user cannot read: the job runs as nobody, the
# secret is root's with mode 0600.
mkdir -p "$work/nobody"
chmod 1777 "$work/nobody"
(umask 077; echo 00112233 >"$work/root-secret")
mkjob faults 2
cp "$work/faults.toml" "$work/nobody/faults.toml"
chmod 644 "$work/nobody/faults.toml"
if id nobody >/dev/null 2>&1 && runuser -u nobody -- test -x "$build/client/appliance-submit"; then
  id=$(cd "$work/nobody" && slurm_cmd sbatch --parsable --uid=nobody --gid=nogroup -N3 \
    --output="$work/nobody/secret.out" "$sbatch_script" --build "$build" --rundir "$work/nobody/run" \
    --secret-file "$work/root-secret" "$work/nobody/faults.toml" | cut -d';' -f1)
  st=$(ended "$id" 30)
  [ "$st" = FAILED ] || fail "the job with an unreadable secret ended $st, not FAILED"
  grep -q "the cluster secret $work/root-secret is not readable by the job's user nobody (owner root, mode 600)" \
    "$work/nobody/secret.out" || fail "no clear error for an unreadable secret: $(cat "$work/nobody/secret.out")"
  [ ! -e "$work/nobody/run/logs/coordinator.log" ] || fail "daemons started with an unreadable secret"
  echo "ok: a job whose user (nobody) cannot read the secret fails: $(grep -o 'the cluster secret.*' "$work/nobody/secret.out")"
else
  echo "note: the user nobody cannot reach the build tree: the unreadable-secret case is not tested"
fi

# 3. A heterogeneous job, scancel in the middle: nothing left on any host.
t1=$SECONDS
mkjob long 3 -e "s/^max_steps = .*/max_steps = 100000/"
id=$(sb "$work/het.out" -N1 : -N3 -- --rundir "$work/run-het" "$work/long.toml")
st=$(slurm_wait_state "$id" 'RUNNING|FAILED|CANCELLED|COMPLETED' 30)
[ "$st" = RUNNING ] || fail "the heterogeneous job is $st, not RUNNING"
for _ in $(seq 1 600); do # step 20 checkpointed
  [ -e "$work/m-long/checkpoint_20-shard1-of-1.safetensors" ] && break
  sleep 0.1
done
[ -e "$work/m-long/checkpoint_20-shard1-of-1.safetensors" ] || fail "the heterogeneous job's training did not reach step 20"
grep -q "heterogeneous job: component 0 (n1)" "$work/het.out" || fail "the script did not see a heterogeneous job"
running=$(left "${hosts[@]}")
before=$(grep -cE ' (coordinator|memoryx|swarmx|worker|wse-node)$' <<<"$running" || true)
[ "$before" -eq 9 ] || fail "$before appliance daemons running, not 9: $running"
for h in n2 n3 n4; do
  grep -q "^$h: .* wse-node$" <<<"$running" || fail "no wse-node on $h: $running"
done
slurm_cmd scancel "$id"
st=$(ended "$id" 30)
[ "$st" = CANCELLED ] || fail "the cancelled job ended $st"
rest=""
for _ in $(seq 1 50); do
  rest=$(left "${hosts[@]}")
  [ -z "$rest" ] && break
  sleep 0.2
done
[ -z "$rest" ] || fail "left running after scancel: $rest"
grep -q "stopping" "$work/het.out" || fail "the script did not stop its daemons on scancel: $(tail -n 5 "$work/het.out")"
echo "ok: a heterogeneous job (n1 : n2-n4) trained past step 20; scancel stopped all 9 daemons on 4 hosts, nothing left ($((SECONDS - t1)) s)"

# 4. One allocation, two job files on the same daemons; host n4 killed in
# the second.
t1=$SECONDS
# (sbatch waits in the queue while the nodes finish the cancelled job)
mkjob first 3 -e "s/^max_steps = .*/max_steps = 500/" -e "s/^eval_frequency = .*/eval_frequency = 500/"
mkjob faults 3 -e "s/^max_num_restarts = .*/max_num_restarts = 3\nmin_num_csx = 2/" -e "s/^max_steps = .*/max_steps = 160/"
id=$(sb "$work/two.out" -N4 -- --rundir "$work/run-two" "$work/first.toml" "$work/faults.toml")
for _ in $(seq 1 1200); do
  [ -e "$work/m-faults/checkpoint_40-shard1-of-1.safetensors" ] && break
  [[ "$(slurm_cmd squeue -h -j "$id" -o %T 2>/dev/null)" =~ ^(RUNNING|PENDING|CONFIGURING)$ ]] ||
    fail "the two-job allocation ended before its second job reached step 40"
  sleep 0.25
done
[ -e "$work/m-faults/checkpoint_40-shard1-of-1.safetensors" ] || fail "the second job did not reach step 40"
victims=$(ip netns pids "$NETNS_PREFIX-n4" | tr '\n' ' ')
ip -n "$NETNS_PREFIX-sw" link set p-n4 down
kill -KILL $victims 2>/dev/null || true
slurm_reap n4
echo "node loss: n4 cut off and every process on it killed (pids $victims) at step 40 of the second job"
st=$(ended "$id" 150)
[ "$st" = COMPLETED ] || fail "the two-job allocation ended $st, not COMPLETED: $(tail -n 20 "$work/two.out")"
j1=$(sed -n '/job 1 of 2/,/job 1 .* done\|job 1 .* ended/p' "$work/two.out" | grep '^{' | head -n 1)
[ "$(echo "$j1" | field state)" = done ] || fail "the first job is not done: $j1"
if [ -n "$mnist" ]; then
  acc=$(echo "$j1" | field eval_accuracy)
  "$py" -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 0.94 else 1)" "$acc" ||
    fail "FC-MNIST test accuracy $acc below 0.94"
  echo "ok: FC-MNIST on 3 replicas (n2-n4), service roles on n1, under sbatch: test accuracy $acc"
else
  echo "ok: the synthetic job on 3 replicas under sbatch: done (MNIST not fetched: no accuracy check)"
fi
j2=$(sed -n '/job 2 of 2/,$p' "$work/two.out" | grep '^{' | head -n 1)
[ "$(echo "$j2" | field state)" = done ] || fail "the second job is not done after the node loss: $j2"
jid=$(echo "$j2" | field job_id)
grep -q "fault at step .*lost wse-node wse-node-3" "$work/run-two/logs/$jid.log" ||
  fail "the appliance did not see wse-node-3 lost: $(grep -E 'fault|restart' "$work/run-two/logs/$jid.log")"
grep -q "2 of 3 replica(s) available: going on with them" "$work/run-two/logs/$jid.log" ||
  fail "the job did not go on with the 2 survivors: $(grep -E 'fault|restart|replica' "$work/run-two/logs/$jid.log")"
grep -q "ExitCode=0:0" <(slurm_cmd scontrol show job "$id") || fail "the Slurm job's exit code is not 0"
rest=""
for _ in $(seq 1 50); do
  rest=$(left n1 n2 n3)
  [ -z "$rest" ] && break
  sleep 0.2
done
[ -z "$rest" ] || fail "left running after the allocation ended: $rest"
[ "$(stat -c %a "$work/run-two/secret")" = 600 ] || fail "the job's secret is not mode 0600"
echo "ok: node n4 lost mid-job: the job went on with 2 of 3 replicas and ended done; the Slurm job COMPLETED, exit 0, nothing left ($((SECONDS - t1)) s)"
# each wse-node had a spill directory on its own node (the script's default, /tmp)
n=$(grep -l "spill directory /tmp: .* free" "$work/run-two/logs"/wse-node-*.log 2>/dev/null | wc -l)
[ "$n" = 3 ] || fail "$n of 3 wse-nodes said they spill to /tmp: $(grep -h "spill" "$work/run-two/logs"/wse-node-*.log | head -n 3)"
echo "ok: the 3 wse-nodes spill, where a plan needs it, to /tmp on their own nodes"

# 5. Inside salloc (the script run by hand on the controller's host, the
# daemons on the allocation's nodes), a node lost during start-up: n4 is
# down since 4., so the allocation is n1-n3, and n3 is killed once the
# coordinator is up. The start fails naming it (exit 3), and nothing is
# left on n1 and n2.
t1=$SECONDS
mkjob start 2
(cd "$work" && exec ip netns exec "$NETNS_PREFIX-ctl" env SLURM_CONF="$SLURM_DIR/etc/slurm.conf" \
  salloc --no-kill -N3 bash "$sbatch_script" --build "$build" --wafer-memory 1G --rundir "$work/run-start" \
  --start-timeout 20 "$work/start.toml") >"$work/start.out" 2>&1 &
salloc_pid=$!
for _ in $(seq 1 300); do
  grep -q "coordinator on" "$work/start.out" 2>/dev/null && break
  kill -0 "$salloc_pid" 2>/dev/null || fail "salloc ended before the coordinator was up: $(cat "$work/start.out")"
  sleep 0.1
done
grep -q "appliance up" "$work/start.out" && fail "the appliance was up before the node could be killed: $(cat "$work/start.out")"
grep -q "nodes n\[1-3\]: n1 for the service roles" "$work/start.out" ||
  fail "the salloc allocation is not n[1-3]: $(cat "$work/start.out")"
ip -n "$NETNS_PREFIX-sw" link set p-n3 down
kill -KILL $(ip netns pids "$NETNS_PREFIX-n3") 2>/dev/null || true
slurm_reap n3
rc=0
wait "$salloc_pid" || rc=$?
[ "$rc" -eq 3 ] || fail "salloc with a node lost during start-up ended with status $rc, not 3: $(cat "$work/start.out")"
grep -Eq "wse-node-2 on node n3 ended during start-up|wse-node-2 on node n3$" "$work/start.out" ||
  fail "the failed start does not name node n3: $(cat "$work/start.out")"
rest=""
for _ in $(seq 1 50); do
  rest=$(left n1 n2)
  [ -z "$rest" ] && break
  sleep 0.2
done
[ -z "$rest" ] || fail "left running after the failed start: $rest"
echo "ok: inside salloc, node n3 lost during start-up: the start failed (exit 3): $(grep -Eo 'wse-node-2 on node n3.*' "$work/start.out" | head -n 1); nothing left on n1, n2 ($((SECONDS - t1)) s)"
echo "ok: the appliance under Slurm in $((SECONDS - t0)) s"
echo "1 passed, 0 failed"
