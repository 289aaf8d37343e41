# Hosts as network namespaces on one machine, for the multi-host test and the
# fabric benchmark (sourced by both). Every host is a namespace with one
# interface, eth0, whose peer is a port of a bridge that lives in a namespace
# of its own (the "switch"), so nothing touches the machine's interfaces.
# Each link is shaped in both directions: the host's egress on eth0 and its
# ingress on the switch port, both at the host's rate (tbf). Each link end
# also gets a delay of NETNS_DELAY_US microseconds (default 200):
#  - where the kernel has netem, a netem qdisc under each of the two tbfs
#    (NETNS_DELAY="0.2ms");
#  - otherwise, where NFQUEUE works and the delay line is built
#    ($BUILD_ROOT/tests/cluster/delayline, or NETNS_DELAYLINE), a delay line
#    in each host's namespace (NETNS_DELAY="0.2ms (nfqueue)"): an iptables
#    rule (mangle PREROUTING -i eth0, --queue-bypass: packets pass
#    undelayed if the delay line is gone) sends every packet the host
#    receives to NFQUEUE 0, and the delay line holds each for
#    2 x NETNS_DELAY_US from when it arrived, then accepts it. That is the
#    sender's link end and the receiver's together, as netem on both gives;
#    received packets carry the kernel's arrival stamp, which sent ones do
#    not, so holding them on the way in keeps the delay exact and costs one
#    pass through a queue per packet. The delay line runs under SCHED_FIFO
#    so that it wakes on time on a busy machine;
#  - otherwise no delay (NETNS_DELAY empty, NETNS_DELAY_WHY says why).
# Every host's TCP uses the congestion control NETNS_TCP_CC (default cubic,
# the kernel's own default), whatever the machine is set to: BBR, which some
# machines default to, paces below what a tbf-shaped link carries and makes
# the fabric figures swing by a fifth from run to run.
# So with the default a packet from one host to another takes 0.4 ms more
# one way, and a round trip between two hosts 0.8 ms more, either way.
# NETNS_DELAY_US=0 turns the delay off; NETNS_DELAY_VIA=nfqueue takes the
# delay line even where there is netem (tests/cluster/delay.sh).
#
#   netns_usable || { echo "SKIP: $NETNS_WHY"; exit 77; }
#   trap cleanup EXIT; trap 'exit 130' INT; trap 'exit 143' TERM
#                                     where cleanup calls netns_teardown
#   netns_init PREFIX                 the switch; names become PREFIX-<host>
#   netns_host NAME ADDR RATE         e.g. netns_host mx 10.77.0.2 1gbit
#   netns_run NAME CMD...             runs CMD in the host's namespace
#   netns_spawn NAME LOG CMD...       the same in the background, in its own
#                                     session, output to LOG; records the pid
#   netns_delay_stop NAME             takes the delay line off a host's link
#   netns_wait_alive N TRIES SUBMIT   waits until the coordinator that the
#                                     command SUBMIT (appliance-submit's
#                                     arguments follow) asks counts N members
#                                     alive, TRIES times 0.25 s at most;
#                                     prints how many it counts
#                                     (its rules, then the process) and prints
#                                     its last line: how long it held packets
#   netns_teardown                    kills the spawned processes and every
#                                     process left in the namespaces, deletes
#                                     the namespaces (and so the veths and the
#                                     bridge); call it from the EXIT trap

NETNS_PREFIX=""
NETNS_NAMES=()      # every namespace made, the switch first
NETNS_PIDS=()       # processes started with netns_spawn
NETNS_DELAY=""      # "0.2ms" with netem, "0.2ms (nfqueue)" with the delay
                    # line, empty when there is no delay
