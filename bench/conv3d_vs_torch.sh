#!/usr/bin/env bash
# Benchmark: a 3D U-Net's first-level convolutions (the SKM-TEA U-Net's:
# 1 -> 32 and 32 -> 32 channels, 3x3x3, padding 1, a 64^3 volume, batch
# 1), forward + backward on the kernels (bench_conv3d) against PyTorch
# 1.13 on the same host, both on 2 threads (torch.set_num_threads(2)):
#   BENCH conv3d_fwd_bwd_<shape>_64 <ratio> of_pytorch          float32
#   BENCH conv3d_fwd_bwd_<shape>_64_bf16 <ratio> of_pytorch     the kernels in
#         mixed precision (bfloat16 where the processor has it) against
#         PyTorch's float32
#   BENCH conv3d_fwd_bwd_<shape>_64_vol2col <ratio> of_pytorch  float32, oneDNN
#         left out (the path of a build without it)
# Each side's figure is its fastest timed round (the first round only
# warming up; the host is shared, and other work only ever slows a round),
# its median printed beside it; the first layer computes no input gradient on either
# side (its input is the data). Needs Debian's python3-torch for the
# ratios: without it the kernels' times alone are printed.
#   conv3d_vs_torch.sh [rounds] [size]
set -euo pipefail
src=${SOURCE_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
build=${BUILD_ROOT:-$src/build}
py=/usr/bin/python3
rounds=${1:-5}
size=${2:-64}
. "$src/bench/lib.sh"
bench_host_line
ours=$("$build/bench/bench_conv3d" 2 "$rounds" "$size")
echo "$ours"
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "conv3d_vs_torch: PyTorch (Debian's python3-torch) is not installed: no ratios"
  exit 0
fi
theirs=$("$py" - "$rounds" "$size" <<'PY'
import statistics
import sys
import time

import torch
import torch.nn.functional as F

torch.set_num_threads(2)
rounds, size = int(sys.argv[1]), int(sys.argv[2])
for name, c, k, din in (("c1k32", 1, 32, False), ("c32k32", 32, 32, True)):
    g = torch.Generator().manual_seed(1)
    x = torch.rand(1, c, size, size, size, generator=g) - 0.5
    x.requires_grad_(din)
    w = (torch.rand(k, c, 3, 3, 3, generator=g) - 0.5).requires_grad_()
    b = (torch.rand(k, generator=g) - 0.5).requires_grad_()
    dy = torch.rand(1, k, size, size, size, generator=g) - 0.5
    runs = []
    for r in range(rounds + 1):
        t0 = time.perf_counter()
        y = F.conv3d(x, w, b, padding=1)
        t1 = time.perf_counter()
        y.backward(dy)
        t2 = time.perf_counter()
        w.grad = b.grad = x.grad = None
        if r:
            runs.append((t2 - t0, t1 - t0, t2 - t1))
    tot, f, bw = min(runs)
    med = statistics.median(t for t, _, _ in runs)
    print(f"TIME conv3d_{name}_{size} pytorch fwd {f * 1e3:.2f} bwd {bw * 1e3:.2f} "
          f"total {tot * 1e3:.2f} median {med * 1e3:.2f} (torch {torch.__version__}, mkldnn "
          f"{torch.backends.mkldnn.is_available()})")
PY
)
echo "$theirs"
total() { # total SHAPE KIND: the total milliseconds of a TIME line
  printf '%s\n%s\n' "$ours" "$theirs" | awk -v s="conv3d_$1_$size" -v k="$2" \
    '$1 == "TIME" && $2 == s && $3 == k {print $9}'
}
for shape in c1k32 c32k32; do
  t=$(total "$shape" pytorch)
  for kind in f32 bf16 vol2col; do
    o=$(total "$shape" "$kind")
    suffix=$([ "$kind" = f32 ] && echo "" || echo "_$kind")
    awk -v o="$o" -v t="$t" -v n="conv3d_fwd_bwd_${shape}_${size}${suffix}" \
      'BEGIN {printf "BENCH %s %.3f of_pytorch\n", n, o / t}'
  done
done
