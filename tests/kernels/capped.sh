#!/usr/bin/env bash
# capped.sh ISA-EXCEEDS CAP BLAS-CORE PROGRAM [ARGS...]: runs PROGRAM as on
# an older processor, oneDNN and the kernels' own vector code capped to the
# instruction set CAP (ONEDNN_MAX_CPU_ISA) and, unless BLAS-CORE is empty,
# OpenBLAS on that core's kernels; skipped (77) where this processor has no
# more than CAP, since the run without a cap already takes those paths.
set -euo pipefail
exceeds=$1 cap=$2 core=$3
shift 3
if ! why=$("$exceeds" "$cap"); then
  echo "skip: $why: the uncapped run takes these paths"
  exit 77
fi
echo "$why"
export ONEDNN_MAX_CPU_ISA="$cap"
[ -z "$core" ] || export OPENBLAS_CORETYPE="$core"
exec "$@"
