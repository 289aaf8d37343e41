#!/usr/bin/env bash
# Benchmark: the coordinator under load while a training job runs.
#
# The training job (FC 784 -> 2048 -> 2048 -> 10, batch 256, Pipelined, one
# replica; 0.2 to 0.3 s a step on two cores) runs throughout. The load
# generator (bench/load.c) opens 200 authenticated client connections that
# poll the job's status and their own jobs' twice a second and together
# submit 1,000 small jobs (quickstart, 5 steps) over the run. The coordinator's admission
# limits are set low enough to be reached (700 queued jobs, 4 per submitter),
# so that refusals are part of what is accounted for.
#
# A client polling the job every 25 ms times its steps and the status round
# trip, unloaded before the load, under the load, and unloaded after it; the
# baseline is the mean of the two unloaded runs, so a drift of the machine
# cancels out (on a machine shared with other work the two still differ by
# some percent: compare train_step_unloaded_before and _after). The CPU the
# coordinator and the load generator took is printed too. The coordinator's
# VmRSS is sampled every 0.2 s, and again during a second, shorter load
# (whose jobs find the queue full), to show that it does not keep growing;
# that load is timed too, against the unloaded runs around it.
# Prints:
#   BENCH train_step_under_load <ratio> of_unloaded
#   BENCH train_step_under_second_load <ratio> of_unloaded
#   BENCH status_rtt_p99_under_load <ratio> of_idle
#   BENCH coordinator_rss_under_load <ratio> of_idle
#   BENCH coordinator_rss_after_load <ratio> of_under_load
#   BENCH coordinator_rss_second_load <ratio> of_first_load
#   BENCH load_jobs_accounted <ratio> of_submitted
# with the absolute figures and the counts beside them. Fails when a
# submitted job is not accounted for (refused with a reason, or queued,
# running, done, failed or cancelled).
set -euo pipefail
src=${SOURCE_ROOT:?}
build=${BUILD_ROOT:?}
py=/usr/bin/python3
work=$(mktemp -d "${TMPDIR:-/tmp}/appliance-bench-load.XXXXXX")
run="$work/run"
sampler=
cleanup() {
  [ -z "$sampler" ] || kill "$sampler" 2>/dev/null || true
  "$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null 2>&1 || true
  if [ "${KEEP_WORK:-}" = "" ]; then rm -rf "$work"; fi
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; tail -n 20 "$run/logs/coordinator.log" >&2 || true; exit 1; }

clients=${LOAD_CLIENTS:-200}
jobs=${LOAD_JOBS:-1000}
seconds=${LOAD_SECONDS:-40}       # the loaded run
seconds2=${LOAD_SECONDS2:-20}     # the second one
idle_seconds=${LOAD_IDLE_SECONDS:-15} # each unloaded run

cat > "$work/coordinator.toml" <<TOML
max_queued_jobs = 700
max_queued_per_submitter = 4
TOML
"$src/deploy/local/appliance-up" --replicas 1 --dir "$run" --build "$build" \
  --coordinator-config "$work/coordinator.toml" >/dev/null
set -a; . "$run/env"; set +a
submit="$build/client/appliance-submit"
load="$build/bench/load"
coord_pid=$(head -n 1 "$run/pids/coordinator.pid")

cat > "$work/train.toml" <<TOML
[runconfig]
max_steps = 1000000
log_steps = 50
seed = 1
num_csx = 1
mode = "pipelined"
model_dir = "$work/train"
[train_input]
data_processor = "synthetic_classification"
batch_size = 256
num_classes = 10
num_samples = 65536
[model]
input_shape = [1, 28, 28]
loss = "softmax_cross_entropy"
[[model.layers]]
name = "flatten"
type = "flatten"
[[model.layers]]
name = "fc1"
type = "dense"
units = 2048
[[model.layers]]
name = "relu1"
type = "relu"
[[model.layers]]
name = "fc2"
type = "dense"
units = 2048
[[model.layers]]
name = "relu2"
type = "relu"
[[model.layers]]
name = "fc3"
type = "dense"
units = 10
[optimizer]
optimizer_type = "sgd"
learning_rate = 0.01
momentum = 0.9
TOML
sed -e "s/^max_steps = .*/max_steps = 5/" -e "s/^num_csx = .*/num_csx = 1/" \
  -e "s|^model_dir = .*|model_dir = \"$work/small\"|" -e "s/^checkpoint_steps = .*/checkpoint_steps = 0/" \
  -e "s/^save_initial_checkpoint = .*/save_initial_checkpoint = false/" \
  "$src/examples/quickstart.toml" > "$work/small.toml"

train=$("$submit" --detach "$work/train.toml") || fail "cannot submit the training job"
# Past the first steps (weights loaded, caches warm) before anything is timed.
for _ in $(seq 1 300); do
  step=$("$submit" status "$train" --json | "$py" -c 'import json,sys; s=json.load(sys.stdin); print(s["steps"] if s["state"]=="running" else -1)')
  [ "$step" -ge 10 ] && break
  sleep 0.1
done
[ "$step" -ge 10 ] || fail "the training job $train did not reach step 10"

rss() { awk '/^VmRSS:/ {print $2}' "/proc/$coord_pid/status"; }
cpu_ticks() { sed -e 's/^.*) //' "/proc/$coord_pid/stat" | awk '{print $12 + $13}'; } # utime + stime
val() { awk -v k="$1" '$1 == k {print $2}' "$2"; }

"$load" --train "$train" --clients 0 --seconds "$idle_seconds" > "$work/before.out" ||
  fail "unloaded run (before): $(cat "$work/before.out")"
