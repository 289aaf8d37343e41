#!/usr/bin/env bash
# Prints the path of a minimal Debian bookworm root file system, building it
# with debootstrap the first time. It is cached outside the source tree
# (APPLIANCE_ROOTFS_CACHE, default /var/cache/appliance-test) and rebuilt
# when what it is made of changes. Needs root and debootstrap.
#   rootfs.sh           bookworm-rootfs: systemd and the appliance's runtime
#                       libraries (tests/deploy/systemd.sh)
#   rootfs.sh minbase   bookworm-minbase: debootstrap's minbase alone, with apt
#                       set up as in debian:bookworm-slim and its sources on
#                       this host's mirror (tests/deploy/dockerfile.sh
#                       imports it as that image)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/deploy/lib.sh
. "$here/lib.sh"

cache=${APPLIANCE_ROOTFS_CACHE:-/var/cache/appliance-test}
url=$(debian_mirror)
case "${1:-systemd}" in
  systemd)
    packages=systemd,dbus,libuv1,libprotobuf-c1,libopenblas0-pthread,libdnnl2,libsqlite3-0,libsodium23,libpng16-16,libmicrohttpd12,libsystemd0,libyaml-0-2,libtiff6,libjpeg62-turbo,libhdf5-103-1
    name=bookworm-rootfs
    stamp=$packages ;;
  minbase)
    packages=
    name=bookworm-minbase
    # Bump the number when the setup below changes.
    stamp="minbase 1 $url $(debian_security_mirror)" ;;
  *) echo "usage: rootfs.sh [systemd|minbase]" >&2; exit 2 ;;
esac
dest="$cache/$name"

# The marker's first line is the stamp; the second, when it was built.
fresh() { [ -f "$dest/.appliance-rootfs" ] && [ "$(head -n 1 "$dest/.appliance-rootfs")" = "$stamp" ]; }
if fresh; then
  echo "$dest"
  exit 0
fi

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if fresh; then
  echo "$dest"
  exit 0
fi
tmp="$cache/$name.new"
log="$cache/debootstrap-$name.log"
rm -rf "$tmp"
echo "rootfs: debootstrap bookworm from $url into $dest (once; takes minutes)" >&2
if ! debootstrap --variant=minbase ${packages:+--include="$packages"} bookworm "$tmp" "$url" >"$log" 2>&1; then
  echo "rootfs: debootstrap failed; last lines of $log:" >&2
  tail -n 20 "$log" >&2
  rm -rf "$tmp"
  exit 1
fi
rm -rf "$tmp/var/cache/apt/archives/"*.deb "$tmp/var/lib/apt/lists/"* || true
if [ "$name" = bookworm-minbase ]; then
  # As in the debian:bookworm-slim image: deb822 sources (here on this
  # host's mirror), no documentation or translations installed, apt's
  # package cache emptied after every run.
  rm -f "$tmp/etc/apt/sources.list"
  {
    printf 'Types: deb\nURIs: %s\nSuites: bookworm bookworm-updates\nComponents: main\n' "$url"
    printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
    if sec=$(debian_security_mirror) && [ -n "$sec" ]; then
      printf '\nTypes: deb\nURIs: %s\nSuites: bookworm-security\nComponents: main\n' "$sec"
      printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
    fi
  } >"$tmp/etc/apt/sources.list.d/debian.sources"
  cat >"$tmp/etc/dpkg/dpkg.cfg.d/docker" <<'DPKG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
DPKG
  cat >"$tmp/etc/apt/apt.conf.d/docker-clean" <<'APT'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
APT
  echo 'Acquire::Languages "none";' >"$tmp/etc/apt/apt.conf.d/docker-no-languages"
  : >"$tmp/etc/resolv.conf"      # the engine mounts its own
  rm -f "$tmp/etc/hostname"
fi
printf '%s\n%s\n' "$stamp" "$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)" >"$tmp/.appliance-rootfs"
rm -rf "$dest"
mv "$tmp" "$dest"
echo "$dest"
