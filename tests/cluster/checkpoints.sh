#!/usr/bin/env bash
# Cluster test: a Pipelined job's checkpoints come from its first replica.
# The replicas apply the updates; after each step a checkpoint follows, the
# first replica sends its weights and optimizer state up through swarmx and
# memoryx writes them. The job of faults.toml on 2 replicas, checkpointed
# after every step (so the next upload comes while the last checkpoint is
# being written, and waits), must write at steps 5, 10, ... 30 the weights
# and momentum of the same job checkpointed every 5 steps, bit for bit; a
# job resumed from its checkpoint of step 10 must end at the same weights;
# and memoryx must have committed no step and taken no gradient.
# In Weight Streaming memoryx updates each tensor in parts and, where no
# checkpoint follows a step, streams the next step's weights before the
# step's last update is back: the same job in Weight Streaming, in 16 KiB
# chunks (so each layer updates in two parts), must write the same bits
# checkpointed every step (no step streams early) as every 5 steps (24 of
# its 30 steps stream early, memoryx's metric says).
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-checkpoints
submit="$build/client/appliance-submit"

"$src/deploy/local/appliance-up" --replicas 2 --metrics --dir "$run" --build "$build" >/dev/null
set -a; . "$run/env"; set +a
mode=pipelined
job() { # job NAME CHECKPOINT_STEPS STEPS [SED-EXPRESSION]
  sed -e "s|^model_dir = .*|model_dir = \"$work/$1\"\nmode = \"$mode\"|" \
    -e "s/^max_steps = .*/max_steps = $3/" \
    -e "s/^checkpoint_steps = .*/checkpoint_steps = $2/" -e "${4:-}" \
    "$src/tests/cluster/jobs/faults.toml" > "$work/$1.toml"
  local out
  out=$(cd "$work" && "$submit" --plan "$work/$1.toml") || fail "$1: plan: $out"
  echo "$out" | has "mode $mode" || fail "$1: not $mode: $out"
  out=$(cd "$work" && timeout 120 "$submit" --json "$work/$1.toml") || fail "$1: $out"
  [ "$(echo "$out" | field state)" = done ] || fail "$1: not done: $out"
}
same() { # same A B STEP: A's checkpoint of STEP holds B's weights and optimizer state
  for f in checkpoint optimizer; do
    "$build/client/st-compare" "$work/$1/${f}_$3-shard1-of-1.safetensors" \
      "$work/$2/${f}_$3-shard1-of-1.safetensors" --rtol 0 >"$work/cmp" ||
      { cat "$work/cmp"; fail "$1 and $2 differ at step $3 ($f)"; }
  done
}
job every 1 30
job fifth 5 30
for s in 5 10 15 20 25 30; do same every fifth $s; done
echo "ok: checkpointed every step and every 5 steps: the same weights and momentum at steps 5 to 30"

# resumed from the checkpoint of step 10 the first job wrote
job resumed 5 30 "s|^\\[runconfig\\]|[runconfig]\\ncheckpoint_path = \"$work/every/checkpoint_10-shard1-of-1.safetensors\"|"
grep -q "resumed from the checkpoint of step 10" "$run/logs/memoryx-1.log" || fail "the job did not resume from step 10"
same resumed fifth 30
echo "ok: resumed from the checkpoint of step 10: the same weights at step 30"

# mx_metric NAME: memoryx's counter NAME now
mx_metric() {
  local url
  url=$(awk '$1 == "memoryx-1" {print $2}' "$run/metrics")
  sleep 1.2 # the exposition is rendered once a second
  "$py" - "$url" "$1" <<'PY'
import re, sys, urllib.request
text = urllib.request.urlopen(sys.argv[1], timeout=5).read().decode()
print(int(float(re.search(r"^%s (\S+)$" % sys.argv[2], text, re.M).group(1))))
PY
}
[ "$(mx_metric appliance_steps_committed_total)" = 0 ] || fail "memoryx took part in the steps"
echo "ok: memoryx committed no step of the Pipelined jobs"

"$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null
printf 'chunk_size = "16K"\n' > "$work/coordinator.toml"
"$src/deploy/local/appliance-up" --replicas 2 --metrics --dir "$run" --build "$build" \
  --coordinator-config "$work/coordinator.toml" >/dev/null
set -a; . "$run/env"; set +a
mode=weight_streaming
job ws_every 1 30
[ "$(mx_metric appliance_steps_streamed_early_total)" = 0 ] ||
  fail "a step streamed early though a checkpoint followed every step"
job ws_fifth 5 30
early=$(mx_metric appliance_steps_streamed_early_total)
[ "$early" = 24 ] || fail "$early steps streamed early, expected 24 (the 30 steps but the 6 before a checkpoint)"
for s in 5 10 15 20 25 30; do same ws_every ws_fifth $s; done
echo "ok: Weight Streaming, updates in parts: checkpointed every step (no step streamed early) and every 5 steps ($early streamed early): the same weights and momentum at steps 5 to 30"
echo "4 passed, 0 failed"
