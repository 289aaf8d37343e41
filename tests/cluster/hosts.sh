#!/usr/bin/env bash
# Cluster test: a host's memory counted once. Two wse-nodes each declare the
# whole of their host's memory (a host faked at 2.5 GiB with --host-memory,
# so that nothing near it is ever allocated): the coordinator warns at
# registration (its log, the member's, --cluster); a job whose plan fits each
# wse-node alone but not the host with both (and memoryx, swarmx, the
# workers) is refused naming the host and the numbers, while the same job on
# one wse-node plans; a job that fits when each wse-node is planned within
# its share of the host is planned so. A wse-node on another host id is
# counted there.
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-hosts
extra_pid=
cleanup_extra() { [ -z "$extra_pid" ] || kill "$extra_pid" 2>/dev/null || true; }

"$src/deploy/local/appliance-up" --replicas 2 --host-memory 2560M --wafer-memory 2560M \
  --dir "$run" --build "$build" >/dev/null
set -a; . "$run/env"; set +a
submit="$build/client/appliance-submit"

over='host .* has 2.5 GiB and its members declare 5.0 GiB: wse-node-[12] 2.5 GiB of wafer memory, wse-node-[12] 2.5 GiB of wafer memory; jobs are planned within the host.s 2.5 GiB'
grep -Eq "WARN coordinator: $over" "$run/logs/coordinator.log" ||
  fail "no warning at registration in the coordinator's log"
cat "$run"/logs/wse-node-*.log | has -E "the coordinator warns: $over" ||
  fail "the wse-node that overcommitted its host was not told"
"$submit" --cluster | has -E "^warning: $over" || fail "--cluster shows no warning: $("$submit" --cluster)"
"$submit" --cluster --json | "$py" -c '
import json, sys
doc = json.load(sys.stdin)
ms = [m for m in doc["members"] if m["state"] == "alive"]
assert len(ms) == 6, ms
assert len({m["host_id"] for m in ms}) == 1 and ms[0]["host_id"], ms
assert all(m["host_memory"] == 2560 << 20 for m in ms), ms
assert len(doc["warnings"]) == 1, doc["warnings"]
' || fail "--cluster --json: $("$submit" --cluster --json)"
echo "ok: two wse-nodes declaring 2.5 GiB each on a 2.5 GiB host: warned at registration, in both logs and in --cluster"

# 50 million parameters under Adam in Pipelined mode: a replica holds the
# weights, their gradients and two moments (1.3 GiB), memoryx the weights
# and moments.
job() { # job NUM_CSX MODEL_LINES...
  local csx=$1
  shift
  {
    printf '[runconfig]\nmax_steps = 10\nseed = 7\nnum_csx = %s\nmode = "pipelined"\n' "$csx"
    printf 'model_dir = "%s/model"\n' "$work"
    printf '[train_input]\ndata_processor = "synthetic_classification"\nbatch_size = 2\n'
    printf 'num_classes = 4\nnum_samples = 64\n'
    printf '[model]\ninput_shape = [4096]\nloss = "softmax_cross_entropy"\n'
    for units in 8192 4096 4; do
      printf '[[model.layers]]\nname = "fc%s"\ntype = "dense"\nunits = %s\n' "$units" "$units"
    done
    printf '[optimizer]\noptimizer_type = "adam"\nlearning_rate = 0.001\n'
  } > "$work/job$csx.toml"
  echo "$work/job$csx.toml"
}
rc=0
out=$("$submit" --detach "$(job 2)" 2>&1) || rc=$?
[ "$rc" = 3 ] || fail "a job the host cannot hold: exit $rc (expected 3, refused): $out"
echo "$out" | "$py" -c '
import re, sys
msg = sys.stdin.read()
m = re.search(r"host \S+ \(\w+\) has 2\.5 GiB and the job.s members on it need ([0-9.]+) GiB: "
              r"2 wse-nodes plan ([0-9.]+) GiB each, memoryx holds [0-9.]+ MiB, "
              r"swarmx buffers up to [0-9.]+ MiB, 2 workers hold [0-9.]+ KiB of batches; "
              r"nor does the job fit with each wse-node planned within [0-9.]+ MiB", msg)
