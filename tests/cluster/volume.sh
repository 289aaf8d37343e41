#!/usr/bin/env bash
# Cluster test: volumes end to end. tests/cluster/volume.toml, a small 3D
# U-Net, on 2 replicas reading synthetic_volume's 32^3 volumes: every
# daemon carries the four-size samples, the wse-nodes compute the 3D
# layers, the training loss falls and the held-out volumes' mean IoU
# is above 0.6 at the end.
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-volume

steps=40
"$src/deploy/local/appliance-up" --replicas 2 --threads 1 --dir "$run" --build "$build" >/dev/null
set -a; . "$run/env"; set +a

sed -e "s/^max_steps = .*/max_steps = $steps/" \
  -e "s|^model_dir = .*|model_dir = \"$work/volume\"|" "$src/tests/cluster/volume.toml" \
  > "$work/volume.toml"
out=$(cd "$work" && timeout 400 "$build/client/appliance-submit" volume.toml 2>&1) ||
  fail "volume: $out"
echo "$out" | "$py" -c '
import re, sys
text = sys.stdin.read()
steps = int(sys.argv[1])
by_step = {int(st): float(l) for st, l in re.findall(r"step (\d+)/\d+ \(\d+%\) loss ([0-9.]+)", text) if int(st) > 0}
losses = [by_step[k] for k in sorted(by_step)]
assert len(losses) == steps // 2, ("progress lines", losses)
first, last = losses[0], sum(losses[-3:]) / 3
assert last < 0.85 * first, ("the loss did not fall", losses)
evals = [float(m) for m in re.findall(r"eval at step \d+: loss [0-9.]+, IoU ([0-9.]+)", text)]
assert len(evals) == 2 and evals[-1] > 0.6, ("IoU", evals)
print("ok: 3D U-Net on 32^3 volumes, 2 replicas: loss %.3f -> %.3f (mean of the last three), "
      "held-out IoU %s" % (first, last, " -> ".join("%.3f" % e for e in evals)))
' "$steps" || fail "volume: $out"
echo "1 passed, 0 failed"