NETNS_DELAY_WHY=""  # why there is no delay
NETNS_DELAY_US=${NETNS_DELAY_US:-200}
NETNS_DELAYLINE=${NETNS_DELAYLINE:-${BUILD_ROOT:+$BUILD_ROOT/tests/cluster/delayline}}
NETNS_WHY=""        # why netns_usable failed
NETNS__MODE=""      # netem, nfqueue or empty
NETNS__DIR=""       # the delay lines' logs and ready files
declare -A NETNS__DLPID=()  # host -> pid of its delay line

# Succeeds when this shell may make namespaces, veths and bridges; otherwise
# sets NETNS_WHY. Also chooses how links get their delay (NETNS_DELAY).
netns_usable() {
  if [ "$(id -u)" -ne 0 ]; then NETNS_WHY="not root: network namespaces need root"; return 1; fi
  if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
    NETNS_WHY="ip or tc missing (apt-get install iproute2)"; return 1
  fi
  case "$NETNS_DELAY_US" in
    ''|*[!0-9]*) NETNS_WHY="NETNS_DELAY_US=$NETNS_DELAY_US: want a whole number of microseconds"; return 1 ;;
  esac
  local probe="nsprobe-$$"
  if ! ip netns add "$probe" 2>/dev/null; then NETNS_WHY="ip netns add is not permitted here"; return 1; fi
  local ok=0
  ip -n "$probe" link add br-probe type bridge 2>/dev/null &&
    ip -n "$probe" link add vp0 type veth peer name vp1 2>/dev/null &&
    ip netns exec "$probe" tc qdisc add dev vp0 root tbf rate 1gbit burst 128k latency 20ms 2>/dev/null &&
    ok=1
  NETNS_DELAY="" NETNS__MODE="" NETNS_DELAY_WHY=""
  if [ "$NETNS_DELAY_US" -eq 0 ]; then
    NETNS_DELAY_WHY="NETNS_DELAY_US=0"
  elif [ "${NETNS_DELAY_VIA:-}" != nfqueue ] &&
       ip netns exec "$probe" tc qdisc add dev vp1 root netem delay "${NETNS_DELAY_US}us" 2>/dev/null; then
    NETNS__MODE=netem
  elif netns__probe_nfqueue "$probe"; then
    NETNS__MODE=nfqueue
  fi
  if [ -n "$NETNS__MODE" ]; then
    NETNS_DELAY=$(awk -v u="$NETNS_DELAY_US" 'BEGIN { printf "%gms", u / 1000 }')
    [ "$NETNS__MODE" = netem ] || NETNS_DELAY+=" (nfqueue)"
  fi
  ip netns del "$probe" 2>/dev/null
  [ "$ok" -eq 1 ] || { NETNS_WHY="no bridge, veth or tbf support in this kernel"; return 1; }
}

