#!/usr/bin/env bash
# Cluster test: Prometheus metrics. Every daemon serves /metrics; a scrape
# parses as text exposition; during a job the counters move (bytes per peer,
# steps, chunks, batches, jobs by state) and histograms fill.
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-metrics

"$src/deploy/local/appliance-up" --replicas 2 --metrics --dir "$run" --build "$build" >/dev/null
set -a; . "$run/env"; set +a
[ "$(wc -l < "$run/metrics")" = 7 ] || fail "metrics addresses: $(cat "$run/metrics")"

scrape() { # scrape TAG: every daemon's metrics into $work/TAG.<name>
  while read -r name url; do
    "$py" - "$url" > "$work/$1.$name" <<'PY' || fail "scrape $url"
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=5) as r:
    assert r.headers["Content-Type"].startswith("text/plain"), r.headers["Content-Type"]
    sys.stdout.write(r.read().decode())
PY
  done < "$run/metrics"
}
scrape before
sed -e "s|^model_dir = .*|model_dir = \"$work/m\"|" "$src/examples/quickstart.toml" > "$work/q.toml"
"$build/client/appliance-submit" --json "$work/q.toml" > "$work/out.json" || fail "job: $(cat "$work/out.json")"
sleep 1.2 # the expositions are rendered once a second
scrape after

"$py" - "$work" <<'PY' || fail "metrics did not move"
import glob, os, re, sys
work = sys.argv[1]
line = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (-?[0-9.eE+-]+|NaN|\+Inf)$')
def parse(path):
    vals = {}
    for l in open(path):
        l = l.rstrip("\n")
        if not l or l.startswith("# HELP ") or l.startswith("# TYPE "):
            continue
        m = line.match(l)
        assert m, (path, l)
        vals[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return vals
def get(vals, name):
    return sum(v for k, v in vals.items() if k == name or k.startswith(name + "{"))
checks = {
    "coordinator": ['appliance_jobs{state="done"}', "appliance_step_seconds_count"],
    "memoryx-1": ["appliance_steps_committed_total", "appliance_checkpoints_total",
                  "appliance_chunk_write_seconds_count", "appliance_peer_bytes_sent_total"],
    "swarmx-1": ["appliance_chunks_forwarded_total", "appliance_chunks_reduced_total",
                 "appliance_peer_bytes_received_total"],
    "wse-node-1": ["appliance_steps_total", "appliance_step_compute_seconds_count",
                   "appliance_peer_bytes_received_total"],
    "worker-1": ["appliance_batches_total", "appliance_batch_seconds_count"],
}
for daemon, names in checks.items():
    before, after = parse(f"{work}/before.{daemon}"), parse(f"{work}/after.{daemon}")
    for n in names:
        assert get(after, n) > get(before, n), (daemon, n, get(before, n), get(after, n))
    assert get(after, "appliance_memory_bytes") > 0, daemon
wse = parse(f"{work}/after.wse-node-1")
assert get(wse, "appliance_steps_total") == 60, get(wse, "appliance_steps_total")
assert wse['appliance_step_compute_seconds_bucket{le="+Inf"}'] == 60
assert get(wse, "appliance_memory_limit_bytes") > 0
print("ok: every daemon's metrics parse and move during a job")
PY
echo "1 passed, 0 failed"
