# A Slurm cluster of network-namespace hosts on one machine, for the Slurm
# deployment test and its benchmark (sourced by both, after netns-lib.sh).
# Debian's MUNGE, slurmctld and slurmd, configured here: one munged with its
# own key, socket, pid, seed and log in the work directory (its socket is a
# file, so every namespace reaches it), slurmctld on a host "ctl" of its
# own, one slurmd on each compute host. Each daemon runs in its host's
# network namespace and, through unshare --uts, under the host's name as its
# hostname, which is how slurmctld and slurmd find their entries in
# slurm.conf. No cgroups: proctrack/linuxproc (a step's processes are those
# descended from its slurmstepd) and task/none. State, spool, pid and log
# files per node (%n) under the work directory. Everything runs as root.
#
#   slurm_usable || { echo "SKIP: $SLURM_WHY"; exit 77; }
#   slurm_init DIR NET HOSTS...   munged, slurm.conf, slurmctld on NET.1 and
#                                 one slurmd per host on NET.11, NET.12, ...;
#                                 waits until every node is idle
#   slurm_cmd CMD...              a Slurm client command on host ctl
#   slurm_node_pids HOST          every process in HOST's namespace but the
#                                 slurmd itself (one pid a line)
#   slurm_wait_state JOBID STATES SECS  until the job is in one of STATES
#                                 (a regex), printing the state
#   slurm_reap HOST               after HOST's slurmd was killed: reaps it
#                                 quietly (no "Killed" line from the shell)
#   slurm_teardown                munged stopped (the namespaces' processes
#                                 go with netns_teardown)

SLURM_WHY=""
SLURM_DIR=""
SLURM_HOSTS=()
SLURM_MUNGED_PID=""
declare -A SLURM_ADDR=()
declare -A SLURM_PID=()   # host -> the pid of its slurmd (slurmctld's for ctl)

