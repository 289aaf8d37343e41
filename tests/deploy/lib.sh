# shellcheck shell=bash
# shellcheck disable=SC2154 # src, work, project, compose_file: set by the test
# Shared by the deployment tests (sourced): the host's Debian mirror,
# podman's configuration for a test, and a cluster from
# deploy/docker/compose.yaml that trains examples/quickstart.toml.

skip() { echo "SKIP: $*"; exit 77; }

# The Debian mirror this host already uses (deb822 or one-line sources).
debian_mirror() {
  local m
  m=$(sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/*.sources 2>/dev/null |
      tr ' ' '\n' | grep -v -- '-security' | grep -m1 '/debian/*$' || true)
  if [ -z "$m" ]; then
    m=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
        awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^(https?|file):/) { print $i; exit } }' |
        grep -v -- '-security' | head -n 1 || true)
  fi
  echo "${m:-http://deb.debian.org/debian}"
}

# Its security mirror, if it has one (nothing otherwise).
debian_security_mirror() {
  { sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/*.sources 2>/dev/null | tr ' ' '\n'
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
      awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^(https?|file):/) print $i }'
  } | grep -m1 -- '-security/*$' || true
}

# podman_conf FILE [LINES...]: a containers.conf for this test only, exported
# as CONTAINERS_CONF. LINES are appended (whole sections, after [engine] and
# [containers]; "engine:KEY = VALUE" goes into [engine]).
# - runc: crun cannot start containers on sandboxed kernels such as gVisor;
# - explicit ulimits: podman's defaults raise RLIMIT_NOFILE and RLIMIT_NPROC,
#   which needs CAP_SYS_RESOURCE; without it the container fails to start
#   ("error setting rlimit type 6/7: operation not permitted"). Values below
#   the current hard limits are always allowed.
podman_conf() {
  local file=$1 nofile nproc l
  shift
  nofile=$(ulimit -Hn); [ "$nofile" = unlimited ] || [ "$nofile" -gt 4096 ] && nofile=4096
  nproc=$(ulimit -Hu); [ "$nproc" = unlimited ] || [ "$nproc" -gt 4096 ] && nproc=4096
  {
    echo '[engine]'
    echo 'runtime = "runc"'
    for l in "$@"; do [[ "$l" == engine:* ]] && echo "${l#engine:}"; done
    echo '[containers]'
    echo "default_ulimits = [\"nofile=$nofile:$nofile\", \"nproc=$nproc:$nproc\"]"
    for l in "$@"; do [[ "$l" == engine:* ]] || echo "$l"; done
  } >"$file"
  export CONTAINERS_CONF="$file"
}

# ---- a cluster from deploy/docker/compose.yaml under podman-compose
# Set before use: project (compose project name), compose_file, work (a
# directory of the test, for the secret and logs).

compose() {
  podman-compose -p "$project" -f "$compose_file" "$@"
}

compose_logs() {
  local c
  for c in $(podman ps -a --format '{{.Names}}' --filter "label=io.podman.compose.project=$project"); do
    echo "== $c" >&2
    podman logs --tail 15 "$c" >&2 2>&1 || true
  done
}

compose_containers() {
  podman ps --format '{{.Names}}' --filter "label=io.podman.compose.project=$project"
}

# Brings the project down, volumes included. podman-compose 1.0 leaves the
# project's network (and, when up failed half-way, possibly containers and
# volumes): all are removed by label. It also leaves the anonymous volumes
# that an image's VOLUME gives containers that mount nothing there (docker
# compose down -v removes them): they are looked up before. The CNI
# host-local IPAM keeps a directory per network name in /var/lib/cni/networks
# after the network is gone; it goes too once it holds no address.
compose_down() {
  local c v n anon nets d
  nets=$(podman network ls --format '{{.Name}}' --filter "label=io.podman.compose.project=$project" 2>/dev/null)
  anon=$(for c in $(podman ps -aq --filter "label=io.podman.compose.project=$project"); do
           podman inspect --format '{{range .Mounts}}{{if eq .Type "volume"}}{{.Name}} {{end}}{{end}}' "$c"
         done 2>/dev/null)
  compose down -v >/dev/null 2>&1
  for c in $(podman ps -aq --filter "label=io.podman.compose.project=$project"); do
    podman rm -f -v "$c" >/dev/null 2>&1
  done
  for v in $(podman volume ls -q --filter "label=io.podman.compose.project=$project") $anon; do
    podman volume rm -f "$v" >/dev/null 2>&1
  done
  for n in $(podman network ls -q --filter "label=io.podman.compose.project=$project"); do
    podman network rm -f "$n" >/dev/null 2>&1
  done
  for n in $nets; do
    d="/var/lib/cni/networks/$n"
    if [ -d "$d" ] && ! podman network exists "$n" 2>/dev/null &&
       [ -z "$(find "$d" -mindepth 1 ! -name lock ! -name 'last_reserved_ip.*' -print -quit)" ]; then
      rm -rf "$d"
    fi
  done
  return 0
}

# compose_up IMAGE SUBMIT: a new secret and a free host port, then the
# cluster (2 wse-nodes, 2 workers) from IMAGE, up until its 6 members are
# alive. Exports what appliance-submit (SUBMIT, run on the host) needs.
compose_up() {
  local image=$1 port list alive=0
  submit=$2
  head -c 32 /dev/urandom | base64 >"$work/secret"
  chmod 0644 "$work/secret"    # bind-mounted as it is; the daemons run as uid 10001
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  export APPLIANCE_IMAGE="$image" APPLIANCE_PULL_POLICY=never APPLIANCE_SECRET="$work/secret"
  export WSE_NODES=2 WORKERS=2 COORDINATOR_PORT="$port" APPLIANCE_PUBLISH=127.0.0.1
  compose up -d --no-build >"$work/up.log" 2>&1 || { cat "$work/up.log" >&2; fail "podman-compose up failed"; }
  export APPLIANCE_COORDINATOR="127.0.0.1:$port" APPLIANCE_SECRET_FILE="$work/secret"
  for _ in $(seq 1 120); do
    if list=$("$submit" --cluster --json 2>/dev/null); then
      alive=$(python3 -c 'import json,sys; print(sum(m["state"] == "alive" for m in json.loads(sys.argv[1])["members"]))' "$list")
      [ "$alive" -ge 6 ] && break
    fi
    sleep 0.5
  done
  [ "$alive" -ge 6 ] || fail "after 60 s $alive of 6 members alive (memoryx, swarmx, 2 workers, 2 wse-nodes): ${list:-no answer}"
  python3 - "$list" <<'PY' || fail "member list: $list"
import json, sys
members = json.loads(sys.argv[1])["members"]
wse = [m for m in members if m["name"].startswith("wse-node-")]
assert len(wse) == 2 and len({m["name"] for m in wse}) == 2, "two wse-nodes with distinct names"
PY
}

# examples/quickstart.toml, submitted from the host, trains to the end and
# memoryx writes the checkpoint of step 60 into the data volume.
compose_quickstart() {
  local out
  # model_dir is absolute, under the data volume that memoryx mounts.
  sed -e 's|^model_dir = .*|model_dir = "/data/model_dir/quickstart"|' "$src/examples/quickstart.toml" >"$work/quickstart.toml"
  out=$(cd "$work" && timeout 300 "$submit" --json quickstart.toml) || fail "the job failed: $out"
  python3 - "$out" <<'PY' || fail "result: $out"
import json, sys
r = json.loads(sys.argv[1])
assert r["state"] == "done", r["state"]
assert r["steps"] == 60, r["steps"]
assert 0 < r["final_loss"] < 0.3, r["final_loss"]
assert r["model_dir"] == "/data/model_dir/quickstart", r["model_dir"]
PY
  podman exec "${project}_memoryx_1" bash -c '[ -f /data/model_dir/quickstart/checkpoint_60-shard1-of-1.safetensors ]' ||
    fail "no checkpoint of step 60 in the data volume"
  echo "ok: quickstart done in the containers: $out"
}
