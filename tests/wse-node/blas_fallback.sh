#!/usr/bin/env bash
# The wse-node's BLAS start-up self-check on a real process: with a
# misdetecting BLAS preloaded (blas_shim.c), a wse-node whose sgemm is wrong
# or dies of SIGILL starts again on the fallback core type, says which core
# failed and how, and runs; one whose fallback fails too refuses to start.
# One whose library names a core older than the processor allows (Prescott)
# tries the newer cores the processor allows and runs on the newest that
# computes right, skipping those that do not: the same core at every start.
set -euo pipefail
wse=$1 shim=$2
if [ -n "${APPLIANCE_TEST_LIGHT:-}" ]; then
  echo "skipped: the sanitizers' runtime must be the first library loaded, before a preloaded one"
  exit 77
fi
unset OPENBLAS_CORETYPE
log=$(mktemp "${TMPDIR:-/tmp}/blas-fallback.XXXXXX")
trap 'rm -f "$log"' EXIT

# run MODE: the wse-node for 2 s with the shim in MODE; its exit status
run() {
  local rc=0
  BLAS_SHIM=$1 LD_PRELOAD=$shim timeout 2 "$wse" --insecure --coordinator 127.0.0.1:1 \
    --listen 127.0.0.1:0 >"$log" 2>&1 || rc=$?
  echo "$rc"
}
expect() { # PATTERN WHAT
  grep -Eq "$1" "$log" || { echo "FAIL: $2; the log:"; cat "$log"; exit 1; }
}

rc=$(run wrong)
[ "$rc" = 124 ] || { echo "FAIL: the wse-node exited ($rc) instead of running"; cat "$log"; exit 1; }
expect "WARN wse-node: OpenBLAS core [A-Za-z0-9]+ failed its start-up self-check \(sgemm NN 64x64x64: C\[0\]\[0\] is [-0-9.e]+ where the reference gives [-0-9.e]+\): the kernels run on core type (Haswell|Sandybridge|Prescott)" \
  "a wrong sgemm is named and the fallback used"
expect "listening on 127.0.0.1:" "the wse-node runs on the fallback core"
echo "ok: a wrong sgemm falls back: $(grep -o 'core type [A-Za-z]*' "$log")"

rc=$(run sigill)
[ "$rc" = 124 ] || { echo "FAIL: the wse-node exited ($rc) instead of running"; cat "$log"; exit 1; }
expect "failed its start-up self-check \(sgemm died of signal 4 \(Illegal instruction\)\): the kernels run on core type" \
  "a kernel dying of SIGILL is a failed check"
echo "ok: SIGILL falls back"

rc=$(run always)
[ "$rc" = 1 ] || { echo "FAIL: a wse-node whose fallback fails too exited $rc, not 1"; cat "$log"; exit 1; }
expect "ERROR wse-node: OpenBLAS core [A-Za-z0-9]+ fails its self-check \(sgemm NN 64x64x64: .*\), after core [A-Za-z0-9]+ failed too: refusing to compute with it" \
  "the refusal names both cores"
if grep -q "listening" "$log"; then echo "FAIL: it listened"; cat "$log"; exit 1; fi
echo "ok: refused when the fallback fails too"

# the newer cores this processor allows (blas_better_cores), from its flags
newer=()
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then newer+=(Zen Haswell); fi
if grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo; then
  newer+=(SkylakeX)
  if grep -qw avx512_bf16 /proc/cpuinfo; then newer+=(Cooperlake); fi
fi
if [ ${#newer[@]} = 0 ]; then
  echo "ok: no core newer than Prescott for this processor: the search is not tried"
  exit 0
fi
in_list() { local x; for x in "${@:2}"; do [ "$x" = "$1" ] && return 0; done; return 1; }
rc=$(run old)
[ "$rc" = 124 ] || { echo "FAIL: the wse-node exited ($rc) instead of running"; cat "$log"; exit 1; }
expect "INFO wse-node: OpenBLAS named core Prescott, older than this processor \([a-z0-9_]+\) allows: tried Prescott [0-9]+, .* GFLOP/s; the kernels run on core type [A-Za-z]+, the newest that passed its self-check" \
  "a core older than the processor allows is replaced by the newest one"
chosen=$(sed -n 's/.*the kernels run on core type \([A-Za-z]*\), the newest.*/\1/p' "$log")
# the newest the flags allow, whatever the timings (which vary from start to start)
[ "$chosen" = "${newer[-1]}" ] || { echo "FAIL: chose $chosen, not the newest of ${newer[*]}"; cat "$log"; exit 1; }
for c in "${newer[@]}"; do
  grep -q "tried .*$c [0-9]" "$log" || { echo "FAIL: $c was not tried"; cat "$log"; exit 1; }
done
expect "listening on 127.0.0.1:" "the wse-node runs on the chosen core"
echo "ok: Prescott named on a processor that allows ${newer[*]}: runs on $chosen ($(grep -o 'tried [^;]*' "$log"))"

if in_list SkylakeX "${newer[@]}"; then
  rc=$(run old-newer)
  [ "$rc" = 124 ] || { echo "FAIL: the wse-node exited ($rc) instead of running"; cat "$log"; exit 1; }
  expect "SkylakeX failed \(sgemm NN 64x64x64: C\[0\]\[0\] is" "a newer core that computes wrong is named"
  chosen=$(sed -n 's/.*the kernels run on core type \([A-Za-z]*\), the newest.*/\1/p' "$log")
  [ "$chosen" = Haswell ] || { echo "FAIL: chose $chosen, not the newest AVX2 core (Haswell)"; cat "$log"; exit 1; }
  echo "ok: newer cores that compute wrong are skipped: runs on $chosen"
fi
