#!/usr/bin/env bash
# Deploy test: the systemd units under a real systemd. Installs the appliance
# with `meson install` into a fresh Debian bookworm root file system, boots
# it with systemd-nspawn (private network: only its own loopback), starts
# every unit and waits until each is active (registered, through
# Type=notify), trains examples/quickstart.toml with appliance-submit inside,
# kills a wse-node and checks that systemd restarts it and it registers
# again. Needs root; skips (77) without it or without nspawn and debootstrap.
set -euo pipefail
src=${SOURCE_ROOT:?}
build=${BUILD_ROOT:?}
py=/usr/bin/python3
here="$src/tests/deploy"
t0=$SECONDS

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "the deploy test needs root (debootstrap, systemd-nspawn)"
missing=()
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v systemd-nspawn >/dev/null || missing+=(systemd-container)
if [ ${#missing[@]} -gt 0 ]; then
  echo "deploy: installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    -o DPkg::Lock::Timeout=300 "${missing[@]}" >/dev/null 2>&1 ||
    { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        -o DPkg::Lock::Timeout=300 "${missing[@]}" >/dev/null 2>&1; } ||
    skip "systemd-nspawn or debootstrap missing and could not be installed: ${missing[*]}"
fi
command -v nsenter >/dev/null || skip "nsenter (util-linux) is missing"

work=$(mktemp -d /var/tmp/appliance-deploy.XXXXXX)
root="$work/root"
nspawn_pid=""
init_pid=""
cleanup() {
  local rc=$?
  if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2>/dev/null; then
    if [ -n "$init_pid" ]; then
      nsenter --target "$init_pid" --all systemctl poweroff --no-block >/dev/null 2>&1 || true
    fi
    for _ in $(seq 1 100); do kill -0 "$nspawn_pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$nspawn_pid" 2>/dev/null || true
    wait "$nspawn_pid" 2>/dev/null || true
  fi
  if [ "${KEEP_WORK:-}" = "" ]; then rm -rf "$work"; else echo "kept $work" >&2; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# inside CMD...: runs CMD inside the container, in a clean environment.
inside() {
  nsenter --target "$init_pid" --all \
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"
}
units=(appliance-coordinator.service appliance-memoryx.service appliance-swarmx.service
       appliance-worker@1.service appliance-worker@2.service
       appliance-wse-node@1.service appliance-wse-node@2.service)
fail() {
  echo "FAIL: $*" >&2
  if [ -n "$init_pid" ]; then
    for u in "${units[@]}"; do
      echo "== $u" >&2
      inside journalctl -q -u "$u" -n 15 --no-pager >&2 2>&1 || true
    done
  fi
  [ -s "$work/nspawn.log" ] && { echo "== nspawn" >&2; tail -n 20 "$work/nspawn.log" >&2; }
  exit 1
}
step() { echo "[$((SECONDS - t0)) s] $*"; }

# 1. A root file system: the cached debootstrap, copied fresh.
step "root file system"
cached=$("$here/rootfs.sh") || fail "no root file system (debootstrap)"
cp -a "$cached" "$root"

# 2. The appliance installed as a distribution would: /usr, /etc.
step "meson install --destdir"
dbuild="$build/deploy-usr"
# the build under test itself where it was set up for /usr and /etc (CI's:
# .ci/run), else a second one beside it
if meson introspect --buildoptions "$build" 2>/dev/null | "$py" -c '
import json, sys
o = {x["name"]: x["value"] for x in json.load(sys.stdin)}
sys.exit(0 if o.get("prefix") == "/usr" and o.get("sysconfdir") in ("/etc", "etc") else 1)'; then
  dbuild=$build
elif [ ! -f "$dbuild/build.ninja" ]; then
  meson setup "$dbuild" "$src" --prefix=/usr --sysconfdir=/etc -Dtests=false >"$work/setup.log" 2>&1 ||
    { tail -n 20 "$work/setup.log" >&2; fail "meson setup of the /usr build"; }
fi
ninja -C "$dbuild" >"$work/ninja.log" 2>&1 || { tail -n 30 "$work/ninja.log" >&2; fail "build"; }
meson install -C "$dbuild" --destdir "$root" --quiet --no-rebuild >"$work/install.log" 2>&1 ||
  { tail -n 20 "$work/install.log" >&2; fail "meson install"; }
for f in usr/bin/coordinator usr/bin/appliance-submit usr/lib/systemd/system/appliance-wse-node@.service \
         etc/appliance/coordinator.toml usr/share/appliance/examples/quickstart.toml; do
  [ -e "$root/$f" ] || fail "meson install did not install /$f"
done

# 3. The secret (root only; the units read it through LoadCredential) and
# the configuration: the installed examples, with checkpoints under memoryx's
# state directory and OpenBLAS told the core type.
( umask 077; od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$root/etc/appliance/secret" )
chmod 600 "$root/etc/appliance/secret"
sed -i 's/^wafer_memory = .*/wafer_memory = "512M"/' "$root/etc/appliance/wse-node.toml"
mkdir -p "$root/root/job"
sed -e 's|^model_dir = .*|model_dir = "/var/lib/appliance/memoryx/quickstart"|' \
  "$root/usr/share/appliance/examples/quickstart.toml" >"$root/root/job/quickstart.toml"

# 4. Boot it. Only its own loopback: nothing it does reaches the host's.
step "boot"
systemd-nspawn -b -D "$root" --register=no --keep-unit --private-network \
  --machine="appliance-test-$$" --console=read-only </dev/null >"$work/nspawn.log" 2>&1 &
nspawn_pid=$!
for _ in $(seq 1 100); do
  for p in $(cat /proc/"$nspawn_pid"/task/*/children 2>/dev/null); do
    if [ "$(cat /proc/"$p"/comm 2>/dev/null)" = systemd ]; then init_pid=$p; break 2; fi
  done
  kill -0 "$nspawn_pid" 2>/dev/null || fail "systemd-nspawn exited"
  sleep 0.2
done
[ -n "$init_pid" ] || fail "no systemd inside the container after 20 s"
deadline=$((SECONDS + 120))
while :; do
  state=$(inside systemctl is-system-running 2>&1 || true)
  case "$state" in
    running|degraded) break ;;
  esac
  kill -0 "$nspawn_pid" 2>/dev/null || fail "systemd-nspawn exited"
  [ "$SECONDS" -lt "$deadline" ] || fail "the container's systemd did not come up (is-system-running: $state)"
  sleep 0.5
done
step "container up (systemd $state, init pid $init_pid)"

# 5. The units pass systemd-analyze verify.
verify=$(inside systemd-analyze verify appliance-secret.service "${units[@]}" 2>&1) || fail "systemd-analyze verify: $verify"
[ -z "$verify" ] || fail "systemd-analyze verify warns: $verify"
echo "ok: systemd-analyze verify is silent on $((${#units[@]} + 1)) units"

# 6. Start everything; active means registered (Type=notify, READY=1).
step "start"
inside systemctl enable --quiet "${units[@]}" || fail "systemctl enable"
inside systemctl start --no-block "${units[@]}" || fail "systemctl start"
deadline=$((SECONDS + 90))
while :; do
  pending=()
  for u in "${units[@]}"; do
    s=$(inside systemctl is-active "$u" 2>/dev/null || true)
    [ "$s" = active ] || pending+=("$u:$s")
    [ "$s" = failed ] && fail "$u failed"
  done
  [ ${#pending[@]} -eq 0 ] && break
  [ "$SECONDS" -lt "$deadline" ] || fail "not active after 90 s: ${pending[*]}"
  sleep 0.5
done
step "ok: all ${#units[@]} units active (registered)"
# each wse-node's spill directory: its own cache directory, made by systemd
for i in 1 2; do
  inside journalctl -q -u "appliance-wse-node@$i.service" --no-pager |
    grep -q "spill directory /var/cache/appliance/wse-node-$i: .* free" ||
    fail "wse-node-$i has no spill directory in /var/cache/appliance: $(inside journalctl -q -u "appliance-wse-node@$i.service" --no-pager | grep -i spill | tail -n 2)"
done
step "ok: the wse-nodes spill, where a plan needs it, to /var/cache/appliance/wse-node-N"
submit_env=(APPLIANCE_COORDINATOR=127.0.0.1:7070 APPLIANCE_SECRET_FILE=/etc/appliance/secret)
cluster=$(inside env "${submit_env[@]}" appliance-submit --cluster --json) || fail "appliance-submit --cluster: $cluster"
"$py" - "$cluster" <<'PY' || fail "members not all alive: $cluster"
import json, sys
alive = {m["name"] for m in json.loads(sys.argv[1])["members"] if m["state"] == "alive"}
want = {"memoryx-1", "swarmx-1", "worker-1", "worker-2", "wse-node-1", "wse-node-2"}
sys.exit(0 if want <= alive else 1)
PY

# 7. Train the quickstart job on 2 replicas.
step "quickstart"
out=$(inside env "${submit_env[@]}" timeout 300 sh -c 'cd /root/job && appliance-submit --json quickstart.toml') ||
  fail "quickstart job: $out"
"$py" - "$out" <<'PY' || fail "quickstart result: $out"
import json, sys
r = json.loads(sys.argv[1])
sys.exit(0 if r["state"] == "done" and r["steps"] == 60 else 1)
PY
inside test -f /var/lib/appliance/memoryx/quickstart/checkpoint_60-shard1-of-1.safetensors ||
  fail "no checkpoint of step 60 in memoryx's state directory"
step "ok: quickstart done, 60 steps, checkpoint in /var/lib/appliance/memoryx/quickstart"

# 8. A wse-node killed: systemd restarts it and it registers again.
before=$(inside systemctl show -P MainPID appliance-wse-node@2.service)
inside systemctl kill -s KILL appliance-wse-node@2.service || fail "systemctl kill"
deadline=$((SECONDS + 60))
while :; do
  pid=$(inside systemctl show -P MainPID appliance-wse-node@2.service 2>/dev/null || true)
  s=$(inside systemctl is-active appliance-wse-node@2.service 2>/dev/null || true)
  if [ "$s" = active ] && [ -n "$pid" ] && [ "$pid" != 0 ] && [ "$pid" != "$before" ]; then
    cluster=$(inside env "${submit_env[@]}" appliance-submit --cluster --json 2>/dev/null || true)
    if "$py" - "$cluster" "$pid" <<'PY'; then break; fi
import json, sys
try:
    ms = json.loads(sys.argv[1])["members"]
except ValueError:
    sys.exit(1)
sys.exit(0 if any(m["name"] == "wse-node-2" and m["state"] == "alive" and
                  str(m.get("pid", sys.argv[2])) == sys.argv[2] for m in ms) else 1)
PY
  fi
  [ "$SECONDS" -lt "$deadline" ] || fail "wse-node-2 not back within 60 s (state $s, pid $pid, was $before)"
  sleep 0.5
done
restarts=$(inside systemctl show -P NRestarts appliance-wse-node@2.service)
[ "$restarts" -ge 1 ] || fail "NRestarts is $restarts"
step "ok: wse-node-2 killed (pid $before), restarted by systemd (pid $pid, NRestarts $restarts), alive again"

# 9. The watchdog is fed from the event loop.
wd=$(inside systemctl show -P WatchdogUSec appliance-wse-node@1.service)
ts=$(inside systemctl show -P WatchdogTimestampMonotonic appliance-wse-node@1.service)
[ "$wd" = 30s ] && [ "${ts:-0}" != 0 ] || fail "watchdog not fed (WatchdogUSec $wd, last ping $ts)"
echo "ok: WatchdogSec=$wd, WATCHDOG=1 received"

# 10. Bad input. Without the coordinator a daemon stays activating and says
# it retries; without the secret a unit fails at once, on its dependency on
# appliance-secret.service, whose message in the journal names the file.
step "bad input"
inside systemctl stop appliance-coordinator.service
inside systemctl start --no-block appliance-wse-node@3.service
sleep 6
s=$(inside systemctl is-active appliance-wse-node@3.service || true)
[ "$s" = activating ] || fail "wse-node@3 without a coordinator is $s, expected activating"
log=$(inside journalctl -q -u appliance-wse-node@3.service --no-pager)
grep -q "coordinator 127.0.0.1:7070 not reached: .*; retrying" <<<"$log" || fail "no 'not reached ... retrying' in the log"
inside systemctl stop appliance-wse-node@3.service
echo "ok: without a coordinator wse-node@3 stays activating and logs that it retries"
mv "$root/etc/appliance/secret" "$root/etc/appliance/secret.away"
t=$SECONDS
if msg=$(inside timeout 20 systemctl start appliance-worker@3.service 2>&1); then
  fail "worker@3 started without a secret"
fi
[ $((SECONDS - t)) -le 5 ] || fail "worker@3 without a secret took $((SECONDS - t)) s to fail"
journal=$(inside journalctl -q -u appliance-secret.service -u appliance-worker@3.service --no-pager)
named=$(grep -m1 "the cluster secret /etc/appliance/secret is missing or empty" <<<"$journal" || true)
[ -n "$named" ] || fail "the journal does not name the missing secret file: $msg; $journal"
grep -q "Dependency failed for.*input worker 3" <<<"$journal" ||
  fail "worker@3 did not fail on its dependency on the secret: $journal"
mv "$root/etc/appliance/secret.away" "$root/etc/appliance/secret"
echo "ok: without its secret a unit fails at once: $msg; the journal: ${named#*]: }"

# 11. A clean power-off: every daemon stops on SIGTERM.
step "poweroff"
inside systemctl poweroff --no-block >/dev/null 2>&1 || true
for _ in $(seq 1 150); do kill -0 "$nspawn_pid" 2>/dev/null || break; sleep 0.2; done
if kill -0 "$nspawn_pid" 2>/dev/null; then fail "the container did not power off within 30 s"; fi
wait "$nspawn_pid" 2>/dev/null || true
nspawn_pid=""
step "1 passed, 0 failed"