# netns__probe_nfqueue NS: succeeds when a delay line in NS delays a UDP
# datagram to itself over lo; otherwise sets NETNS_DELAY_WHY.
netns__probe_nfqueue() {
  local ns="$1" dir pid ok=0 pre="no netem in this kernel"
  [ "${NETNS_DELAY_VIA:-}" != nfqueue ] || pre="NETNS_DELAY_VIA=nfqueue"
  if [ -z "$NETNS_DELAYLINE" ] || [ ! -x "$NETNS_DELAYLINE" ]; then
    NETNS_DELAY_WHY="$pre and no delay line built (${NETNS_DELAYLINE:-BUILD_ROOT unset})"
    return 1
  fi
  if ! command -v iptables >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    # what the delay line needs, installed as the scripts install what is missing
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iptables \
      >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null 2>&1 &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iptables \
          >/dev/null 2>&1; } || true
  fi
  if ! command -v iptables >/dev/null; then
    NETNS_DELAY_WHY="$pre and no iptables for the delay line (apt-get install iptables)"
    return 1
  fi
  dir=$(mktemp -d "${TMPDIR:-/tmp}/netns-probe.XXXXXX")
  ip -n "$ns" link set lo up
  ip netns exec "$ns" "$NETNS_DELAYLINE" --queue 0 --delay-us 1000 --ready-file "$dir/ready" \
    </dev/null >"$dir/log" 2>&1 &
  pid=$!
  for _ in $(seq 1 50); do
    [ -e "$dir/ready" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  # No --queue-bypass here: the datagram gets through only if the delay
  # line passes it, and only after 2 x 1 ms (out and in by lo).
  if [ -e "$dir/ready" ] &&
     ip netns exec "$ns" iptables -t mangle -A OUTPUT -o lo -p udp -j NFQUEUE --queue-num 0 2>"$dir/ipt" &&
     ip netns exec "$ns" iptables -t mangle -A PREROUTING -i lo -p udp -j NFQUEUE --queue-num 0 2>>"$dir/ipt" &&
     ip netns exec "$ns" /usr/bin/python3 -c '
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 0)); s.settimeout(2)
t = time.monotonic(); s.sendto(b"x", s.getsockname()); s.recv(16)
raise SystemExit(0 if time.monotonic() - t >= 0.0015 else 1)' 2>/dev/null; then
    ok=1
  fi
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  if [ "$ok" -eq 0 ]; then
    NETNS_DELAY_WHY="$pre and NFQUEUE does not work here: $(cat "$dir/ipt" "$dir/log" 2>/dev/null | grep -v 'bound\|packets' | head -n 1)"
  fi
  rm -rf "$dir"
  [ "$ok" -eq 1 ]
}

netns_init() {
  NETNS_PREFIX="$1"
  ip netns add "$NETNS_PREFIX-sw"
  NETNS_NAMES+=("$NETNS_PREFIX-sw")
  ip -n "$NETNS_PREFIX-sw" link add br0 type bridge
  ip -n "$NETNS_PREFIX-sw" link set br0 up
  ip -n "$NETNS_PREFIX-sw" link set lo up
  NETNS__DIR=$(mktemp -d "${TMPDIR:-/tmp}/netns-$NETNS_PREFIX.XXXXXX")
}

# netns__shape NS DEV RATE: tbf at RATE with a burst of 5 ms at that rate
# (5 ms; at least 64 KiB, so that 64 KiB GSO packets pass), then netem's
# delay when that is how links get it.
netns__shape() {
  local ns="$1" dev="$2" rate="$3" bits burst
  bits=$(/usr/bin/python3 -c '
import sys, re
m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", sys.argv[1].lower())
print(int(float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]))' "$rate")
  burst=$((bits / 8 / 200))
  [ "$burst" -ge 65536 ] || burst=65536
  ip netns exec "$ns" tc qdisc add dev "$dev" root handle 1: tbf rate "$rate" burst "$burst" latency 20ms
  if [ "$NETNS__MODE" = netem ]; then
    ip netns exec "$ns" tc qdisc add dev "$dev" parent 1:1 handle 10: netem delay "${NETNS_DELAY_US}us" limit 100000
  fi
}

netns_host() {
  local name="$1" addr="$2" rate="$3" ns="$NETNS_PREFIX-$1" sw="$NETNS_PREFIX-sw"
  ip netns add "$ns"
  NETNS_NAMES+=("$ns")
  ip -n "$ns" link set lo up
  ip netns exec "$ns" sysctl -qw net.ipv4.tcp_congestion_control="${NETNS_TCP_CC:-cubic}" ||
    echo "netns: ${NETNS_TCP_CC:-cubic} congestion control not available; host $name keeps $(ip netns exec "$ns" sysctl -n net.ipv4.tcp_congestion_control)" >&2
  ip -n "$ns" link add eth0 type veth peer name "p-$name" netns "$sw"
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$sw" link set "p-$name" master br0
  ip -n "$sw" link set "p-$name" up
  netns__shape "$ns" eth0 "$rate"
  netns__shape "$sw" "p-$name" "$rate"
  [ "$NETNS__MODE" != nfqueue ] || netns__delayline "$name"
}

