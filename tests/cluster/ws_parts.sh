#!/usr/bin/env bash
# Cluster test: Weight Streaming in parts. A 16.8M-parameter MLP whose
# largest layer (32 MiB of weights) needs 128 MiB of whole-layer slots
# trains with evaluation on two replicas with a 40 MiB wafer: the plan
# streams its dense layers in slices of rows, and the weights after 4 steps
# agree with those of a 256 MiB wafer (whole layers) within 1e-6: only the
# order in which the input gradient's parts are summed differs. A wafer too
# small for even one aligned part is refused with the numbers.
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-ws-parts
submit="$build/client/appliance-submit"

cp "$src/tests/cluster/jobs/wide_mlp.toml" "$work/mlp.toml"

train() { # train NAME WAFER: the job on a fresh cluster of 2 wse-nodes with that wafer
  "$src/deploy/local/appliance-down" --dir "$run" --quiet >/dev/null 2>&1 || true
  rm -rf "$run"
  mkdir -p "$work/$1"
  cp "$work/mlp.toml" "$work/$1/"
  "$src/deploy/local/appliance-up" --replicas 2 --wafer-memory "$2" --dir "$run" --build "$build" >/dev/null
  local out
  out=$(set -a; . "$run/env"; set +a; cd "$work/$1" && timeout 300 "$submit" --json mlp.toml 2>&1) ||
    fail "$1: $out"
  [ "$(echo "$out" | field state)" = done ] && [ "$(echo "$out" | field steps)" = 4 ] ||
    fail "$1: not done: $out"
}

train whole 256M
train parts 40M
plan=$("$submit" --plan "$work/mlp.toml" --wafer-memory 40M)
echo "$plan" | has "weight_streaming in parts: dense layers of more than [0-9]* weights" ||
  fail "--plan does not say the layers go in parts: $plan"
echo "$plan" | grep -E "^  weight_streaming .* yes " >/dev/null || fail "--plan: parts do not fit 40 MiB: $plan"
"$build/client/st-compare" "$work/whole/model/checkpoint_4-shard1-of-1.safetensors" \
  "$work/parts/model/checkpoint_4-shard1-of-1.safetensors" --rtol 1e-6 >"$work/cmp" ||
  { cat "$work/cmp"; fail "the weights trained in parts differ from those of whole layers"; }
echo "ok: 4 steps with evaluation on a 40 MiB wafer in parts: the weights of whole layers within 1e-6 ($(sort -t= -k2 -g "$work/cmp" | tail -n 1))"

# a wafer too small for one part (with the activations) is refused, with the numbers
set +e
msg=$("$submit" --plan "$work/mlp.toml" --wafer-memory 3M 2>&1)
set -e
echo "$msg" | has "weight_streaming .* no " || fail "a 3 MiB wafer: $msg"
echo "ok: a 3 MiB wafer does not fit: $(echo "$msg" | grep "^mode ")"
echo "1 passed, 0 failed"
