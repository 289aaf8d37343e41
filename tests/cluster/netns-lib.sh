# Hosts as network namespaces on one machine, for the multi-host test and the
# fabric benchmark (sourced by both). Every host is a namespace with one
# interface, eth0, whose peer is a port of a bridge that lives in a namespace
# of its own (the "switch"), so nothing touches the machine's interfaces.
# Each link is shaped in both directions: the host's egress on eth0 and its
# ingress on the switch port, both at the host's rate (tbf), with a 0.2 ms
# delay where the kernel has netem.
#
#   netns_usable || { echo "SKIP: $NETNS_WHY"; exit 77; }
#   trap cleanup EXIT; trap 'exit 130' INT; trap 'exit 143' TERM
#                                     where cleanup calls netns_teardown
#   netns_init PREFIX                 the switch; names become PREFIX-<host>
#   netns_host NAME ADDR RATE         e.g. netns_host mx 10.77.0.2 1gbit
#   netns_run NAME CMD...             runs CMD in the host's namespace
#   netns_spawn NAME LOG CMD...       the same in the background, in its own
#                                     session, output to LOG; records the pid
#   netns_teardown                    kills the spawned processes and every
#                                     process left in the namespaces, deletes
#                                     the namespaces (and so the veths and the
#                                     bridge); call it from the EXIT trap

NETNS_PREFIX=""
NETNS_NAMES=()      # every namespace made, the switch first
NETNS_PIDS=()       # processes started with netns_spawn
NETNS_DELAY=""      # "0.2ms" when netem is there, empty otherwise
NETNS_WHY=""        # why netns_usable failed

# Succeeds when this shell may make namespaces, veths and bridges; otherwise
# sets NETNS_WHY.
netns_usable() {
  if [ "$(id -u)" -ne 0 ]; then NETNS_WHY="not root: network namespaces need root"; return 1; fi
  if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
    NETNS_WHY="ip or tc missing (apt-get install iproute2)"; return 1
  fi
  local probe="nsprobe-$$"
  if ! ip netns add "$probe" 2>/dev/null; then NETNS_WHY="ip netns add is not permitted here"; return 1; fi
  local ok=0
  ip -n "$probe" link add br-probe type bridge 2>/dev/null &&
    ip -n "$probe" link add vp0 type veth peer name vp1 2>/dev/null &&
    ip netns exec "$probe" tc qdisc add dev vp0 root tbf rate 1gbit burst 128k latency 20ms 2>/dev/null &&
    ok=1
  ip netns exec "$probe" tc qdisc add dev vp1 root netem delay 0.2ms 2>/dev/null && NETNS_DELAY=0.2ms
  ip netns del "$probe" 2>/dev/null
  [ "$ok" -eq 1 ] || { NETNS_WHY="no bridge, veth or tbf support in this kernel"; return 1; }
}

netns_init() {
  NETNS_PREFIX="$1"
  ip netns add "$NETNS_PREFIX-sw"
  NETNS_NAMES+=("$NETNS_PREFIX-sw")
  ip -n "$NETNS_PREFIX-sw" link add br0 type bridge
  ip -n "$NETNS_PREFIX-sw" link set br0 up
  ip -n "$NETNS_PREFIX-sw" link set lo up
}

# netns__shape NS DEV RATE: tbf at RATE with a burst of 5 ms at that rate
# (5 ms; at least 64 KiB, so that 64 KiB GSO packets pass), then the delay.
netns__shape() {
  local ns="$1" dev="$2" rate="$3" bits burst
  bits=$(/usr/bin/python3 -c '
import sys, re
m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", sys.argv[1].lower())
print(int(float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]))' "$rate")
  burst=$((bits / 8 / 200))
  [ "$burst" -ge 65536 ] || burst=65536
  ip netns exec "$ns" tc qdisc add dev "$dev" root handle 1: tbf rate "$rate" burst "$burst" latency 20ms
  if [ -n "$NETNS_DELAY" ]; then
    ip netns exec "$ns" tc qdisc add dev "$dev" parent 1:1 handle 10: netem delay "$NETNS_DELAY" limit 100000
  fi
}

netns_host() {
  local name="$1" addr="$2" rate="$3" ns="$NETNS_PREFIX-$1" sw="$NETNS_PREFIX-sw"
  ip netns add "$ns"
  NETNS_NAMES+=("$ns")
  ip -n "$ns" link set lo up
  ip -n "$ns" link add eth0 type veth peer name "p-$name" netns "$sw"
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$sw" link set "p-$name" master br0
  ip -n "$sw" link set "p-$name" up
  netns__shape "$ns" eth0 "$rate"
  netns__shape "$sw" "p-$name" "$rate"
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
  NETNS_PIDS=()
  NETNS_NAMES=()
}