# netns__delayline NAME: starts the host's delay line on queue 0 of its
# namespace, waits until it has bound the queue, then sends what comes in by
# eth0 through it.
netns__delayline() {
  local name="$1" ns="$NETNS_PREFIX-$1" ready="$NETNS__DIR/delayline-$1.ready" log="$NETNS__DIR/delayline-$1.log"
  netns_spawn "$name" "$log" "$NETNS_DELAYLINE" --queue 0 --delay-us $((2 * NETNS_DELAY_US)) \
    --ready-file "$ready" --realtime 10
  NETNS__DLPID[$name]=${NETNS_PIDS[-1]}
  for _ in $(seq 1 100); do
    [ -e "$ready" ] && break
    kill -0 "${NETNS__DLPID[$name]}" 2>/dev/null || break
    sleep 0.05
  done
  if [ ! -e "$ready" ]; then
    echo "netns: the delay line of host $name did not start: $(cat "$log")" >&2
    return 1
  fi
  ip netns exec "$ns" iptables -t mangle -A PREROUTING -i eth0 -j NFQUEUE --queue-num 0 --queue-bypass
}

netns_delay_stop() {
  local name="$1" ns="$NETNS_PREFIX-$1" pid="${NETNS__DLPID[$1]:-}"
  [ -n "$pid" ] || return 0
  ip netns exec "$ns" iptables -t mangle -D PREROUTING -i eth0 -j NFQUEUE --queue-num 0 --queue-bypass
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  unset "NETNS__DLPID[$name]"
  tail -n 1 "$NETNS__DIR/delayline-$name.log"
}

netns_run() {
  local ns="$NETNS_PREFIX-$1"
  shift
  ip netns exec "$ns" "$@"
}

# With job control off, setsid does not fork and ip netns exec execs, so $!
# is the command itself.
netns_spawn() {
  local ns="$NETNS_PREFIX-$1" log="$2"
  shift 2
  setsid ip netns exec "$ns" "$@" </dev/null >"$log" 2>&1 &
  NETNS_PIDS+=("$!")
}

# netns_work NAME: a working directory for the script in $work
# (appliance-NAME.XXXXXX under TMPDIR, mode 755 for the daemons the hosts
# run), and the exit path that tears the hosts down: on exit, INT or TERM,
# the script's own netns_before_teardown (when it defines one), then
# netns_teardown, then the directory is removed, or kept when
# NETNS_KEEP_WORK is set (saying where).
netns_work() {
  work=$(mktemp -d "${TMPDIR:-/tmp}/appliance-$1.XXXXXX")
  chmod 755 "$work"
  trap netns__exit EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

netns__exit() {
  if declare -F netns_before_teardown >/dev/null; then netns_before_teardown; fi
  netns_teardown
  if [ -n "${NETNS_KEEP_WORK:-}" ]; then echo "logs and traces kept in $work"; else rm -rf "$work"; fi
}

netns_teardown() {
  local pid ns left
  for pid in "${NETNS_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    left=0
    for pid in "${NETNS_PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && left=1; done
    [ "$left" -eq 0 ] && break
    sleep 0.2
  done
  for pid in "${NETNS_PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for ns in "${NETNS_NAMES[@]}"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
  done
  for ns in "${NETNS_NAMES[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  [ -z "$NETNS__DIR" ] || rm -rf "$NETNS__DIR"
  NETNS__DIR=""
  NETNS__DLPID=()
  NETNS_PIDS=()
  NETNS_NAMES=()
}

netns_wait_alive() {
  local want="$1" tries="$2" alive=0
  shift 2
  for _ in $(seq 1 "$tries"); do
    alive=$("$@" --cluster --json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
print(sum(1 for m in json.load(sys.stdin).get("members", []) if m.get("state") == "alive"))' 2>/dev/null || echo 0)
    [ "$alive" -ge "$want" ] && break
    sleep 0.25
  done
  echo "$alive"
}
