#!/usr/bin/env bash
# Cluster test: execution modes against the wafer memory. The wse-nodes
# declare 12 MiB; a model with 16 MiB of weights trains in Weight Streaming
# mode (auto picks it), and asking for Pipelined is refused with the numbers.
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-modes

"$src/deploy/local/appliance-up" --replicas 2 --wafer-memory 12M --dir "$run" --build "$build" >/dev/null
set -a; . "$run/env"; set +a
submit="$build/client/appliance-submit"

sed -e "s|^model_dir = .*|model_dir = \"$work/deep\"|" "$src/tests/cluster/jobs/deep.toml" > "$work/deep.toml"
plan=$(cd "$work" && "$submit" --plan deep.toml) || fail "plan: $plan"
echo "$plan" | has "mode weight_streaming" || fail "auto did not choose weight streaming: $plan"
echo "$plan" | has "4204548 parameters" || fail "parameter count: $plan"
# Each replica's memory need is within its 12 MiB wafer.
echo "$plan" | "$py" -c '
import re, sys
rows = [l.split() for l in sys.stdin if re.match(r"^[0-9]+ +[0-9]+ +[0-9]+ ", l)]
assert len(rows) == 2, rows
units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
for r in rows:
    need = float(r[3]) * units[r[4]]; wafer = float(r[5]) * units[r[6]]
    assert need <= wafer and wafer == 12 << 20, r
' || fail "memory table: $plan"
out=$(cd "$work" && timeout 300 "$submit" --json deep.toml) || fail "deep job: $out"
[ "$(echo "$out" | field state)" = done ] || fail "deep job not done: $out"
"$py" -c "import sys; sys.exit(0 if float(sys.argv[1]) < 1.0 else 1)" "$(echo "$out" | field final_loss)" ||
  fail "loss did not fall below 1.0 (ln 4 = 1.386 at start): $out"
echo "ok: 16 MiB of weights trained in Weight Streaming mode on 12 MiB wafers"

sed -e 's/^num_csx = 2/num_csx = 2\nmode = "pipelined"/' "$work/deep.toml" > "$work/deep-pipe.toml"
set +e
msg=$(cd "$work" && "$submit" deep-pipe.toml 2>&1); rc=$?
set -e
[ "$rc" = 3 ] || fail "pipelined: exit $rc, expected 3: $msg"
echo "$msg" | has "Pipelined does not fit: .* need [0-9.]* MiB per replica, the smallest wafer has 12.0 MiB; use mode = \"weight_streaming\" (needs [0-9.]* MiB)" ||
  fail "pipelined refusal message: $msg"
echo "ok: $msg"

# memoryx's memory: by default the coordinator accepts the models its
# memoryx members can hold (weights, gradients, optimizer state), and the
# plan gives no shard more than its memoryx has, naming what would do.
"$src/deploy/local/appliance-down" --dir "$run" --quiet
rm -rf "$run"
"$src/deploy/local/appliance-up" --replicas 1 --memoryx 2 --memoryx-memory 36M --memoryx-disk 0 --wafer-memory 12M \
  --dir "$run" --build "$build" >/dev/null
set -a; . "$run/env"; set +a
sed -e 's/^num_csx = 2/num_csx = 1/' -e 's/^optimizer_type = .*/optimizer_type = "adam"/' -e '/^momentum = /d' \
  "$work/deep.toml" > "$work/deep-adam.toml"
set +e
msg=$(cd "$work" && "$submit" deep-adam.toml 2>&1); rc=$?
set -e
[ "$rc" != 0 ] || fail "a model beyond its memoryx members was accepted"
echo "$msg" | has "with their gradients and optimizer state they need 64.2 MiB, more than the memoryx members of this cluster hold (72.0 MiB in all, in memory or in their disk tiers)" ||
  echo "$msg" | has "memoryx cannot hold the model: .* need 64.2 MiB in all, .* on shard 1 of 1, memoryx memoryx-[12] has 36.0 MiB (in memory or its disk tier); run more memoryx shards (runconfig.num_wgt_servers = 2 would do)" ||
  fail "memoryx refusal: $msg"
echo "ok: $msg"
sed -e 's/^num_csx = 1/num_csx = 1\nnum_wgt_servers = 2/' -e 's/^max_steps = .*/max_steps = 3/' \
  "$work/deep-adam.toml" > "$work/deep-adam2.toml"
out=$(cd "$work" && timeout 300 "$submit" --json deep-adam2.toml) || fail "on two shards: $out"
[ "$(echo "$out" | field state)" = done ] || fail "not done on two shards: $out"
echo "ok: the same model trains on 2 memoryx shards of 36 MiB"
echo "1 passed, 0 failed"
