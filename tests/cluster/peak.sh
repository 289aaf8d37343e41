#!/usr/bin/env bash
# Cluster test: the plan's memory is the truth. The U-Net of
# examples/unet.toml at batch 1 on one wse-node with 2 threads, at two image
# sizes: the wse-node's peak resident memory (VmHWM) over two training
# steps and an evaluation is within 10% of what `appliance-submit --plan`
# says a replica needs. On wafers of 16 GiB the plan keeps every output;
# on a wafer a byte short of the leanest plan's need it makes large
# convolutions' outputs again too (Plan.keep_costly off) and holds one
# batch in flight rather than two (Plan.feed_credits 1), and the
# wse-node's plan and feed are those.
set -euo pipefail
if [ -n "${APPLIANCE_TEST_LIGHT:-}" ]; then
  echo "skipped: under the sanitizers a process's memory is not the plan's (shadow memory)"
  exit 77
fi
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-peak
submit="$build/client/appliance-submit"
sizes=${PEAK_SIZES:-"768 1536 1536:lean"}

for at in $sizes; do
  size=${at%:*} wafer=16G
  [ "$at" = "$size" ] || wafer=${at#*:}
  sed -e "s/^max_steps = .*/max_steps = 2/" -e "s/^eval_frequency = .*/eval_frequency = 2/" \
    -e "s/^num_csx = .*/num_csx = 1/" -e "s/^batch_size = .*/batch_size = 1/" \
    -e "s/^num_samples = 16/num_samples = 1/" \
    -e "s|^input_shape = .*|input_shape = [3, $size, $size]|" \
    -e "s|^model_dir = .*|model_dir = \"$work/m$size\"|" "$src/examples/unet.toml" > "$work/u$size.toml"
  if [ "$wafer" = lean ]; then # a byte short of the leanest plan's need (two batches in flight)
    wafer=$("$submit" --plan --wafer-memory 64M --threads 2 --json "$work/u$size.toml" | "$py" -c '
import json, sys
print(min(m["bytes_per_replica"] for m in json.load(sys.stdin)["modes"]) - 1)')
  fi
  plan=$("$submit" --plan --wafer-memory "$wafer" --threads 2 --json "$work/u$size.toml") ||
    fail "plan $size: $plan"
  need=$(echo "$plan" | "$py" -c '
import json, sys
p = json.load(sys.stdin)
print([m for m in p["modes"] if m["mode"] == p["mode"]][0]["bytes_per_replica"])')
  "$src/deploy/local/appliance-up" --replicas 1 --threads 2 --wafer-memory "$wafer" --dir "$run" \
    --build "$build" >/dev/null
  out=$(set -a; . "$run/env"; set +a; cd "$work" && timeout 600 "$submit" --json "u$size.toml" 2>&1) ||
    fail "job $size: $out"
  [ "$(echo "$out" | field state)" = done ] || fail "job $size: not done: $out"
  hwm=$(awk '/^VmHWM:/ {printf "%.0f\n", $2 * 1024}' "/proc/$(cat "$run/pids/wse-node-1.pid")/status")
  if [ "$wafer" != 16G ]; then
    echo "$plan" | grep -q '"keep_costly": false, "feed_credits": 1,' || fail "plan $size at $wafer: $plan"
    grep -q "and the large convolutions' whose absence saves the most, are computed again" \
      "$run"/logs/wse-node-1.log || fail "the wse-node at $wafer did not lighten its plan"
    grep -q "one batch in flight from each worker" "$run"/logs/wse-node-1.log ||
      fail "the wse-node at $wafer did not take one batch at a time"
  fi
  "$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null
  rm -rf "$run"
  "$py" -c '
import sys
size, need, hwm = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
r = hwm / need
print("ok: U-Net %dx%d on a wafer of %s: the plan says %.1f MiB per replica, the wse-node peaked at %.1f MiB (%.3f of the plan)"
      % (size, size, sys.argv[4], need / 2**20, hwm / 2**20, r))
sys.exit(0 if 0.9 <= r <= 1.1 else 1)' "$size" "$need" "$hwm" "$wafer" || fail "peak memory off the plan at $size"
done
echo "1 passed, 0 failed"
