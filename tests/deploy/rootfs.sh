#!/usr/bin/env bash
# Prints the path of a minimal Debian bookworm root file system with systemd
# and the appliance's runtime libraries, building it with debootstrap the
# first time. It is cached outside the source tree (APPLIANCE_ROOTFS_CACHE,
# default /var/cache/appliance-test) and rebuilt when the package list
# changes. Needs root and debootstrap.
set -euo pipefail

cache=${APPLIANCE_ROOTFS_CACHE:-/var/cache/appliance-test}
packages=systemd,dbus,libuv1,libprotobuf-c1,libopenblas0-pthread,libsqlite3-0,libsodium23,libpng16-16,libmicrohttpd12,libsystemd0
dest="$cache/bookworm-rootfs"

# The Debian mirror this host already uses (deb822 or one-line sources).
mirror() {
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

if [ -f "$dest/.appliance-rootfs" ] && [ "$(cat "$dest/.appliance-rootfs")" = "$packages" ]; then
  echo "$dest"
  exit 0
fi

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ -f "$dest/.appliance-rootfs" ] && [ "$(cat "$dest/.appliance-rootfs")" = "$packages" ]; then
  echo "$dest"
  exit 0
fi
tmp="$cache/bookworm-rootfs.new"
rm -rf "$tmp"
url=$(mirror)
echo "rootfs: debootstrap bookworm from $url into $dest (once; takes minutes)" >&2
if ! debootstrap --variant=minbase --include="$packages" bookworm "$tmp" "$url" >"$cache/debootstrap.log" 2>&1; then
  echo "rootfs: debootstrap failed; last lines of $cache/debootstrap.log:" >&2
  tail -n 20 "$cache/debootstrap.log" >&2
  rm -rf "$tmp"
  exit 1
fi
rm -rf "$tmp/var/cache/apt/archives/"*.deb "$tmp/var/lib/apt/lists/"* || true
echo "$packages" >"$tmp/.appliance-rootfs"
rm -rf "$dest"
mv "$tmp" "$dest"
echo "$dest"