assert m, msg
total, each = float(m.group(1)), float(m.group(2))
assert total > 2.5 and each < 2.5, msg
' || fail "the refusal does not name the host and the numbers: $out"
! "$submit" list | has job- || fail "the refused job was queued: $("$submit" list)"
echo "ok: refused: $out"
plan=$("$submit" --plan "$(job 1)" 2>&1) || fail "the same job on one wse-node: $plan"
echo "$plan" | has -E "^0 +[0-9]+ +2 +1\.3 GiB +2\.5 GiB" || fail "the plan on one wse-node: $plan"
echo "ok: the same job on one wse-node of that host plans"

# The U-Net at 1536x1536, one image per replica: each replica's plan keeps
# every output (more than half the host each); within its share of the
# host the planner computes some again, or splits the images.
sed -e 's/input_shape = \[3, 512, 512\]/input_shape = [3, 1536, 1536]/' \
  -e '0,/batch_size = 4/s//batch_size = 2/' -e "s|^model_dir = .*|model_dir = \"$work/unet\"|" \
  "$src/examples/unet.toml" > "$work/unet.toml"
plan=$("$submit" --plan "$work/unet.toml" 2>&1) || fail "the U-Net within the host's share: $plan"
echo "$plan" | has -E "^each replica planned within 1\.[0-9] GiB, its share of its host.s memory" ||
  fail "the U-Net's plan does not say it was planned within the host's share: $plan"
echo "$plan" | "$py" -c '
import re, sys
needs = [float(v) / (1024 if u == "MiB" else 1) for v, u in
         re.findall(r"^\d+ +\d+ +\d+ +([0-9.]+) (GiB|MiB) +2\.5 GiB", sys.stdin.read(), re.M)]
assert len(needs) == 2 and sum(needs) < 2.5, needs
' || fail "the U-Net's replicas do not fit the host together: $plan"
echo "ok: a job that fits within each wse-node's share of the host is planned so"

# A wse-node on another host (--host-id) is counted there, not here.
"$build/wse-node/wse-node" --name wse-node-elsewhere --coordinator "$APPLIANCE_COORDINATOR" \
  --secret-file "$APPLIANCE_SECRET_FILE" --host-id elsewhere --host-memory 1G --wafer-memory 1G \
  > "$work/elsewhere.log" 2>&1 &
extra_pid=$!
for _ in $(seq 50); do
  "$submit" --cluster | has -E "wse-node-elsewhere +alive .*\(elsewhere\)" && break
  sleep 0.1
done
"$submit" --cluster | has -E "wse-node-elsewhere +alive .*\(elsewhere\)" ||
  fail "wse-node-elsewhere did not join: $("$submit" --cluster) $(cat "$work/elsewhere.log")"
"$submit" --cluster --json | "$py" -c '
import json, sys
doc = json.load(sys.stdin)
assert len(doc["warnings"]) == 1 and "declare 5.0 GiB" in doc["warnings"][0], doc["warnings"]
' || fail "the wse-node elsewhere changed this host's count: $("$submit" --cluster)"
grep -q "the coordinator warns" "$work/elsewhere.log" && fail "wse-node-elsewhere was warned"
echo "ok: a wse-node with another --host-id is counted on its own host"

# A spill directory given that cannot take a spill file: refused at start,
# naming it, before the wse-node joins anything
for d in "$work/no-such-dir" "$work/unet.toml"; do
  st=0
  out=$("$build/wse-node/wse-node" --name wse-node-nospill --coordinator "$APPLIANCE_COORDINATOR" \
        --secret-file "$APPLIANCE_SECRET_FILE" --spill-dir "$d" 2>&1) || st=$?
  [ "$st" = 2 ] && echo "$out" | has "wse-node: --spill-dir $d: cannot make an unnamed file there: " ||
    fail "a wse-node with --spill-dir $d: exit $st: $out"
done
echo "ok: a --spill-dir that takes no file is refused at start: $(echo "$out" | tail -n 1)"
