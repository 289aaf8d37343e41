#!/usr/bin/env bash
# Benchmark: how long the appliance takes from nothing to a job's first
# training step, under Slurm and by hand. Under Slurm: a controller and 4
# compute hosts in network namespaces (tests/slurm/slurm-lib.sh), the clock
# started just before sbatch -N4 deploy/slurm/appliance.sbatch (coordinator,
# memoryx, swarmx and 3 workers on n1, a wse-node on each of n2-n4) and
# stopped when the coordinator reports step 1 or more of its job. By hand:
# deploy/local/appliance-up --replicas 3 on loopback, then the same job
# submitted, timed the same way. The job is the fault tests' MLP on
# synthetic data (tests/cluster/jobs/faults.toml) on 3 replicas. Prints
#   BENCH slurm_start_sec <s> s
#   BENCH appliance_up_start_sec <s> s
#   BENCH slurm_start_ratio <slurm/appliance-up> of_appliance_up_start
# The difference is Slurm's: scheduling, the batch step, one srun step per
# daemon. Needs root, Slurm and MUNGE; prints a SKIP line otherwise.
set -euo pipefail
src=${SOURCE_ROOT:?}
build=${BUILD_ROOT:?}
py=/usr/bin/python3
export NETNS_DELAY_US=0
. "$src/tests/cluster/netns-lib.sh"
. "$src/tests/slurm/slurm-lib.sh"
. "$src/bench/lib.sh"
netns_usable || { echo "SKIP: slurm_start benchmark: $NETNS_WHY"; exit 0; }
slurm_usable || { echo "SKIP: slurm_start benchmark: $SLURM_WHY"; exit 0; }

NETNS_KEEP_WORK=${SLURM_BENCH_KEEP:-}
netns_work slurm-start
run="$work/local"
netns_before_teardown() {
  [ -z "$SLURM_DIR" ] || slurm_cmd scancel --quiet --full --user=root 2>/dev/null || true
  slurm_teardown
  "$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null 2>&1 || true
}
bench_host_line

job() { # job NAME: the job file, 3 replicas, model_dir under $work
  sed -e "s/^num_csx = .*/num_csx = 3/" -e "s|^model_dir = .*|model_dir = \"$work/m-$1\"|" \
    "$src/tests/cluster/jobs/faults.toml" >"$work/$1.toml"
}
now() { date +%s.%N; }
steps_of() { # steps_of CMD...: the newest job's steps, 0 when there is none yet
  "$@" status --json 2>/dev/null | "$py" -c 'import json,sys; print(json.load(sys.stdin).get("steps", 0))' 2>/dev/null ||
    echo 0
}

netns_init "apsb$$"
slurm_init "$work/slurm" 10.78.1 n1 n2 n3 n4 || { echo "SKIP: slurm_start benchmark: $SLURM_WHY"; exit 0; }
job slurm
t0=$(now)
id=$(cd "$work" && slurm_cmd sbatch --parsable --output="$work/slurm.out" -N4 "$src/deploy/slurm/appliance.sbatch" \
  --build "$build" --wafer-memory 1G --rundir "$work/run-slurm" "$work/slurm.toml" | cut -d';' -f1)
t_slurm=""
for _ in $(seq 1 1200); do
  if [ -s "$work/run-slurm/env" ] &&
     [ "$(steps_of netns_run ctl env $(cat "$work/run-slurm/env") "$build/client/appliance-submit")" -ge 1 ]; then
    t_slurm=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
    break
  fi
  sleep 0.05
done
[ -n "$t_slurm" ] || { echo "FAIL: the job under Slurm reached no step in 60 s: $(tail -n 5 "$work/slurm.out")"; exit 1; }
slurm_cmd scancel "$id"
slurm_wait_state "$id" 'CANCELLED|COMPLETED|FAILED' 30 >/dev/null

job local
t0=$(now)
"$src/deploy/local/appliance-up" --replicas 3 --wafer-memory 1G --dir "$run" --build "$build" >/dev/null
(set -a; . "$run/env"; set +a; cd "$work" && "$build/client/appliance-submit" --detach local.toml >/dev/null)
t_local=""
for _ in $(seq 1 1200); do
  if [ "$(set -a; . "$run/env"; set +a; steps_of "$build/client/appliance-submit")" -ge 1 ]; then
    t_local=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
    break
  fi
  sleep 0.05
done
[ -n "$t_local" ] || { echo "FAIL: the job under appliance-up reached no step in 60 s"; exit 1; }
echo "BENCH slurm_start_sec $t_slurm s"
echo "BENCH appliance_up_start_sec $t_local s"
echo "BENCH slurm_start_ratio $(awk -v a="$t_slurm" -v b="$t_local" 'BEGIN { printf "%.2f", a / b }') of_appliance_up_start"
