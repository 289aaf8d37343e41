#!/usr/bin/env bash
# Cluster test: Prometheus metrics. Every daemon serves /metrics; a scrape
# parses as text exposition; during a job the counters move (bytes per peer,
# steps, chunks, batches, jobs by state) and histograms fill. Every daemon
# also traces its stream (--trace): the traces have the documented columns,
# swarmx sent each weight chunk to both replicas, and bench/trace_phases.py
# finds the broadcast and the reduction of each step of a Weight Streaming job.
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-metrics

"$src/deploy/local/appliance-up" --replicas 2 --metrics --trace --dir "$run" --build "$build" >/dev/null
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
    # the job is Pipelined: memoryx commits no step, it takes the first
    # replica's weights at each checkpoint
    "memoryx-1": ["appliance_checkpoints_total", "appliance_peer_bytes_received_total",
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
# Pipelined: memoryx commits no step and takes no gradient; what comes up
# from swarmx is the first replica's weights for the checkpoints of steps
# 20, 40 and 60 (132 parameters, SGD without momentum: 528 bytes each),
# far from the 60 steps' gradients (31680 bytes) it took before
mx = parse(f"{work}/after.memoryx-1")
assert get(mx, "appliance_steps_committed_total") == 0
# what the alert rules read (deploy/prometheus): no checkpoint failed
assert mx["appliance_checkpoint_failures_total"] == 0, mx
up = sum(v for k, v in mx.items()
         if k.startswith("appliance_peer_bytes_received_total{") and 'peer_role="swarmx"' in k)
assert 3 * 528 < up < 60 * 528, up
wse = parse(f"{work}/after.wse-node-1")
assert get(wse, "appliance_steps_total") == 60, get(wse, "appliance_steps_total")
assert wse['appliance_step_compute_seconds_bucket{le="+Inf"}'] == 60
assert get(wse, "appliance_memory_limit_bytes") > 0
# where the replica's time went: every phase is there, the compute phases
# hold every task's time, and all of them fit in the job's time
phases = {k[len('appliance_step_phase_seconds_total{phase="'):-2]: v for k, v in wse.items()
          if k.startswith("appliance_step_phase_seconds_total{")}
names = ["forward", "loss", "backward", "update", "evaluation", "wait_batch", "wait_weights",
         "wait_gradients_sent", "wait_reduced", "wait_stripes", "wait_checkpoint", "other"]
assert sorted(phases) == sorted(names), phases
compute = sum(phases[n] for n in names[:5])
assert phases["forward"] > 0 and phases["backward"] > 0, phases
assert compute >= 0.999 * wse["appliance_step_compute_seconds_sum{}"], (compute, wse)
import json
elapsed = json.load(open(f"{work}/out.json"))["elapsed_sec"]
assert sum(phases.values()) <= elapsed + 1.0, (phases, elapsed)
print("ok: every daemon's metrics parse and move during a job; the replica's time by phase: " +
      ", ".join("%s %.3f s" % (n, phases[n]) for n in names))
PY
grep -aq "step_phase_sec/forward" "$work"/m/events.out.tfevents.* ||
  fail "no step phases in the TensorBoard file"

# The traces, of a Weight Streaming run of the same model: 4 steps.
sed -e "s|^model_dir = .*|model_dir = \"$work/ws\"|" -e 's/^max_steps = .*/max_steps = 4/' \
  -e 's/^\[runconfig\]/[runconfig]\nmode = "weight_streaming"/' "$src/examples/quickstart.toml" > "$work/ws.toml"
"$build/client/appliance-submit" --json "$work/ws.toml" > "$work/ws.json" || fail "ws job: $(cat "$work/ws.json")"
job=$(field job_id < "$work/ws.json")
"$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null 2>&1 # the traces are complete
"$py" - "$run/traces" "$job" <<'PY' || fail "traces"
import glob, os, sys
d, job = sys.argv[1], sys.argv[2]
names = sorted(os.path.basename(p)[:-6] for p in glob.glob(d + "/*.trace"))
assert names == ["coordinator", "memoryx-1", "swarmx-1", "worker-1", "worker-2", "wse-node-1",
                 "wse-node-2"], names
cols = "t_us dir msg peer step tensor offset count pass eval"
for n in names:
    lines = open(f"{d}/{n}.trace").read().splitlines()
    assert lines[0] == f"# appliance trace of {n}: {cols}", lines[0]
    last = 0
    for l in lines[1:]:
        p = l.split()
        assert len(p) == 10 and p[1] in ("in", "out"), (n, l)
        assert int(p[0]) >= last, (n, "time went back", l)
        last = int(p[0])
sw = [l.split() for l in open(f"{d}/swarmx-1.trace") if not l.startswith("#")]
def count(d, peer):
    return sum(1 for p in sw if p[1] == d and p[2] == "weight_chunk" and p[3].startswith(peer))
win, wout = count("in", "memoryx"), count("out", "wse-node")
assert win > 0 and wout == 2 * win, (win, wout)
# the Pipelined job's checkpoints: the first replica's weights passed up
up_in, up_out = count("in", "wse-node"), count("out", "memoryx")
assert up_in > 0 and up_in == up_out, (up_in, up_out)
senders = {p[3] for p in sw if p[1] == "in" and p[2] == "weight_chunk" and p[3].startswith("wse-node")}
assert len(senders) == 1, ("weights up from more than the first replica", senders)
PY
"$py" "$src/bench/trace_phases.py" "$run/traces/memoryx-1.trace" "$run/traces/wse-node-1.trace" \
  "$run/traces/wse-node-2.trace" > "$work/phases" || fail "trace_phases: $(cat "$work/phases")"
# quickstart's weights: 32 x 4 and a bias of 4, float32: 528 bytes a step.
"$py" - "$work/phases" <<'PY' || fail "phases: $(cat "$work/phases")"
import sys
rows = [l.split() for l in open(sys.argv[1])]
assert [int(r[1]) for r in rows] == [0, 1, 2, 3], rows
for r in rows:
    assert r[5] == "528" and r[9] == "528", r
    assert 0 < float(r[3]) < 10 and 0 < float(r[7]) < 10, r
PY
echo "ok: traces of every daemon; the broadcast and reduction of 4 Weight Streaming steps: $(awk '{ printf "%s/%s ", $4, $8 }' "$work/phases")s"
echo "1 passed, 0 failed"