rss_idle=$(rss)
while :; do rss >> "$work/rss"; sleep 0.2; done &
sampler=$!
cpu0=$(cpu_ticks)
set +e
"$load" --train "$train" --job-file "$work/small.toml" --clients "$clients" --jobs "$jobs" \
  --seconds "$seconds" > "$work/loaded.out" 2> "$work/loaded.err"
load_rc=$?
set -e
cpu1=$(cpu_ticks)
kill "$sampler"; wait "$sampler" 2>/dev/null || true; sampler=
cat "$work/loaded.err" >&2
"$load" --train "$train" --clients 0 --seconds "$idle_seconds" > "$work/after.out" ||
  fail "unloaded run (after): $(cat "$work/after.out")"
rss_after=$(rss)
rss_peak=$(sort -n "$work/rss" | tail -n 1)
while :; do rss >> "$work/rss2"; sleep 0.2; done &
sampler=$!
"$load" --train "$train" --job-file "$work/small.toml" --clients "$clients" --jobs "$jobs" \
  --seconds "$seconds2" > "$work/second.out" 2> "$work/second.err" ||
  fail "second load: $(cat "$work/second.out" "$work/second.err")"
kill "$sampler"; wait "$sampler" 2>/dev/null || true; sampler=
rss_peak2=$(sort -n "$work/rss2" | tail -n 1)
"$load" --train "$train" --clients 0 --seconds "$idle_seconds" > "$work/last.out" ||
  fail "unloaded run (last): $(cat "$work/last.out")"
hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$coord_pid/status")
"$submit" cancel "$train" >/dev/null 2>&1 || true

cpu_sec=$(awk -v t="$((cpu1 - cpu0))" -v hz="$(getconf CLK_TCK)" 'BEGIN {print t / hz}')
"$py" - "$work" "$rss_idle" "$rss_peak" "$rss_after" "$rss_peak2" "$hwm" "$cpu_sec" "$seconds" <<'PY'
import sys
work, rss_idle, rss_peak, rss_after, rss_peak2, hwm, cpu_sec, seconds = \
    sys.argv[1], *map(float, sys.argv[2:])
def read(name):
    d = {}
    for line in open("%s/%s.out" % (work, name)):
        k, v = line.split()
        d[k] = float(v)
    return d
b, l, a, l2, z = read("before"), read("loaded"), read("after"), read("second"), read("last")
step_idle = (b["train_step_sec"] + a["train_step_sec"]) / 2
rtt_idle = (b["obs_rtt_p99_ms"] + a["obs_rtt_p99_ms"]) / 2
def bench(name, value, unit, fmt="%.3f"):
    print("BENCH %s %s %s" % (name, fmt % value, unit))
bench("train_step_unloaded_before", b["train_step_sec"], "s", "%.4f")
bench("train_step_unloaded_after", a["train_step_sec"], "s", "%.4f")
bench("train_step_unloaded", step_idle, "s", "%.4f")
bench("train_step_loaded", l["train_step_sec"], "s", "%.4f")
bench("train_step_under_load", l["train_step_sec"] / step_idle, "of_unloaded")
bench("train_step_unloaded_last", z["train_step_sec"], "s", "%.4f")
bench("train_step_second_load", l2["train_step_sec"], "s", "%.4f")
step_idle2 = (a["train_step_sec"] + z["train_step_sec"]) / 2
bench("train_step_under_second_load", l2["train_step_sec"] / step_idle2, "of_unloaded")
bench("status_rtt_p99_idle", rtt_idle, "ms")
bench("status_rtt_p99_loaded", l["obs_rtt_p99_ms"], "ms")
bench("status_rtt_p99_under_load", l["obs_rtt_p99_ms"] / rtt_idle, "of_idle")
bench("client_status_rtt_p99_loaded", l["all_rtt_p99_ms"], "ms")
bench("submit_rtt_p99_loaded", l["submit_rtt_p99_ms"], "ms")
bench("coordinator_cpu_under_load", cpu_sec / seconds, "cores")
bench("load_generator_cpu", l["cpu_sec"] / seconds, "cores")
bench("coordinator_rss_idle", rss_idle / 1024, "MiB", "%.1f")
bench("coordinator_rss_peak_under_load", rss_peak / 1024, "MiB", "%.1f")
bench("coordinator_rss_hwm", hwm / 1024, "MiB", "%.1f")
bench("coordinator_rss_under_load", rss_peak / rss_idle, "of_idle")
bench("coordinator_rss_after_load", rss_after / rss_peak, "of_under_load")
bench("coordinator_rss_second_load", rss_peak2 / rss_peak, "of_first_load")
submitted = l["submitted"]
bench("load_clients_connected", l["clients_connected"], "clients", "%d")
bench("load_status_polls", l["status_polls"], "polls", "%d")
bench("load_jobs_submitted", submitted, "jobs", "%d")
bench("load_jobs_accepted", l["accepted"], "jobs", "%d")
bench("load_jobs_refused", l["refused"], "jobs", "%d")
bench("load_jobs_refused_queue_full", l["refused_queue_full"], "jobs", "%d")
bench("load_jobs_refused_per_submitter", l["refused_per_submitter"], "jobs", "%d")
for s in ("queued", "running", "done", "failed", "cancelled"):
    bench("load_jobs_" + s, l["final_" + s], "jobs", "%d")
bench("load_jobs_unaccounted", l["unaccounted"], "jobs", "%d")
bench("load_jobs_accounted", (submitted - l["unaccounted"]) / max(submitted, 1), "of_submitted")
bench("second_load_jobs_refused", l2["refused"], "jobs", "%d")
bench("second_load_jobs_accounted", (l2["submitted"] - l2["unaccounted"]) / max(l2["submitted"], 1),
      "of_submitted")
PY
[ "$load_rc" = 0 ] || fail "the load generator reported a failure (exit $load_rc): $(cat "$work/loaded.out")"
