#!/usr/bin/env bash
# Deployment test of deploy/docker/Dockerfile itself: it builds, and the
# image it makes runs deploy/docker/compose.yaml (2 wse-node replicas) and
# trains examples/quickstart.toml submitted from the host.
#
# No registry is reachable from where this runs, so debian:bookworm-slim is
# made here: debootstrap's minbase of bookworm from this host's Debian mirror
# (tests/deploy/rootfs.sh minbase, cached), with apt's sources on that mirror,
# imported as docker.io/library/debian:bookworm-slim into a podman storage of
# this test's own under /var/cache/appliance-test/podman-dockerfile (its own
# storage.conf and containers.conf; nothing of the host's podman changes).
# The image is built with `podman build --format docker` (an OCI image has
# no HEALTHCHECK) from a copy of the files git tracks, and kept there under a
# tag of the tree's hash, so that a second run of the same tree skips the
# build. Checks: the runtime image has no compiler and runs as uid 10001, the
# cluster's members join, their health check reports healthy, the job
# trains; then containers, network and volumes are removed.
#
# Heavy (apt downloads and a full compile in the build stage): skips (exit
# 77) unless APPLIANCE_TEST_DOCKERFILE=1, and when not root or podman,
# podman-compose or debootstrap is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/deploy/lib.sh
. "$here/lib.sh"
src=${SOURCE_ROOT:?}
build=${BUILD_ROOT:?}
t0=$SECONDS

[ "${APPLIANCE_TEST_DOCKERFILE:-}" = 1 ] ||
  skip "opt-in: set APPLIANCE_TEST_DOCKERFILE=1 to build deploy/docker/Dockerfile (apt downloads and a full compile)"
[ "$(id -u)" -eq 0 ] || skip "needs root (rootful podman, debootstrap)"
if ! command -v podman >/dev/null || ! command -v podman-compose >/dev/null; then
  skip "podman and podman-compose are not installed (tests/deploy/compose.sh installs them)"
fi
command -v debootstrap >/dev/null || skip "debootstrap is not installed"
submit="$build/client/appliance-submit"
[ -x "$submit" ] || { echo "FAIL: $submit is not built" >&2; exit 1; }

cache=${APPLIANCE_ROOTFS_CACHE:-/var/cache/appliance-test}
store="$cache/podman-dockerfile"
# podman's database records the run and tmp directories: they stay the same
# from run to run (under /run, so a reboot empties them, as it should).
run=/run/appliance-test/podman-dockerfile
mkdir -p "$store" "$run"
# One run at a time: the storage, its networks' subnets and the tags are ours.
exec 8>"$cache/.podman-dockerfile.lock"
flock 8

work=$(mktemp -d "${TMPDIR:-/tmp}/appliance-dockerfile.XXXXXX")
chmod 0755 "$work"
cat >"$work/storage.conf" <<EOC
[storage]
driver = "overlay"
graphroot = "$store/storage"
runroot = "$run/storage"
EOC
export CONTAINERS_STORAGE_CONF="$work/storage.conf"
# lib.sh's runc and ulimits; networks of this storage only, on subnets the
# host's podman does not hand out by default.
podman_conf "$work/containers.conf" \
  "engine:tmp_dir = \"$run/libpod\"" \
  '[network]' \
  "network_config_dir = \"$store/networks\"" \
  'default_subnet_pools = [{"base" = "10.213.0.0/16", "size" = 24}]'
mkdir -p "$store/networks"

project="appliance-dockerfile-$$"
compose_file="$src/deploy/docker/compose.yaml"
image=localhost/appliance:test
base=docker.io/library/debian:bookworm-slim

