/* The BLAS start-up self-check and its fallback (blas_check.h). */
#include "blas_check.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernels.h"
#include "kernels_internal.h"

/* Where a failed core is noted across the guard's exec: "CORE\nWHY". */
#define FAILED_ENV "APPLIANCE_BLAS_FAILED"
static int blas_search(char **argv, blas_status *st, char *err, size_t errlen);

/* Where the search's findings are noted across the guard's exec:
 * "NAMED\nWHAT WAS TRIED". */
#define CHOSEN_ENV "APPLIANCE_BLAS_CHOSEN"
/* Set in a probe's environment: the descriptor it answers on. */
#define PROBE_ENV "APPLIANCE_BLAS_PROBE"

void blas_sgemm_openblas(int ta, int tb, int m, int n, int k, float alpha, const float *a,
                         int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m,
                n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* One shape of the check: op(A) is m x k, op(B) is k x n. */
typedef struct check_shape {
    int ta, tb, m, n, k;
    float alpha, beta;
} check_shape;

/* Sizes past OpenBLAS's register blocks and unroll factors on every x86
 * core (the 16x4 and 32x... micro-kernels, their edge cases), and a
 * square one that goes through packing and, with threads, the split. */
static const check_shape shapes[] = {
    {0, 0, 64, 64, 64, 1.0f, 0.0f},   {0, 1, 37, 129, 65, 1.0f, 1.0f},
    {1, 0, 96, 33, 300, 0.5f, 0.0f},  {1, 1, 17, 70, 19, 1.0f, -1.0f},
    {0, 0, 1, 255, 127, 1.0f, 0.0f},  {0, 0, 250, 3, 40, 2.0f, 0.5f},
    {0, 0, 192, 192, 192, 1.0f, 0.0f},
};

void kern__exec_self(char **argv)
{
    /* by its own path, not /proc/self/exe: the process keeps its name
     * (comm) for ps, pgrep and systemd */
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len > 0 && (size_t)len < sizeof(self) - 1) {
        self[len] = '\0';
        execv(self, argv);
    }
    execv("/proc/self/exe", argv);
}

