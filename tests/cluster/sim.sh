#!/usr/bin/env bash
# Cluster test: simulated compute (wse-node --simulate-compute). The CNN of
# the simulated runs (tests/cluster/jobs/sim_cnn.toml: 3x64x64 images, 16
# samples a replica) in Weight Streaming on 4 wse-nodes, with the kernels,
# then simulated (0.01 s a step per sample): both commit every step with a
# loss from every replica (the simulated one a uniform prediction's, ln 10),
# run the same evaluations, and memoryx streams to swarmx and takes back
# from it the same tensor bytes exactly (the frames' headers within 0.1%);
# the simulated wse-nodes' peak resident memory (VmHWM) stays under 30% of
# the real ones' (one run: 163 MiB real, 23 MiB simulated). The coordinator
# lists the simulated wse-nodes as such (Register.simulated; appliance-submit
# --cluster and the web API's /api/cluster), logs their
# registration so, counts no wafer memory of theirs against their host
# (said to have 512 MiB, less than their 4 x 1 GiB), plans the job without
# cutting it to a share of that host (4 real plans of 133 MiB and swarmx's
# 224 MiB of buffers would not fit it; what simulated ones hold does), and
# the job's log says it simulates. A job keeps its kind across a restart of
# the coordinator (the journal keeps it), though real wse-nodes joined since.
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-sim
submit="$build/client/appliance-submit"

# the CNN of the simulated runs (tests/cluster/jobs/sim_cnn.toml), 16
# samples on each of 4 replicas, evaluated every 3 steps
sed -e 's/^num_csx = .*/num_csx = 4/' -e 's/^max_steps = .*/max_steps = 6\neval_frequency = 3/' \
  -e 's/^batch_size = .*/batch_size = 64/' -e "s|^model_dir = .*|model_dir = \"$work/m\"|" \
  "$src/tests/cluster/jobs/sim_cnn.toml" > "$work/job.toml"
printf '\n[eval_input]\nbatch_size = 64\nnum_classes = 10\nnum_samples = 64\n' >> "$work/job.toml"

echo 'http = "127.0.0.1:0"' > "$work/coordinator.toml"

# run TAG [APPLIANCE-UP ARGS]: the job on a fresh cluster of 4 wse-nodes;
# leaves TAG.out (the client's), TAG.mx (memoryx's metrics), TAG.hwm (each
# wse-node's VmHWM in bytes), TAG.log (the coordinator's log) and
# TAG.cluster (appliance-submit --cluster --json before the job), TAG.api
# (the web API's /api/cluster then) and TAG.joblog (the job's log)
run_job() {
  local tag=$1
  shift
  "$src/deploy/local/appliance-up" --replicas 4 --metrics --dir "$run" --build "$build" \
    --coordinator-config "$work/coordinator.toml" "$@" >/dev/null || fail "$tag: appliance-up"
  (set -a; . "$run/env"; set +a; timeout 30 "$submit" --cluster --json) > "$work/$tag.cluster" ||
    fail "$tag: appliance-submit --cluster: $(cat "$work/$tag.cluster")"
  # the web page's members, as an operator (the cluster secret)
  "$py" - "$(grep -o 'web page at http://127.0.0.1:[0-9]*' "$run/logs/coordinator.log" | head -n 1 |
             sed 's/^web page at //')" "$(set -a; . "$run/env"; echo "$APPLIANCE_SECRET_FILE")" \
    > "$work/$tag.api" <<'PY' || fail "$tag: the web API's cluster"
import json, sys, urllib.parse, urllib.request
url, secret = sys.argv[1], open(sys.argv[2]).read().strip()
body = urllib.parse.urlencode({"user": "", "key": secret}).encode()
with urllib.request.urlopen(urllib.request.Request(url + "/api/login", data=body, method="POST"), timeout=10) as r:
    token = json.load(r)["token"]
req = urllib.request.Request(url + "/api/cluster", headers={"Authorization": "Bearer " + token})
with urllib.request.urlopen(req, timeout=10) as r:
    sys.stdout.write(r.read().decode())
