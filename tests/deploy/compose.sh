#!/usr/bin/env bash
# Deployment test: deploy/docker/compose.yaml, as it is, brings up a whole
# cluster in containers (coordinator, memoryx, swarmx, 2 workers, 2 wse-node
# replicas) under podman-compose; examples/quickstart.toml submitted from the
# host through the coordinator's published port trains to the end.
#
# No registry is reachable from where this runs, and building
# deploy/docker/Dockerfile (FROM debian:bookworm-slim) takes apt downloads
# and a full compile (tests/deploy/dockerfile.sh does, opt-in). This quick
# test builds a stand-in, tests/deploy/Containerfile (FROM scratch), from a root it stages:
# the built binaries, the entrypoint and health check of deploy/docker, bash
# and mkdir for them, every shared library ldd lists for these programs, the
# dynamic loader, the NSS modules and /etc/nsswitch.conf (service names such
# as "coordinator" are resolved through DNS), and a passwd entry for uid 10001.
#
# Skips (exit 77) when not root, or when podman cannot be installed or cannot
# run a container here.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/deploy/lib.sh
. "$here/lib.sh"
src=${SOURCE_ROOT:?}
build=${BUILD_ROOT:?}
t0=$SECONDS

[ "$(id -u)" -eq 0 ] || skip "needs root (rootful podman)"
if ! command -v podman >/dev/null || ! command -v podman-compose >/dev/null; then
  command -v apt-get >/dev/null || skip "podman and podman-compose are not installed"
  echo "installing podman, podman-compose, runc and the dnsname CNI plugin"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      podman podman-compose runc containernetworking-plugins \
      golang-github-containernetworking-plugin-dnsname; } >/dev/null 2>&1 ||
    skip "cannot install podman and podman-compose with apt-get"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/appliance-compose.XXXXXX")
chmod 0755 "$work"
tag="appliance-compose-test:$$"
image="localhost/$tag"
project="appliance-test-$$"
compose_file="$src/deploy/docker/compose.yaml"

# Podman's configuration for this test only (lib.sh: runc, ulimits).
podman_conf "$work/containers.conf"

# ---- docker-compose config: the file is valid Compose as Docker reads it,
# the replica counts come from their variables, and a broken copy is refused
# with the key named.
if ! command -v docker-compose >/dev/null && command -v apt-get >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker-compose \
    >/dev/null 2>&1 || true
fi
if command -v docker-compose >/dev/null; then
  dc() { APPLIANCE_SECRET="$work/secret" docker-compose -f "$1" --project-directory "$(dirname "$compose_file")" config "${@:2}"; }
  : >"$work/secret"
  err=$(dc "$compose_file" -q 2>&1) || fail "docker-compose config refuses compose.yaml: $err"
  replicas=$(WSE_NODES=4 dc "$compose_file" 2>/dev/null | /usr/bin/python3 -c '
import sys
lines = sys.stdin.read().splitlines()
i = lines.index("  wse-node:")
print(next(l.split(":")[1].strip() for l in lines[i:] if l.strip().startswith("replicas:")))')
  [ "$replicas" = 4 ] || fail "WSE_NODES=4 gives $replicas wse-node replicas in docker-compose config"
  sed 's/^\( *\)replicas: .*/\1replicas: two/' "$compose_file" >"$work/broken.yaml"
  if err=$(dc "$work/broken.yaml" -q 2>&1); then fail "docker-compose config accepted replicas: two"; fi
  case "$err" in *replicas*) ;; *) fail "docker-compose's refusal does not name the key: $err" ;; esac
  echo "ok: docker-compose $(docker-compose version --short 2>/dev/null) config accepts compose.yaml (WSE_NODES=4: $replicas replicas) and refuses a broken copy: $(echo "$err" | head -n 1)"
else
  echo "docker-compose is not installed: compose.yaml not checked with docker-compose config"
fi

