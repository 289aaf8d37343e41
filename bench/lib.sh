# Shared by the benchmark scripts: the line that says which machine a
# figure comes from (processor, cores, memory and the vector flags that
# decide the kernels).
bench_host_line() {
  echo "host: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB;" \
    "flags: $(lscpu | sed -n 's/^Flags: *//p' | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_tile|fma)$' | tr '\n' ' ')"
}
