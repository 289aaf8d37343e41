#!/usr/bin/env bash
# Cluster test: appliance-submit's progress on a terminal and through a
# pipe. Under tmux (a real terminal of 80 columns) the screen, captured
# several times while a job trains, holds one progress line rewritten in
# place (its step moving, its phase named), each evaluation's line once
# above it, and at the end the final result with the progress line gone.
# Piped, every line is printed once, the phases in order. Skipped without
# tmux.
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-progress
command -v tmux >/dev/null 2>&1 || { echo "SKIP: tmux not found (apt-get install tmux)"; exit 77; }

"$src/deploy/local/appliance-up" --replicas 1 --dir "$run" --build "$build" >/dev/null
set -a; . "$run/env"; set +a
submit="$build/client/appliance-submit"

# job NAME STEPS: a small classifier with evaluations every STEPS/2 steps
job() {
  cat > "$work/$1.toml" <<TOML
[runconfig]
max_steps = $2
log_steps = 250
seed = 7
num_csx = 1
eval_frequency = $(($2 / 2))
checkpoint_steps = $(($2 / 2))
model_dir = "$work/$1"
[train_input]
data_processor = "synthetic_classification"
batch_size = 64
num_classes = 4
num_samples = 4096
noise = 1.0
[eval_input]
data_processor = "synthetic_classification"
batch_size = 64
num_classes = 4
num_samples = 256
noise = 1.0
[model]
input_shape = [32]
loss = "softmax_cross_entropy"
[[model.layers]]
name = "classifier"
type = "dense"
units = 4
[optimizer]
optimizer_type = "sgd"
learning_rate = 0.1
TOML
}

# 1. Piped: plain timestamped lines, each once.
job piped 4000
rc=0; "$submit" "$work/piped.toml" > "$work/piped.out" 2>&1 || rc=$?
[ "$rc" = 0 ] || fail "piped job: exit $rc: $(cat "$work/piped.out")"
"$py" - "$work/piped.out" <<'PY' || fail "piped output: $(cat "$work/piped.out")"
import re, sys
lines = open(sys.argv[1]).read().splitlines()
assert not any("\r" in l or "\033" in l for l in lines), "terminal codes in piped output"
bodies = [re.sub(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ", "", l) for l in lines]
dups = {b for b in bodies if bodies.count(b) > 1}
assert not dups, ("printed more than once", dups)
progress = [b for b in bodies if re.match(r"job-\d+ \[", b)]
phases = [re.match(r"job-\d+ \[([a-z ]+)\]", b).group(1) for b in progress]
assert "training" in phases, phases
order = ["compiling", "loading weights", "training", "evaluating", "checkpointing"]
assert all(p in order for p in phases), phases
assert phases[0] in ("compiling", "loading weights", "training"), phases
evals = [b for b in bodies if " eval at step " in b]
assert [re.search(r"eval at step (\d+)", e).group(1) for e in evals] == ["2000", "4000"], evals
assert any(re.match(r"job-\d+ done: 4000 steps", b) for b in bodies), bodies[-4:]
print("piped: %d lines, each once; phases %s" % (len(lines), " > ".join(dict.fromkeys(phases))))
PY

# 2. On a terminal: tmux, 80 columns.
job tty 30000
sock="$work/tmux.sock"
cleanup_extra() { tmux -S "$sock" kill-server 2>/dev/null || true; }
tmux -S "$sock" new-session -d -x 80 -y 30 -s progress \
  "cd '$work' && '$submit' tty.toml; echo \"exit \$?\" > '$work/tty.rc'; sleep 600"
shots=0
for i in $(seq 600); do
  [ -f "$work/tty.rc" ] && break
  tmux -S "$sock" capture-pane -p -t progress > "$work/shot.$shots"
  shots=$((shots + 1))
  sleep 0.1
done
[ -f "$work/tty.rc" ] || fail "the job on the terminal did not end"
sleep 0.2
tmux -S "$sock" capture-pane -p -t progress > "$work/final"
"$py" - "$work" "$shots" <<'PY' || fail "the terminal: $(cat "$work/final")"
import re, sys
work, shots = sys.argv[1], int(sys.argv[2])
prog = re.compile(r"^\[([a-z ]+)\] step (\d+)/30000 +\d+%( \[[#.]{10}\])? loss [0-9.e+-]+ [0-9.]+ samples/s ETA [0-9.hms-]+$")
steps, phases = [], set()
for i in range(shots):
    screen = [l for l in open(f"{work}/shot.{i}").read().splitlines() if l.strip()]
    p = [l for l in screen if prog.match(l)]
    assert len(p) <= 1, ("more than one progress line on the screen", screen)
    assert all(len(l) <= 80 for l in screen), screen
    # nothing else but the accepted line, evaluations, the progress line, or
    # once the job ended (a capture before the shell noted its exit) the result
    ended = any(re.match(r"job-\d+ done: ", l) for l in screen)
    result = re.compile(r"job-\d+ done: |test accuracy |checkpoints in ")
    for l in screen:
        assert ("accepted as" in l or " eval at step " in l or prog.match(l) or
                (ended and result.match(l))), ("stray line", l, screen)
    assert not (ended and any(prog.match(l) for l in screen)), ("the progress line stayed", screen)
    evals = [l for l in screen if " eval at step " in l]
    assert len(evals) == len(set(evals)), ("an evaluation twice", screen)
    if p:
        m = prog.match(p[0])
        phases.add(m.group(1))
        steps.append(int(m.group(2)))
        assert screen[-1] == p[0], ("the progress line is not the last", screen)
moving = len(set(steps))
assert moving >= 3, ("the progress line did not move", steps)
assert steps == sorted(steps), ("the step went back", steps)
final = [l for l in open(f"{work}/final").read().splitlines() if l.strip()]
assert open(f"{work}/tty.rc").read().strip() == "exit 0", "the job's exit status"
assert not any(prog.match(l) for l in final), ("the progress line stayed", final)
evals = [l for l in final if " eval at step " in l]
assert [re.search(r"eval at step (\d+)", e).group(1) for e in evals] == ["15000", "30000"], final
assert any(re.match(r"job-\d+ done: 30000 steps", l) for l in final), final
assert any(l.startswith("test accuracy ") for l in final), final
print("terminal: %d captures, the progress line at %d steps (phases %s), evaluations once, the result"
      % (shots, moving, ", ".join(sorted(phases))))
PY
echo "1 passed, 0 failed"
