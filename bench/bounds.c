/* The bounds a step is measured against, in this process:
 *   bounds gemm M N K [THREADS]   seconds of one single-precision GEMM
 *                                 (M x K by K x N, OpenBLAS's own kernels,
 *                                 self-checked), the median of several
 *   bounds gemm-bf16 M N K        seconds of one bfloat16 GEMM on oneDNN's
 *                                 matmul (float32 out), its operands already
 *                                 bfloat16 and in the layouts it likes best
 *                                 (no rounding, no reorder counted): the
 *                                 faster of plain and its own, the fastest
 *                                 of several (a floor); threads:
 *                                 OMP_NUM_THREADS
 *   bounds loopback BYTES         seconds to move BYTES over a loopback TCP
 *                                 connection (one writer, one reader process) */
#include <arpa/inet.h>
#include <cblas.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "bench_blas.h"

#ifdef KERNELS_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

static int gemm(int argc, char **argv)
{
    if (argc < 5)
        return 2;
    long m = atol(argv[2]), n = atol(argv[3]), k = atol(argv[4]);
    openblas_set_num_threads(argc > 5 ? atoi(argv[5]) : 2);
    float *a = bench_alloc((size_t)m * k, 1), *b = bench_alloc((size_t)k * n, 2);
    float *c = bench_alloc((size_t)m * n, 3);
    double t[5];
    for (int r = -1; r < 5; r++) { /* one warm-up */
        double t0 = bench_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k, 1.0f, a, (int)k,
                    b, (int)k, 0.0f, c, (int)n);
        if (r >= 0)
            t[r] = bench_now() - t0;
    }
    printf("%.6f\n", bench_median(t, 5));
    return 0;
}

#ifdef KERNELS_HAVE_DNNL
/* A oneDNN memory's bytes set to zero. */
static void memory_zero(dnnl_memory_t mem)
{
    void *h;
    const dnnl_memory_desc_t *d;
    if (dnnl_memory_get_data_handle(mem, &h) == dnnl_success &&
        dnnl_memory_get_memory_desc(mem, &d) == dnnl_success)
        memset(h, 0, dnnl_memory_desc_get_size(d));
}

/* The fewest seconds of an M x K by K x N bfloat16 matmul on oneDNN, its
 * operands plain (any = 0) or in the layouts the primitive picks (1). */
static double gemm_bf16_layout(long m, long n, long k, int any)
{
    dnnl_engine_t eng;
    dnnl_stream_t st;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    dnnl_memory_t ma = NULL, mb = NULL, mc = NULL, ms = NULL;
    double best = -1;
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success)
        return -1;
    if (dnnl_stream_create(&st, eng, dnnl_stream_default_flags) != dnnl_success)
        goto out_engine;
    dnnl_memory_desc_t amd, bmd, cmd;
    dnnl_dims_t ad = {m, k}, bd = {k, n}, cd = {m, n};
    dnnl_format_tag_t tag = any ? dnnl_format_tag_any : dnnl_ab;
    dnnl_matmul_desc_t md;
    if (dnnl_memory_desc_init_by_tag(&amd, 2, ad, dnnl_bf16, tag) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&bmd, 2, bd, dnnl_bf16, tag) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&cmd, 2, cd, dnnl_f32, dnnl_ab) != dnnl_success ||
        dnnl_matmul_desc_init(&md, &amd, &bmd, NULL, &cmd) != dnnl_success ||
        dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL) != dnnl_success ||
        dnnl_primitive_create(&prim, pd) != dnnl_success)
        goto out;
    /* the operands' bytes are what they are: zeros (the time does not
     * depend on the values) */
    if (dnnl_memory_create(&ma, dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0), eng,
                           DNNL_MEMORY_ALLOCATE) != dnnl_success ||
        dnnl_memory_create(&mb, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0), eng,
                           DNNL_MEMORY_ALLOCATE) != dnnl_success ||
        dnnl_memory_create(&mc, &cmd, eng, DNNL_MEMORY_ALLOCATE) != dnnl_success ||
        dnnl_memory_create(&ms, dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0),
                           eng, DNNL_MEMORY_ALLOCATE) != dnnl_success)
        goto out;
    memory_zero(ma);
    memory_zero(mb);
    dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc},
                              {DNNL_ARG_SCRATCHPAD, ms}};
    double fewest = 1e300;
    for (int r = -1; r < 7; r++) { /* one warm-up */
        double t0 = bench_now();
        if (dnnl_primitive_execute(prim, st, 4, args) != dnnl_success ||
            dnnl_stream_wait(st) != dnnl_success)
            goto out;
        double t = bench_now() - t0;
        if (r >= 0 && t < fewest)
            fewest = t;
    }
    best = fewest;
out:
    dnnl_memory_destroy(ma), dnnl_memory_destroy(mb), dnnl_memory_destroy(mc), dnnl_memory_destroy(ms);
    dnnl_primitive_destroy(prim);
    dnnl_primitive_desc_destroy(pd);
    dnnl_stream_destroy(st);
out_engine:
    dnnl_engine_destroy(eng);
    return best;
}

static int gemm_bf16(char **argv)
{
    long m = atol(argv[2]), n = atol(argv[3]), k = atol(argv[4]);
    double plain = gemm_bf16_layout(m, n, k, 0), own = gemm_bf16_layout(m, n, k, 1);
    if (plain < 0 && own < 0) {
        fprintf(stderr, "bounds: oneDNN has no bfloat16 matmul for %ldx%ldx%ld here\n", m, n, k);
        return 1;
    }
    printf("%.6f\n", plain < 0 ? own : own < 0 ? plain : plain < own ? plain : own);
    return 0;
}
#endif

static int loopback(char **argv)
{
    size_t total = strtoull(argv[2], NULL, 10), chunk = 8u << 20;
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(ls, 1) < 0 ||
        getsockname(ls, (struct sockaddr *)&sa, &sl) < 0) {
        perror("loopback");
        return 1;
    }
    char *buf = malloc(chunk);
    memset(buf, 1, chunk);
    pid_t pid = fork();
    if (pid == 0) { /* the reader */
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0)
            _exit(1);
        for (size_t got = 0; got < total;) {
            ssize_t r = read(s, buf, chunk);
            if (r <= 0)
                _exit(1);
            got += (size_t)r;
        }
        if (write(s, "k", 1) != 1)
            _exit(1);
        _exit(0);
    }
    int s = accept(ls, NULL, NULL);
    double t0 = bench_now();
    for (size_t sent = 0; sent < total;) {
        size_t want = total - sent < chunk ? total - sent : chunk;
        ssize_t w = write(s, buf, want);
        if (w <= 0) {
            perror("loopback write");
            return 1;
        }
        sent += (size_t)w;
    }
    char ack;
    if (read(s, &ack, 1) != 1)
        return 1;
    printf("%.6f\n", bench_now() - t0);
    int st;
    waitpid(pid, &st, 0);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "gemm") == 0) {
        if (bench_blas_guard(argv) < 0)
            return 1;
        return gemm(argc, argv);
    }
    if (argc >= 3 && strcmp(argv[1], "loopback") == 0)
        return loopback(argv);
    if (argc >= 5 && strcmp(argv[1], "gemm-bf16") == 0) {
#ifdef KERNELS_HAVE_DNNL
        return gemm_bf16(argv);
#else
        fprintf(stderr, "bounds: built without oneDNN: no bfloat16 GEMM\n");
        return 1;
#endif
    }
    fprintf(stderr, "usage: bounds gemm M N K [THREADS] | bounds gemm-bf16 M N K | "
            "bounds loopback BYTES\n");
    return 2;
}