PY
  (set -a; . "$run/env"; set +a; timeout 120 "$submit" --json "$work/job.toml") > "$work/$tag.out" 2>&1 ||
    fail "$tag: $(tail -n 3 "$work/$tag.out")"
  [ "$(tail -n 1 "$work/$tag.out" | field state)" = done ] || fail "$tag: not done: $(tail -n 1 "$work/$tag.out")"
  (set -a; . "$run/env"; set +a; timeout 30 "$submit" logs "$(tail -n 1 "$work/$tag.out" | field job_id)") \
    > "$work/$tag.joblog" 2>&1 || fail "$tag: the job's log: $(tail -n 3 "$work/$tag.joblog")"
  sleep 1.2 # the metrics are rendered once a second
  "$py" - "$(awk '$1 == "memoryx-1" {print $2}' "$run/metrics")" > "$work/$tag.mx" <<'PY' || fail "$tag: memoryx metrics"
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=5) as r:
    sys.stdout.write(r.read().decode())
PY
  for i in 1 2 3 4; do
    awk '/^VmHWM:/ {printf "%.0f\n", $2 * 1024}' "/proc/$(cat "$run/pids/wse-node-$i.pid")/status"
  done > "$work/$tag.hwm"
  cp "$run/logs/coordinator.log" "$work/$tag.log"
  grep -h "simulated compute" "$run"/logs/wse-node-*.log > "$work/$tag.sim" || true
  # each daemon's nice, and its session's group's where the kernel groups
  # sessions (autogroup): "NAME NICE GROUP-NICE|-"
  for f in "$run"/pids/*.pid; do
    local p name
    p=$(cat "$f"); name=$(basename "$f" .pid)
    echo "$name $(sed 's/.*) //' "/proc/$p/stat" | awk '{print $17}')" \
      "$(sed -n 's/.* nice \(-\{0,1\}[0-9]*\)$/\1/p' "/proc/$p/autogroup" 2>/dev/null || true)"
  done > "$work/$tag.nice"
  grep -h "running at nice" "$run"/logs/worker-*.log > "$work/$tag.nicelog" || true
  # the daemons under SCHED_FIFO (--fabric-realtime): "NAME POLICY" from the
  # kernel, and what their logs say
  for f in "$run"/pids/*.pid; do
    echo "$(basename "$f" .pid) $(chrt -p "$(cat "$f")" 2>/dev/null | sed -n 's/.*policy: //p')"
  done > "$work/$tag.policy"
  grep -l "running under SCHED_FIFO at real-time priority 1" "$run"/logs/*.log > "$work/$tag.rtlog" || true
  "$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null
  ! grep -l "runtime error\|AddressSanitizer\|LeakSanitizer" "$run"/logs/*.log >/dev/null ||
    fail "$tag: a sanitizer report in $(grep -l "runtime error\|AddressSanitizer\|LeakSanitizer" "$run"/logs/*.log | tr '\n' ' ')"
  rm -rf "$run" "$work/m"
}
run_job real
# simulated, on a host said to have 512 MiB: the wse-nodes' 1 GiB of wafer
# memory each is no warning (a simulated one fills no wafer), and the job's
# members fit (4 x 133 MiB would not: the real plan would be cut to a share)
# memoryx and swarmx under SCHED_FIFO where this user may (root, or an
# RLIMIT_RTPRIO): the fabric first, as on hosts of its own
rt=()
! chrt -f 1 true 2>/dev/null || rt=(--fabric-realtime)
run_job sim --simulate-compute 0.01 --host-memory 512M --wafer-memory 1G "${rt[@]}"

[ ! -s "$work/real.sim" ] || fail "the real run says it simulated: $(head -n 1 "$work/real.sim")"
# With simulated replicas appliance-up runs the input workers at nice 10
# (--worker-nice), their session's scheduling group too where the kernel
# has one per session; every other daemon, and every daemon of the real
# run, as it was started
awk '{ok = $2 == 0 && ($3 == "" || $3 == 0)} !ok {print FILENAME ": " $0; bad = 1} END {exit bad}' \
  "$work/real.nice" || fail "a daemon of the real run is not at nice 0"
awk '{w = $1 ~ /^worker-/; want = w ? 10 : 0; ok = $2 == want && ($3 == "" || $3 == want)}
     !ok {print "sim: " $0 " (want " want ")"; bad = 1} END {exit bad || NR < 9}' "$work/sim.nice" ||
  fail "the simulated run's workers are not at nice 10 alone: $(tr '\n' ';' < "$work/sim.nice")"
[ "$(grep -c 'running at nice 10' "$work/sim.nicelog")" = 4 ] && [ ! -s "$work/real.nicelog" ] ||
  fail "the workers' logs do not say their nice: $(cat "$work/sim.nicelog" "$work/real.nicelog")"
if [ ${#rt[@]} -gt 0 ]; then
  awk '{fifo = $1 ~ /^(memoryx|swarmx)-/; ok = ($2 == "SCHED_FIFO") == fifo} !ok {print; bad = 1}
       END {exit bad || NR < 9}' "$work/sim.policy" ||
    fail "--fabric-realtime: not memoryx and swarmx alone under SCHED_FIFO: $(tr '\n' ';' < "$work/sim.policy")"
  [ "$(grep -c . "$work/sim.rtlog")" = "$(grep -c '^\(memoryx\|swarmx\)-' "$work/sim.policy")" ] ||
    fail "--fabric-realtime: the logs saying SCHED_FIFO: $(tr '\n' ' ' < "$work/sim.rtlog")"
  ! grep -q SCHED_FIFO "$work/real.policy" && [ ! -s "$work/real.rtlog" ] ||
    fail "a daemon of the real run under SCHED_FIFO: $(tr '\n' ';' < "$work/real.policy")"
  echo "ok: --fabric-realtime: memoryx and the swarmx nodes under SCHED_FIFO (and say so), no other daemon"
  # a user who may not is refused before anything starts, with what is missing
  if command -v setpriv >/dev/null && id nobody >/dev/null 2>&1; then
    mkdir -p "$work/nobody" && chmod 777 "$work/nobody"
    out=$(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups \
          "$src/deploy/local/appliance-up" --replicas 1 --dir "$work/nobody/run" --build "$build" \
          --fabric-realtime 2>&1) && fail "--fabric-realtime as nobody started: $out"
    echo "$out" | grep -q "may not run processes under SCHED_FIFO (it needs CAP_SYS_NICE, or an RLIMIT_RTPRIO of 1 or more" ||
      fail "--fabric-realtime as nobody: $out"
    [ ! -e "$work/nobody/run/pids" ] || fail "--fabric-realtime as nobody: something started: $(ls "$work/nobody/run/pids")"
    echo "ok: --fabric-realtime refused to a user without the real-time policy: $out"
  fi
else
  echo "SKIP: --fabric-realtime (this user may not use SCHED_FIFO)"
fi
echo "ok: with simulated replicas the 4 input workers run at nice 10 ($(awk '$1 == "worker-1" {print ($3 == "" ? "no autogroup" : "autogroup nice " $3)}' "$work/sim.nice")), every other daemon at 0"
[ "$(grep -c 'simulated compute: no activation\|the executor.s [0-9]* bytes .* are not allocated' "$work/sim.sim")" = 4 ] ||
  fail "not every wse-node simulated: $(cat "$work/sim.sim")"

"$py" - "$work" <<'PY' || fail "the coordinator does not report the simulated members as such"
import json, re, sys
w = sys.argv[1]
for tag, sim in (("real", False), ("sim", True)):
    c = json.load(open(f"{w}/{tag}.cluster"))
    wse = [m for m in c["members"] if m["role"] == "wse-node"]
    assert len(wse) == 4 and all(m["simulated"] is sim for m in wse), f"{tag}: wse-nodes {wse}"
    others = [m["name"] for m in c["members"] if m["role"] != "wse-node" and m["simulated"]]
    assert not others, f"{tag}: members other than wse-nodes said to be simulated: {others}"
    api = {m["name"]: m["simulated"] for m in json.load(open(f"{w}/{tag}.api"))["members"]}
    want = {m["name"]: m["role"] == "wse-node" and sim for m in c["members"]}
    assert api == want, f"{tag}: /api/cluster says simulated {api}, wanted {want}"
    log = open(f"{w}/{tag}.log").read()
    said = re.findall(r"registered: wse-node (\S+) at \S+ \(simulated compute\)", log)
    assert len(said) == (4 if sim else 0), f"{tag}: the coordinator logged {said} registering simulated"
    out = open(f"{w}/{tag}.joblog").read()
    line = "simulated compute: its 4 wse-nodes run no kernel (--simulate-compute); the losses are not the model's"
    assert (line in out) == sim, f"{tag}: the job's log {'lacks' if sim else 'has'} \"{line}\""
    assert "planned within" not in out, f"{tag}: a replica was planned within a share of its host"
sim = json.load(open(f"{w}/sim.cluster"))
assert sim["warnings"] == [], f"simulated wse-nodes' wafer memory counted against the host: {sim['warnings']}"
assert all(m["host_memory"] == 512 << 20 for m in sim["members"]), "the host's memory is not 512 MiB"
print("ok: the coordinator lists the 4 simulated wse-nodes as simulated (and no other member; "
      "appliance-submit --cluster and /api/cluster), "
      "counts no wafer memory of theirs against the 512 MiB host, and the job says it simulates")
PY

"$py" - "$work" <<'PY' || fail "the simulated run differs from the real one"
import math, re, sys
w = sys.argv[1]
def steps(tag):  # step -> loss, from the coordinator's log
    return {int(s): float(l) for s, l in
            re.findall(r"job \S+: step (\d+)/6 loss ([0-9.na]+)", open(f"{w}/{tag}.log").read())}
def evals(tag):  # (step, samples) -> loss of each evaluation
    return {(int(s), int(n)): float(l) for s, n, l in
            re.findall(r"evaluation at step (\d+) over (\d+) samples: loss ([0-9.na]+)",
                       open(f"{w}/{tag}.log").read())}
def peer(tag, what, kind="bytes"):  # memoryx's bytes with swarmx (shm_bytes: the payloads in its rings)
    m = re.search(r'^appliance_peer_%s_%s_total\{peer="swarmx-1",peer_role="swarmx"\} (\d+)' % (kind, what),
                  open(f"{w}/{tag}.mx").read(), re.M)
    return int(m.group(1)) if m else None
real, sim = steps("real"), steps("sim")
assert sorted(real) == list(range(1, 7)), f"real steps logged: {sorted(real)}"
assert sorted(sim) == list(range(1, 7)), f"simulated steps logged: {sorted(sim)}"
for s, l in sim.items():
    assert abs(l - math.log(10)) < 1e-5, f"simulated step {s}: loss {l}, not ln 10"
assert all(math.isfinite(l) and l > 0 for l in real.values()), f"real losses {real}"
print(f"ok: 6 steps committed in both runs; the real losses {[round(real[s], 4) for s in sorted(real)]}, "
      f"the simulated ones ln 10 = {sim[1]:.6f}")
er, es = evals("real"), evals("sim")
assert len(er) >= 2 and sorted(er) == sorted(es), f"evaluations: {er} real, {es} simulated"
assert all(abs(l - math.log(10)) < 1e-5 for l in es.values()), f"simulated evaluations' losses {es}"
print(f"ok: the evaluations (step, samples) {sorted(er)} in both runs")
for what in ("sent", "received"):
    # the tensors' bytes (weights down, gradients up: payloads, through the
    # shared-memory ring on this host) exactly; with the frames' headers,
    # whose varints (a loss, a time) may differ by a byte here and there,
    # within 0.1%
    a, b = peer("real", what, "shm_bytes"), peer("sim", what, "shm_bytes")
    ta, tb = peer("real", what), peer("sim", what)
    # the dense layer's weights (640 KiB) or gradients of 6 steps at least
    # (the smaller tensors may go on the socket)
    assert a and a >= 6 * 640 << 10, f"memoryx {what} {a} payload bytes with swarmx in the real run"
    assert a == b, f"memoryx {what} {a} payload bytes with swarmx in the real run, {b} simulated"
    assert ta and tb and abs(ta - tb) <= ta // 1000, f"memoryx {what} {ta} bytes in all with swarmx in the real run, {tb} simulated"
    print(f"ok: memoryx {what} {a} payload bytes with swarmx in both runs ({ta} and {tb} with the frames)")
hr = [int(x) for x in open(f"{w}/real.hwm").read().split()]
hs = [int(x) for x in open(f"{w}/sim.hwm").read().split()]
print("ok: peak resident memory of the wse-nodes: real %s MiB, simulated %s MiB"
      % ([round(x / 2**20, 1) for x in hr], [round(x / 2**20, 1) for x in hs]))
assert max(hs) < 0.3 * min(hr), "a simulated wse-node peaked above 30% of the real ones' least"
PY
# The kind survives the coordinator (its journal keeps it): a job started on
# 2 simulated wse-nodes; 2 real ones join; the coordinator is killed mid-job
# and its supervisor starts it again. The job's next attempt runs on the
# simulated ones again, not on the real ones a new job would take.
"$src/deploy/local/appliance-up" --replicas 2 --dir "$run" --build "$build" --restart \
  --simulate-compute 0.01 >/dev/null || fail "kind: appliance-up"
set -a; . "$run/env"; set +a
# under appliance-supervise too, a worker leads a session of its own and
# runs at nice 10, its group too where the kernel has one per session
wp=$(cat "$run/pids/worker-1.pid")
[ "$(ps -o sid= -p "$wp" | tr -d ' ')" = "$wp" ] && [ "$(ps -o ni= -p "$wp" | tr -d ' ')" = 10 ] &&
  { [ ! -e "/proc/$wp/autogroup" ] || grep -q ' nice 10$' "/proc/$wp/autogroup"; } ||
  fail "kind: the supervised worker is not at nice 10 in a session of its own: $(ps -o pid,sid,ni -p "$wp" | tail -n 1), $(cat "/proc/$wp/autogroup" 2>/dev/null)"
echo "ok: a supervised worker leads its own session at nice 10"
sed -e 's/^num_csx = .*/num_csx = 2/' -e 's/^max_steps = .*/max_steps = 40/' \
  -e 's/^batch_size = .*/batch_size = 32/' -e "s|^model_dir = .*|model_dir = \"$work/kind\"|" \
  -e 's/^\[runconfig\]/[runconfig]\ncheckpoint_steps = 5\nmax_num_restarts = 2/' \
  "$src/tests/cluster/jobs/sim_cnn.toml" > "$work/kind.toml"
