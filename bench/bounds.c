/* The bounds a step is measured against, in this process:
 *   bounds gemm M N K [THREADS]   seconds of one single-precision GEMM
 *                                 (M x K by K x N, OpenBLAS's own kernels,
 *                                 self-checked), the median of several
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
    fprintf(stderr, "usage: bounds gemm M N K [THREADS] | bounds loopback BYTES\n");
    return 2;
}