cleanup() {
  set +e
  compose_down
  podman rmi -f "$image" >/dev/null 2>&1
  [ -n "${KEEP_WORK:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; compose_logs; exit 1; }

# ---- the staged root
root="$work/ctx/root"
mkdir -p "$root"/{usr/local/bin,bin,lib64,lib/x86_64-linux-gnu,etc,tmp,data,var/lib/appliance,run/secrets}
chmod 1777 "$root/tmp"
# COPY gives everything to root; named volumes start as a copy of these
# directories, so they are world-writable for uid 10001 (the Dockerfile
# chowns them instead).
chmod 1777 "$root/data" "$root/var/lib/appliance"
programs=()
for bin in coordinator/coordinator memoryx/memoryx swarmx/swarmx worker/worker \
           wse-node/wse-node client/appliance-submit; do
  [ -x "$build/$bin" ] || fail "$build/$bin is not built"
  cp "$build/$bin" "$root/usr/local/bin/"
  programs+=("$build/$bin")
done
cp "$src/deploy/docker/appliance-entrypoint" "$src/deploy/docker/appliance-healthcheck" "$root/usr/local/bin/"
cp /bin/bash /bin/mkdir "$root/bin/"
ln -s bash "$root/bin/sh"
programs+=(/bin/bash /bin/mkdir)
# Every library goes to /lib/x86_64-linux-gnu under the name the binaries ask
# for (so OpenBLAS's alternatives link needs no ld.so.cache): the loader
# searches that directory by default.
libdir="$root/lib/x86_64-linux-gnu"
for p in "${programs[@]}"; do
  ldd "$p" | while read -r name arrow path _; do
    if [ "$arrow" = "=>" ] && [ -f "$path" ]; then
      cp -L "$path" "$libdir/$name"
    elif [[ "$name" == /* ]] && [ -f "$name" ]; then
      cp -L "$name" "$root$name"          # the loader, /lib64/ld-linux-x86-64.so.2
    fi
  done
done
[ -f "$root/lib64/ld-linux-x86-64.so.2" ] || fail "the dynamic loader was not found through ldd"
# glibc loads its NSS modules at run time (dns and files are built into libc
# since 2.34; the others come if present).
cp -L /lib/x86_64-linux-gnu/libnss_*.so* "$libdir/" 2>/dev/null || true
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$root/etc/nsswitch.conf"
printf 'root:x:0:0:root:/:/bin/sh\nappliance:x:10001:10001:appliance:/var/lib/appliance:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\nappliance:x:10001:\n' >"$root/etc/group"
# /etc/hosts and /etc/resolv.conf are mounted by podman in every container.
cp "$src/tests/deploy/Containerfile" "$work/ctx/Containerfile"

podman build -q -t "$tag" "$work/ctx" >"$work/build.log" 2>&1 || {
  cat "$work/build.log" >&2
  skip "podman cannot build an image here"
}
t_image=$((SECONDS - t0))
out=$(podman run --rm --net none "$image" bash -c 'echo ok' 2>&1) ||
  skip "podman cannot run a container here: $(echo "$out" | tail -n 1)"
[ "$out" = ok ] || skip "podman cannot run a container here: $out"

# ---- the cluster, from the compose file as users have it
compose_up "$image" "$build/client/appliance-submit"
t_up=$((SECONDS - t0))
echo "ok: 6 members alive after $((t_up - t_image)) s (image built in $t_image s)"

for c in $(compose_containers); do
  podman exec "$c" appliance-healthcheck >/dev/null || fail "health check fails in $c"
done
echo "ok: the health check passes in every container"

# /metrics on port 9100 of every container (the entrypoint's default), and
# across the compose network under the service's name, as
# deploy/prometheus/prometheus-compose.yml scrapes it
# (bash alone: the test's image has no cat)
scrape='exec 3<>"/dev/tcp/$0/9100" && printf "GET /metrics HTTP/1.0\r\nHost: $0\r\n\r\n" >&3 &&
  while IFS= read -r l || [ -n "$l" ]; do printf "%s\n" "$l"; done <&3'
for c in $(compose_containers); do
  podman exec "$c" bash -c "$scrape" 127.0.0.1 >"$work/metrics" 2>&1 || fail "no metrics in $c: $(cat "$work/metrics")"
  grep -q '^appliance_registered 1$' "$work/metrics" || fail "metrics of $c: $(head -c 600 "$work/metrics")"
done
# grep reads the whole list (with -m1 it could stop first, and the writer's
# SIGPIPE fail the pipeline under pipefail)
coord=$(compose_containers | grep coordinator) || fail "no coordinator container"
coord=${coord%%$'\n'*}
podman exec "$coord" bash -c "$scrape" memoryx >"$work/metrics" 2>&1 || fail "memoryx:9100 from the coordinator: $(cat "$work/metrics")"
grep -q '^appliance_checkpoint_failures_total 0$' "$work/metrics" || fail "memoryx's metrics: $(head -c 600 "$work/metrics")"
echo "ok: every container serves /metrics on 9100, memoryx's reached by its service name"

compose_quickstart
echo "1 passed, 0 failed ($((SECONDS - t0)) s)"
