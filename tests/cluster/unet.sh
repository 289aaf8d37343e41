#!/usr/bin/env bash
# Cluster test: U-Net segmentation of large images. examples/unet.toml on 2
# replicas, synthetic 512x512 RGB images: the training loss falls and the
# mean IoU on held-out images is above 0.8. With APPLIANCE_TEST_LIGHT set
# (the sanitizer run), the same network on 128x128 images, with a lower bar.
set -euo pipefail
. "${SOURCE_ROOT:?}/tests/cluster/lib.sh" appliance-unet

size=512 steps=24 min_iou=0.8
if [ -n "${APPLIANCE_TEST_LIGHT:-}" ]; then size=128 steps=16 min_iou=0.5; fi
"$src/deploy/local/appliance-up" --replicas 2 --threads 1 --dir "$run" --build "$build" >/dev/null
set -a; . "$run/env"; set +a

sed -e "s/^max_steps = .*/max_steps = $steps/" -e "s/^log_steps = .*/log_steps = 2/" \
  -e "s/^eval_frequency = .*/eval_frequency = $((steps / 2))/" \
  -e "s|^input_shape = .*|input_shape = [3, $size, $size]|" \
  -e "s|^model_dir = .*|model_dir = \"$work/unet\"|" "$src/examples/unet.toml" > "$work/unet.toml"
out=$(cd "$work" && timeout 900 "$build/client/appliance-submit" unet.toml 2>&1) || fail "unet: $out"
echo "$out" | "$py" -c '
import re, sys
text = sys.stdin.read()
steps = int(sys.argv[1]); min_iou = float(sys.argv[2])
# the logged steps (log_steps 2): a line where only the phase changed
# (back to training after an evaluation) may stand between them
by_step = {int(st): float(l) for st, l in re.findall(r"step (\d+)/\d+ \(\d+%\) loss ([0-9.]+)", text) if int(st) > 0 and int(st) % 2 == 0}
losses = [by_step[k] for k in sorted(by_step)]
evals = [float(m) for m in re.findall(r"eval at step \d+: loss [0-9.]+, IoU ([0-9.]+)", text)]
assert len(losses) == steps // 2, ("progress lines", losses)
first, last = losses[0], sum(losses[-3:]) / 3
assert last < 0.85 * first, ("the loss did not fall", losses)
assert len(evals) == 2 and evals[-1] > min_iou, ("IoU", evals)
print("ok: U-Net %dx%d: loss %.3f -> %.3f (mean of the last three), held-out IoU %s" %
      (int(sys.argv[3]), int(sys.argv[3]), first, last, " -> ".join("%.3f" % e for e in evals)))
' "$steps" "$min_iou" "$size" || fail "unet: $out"
echo "1 passed, 0 failed"