id=$(cd "$work" && "$submit" --detach "$work/kind.toml" | grep -o 'job-[0-9]*' | head -n 1)
[ -n "$id" ] || fail "kind: no job id"
wait_step "$id" 3
real_pids=()
cleanup_extra() { [ ${#real_pids[@]} -eq 0 ] || kill "${real_pids[@]}" 2>/dev/null || true; }
for i in 1 2; do
  "$build/wse-node/wse-node" --name "real-$i" --listen 127.0.0.1:0 --secret-file "$run/secret" \
    --coordinator "127.0.0.1:$(tr -dc '0-9' < "$run/ports/coordinator.port")" --threads 1 \
    --log-level info > "$work/real-$i.log" 2>&1 &
  real_pids+=($!)
done
deadline=$((SECONDS + 30))
until [ "$("$submit" --cluster --json 2>/dev/null | "$py" -c 'import json,sys
print(sum(m["role"] == "wse-node" and not m["simulated"] and m["state"] == "alive" for m in json.load(sys.stdin)["members"]))' 2>/dev/null)" = 2 ]; do
  [ "$SECONDS" -lt "$deadline" ] || fail "kind: the real wse-nodes did not register: $(cat "$work"/real-*.log)"
  sleep 0.2
done
s=$(step_of "$id")
kill -KILL "$(cat "$run/pids/coordinator.pid")"
echo "kind: the coordinator killed after step $s of $id, with 2 real wse-nodes idle"
out=$(finish "$id")
[ "$(echo "$out" | field state)" = done ] || fail "kind: the job did not recover: $out"
"$submit" logs "$id" > "$work/kind.log"
grep -q "restarted: 2 replica(s)" "$work/kind.log" || fail "kind: no restart in the job's log: $(cat "$work/kind.log")"
[ "$(grep -c "simulated compute: its 2 wse-nodes run no kernel" "$work/kind.log")" = 2 ] ||
  fail "kind: the restarted job did not keep to simulated wse-nodes: $(grep -E 'started|restarted|simulated|fault' "$work/kind.log")"
grep -q "real-[12]" "$run/logs/coordinator.log" || fail "kind: the real wse-nodes are not in the coordinator's log"
echo "ok: after the coordinator's restart the job ran on simulated wse-nodes again (2 real ones idle)"
echo "1 passed, 0 failed"