slurm_usable() {
  local b
  for b in munged slurmctld slurmd sbatch srun scancel scontrol squeue sinfo unshare; do
    if ! command -v "$b" >/dev/null && [ ! -x "/usr/sbin/$b" ]; then
      SLURM_WHY="$b missing (scripts/bootstrap --test installs slurmctld, slurmd, slurm-client and munge)"
      return 1
    fi
  done
  if [ ! -e /usr/lib/x86_64-linux-gnu/slurm-wlm/proctrack_linuxproc.so ] &&
     ! ls /usr/lib/*/slurm-wlm/proctrack_linuxproc.so >/dev/null 2>&1; then
    SLURM_WHY="Slurm's proctrack/linuxproc plugin is missing"
    return 1
  fi
  if ! unshare --uts true 2>/dev/null; then
    SLURM_WHY="unshare --uts is not permitted here: each slurmd needs a hostname of its own"
    return 1
  fi
}

# slurm__spawn HOST LOG CMD...: CMD in HOST's network namespace under HOST
# as its hostname, in the background, recorded for netns_teardown. Entered
# with nsenter, not ip netns exec: ip netns exec mounts a sysfs of the
# namespace's own over /sys, which hides /sys/fs/cgroup, and slurmd 22.05
# loads its cgroup plugin (to find the machine's cgroup version) even with
# proctrack/linuxproc and task/none, and refuses to start without it. No
# cgroup is made: the plugin only looks.
slurm__spawn() {
  local h="$1" log="$2"
  shift 2
  setsid nsenter --net="/run/netns/$NETNS_PREFIX-$h" unshare --uts \
    sh -c 'hostname "$0" && exec "$@"' "$h" "$@" </dev/null >"$log" 2>&1 &
  NETNS_PIDS+=("$!")
  SLURM_PID[$h]=$!
}

slurm_cmd() {
  netns_run ctl env SLURM_CONF="$SLURM_DIR/etc/slurm.conf" "$@"
}

slurm_init() {
  local dir="$1" net="$2" i=11 h sbin=/usr/sbin
  shift 2
  SLURM_DIR="$dir"
  SLURM_HOSTS=("$@")
  mkdir -p "$dir/munge" "$dir/etc" "$dir/state" "$dir/log" "$dir/run"
  chmod 700 "$dir/munge"
  # MUNGE: a key of its own (1024 random bytes), readable by root only.
  (umask 077; head -c 1024 /dev/urandom >"$dir/munge/munge.key")
  munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/munged.seed" \
    --log-file="$dir/munge/munged.log" >"$dir/munge/munged.out" 2>&1 || {
    SLURM_WHY="munged did not start: $(cat "$dir/munge/munged.out" "$dir/munge/munged.log" 2>/dev/null | tail -n 2)"
    return 1
  }
  SLURM_MUNGED_PID=$(cat "$dir/munge/munged.pid")
  SLURM_ADDR[ctl]="$net.1"
  netns_host ctl "$net.1" 1gbit
  local nodes=""
  for h in "$@"; do
    SLURM_ADDR[$h]="$net.$i"
    netns_host "$h" "$net.$i" 1gbit
    nodes+="NodeName=$h NodeAddr=$net.$i CPUs=8 RealMemory=4000 State=UNKNOWN"$'\n'
    i=$((i + 1))
  done
  cat >"$dir/etc/slurm.conf" <<EOF
ClusterName=appliance
SlurmctldHost=ctl($net.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
SwitchType=switch/none
StateSaveLocation=$dir/state/ctl
SlurmdSpoolDir=$dir/state/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmctldPort=6817
SlurmdPort=6818
ReturnToService=2
SlurmctldTimeout=10
SlurmdTimeout=6
InactiveLimit=0
MinJobAge=300
KillWait=5
MessageTimeout=5
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
$nodes
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
  mkdir -p "$dir/state/ctl"
  for h in "$@"; do mkdir -p "$dir/state/$h"; done
  slurm__spawn ctl "$dir/log/slurmctld.out" "$sbin/slurmctld" -D -i -f "$dir/etc/slurm.conf"
  for h in "$@"; do
    slurm__spawn "$h" "$dir/log/slurmd-$h.out" env SLURM_CONF="$dir/etc/slurm.conf" \
      "$sbin/slurmd" -D -N "$h" -f "$dir/etc/slurm.conf"
  done
  local idle=0
  for _ in $(seq 1 120); do
    idle=$(slurm_cmd sinfo -h -N -o '%N %t' 2>/dev/null | grep -c ' idle$' || true)
    [ "$idle" -ge $# ] && return 0
    sleep 0.25
  done
  SLURM_WHY="only $idle of $# nodes idle after 30 s: $(slurm_cmd sinfo -N 2>&1 | tr '\n' ' ') $(tail -n 3 "$dir/log/slurmctld.log" 2>/dev/null)"
  return 1
}

slurm_node_pids() {
  local h="$1" pid comm
  for pid in $(ip netns pids "$NETNS_PREFIX-$h" 2>/dev/null); do
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || continue
    case "$comm" in
      slurmd|slurmctld|unshare) ;;
      *) echo "$pid $comm" ;;
    esac
  done
}

slurm_wait_state() {
  local id="$1" want="$2" secs="$3" st=""
  for _ in $(seq 1 $((secs * 5))); do
    # (a heterogeneous job has a record per component: the first's)
    st=$(slurm_cmd scontrol show job "$id" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | head -n 1 | cut -d= -f2) || true
    [[ "$st" =~ ^($want)$ ]] && break
    sleep 0.2
  done
  echo "$st"
}

slurm_reap() {
  { wait "${SLURM_PID[$1]}"; } 2>/dev/null || true
}

slurm_teardown() {
  if [ -n "$SLURM_MUNGED_PID" ]; then
    kill -TERM "$SLURM_MUNGED_PID" 2>/dev/null || true
    for _ in $(seq 1 25); do
      kill -0 "$SLURM_MUNGED_PID" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$SLURM_MUNGED_PID" 2>/dev/null || true
    SLURM_MUNGED_PID=""
  fi
}