static float lcg_unit(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static int check_one(blas_sgemm_fn gemm, const check_shape *sh, char *err, size_t errlen)
{
    int m = sh->m, n = sh->n, k = sh->k;
    int lda = sh->ta ? m : k, ldb = sh->tb ? k : n, ldc = n;
    size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
    float *a = malloc(na * sizeof(float)), *b = malloc(nb * sizeof(float));
    float *c = malloc(nc * sizeof(float)), *c0 = malloc(nc * sizeof(float));
    int rc = 0;
    if (!a || !b || !c || !c0) {
        snprintf(err, errlen, "out of memory for the BLAS self-check");
        rc = -1;
        goto out;
    }
    uint32_t s = (uint32_t)(m * 7919 + n * 104729 + k);
    for (size_t i = 0; i < na; i++)
        a[i] = lcg_unit(&s);
    for (size_t i = 0; i < nb; i++)
        b[i] = lcg_unit(&s);
    for (size_t i = 0; i < nc; i++)
        c[i] = c0[i] = lcg_unit(&s);
    gemm(sh->ta, sh->tb, m, n, k, sh->alpha, a, lda, b, ldb, sh->beta, c, ldc);
    for (int i = 0; i < m && rc == 0; i++) {
        for (int j = 0; j < n; j++) {
            double ref = 0, mag = 0;
            for (int p = 0; p < k; p++) {
                double x = sh->ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
                double y = sh->tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
                ref += x * y;
                mag += fabs(x * y);
            }
            double cij = c0[(size_t)i * ldc + j];
            ref = sh->alpha * ref + (sh->beta != 0.0f ? sh->beta * cij : 0.0);
            mag = fabs(sh->alpha) * mag + fabs(sh->beta * cij);
            double got = c[(size_t)i * ldc + j];
            /* float32 sums of k terms: a few ulps of the magnitude per term */
            if (!(fabs(got - ref) <= 1e-5 * mag + 1e-6)) {
                snprintf(err, errlen,
                         "sgemm %c%c %dx%dx%d: C[%d][%d] is %.9g where the reference gives %.9g",
                         sh->ta ? 'T' : 'N', sh->tb ? 'T' : 'N', m, n, k, i, j, got, ref);
                rc = -1;
                break;
            }
        }
    }
out:
    free(a);
    free(b);
    free(c);
    free(c0);
    return rc;
}

int blas_selfcheck(blas_sgemm_fn gemm, char *err, size_t errlen)
{
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
        if (check_one(gemm, &shapes[i], err, errlen) < 0)
            return -1;
    return 0;
}

/* Runs child(ctx, fd) in a child process, fd the write end of a pipe, and
 * collects what it writes there (at most len - 1 bytes, terminated) into
 * msg and its wait status into *status. 0, or -1 with err naming the call
 * that failed. */
static int in_child(void (*child)(void *ctx, int fd), void *ctx, char *msg, size_t len,
                    int *status, char *err, size_t errlen)
{
    int fd[2];
    msg[0] = 0;
    if (pipe(fd) < 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(fd[0]);
        close(fd[1]);
        return -1;
    }
    if (pid == 0) {
        close(fd[0]);
        child(ctx, fd[1]);
        _exit(127);
    }
    close(fd[1]);
    size_t got = 0;
    for (;;) {
        ssize_t r = read(fd[0], msg + got, len - 1 - got);
        if (r > 0 && (got += (size_t)r) < len - 1)
            continue;
        if (r < 0 && errno == EINTR)
            continue;
        break;
    }
    msg[got] = 0;
    close(fd[0]);
    while (waitpid(pid, status, 0) < 0) {
        if (errno != EINTR) {
            snprintf(err, errlen, "waitpid: %s", strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* The self-check in the child: its complaint on fd, exit status 1 */
static void selfcheck_child(void *ctx, int fd)
{
    char msg[256] = "";
    int rc = blas_selfcheck(*(blas_sgemm_fn *)ctx, msg, sizeof(msg));
    if (rc < 0) {
        ssize_t w = write(fd, msg, strlen(msg));
        (void)w;
    }
    _exit(rc < 0 ? 1 : 0);
}

/* "sgemm died of signal 4 (Illegal instruction)" into err where status
 * says a signal ended the child: 1, else 0 */
static int died_of(int status, char *err, size_t errlen)
{
    if (!WIFSIGNALED(status))
        return 0;
    snprintf(err, errlen, "sgemm died of signal %d (%s)", WTERMSIG(status),
             strsignal(WTERMSIG(status)));
    return 1;
}

int blas_selfcheck_isolated(blas_sgemm_fn gemm, char *err, size_t errlen)
{
    char msg[256], why[128];
    int status;
    if (in_child(selfcheck_child, &gemm, msg, sizeof(msg), &status, why, sizeof(why)) < 0) {
        snprintf(err, errlen, "cannot run the BLAS self-check: %s", why);
        return -1;
    }
    if (died_of(status, err, errlen))
        return -1;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        snprintf(err, errlen, "%s", msg[0] ? msg : "the self-check failed");
        return -1;
    }
    return 0;
}

const char *blas_fallback_core(const char *failed)
{
    __builtin_cpu_init();
    const char *chain[3];
    int n = 0;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        chain[n++] = "Haswell";
    if (__builtin_cpu_supports("avx"))
        chain[n++] = "Sandybridge";
    chain[n++] = "Prescott";
    for (int i = 0; i < n; i++)
        if (!failed || strcasecmp(failed, chain[i]) != 0)
            return chain[i];
    return NULL;
}

static void copy_word(char *dst, size_t len, const char *src, size_t n)
{
    if (n >= len)
        n = len - 1;
    memcpy(dst, src, n);
    dst[n] = 0;
}

int blas_guard(char **argv, blas_status *st, char *err, size_t errlen)
{
    memset(st, 0, sizeof(*st));
    const char *core = openblas_get_corename();
    copy_word(st->core, sizeof(st->core), core ? core : "unknown", strlen(core ? core : "unknown"));
    const char *noted = getenv(FAILED_ENV);
    if (noted) { /* this image is a fallback: say what failed before it */
        const char *nl = strchr(noted, '\n');
        copy_word(st->failed, sizeof(st->failed), noted, nl ? (size_t)(nl - noted) : strlen(noted));
        if (nl)
            copy_word(st->why, sizeof(st->why), nl + 1, strlen(nl + 1));
    }
    const char *chosen = getenv(CHOSEN_ENV);
    if (chosen) { /* this image runs the core a search chose: say what it found */
        const char *nl = strchr(chosen, '\n');
        copy_word(st->named, sizeof(st->named), chosen, nl ? (size_t)(nl - chosen) : strlen(chosen));
        if (nl)
            copy_word(st->tried, sizeof(st->tried), nl + 1, strlen(nl + 1));
    }
    char why[256];
    if (blas_selfcheck_isolated(blas_sgemm_openblas, why, sizeof(why)) == 0) {
        unsetenv(FAILED_ENV); /* not inherited by what this program starts */
        if (chosen) {
            unsetenv(CHOSEN_ENV);
            unsetenv("OPENBLAS_CORETYPE");
            return 0;
        }
        return noted ? 0 : blas_search(argv, st, err, errlen);
    }
    const char *next = blas_fallback_core(st->core);
    if (noted || !next) {
        snprintf(err, errlen,
                 "OpenBLAS core %s fails its self-check (%s)%s%s%s: refusing to compute with it",
                 st->core, why, noted ? ", after core " : "", noted ? st->failed : "",
                 noted ? " failed too" : "");
        return -1;
    }
    char note[320];
    snprintf(note, sizeof(note), "%s\n%s", st->core, why);
    if (setenv(FAILED_ENV, note, 1) < 0 || setenv("OPENBLAS_CORETYPE", next, 1) < 0) {
        snprintf(err, errlen, "OpenBLAS core %s fails its self-check (%s) and the fallback "
                 "cannot be set: %s", st->core, why, strerror(errno));
        return -1;
    }
    fflush(NULL);
    kern__exec_self(argv);
    snprintf(err, errlen, "OpenBLAS core %s fails its self-check (%s) and the program cannot "
             "start again with core type %s: %s", st->core, why, next, strerror(errno));
    return -1;
}

/* ---- the search for a newer core ---- */

/* OpenBLAS's x86-64 core types in the order of what they need, each with
 * the instruction set of ours that allows it (older ones: any). */
static const struct {
    const char *name;
    int rank;
    kernels_isa needs;
} cores[] = {
    {"Prescott", 0, KERNELS_ISA_BASE},    {"Core2", 1, KERNELS_ISA_BASE},
    {"Penryn", 1, KERNELS_ISA_BASE},      {"Dunnington", 1, KERNELS_ISA_BASE},
    {"Nehalem", 2, KERNELS_ISA_BASE},     {"Atom", 0, KERNELS_ISA_BASE},
    {"Opteron", 0, KERNELS_ISA_BASE},     {"Barcelona", 1, KERNELS_ISA_BASE},
    {"Bobcat", 1, KERNELS_ISA_BASE},      {"Bulldozer", 2, KERNELS_ISA_BASE},
    {"Piledriver", 2, KERNELS_ISA_BASE},  {"Steamroller", 2, KERNELS_ISA_BASE},
    {"Excavator", 2, KERNELS_ISA_BASE},   {"Sandybridge", 3, KERNELS_ISA_BASE},
    {"Zen", 4, KERNELS_ISA_AVX2},         {"Haswell", 4, KERNELS_ISA_AVX2},
    {"SkylakeX", 5, KERNELS_ISA_AVX512},  {"Cooperlake", 6, KERNELS_ISA_AVX512_BF16},
};
#define NCORES (sizeof(cores) / sizeof(cores[0]))

static int core_index(const char *name)
{
    for (size_t i = 0; name && i < NCORES; i++)
        if (strcasecmp(cores[i].name, name) == 0)
            return (int)i;
    return -1;
}

int blas_allowed_cores(const char *named, kernels_isa isa, const char **out, int max)
{
    int at = core_index(named), n = 0;
    if (at < 0 || cores[at].needs <= isa)
        return 0;
    for (int i = (int)NCORES - 1; i >= 0 && n < max; i--)
        if (cores[i].needs > KERNELS_ISA_BASE && cores[i].needs <= isa)
            out[n++] = cores[i].name;
    return n;
}

int blas_better_cores(const char *named, kernels_isa isa, const char **out, int max)
{
    int at = core_index(named), n = 0;
    if (at < 0) /* a core this table does not know: newer than it, or another family */
        return 0;
    /* the newest first: the likeliest fastest */
    for (int i = (int)NCORES - 1; i >= 0 && n < max; i--)
        if (cores[i].rank > cores[at].rank && cores[i].needs > KERNELS_ISA_BASE &&
            cores[i].needs <= isa)
            out[n++] = cores[i].name;
    return n;
}

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The probe's timing: square single-threaded GEMMs of the size the
 * kernels' split GEMMs hand each thread, the fastest of a few rounds
 * (about 0.1 s in all). GFLOP/s, or a negative number without memory. */
static double probe_speed(void)
{
    enum { N = 256 };
    float *a = malloc(sizeof(float) * N * N), *b = malloc(sizeof(float) * N * N);
    float *c = malloc(sizeof(float) * N * N);
    double best = -1;
    if (a && b && c) {
        uint32_t s = 12345;
        for (int i = 0; i < N * N; i++) {
            a[i] = lcg_unit(&s);
            b[i] = lcg_unit(&s);
        }
        openblas_set_num_threads(1);
        blas_sgemm_openblas(0, 0, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N); /* warm */
        for (int round = 0; round < 5; round++) {
            int reps = 0;
            double t0 = now_sec(), t;
            do {
                blas_sgemm_openblas(0, 0, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
                reps++;
            } while ((t = now_sec() - t0) < 0.02);
            double g = 2.0 * N * N * N * reps / t * 1e-9;
            if (g > best)
                best = g;
        }
    }
    free(a);
    free(b);
    free(c);
    return best;
}

/* A probe is this program started again with PROBE_ENV set: before its
 * main, with OpenBLAS loaded on the core type in its environment, it
 * checks the kernels, times them, answers "ok GFLOPS" or "fail WHY" on
 * the descriptor and exits. */
__attribute__((constructor)) static void blas_probe_main(void)
{
    const char *fdv = getenv(PROBE_ENV);
    if (!fdv)
        return;
    int fd = atoi(fdv);
    char why[256], line[320];
    if (blas_selfcheck(blas_sgemm_openblas, why, sizeof(why)) < 0)
        snprintf(line, sizeof(line), "fail %s\n", why);
    else
        snprintf(line, sizeof(line), "ok %.3f\n", probe_speed());
    ssize_t w = write(fd, line, strlen(line));
    (void)w;
    _exit(0);
}

/* A probe's child: this program again, OpenBLAS on the core asked for */
static void probe_child(void *ctx, int fd)
{
    char v[16];
    snprintf(v, sizeof(v), "%d", fd);
    setenv(PROBE_ENV, v, 1);
    setenv("OPENBLAS_CORETYPE", (const char *)ctx, 1);
    unsetenv(FAILED_ENV);
    unsetenv(CHOSEN_ENV);
    char *args[] = {(char *)"blas-probe", NULL};
    execv("/proc/self/exe", args);
}

int blas_probe_core(const char *core, double *gflops, char *why, size_t whylen)
{
    char msg[320];
    int status;
    *gflops = 0;
    if (in_child(probe_child, (void *)(uintptr_t)core, msg, sizeof(msg), &status, why,
                 whylen) < 0 ||
        died_of(status, why, whylen))
        return -1;
    char *nl = strchr(msg, '\n');
    if (nl)
        *nl = 0;
    if (strncmp(msg, "ok ", 3) == 0) {
        *gflops = strtod(msg + 3, NULL);
        return *gflops > 0 ? 0 : -1;
    }
    snprintf(why, whylen, "%s", strncmp(msg, "fail ", 5) == 0 ? msg + 5
                               : msg[0]                       ? msg
                                                              : "the probe did not answer");
    return -1;
}

/* When OpenBLAS named a core older than the processor allows (and nobody
 * chose one): the named one and each newer core the instruction set
 * allows probed, and the newest that computes right kept by executing the
 * program again on it, unless it runs at under half the named one's
 * speed. The timings are for the log, not the choice: two cores of one
 * generation time alike (Cooperlake and SkylakeX: 103 and 103 GFLOP/s on
 * an idle Xeon, 98 and 146 on a busy one) but round differently, so a
 * choice by speed made the same job on the same machine train to other
 * bits after a restart. 0 to go on as it is (st->tried says what was
 * found), -1 after a failed exec. */
static int blas_search(char **argv, blas_status *st, char *err, size_t errlen)
{
    const char *better[NCORES];
    /* a core newer than the cap allows (ONEDNN_MAX_CPU_ISA): the cores it
     * allows, the named one out of the running */
    int nb = blas_allowed_cores(st->core, kernels_isa_level(), better, (int)NCORES);
    int over = nb > 0;
    if (!over)
        nb = blas_better_cores(st->core, kernels_isa_level(), better, (int)NCORES);
    const char *off = getenv("APPLIANCE_BLAS_SEARCH");
    if (nb == 0 || getenv("OPENBLAS_CORETYPE") || (off && strcmp(off, "off") == 0))
        return 0;
    char why[256];
    double base = 0, chosen_g = 0;
    if (!over && blas_probe_core(st->core, &base, why, sizeof(why)) < 0)
        base = 0;
    const char *chosen = NULL;
    size_t used = over ? (size_t)snprintf(st->tried, sizeof(st->tried), "%s beyond the cap",
                                          st->core)
                       : (size_t)snprintf(st->tried, sizeof(st->tried), "%s %.0f", st->core, base);
    for (int i = 0; i < nb; i++) { /* the newest first */
        double g;
        int ok = blas_probe_core(better[i], &g, why, sizeof(why)) == 0;
        if (used < sizeof(st->tried) && ok)
            used += (size_t)snprintf(st->tried + used, sizeof(st->tried) - used, ", %s %.0f",
                                     better[i], g);
        else if (used < sizeof(st->tried))
            used += (size_t)snprintf(st->tried + used, sizeof(st->tried) - used,
                                     ", %s failed (%s)", better[i], why);
        if (ok && !chosen) {
            chosen = better[i];
            chosen_g = g;
        }
    }
    if (used < sizeof(st->tried))
        snprintf(st->tried + used, sizeof(st->tried) - used, " GFLOP/s");
    if (!chosen || (!over && chosen_g < 0.5 * base))
        return 0;
    char note[sizeof(st->tried) + 40];
    snprintf(note, sizeof(note), "%s\n%s", st->core, st->tried);
    if (setenv(CHOSEN_ENV, note, 1) < 0 || setenv("OPENBLAS_CORETYPE", chosen, 1) < 0) {
        unsetenv(CHOSEN_ENV);
        return 0; /* on as it is */
    }
    fflush(NULL);
    kern__exec_self(argv);
    snprintf(err, errlen, "OpenBLAS core %s is newer than the %s it named, and the "
             "program cannot start again with it: %s", chosen, st->core, strerror(errno));
    return -1;
}
