#!/usr/bin/env bash
# Cluster test: the coordinator's web page (--http) in a real browser.
# Headless Chromium, driven over the DevTools protocol (cdp.py), logs in as
# a user: a wrong key is refused, the members are listed, the user's jobs
# are and another user's job is not, a finished job's loss plot draws
# exactly its points (those appliance-submit printed among them), the
# memory plan of each wse-node is drawn, and cancel works (web.py). Then
# bad requests get their statuses and a bounded load from this host leaves
# the coordinator's loop lag under 250 ms. Skipped without Chromium.
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-web
if ! "$py" -c "import sys; sys.path.insert(0, '$src/tests/cluster'); import cdp; sys.exit(0 if cdp.find_chromium() else 1)"; then
  echo "SKIP: no chromium (scripts/bootstrap --test installs it)"
  exit 77
fi
submit="$build/client/appliance-submit"

keys="$work/keys"
mkdir -m 700 "$keys"
(umask 077
 od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$keys/alice.key"
 od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$keys/bob.key"
 printf '[users.alice]\nkey_file = "alice.key"\n\n[users.bob]\nkey_file = "bob.key"\n' >"$keys/users.toml")
echo 'http = "127.0.0.1:0"' >"$work/coordinator.toml"
"$src/deploy/local/appliance-up" --replicas 2 --dir "$run" --build "$build" --users-file "$keys/users.toml" \
  --coordinator-config "$work/coordinator.toml" >/dev/null
set -a; . "$run/env"; set +a
url=$(grep -o 'web page at http://127.0.0.1:[0-9]*' "$run/logs/coordinator.log" | head -n 1 | sed 's/^web page at //') ||
  fail "the coordinator does not announce its web page"
alice() { env -u APPLIANCE_SECRET_FILE APPLIANCE_USER=alice APPLIANCE_KEY_FILE="$keys/alice.key" "$submit" "$@"; }
bob() { env -u APPLIANCE_SECRET_FILE APPLIANCE_USER=bob APPLIANCE_KEY_FILE="$keys/bob.key" "$submit" "$@"; }
job() { # job NAME STEPS: the quickstart, with an evaluation every 20 steps
  sed -e "s/^max_steps = .*/max_steps = $2/" -e "s|^model_dir = .*|model_dir = \"$work/$1\"|" \
    -e "s/^checkpoint_steps = .*/checkpoint_steps = 0/" -e "s/^save_initial_checkpoint = .*//" \
    -e "s/^log_steps = .*/log_steps = 10\neval_frequency = 20/" "$src/examples/quickstart.toml" >"$work/$1.toml"
  printf '\n[eval_input]\ndata_processor = "synthetic_classification"\nbatch_size = 64\nnum_classes = 4\nnum_samples = 256\nnoise = 1.0\nshuffle = false\n' >>"$work/$1.toml"
  echo "$work/$1.toml"
}

# alice's finished job, and what appliance-submit printed of it
alice "$(job done 60)" >"$work/done.out" 2>&1 || { cat "$work/done.out"; fail "alice's job"; }
done_id=$(sed -n 's/.* accepted as \(job-[0-9]*\)$/\1/p' "$work/done.out")
[ -n "$done_id" ] || fail "no job id in: $(head -n 3 "$work/done.out")"
# a running job of alice's to cancel, and bob's (queued behind it)
run_id=$(alice --detach "$(job long 2000000)") || fail "alice's long job: $run_id"
for _ in $(seq 1 100); do [ "$(alice status "$run_id" --json | field state)" = running ] && break; sleep 0.1; done
[ "$(alice status "$run_id" --json | field state)" = running ] || fail "$run_id is not running"
bob_id=$(bob --detach "$(job bob 100)") || fail "bob's job: $bob_id"

"$py" - "$work/done.out" "$work/args.json" <<PY
import json, re, sys
printed, evals = {}, 0
for line in open(sys.argv[1]):
    evals += bool(re.search(r" eval at step \d+: loss ", line))
    m = re.search(r"\] step (\d+)/\d+ \(\d+%\) loss ([0-9.]+)", line)
    if m and int(m.group(1)) > 0:
        printed[m.group(1)] = m.group(2)
json.dump({"alice_key": open("$keys/alice.key").read(), "bob_key": open("$keys/bob.key").read(),
           "done_job": "$done_id", "running_job": "$run_id", "bob_job": "$bob_id",
           "members": ["memoryx-1", "swarmx-1", "worker-1", "worker-2", "wse-node-1", "wse-node-2"],
           "max_steps": 60, "evals": evals, "replicas": 2, "printed": printed,
           "screenshot": "${WEB_SCREENSHOT:-}"}, open(sys.argv[2], "w"))
PY
PYTHONPATH="$src/tests/cluster" timeout 120 "$py" "$src/tests/cluster/web.py" "$url" "$work/args.json" ||
  fail "the web page (above)"

# the cancel is the coordinator's, as the CLI sees it; no key in its log
[ "$(alice status "$run_id" --json | field state)" = cancelled ] || fail "$run_id not cancelled for the CLI"
grep -q "web login refused from 127.0.0.1: wrong key for user \"alice\"" "$run/logs/coordinator.log" ||
  fail "the refused login is not logged"
for k in "$keys/alice.key" "$keys/bob.key" "$APPLIANCE_SECRET_FILE"; do
  ! grep -qF "$(cat "$k")" "$run/logs/coordinator.log" || fail "a key in the coordinator's log"
done
echo "ok: the web page"