cleanup() {
  set +e
  compose_down
  # Only the images stay (the cache); anything else left is reported.
  left=$(podman ps -aq; podman volume ls -q)
  [ -z "$left" ] || echo "left in $store: $left" >&2
  [ -n "${KEEP_WORK:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM       # meson's timeout: clean up all the same
fail() { echo "FAIL: $*" >&2; compose_logs; exit 1; }

# ---- debian:bookworm-slim
rootfs=$("$here/rootfs.sh" minbase) || fail "no minbase root file system (debootstrap)"
stamp=$(sha256sum <"$rootfs/.appliance-rootfs" | cut -c1-16)
base_id=$(podman image inspect --format '{{.Id}}' "$base" 2>/dev/null || true)
if [ -z "$base_id" ] || [ "$(cat "$store/base.stamp" 2>/dev/null)" != "$stamp $base_id" ]; then
  echo "importing $rootfs as $base"
  base_id=$(tar -C "$rootfs" --numeric-owner --exclude=./.appliance-rootfs --exclude='./dev/*' -cf - . |
            podman import -q --change 'CMD ["bash"]' - "$base") || fail "podman import failed"
  base_id=$(podman image inspect --format '{{.Id}}' "$base")
  echo "$stamp $base_id" >"$store/base.stamp"
fi
t_base=$((SECONDS - t0))

# ---- the image, from the files git knows and does not ignore (no build directories)
mkdir "$work/ctx"
if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
  git -C "$src" ls-files -z --cached --others --exclude-standard |
    tar -C "$src" --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -C "$work/ctx" -xf -
else
  tar -C "$src" --exclude='./build*' --exclude=./run --exclude=./data --exclude=./model_dir \
    --exclude=./deploy/docker/secret -cf - . | tar -C "$work/ctx" -xf -
fi
[ -f "$work/ctx/deploy/docker/Dockerfile" ] || fail "no deploy/docker/Dockerfile in the copy of $src"
tree=$(tar -C "$work/ctx" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - . | sha256sum | cut -c1-16)
key=$(printf '%s %s' "$tree" "$base_id" | sha256sum | cut -c1-16)
cached="localhost/appliance-cache:$key"
if podman image exists "$cached"; then
  podman tag "$cached" "$image"
  echo "ok: image of this tree in the cache ($cached)"
else
  echo "building deploy/docker/Dockerfile (tree $tree)"
  # --format docker: the OCI format has no HEALTHCHECK; --pull=never: the
  # base is the one imported above; --network=host: apt reaches the mirror.
  # The build stage is tagged too, so that pruning keeps its apt layer for
  # the next tree; the second build reuses its layers.
  for target in "--target build -t localhost/appliance-cache:build" "-t $image -t $cached"; do
    # shellcheck disable=SC2086
    if ! podman build --network=host --pull=never --format docker $target \
           -f deploy/docker/Dockerfile "$work/ctx" >>"$work/build.log" 2>&1; then
      tail -n 40 "$work/build.log" >&2
      fail "podman build of deploy/docker/Dockerfile failed (log: $work/build.log with KEEP_WORK=1)"
    fi
  done
  # Older trees' images go, and what only they used.
  for old in $(podman images --format '{{.Repository}}:{{.Tag}}'); do
    case "$old" in
      "$cached"|localhost/appliance-cache:build) ;;
      localhost/appliance-cache:*) podman rmi "$old" >/dev/null 2>&1 || true ;;
    esac
  done
  podman image prune -f >/dev/null 2>&1 || true
  echo "ok: deploy/docker/Dockerfile built"
fi
t_image=$((SECONDS - t0))

# ---- the runtime image
# (--no-healthcheck: podman schedules health checks with systemd timers, and
# says so when there is no systemd.)
run_image() { podman run --rm --net none --no-healthcheck "$image" "$@"; }
out=$(run_image bash -c 'id -u; id -g; id -un') || fail "the image does not run: $out"
[ "$out" = $'10001\n10001\nappliance' ] || fail "the image runs as $(echo "$out" | tr '\n' ' '), not uid and gid 10001 (appliance)"
# shellcheck disable=SC2016 # expanded in the container
out=$(run_image bash -c 'for c in gcc cc cpp c99 ld as make; do command -v "$c"; done; compgen -G "/usr/lib/gcc/*/*/cc1"; dpkg-query -W -f "\${db:Status-Status} \${Package}\n" gcc gcc-12 cpp cpp-12 binutils libc6-dev make 2>/dev/null | grep ^installed; true') ||
  fail "the image does not run bash"
[ -z "$out" ] || fail "the runtime image has build tools: $out"
usage=$(run_image --help)
grep -q '^Usage: appliance-entrypoint' <<<"$usage" || fail "the image's default command is not the entrypoint's usage"
hc=$(podman image inspect --format '{{json .HealthCheck}}' "$image")
case "$hc" in *appliance-healthcheck*) ;; *) fail "the image has no HEALTHCHECK: $hc" ;; esac
echo "ok: the runtime image runs as uid 10001, has no compiler, has its HEALTHCHECK ($(podman image inspect --format '{{.Size}}' "$image" | awk '{ printf "%.0f MB", $1 / 1e6 }'))"

# ---- the cluster, from the compose file as users have it
compose_up "$image" "$submit"
echo "ok: 6 members alive"
for c in $(compose_containers); do
  uid=$(podman exec "$c" stat -c %u /proc/1) || fail "cannot look into $c"
  [ "$uid" = 10001 ] || fail "the daemon of $c runs as uid $uid"
  status=
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    podman healthcheck run "$c" >/dev/null 2>&1 &&
      status=$(podman inspect --format '{{.State.Health.Status}}' "$c") && [ "$status" = healthy ] && break
    sleep 1
  done
  [ "$status" = healthy ] || fail "$c is not healthy: ${status:-podman healthcheck run fails}"
done
echo "ok: every daemon runs as uid 10001 and is healthy"

compose_quickstart

compose_down
left=$(podman ps -aq; podman volume ls -q; podman network ls -q --filter "label=io.podman.compose.project=$project")
[ -z "$left" ] || fail "left after compose down: $left"
echo "ok: containers, network and volumes removed"
echo "1 passed, 0 failed ($((SECONDS - t0)) s: base image $t_base s, image $((t_image - t_base)) s, cluster $((SECONDS - t_image)) s)"
