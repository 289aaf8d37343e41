/* GEMMs in bfloat16 for mixed precision: both operands rounded to
 * bfloat16 (to nearest even) into the caller's workspace, multiplied by
 * oneDNN's matmul with float32 accumulation and output, on the AMX tiles or
 * the AVX512_BF16 instructions where the processor has them. One primitive
 * per shape, kept in a small table; its scratch is carved from the
 * workspace. Elsewhere (no oneDNN, no bfloat16 instructions, a workspace
 * too small) the GEMM runs in float32 (kern_sgemm) on the same operands.
 *
 * A weight gradient's GEMM (A transposed, B not: both operands have K
 * outermost) is the slow case of the plain layouts: on AMX a 2048x2048x1024
 * one ran at 0.55 of the same GEMM with K innermost. Large ones round their
 * operands instead into the layouts the matmul picks (oneDNN's reorders,
 * from float32 straight to its blocked bfloat16), which brings them to that
 * speed with the reorders counted (gemm_blocked). */
#include <stdint.h>
#include <string.h>

#include "bf16.h"
#include "convplan.h"
#include "kernels.h"
#include "kernels_internal.h"

static int bf16_off; /* kernels_bf16_enable(0) */
static int own_off;  /* kernels_bf16_own_passes(0) */

void kernels_bf16_own_passes(int on)
{
    own_off = !on;
}

int kern__bf16_own_passes_on(void)
{
    return !own_off;
}

/* The GEMM in float32 instead (kern__sgemm_bias): where only b16 holds B
 * (b_stale, kern_gemm_bf16_kept_b), B widened from it into b first, rows
 * of cols at ldb. */
static void gemm_f32(int ta, int tb, int m, int n, int k, const float *a, int lda, const float *b,
                     int ldb, const uint16_t *b16, int b_stale, const float *bias, float beta,
                     float *c, int ldc)
{
    int rows = tb ? n : k, cols = tb ? k : n;
    if (b_stale && b16) {
        float *to = (float *)b; /* the caller's: writable where it says B is stale */
        for (int r = 0; r < rows; r++)
            bf16_unpack(to + (size_t)r * (size_t)ldb, b16 + (size_t)r * (size_t)cols,
                        (size_t)cols);
    }
    kern__sgemm_bias(ta, tb, m, n, k, a, lda, b, ldb, bias, beta, c, ldc);
}

#ifdef KERNELS_HAVE_DNNL

#define SLOTS 24

enum { KEY_BLOCKED = 8, KEY_LDA, KEY_LDB, KEY_BIAS, KEY_OWN, KEY_N };

typedef struct gemm_entry {
    int key[KEY_N];             /* m, n, k, ta, tb, beta != 0, ldc, threads,
                                 * blocked, when blocked lda and ldb, and
                                 * whether a bias is added, and whether
                                 * kernels_bf16_own_passes is off */
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c, scratch, bias;
    size_t scratch_bytes;
    /* blocked: the reorders of the float32 operands into a and b */
    dnnl_primitive_t ra, rb;
    dnnl_memory_t af, bf;
    int own_b;                  /* B's layout is kern__bf16_vnni's: made there */
    size_t abytes, bbytes;      /* a's and b's room in the workspace */
    unsigned used;              /* the call count when last used */
} gemm_entry;

static struct {
    gemm_entry e[SLOTS];
    int n;
    unsigned clock;
    int isa;                    /* 1 bfloat16 instructions, -1 none, 0 not asked */
    struct {                    /* the A rounded by the last bfloat16 GEMM */
        const float *src;
        const void *ws;
        int rows, cols, ld;
    } a;
} gb;

static int isa_has_bf16(void)
{
    if (!gb.isa) {
        dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
        gb.isa = (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16 ? 1 : -1;
    }
    return gb.isa > 0;
}

int kernels_bf16_compute(void)
{
    dnnl_engine_t eng;
    dnnl_stream_t st;
    return !bf16_off && isa_has_bf16() && kern__dnnl_engine(&eng, &st);
}

const char *kernels_bf16_isa(void)
{
    if (!isa_has_bf16())
        return "none";
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return (isa & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx ? "amx"
                                                                               : "avx512_bf16";
}

static void entry_free(gemm_entry *g)
{
    dnnl_memory_destroy(g->af);
    dnnl_memory_destroy(g->bf);
    dnnl_primitive_destroy(g->ra);
    dnnl_primitive_destroy(g->rb);
    dnnl_memory_destroy(g->a);
    dnnl_memory_destroy(g->b);
    dnnl_memory_destroy(g->c);
    dnnl_memory_destroy(g->scratch);
    dnnl_memory_destroy(g->bias);
    dnnl_primitive_destroy(g->prim);
    memset(g, 0, sizeof(*g));
}

/* The reorder of a float32 operand (dims d, strides st) into the layout
 * to of the matmul, rounding to bfloat16: its primitive and its source
 * memory (handle set per call); 1 or 0. */
static int reorder_make(dnnl_primitive_t *r, dnnl_memory_t *from, const dnnl_dims_t d,
                        const dnnl_dims_t st, const dnnl_memory_desc_t *to, dnnl_engine_t eng)
{
    dnnl_memory_desc_t fmd;
    dnnl_primitive_desc_t pd = NULL;
    int ok = dnnl_memory_desc_init_by_strides(&fmd, 2, d, dnnl_f32, st) == dnnl_success &&
             dnnl_reorder_primitive_desc_create(&pd, &fmd, eng, to, eng, NULL) == dnnl_success &&
             dnnl_primitive_create(r, pd) == dnnl_success &&
             dnnl_memory_create(from, &fmd, eng, DNNL_MEMORY_NONE) == dnnl_success;
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    return ok;
}

static size_t up64(size_t b)
{
    return (b + 63) / 64 * 64;
}

/* Makes the primitive of key (and its memory objects) into g; 0 or -1. */
static int entry_make(gemm_entry *g, const int key[KEY_N], dnnl_engine_t eng)
{
    int m = key[0], n = key[1], k = key[2], ta = key[3], tb = key[4], sum = key[5];
    /* blocked 2: B alone, A given rounded and plain; 3: the same with B
     * kept rounded (plain), which kern__bf16_vnni alone puts in place */
    int blocked = key[KEY_BLOCKED];
    dnnl_dims_t ad = {m, k}, bd = {k, n}, cd = {m, n};
    /* the rounded copies keep the operands' orientation, packed, or take
     * the layouts the matmul picks */
    dnnl_dims_t as = {ta ? 1 : k, ta ? m : 1}, bs = {tb ? 1 : n, tb ? k : 1};
    dnnl_dims_t cs = {key[6], 1};
    dnnl_dims_t biasd = {1, n}, biass = {n, 1};
    dnnl_memory_desc_t amd, bmd, cmd, biasmd;
    dnnl_matmul_desc_t md;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    int ok = (blocked == 1 ? dnnl_memory_desc_init_by_tag(&amd, 2, ad, dnnl_bf16, dnnl_format_tag_any)
                      : dnnl_memory_desc_init_by_strides(&amd, 2, ad, dnnl_bf16, as)) ==
                 dnnl_success &&
             (blocked ? dnnl_memory_desc_init_by_tag(&bmd, 2, bd, dnnl_bf16, dnnl_format_tag_any)
                      : dnnl_memory_desc_init_by_strides(&bmd, 2, bd, dnnl_bf16, bs)) ==
                 dnnl_success &&
             dnnl_memory_desc_init_by_strides(&cmd, 2, cd, dnnl_f32, cs) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&biasmd, 2, biasd, dnnl_f32, biass) ==
                 dnnl_success &&
             dnnl_matmul_desc_init(&md, &amd, &bmd, key[KEY_BIAS] ? &biasmd : NULL, &cmd) ==
                 dnnl_success &&
             dnnl_primitive_attr_create(&attr) == dnnl_success &&
             dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) ==
                 dnnl_success;
    if (ok && sum) /* C += A B: the bias seeded in C */
        ok = dnnl_post_ops_create(&po) == dnnl_success &&
             dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    ok = ok && dnnl_primitive_desc_create(&pd, &md, attr, eng, NULL) == dnnl_success;
    const dnnl_memory_desc_t *smd = ok ? dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0)
                                       : NULL;
    const dnnl_memory_desc_t *apick = ok ? dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0)
                                         : NULL;
    const dnnl_memory_desc_t *bpick =
        ok ? dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0) : NULL;
    ok = ok && smd && apick && bpick && dnnl_primitive_create(&g->prim, pd) == dnnl_success &&
         dnnl_memory_create(&g->a, apick, eng, DNNL_MEMORY_NONE) == dnnl_success &&
         dnnl_memory_create(&g->b, bpick, eng, DNNL_MEMORY_NONE) == dnnl_success &&
         dnnl_memory_create(&g->c, &cmd, eng, DNNL_MEMORY_NONE) == dnnl_success &&
         dnnl_memory_create(&g->scratch, smd, eng, DNNL_MEMORY_NONE) == dnnl_success &&
         (!key[KEY_BIAS] ||
          dnnl_memory_create(&g->bias, &biasmd, eng, DNNL_MEMORY_NONE) == dnnl_success);
    if (ok && blocked) {
        dnnl_dims_t fas = {ta ? 1 : key[KEY_LDA], ta ? key[KEY_LDA] : 1};
        dnnl_dims_t fbs = {tb ? 1 : key[KEY_LDB], tb ? key[KEY_LDB] : 1};
        dnnl_memory_desc_t vnni;
        g->own_b = blocked >= 2 && !own_off && kern__bf16_vnni_ok() &&
                   dnnl_memory_desc_init_by_tag(&vnni, 2, bd, dnnl_bf16, dnnl_BA16a64b2a) ==
                       dnnl_success &&
                   dnnl_memory_desc_equal(&vnni, bpick);
        ok = (blocked >= 2 || reorder_make(&g->ra, &g->af, ad, fas, apick, eng)) &&
             (blocked == 3 || reorder_make(&g->rb, &g->bf, bd, fbs, bpick, eng));
    }
    if (ok) {
        g->scratch_bytes = dnnl_memory_desc_get_size(smd);
        g->abytes = blocked >= 2 ? 0 : up64(dnnl_memory_desc_get_size(apick));
        g->bbytes = up64(dnnl_memory_desc_get_size(bpick));
    }
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (po)
        dnnl_post_ops_destroy(po);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    if (!ok) {
        entry_free(g);
        return -1;
    }
    memcpy(g->key, key, sizeof(g->key));
    return 0;
}

/* The entry of key, made if need be (the least recently used one goes
 * when the table is full); NULL when oneDNN cannot make it. */
static gemm_entry *entry_of(const int key[KEY_N], dnnl_engine_t eng)
{
    gb.clock++;
    for (int i = 0; i < gb.n; i++)
        if (!memcmp(gb.e[i].key, key, sizeof(gb.e[i].key))) {
            gb.e[i].used = gb.clock;
            return &gb.e[i];
        }
    int slot = gb.n;
    if (gb.n == SLOTS) {
        slot = 0;
        for (int i = 1; i < SLOTS; i++)
            if (gb.e[i].used < gb.e[slot].used)
                slot = i;
        entry_free(&gb.e[slot]);
    } else {
        gb.n++;
    }
    if (entry_make(&gb.e[slot], key, eng) < 0) {
        /* the slot stays empty (an all-zero key matches no real shape) */
        return NULL;
    }
    gb.e[slot].used = gb.clock;
    return &gb.e[slot];
}

/* Rows of an operand rounded to bfloat16 and packed. */
typedef struct pack_job {
    uint16_t *out;
    const float *in;
    int cols, ld;
} pack_job;

static void pack_rows(void *ctx, size_t lo, size_t hi)
{
    const pack_job *p = ctx;
    for (size_t r = lo; r < hi; r++)
        bf16_pack(p->out + r * (size_t)p->cols, p->in + r * (size_t)p->ld, (size_t)p->cols);
}

void kern__bf16_rows(uint16_t *out, const float *in, int rows, int cols, int ld)
{
    pack_job p = {out, in, cols, ld};
    size_t grain = 65536 / (size_t)(cols > 0 ? cols : 1);
    kernels_for((size_t)rows, grain ? grain : 1, pack_rows, &p);
}

static void pack(uint16_t *out, const float *in, int rows, int cols, int ld)
{
    uint64_t t0 = kern__now_ns();
    kern__bf16_rows(out, in, rows, cols, ld);
    kern__layout_since(t0);
}

/* The weight gradients' GEMMs that take the matmul's own layouts (the
 * file's head): A transposed, B not, and an output of at least 256x256
 * (below it the reorders cost what they save). */
static int gemm_blocked(int ta, int tb, int m, int n)
{
    return ta && !tb && m >= 256 && n >= 256;
}

/* Runs g on a and b in float32, reordered into its blocked layouts at ws
 * (by oneDNN, which rounds to nearest even), or on a16 as it is and b (or
 * b16, B kept rounded) put in its layout where the caller rounded A (g
 * made so); 1, or 0 when it computed in float32 instead. */
static int run_blocked(gemm_entry *g, dnnl_stream_t st, int ta, int m, int n, int k,
                       const uint16_t *a16, const float *a, int lda, const float *b, int ldb,
                       const uint16_t *b16, int b_stale, float beta, float *c, int ldc, void *ws)
{
    gb.a.src = NULL; /* A is not left at ws as pack would leave it */
    if (g->af)
        dnnl_memory_set_data_handle(g->af, (void *)a);
    if (g->bf)
        dnnl_memory_set_data_handle(g->bf, (void *)b);
    dnnl_memory_set_data_handle(g->a, a16 ? (void *)a16 : ws);
    dnnl_memory_set_data_handle(g->b, (char *)ws + g->abytes);
    dnnl_memory_set_data_handle(g->c, c);
    dnnl_memory_set_data_handle(g->scratch, (char *)ws + g->abytes + g->bbytes);
    dnnl_exec_arg_t ra[] = {{DNNL_ARG_FROM, g->af}, {DNNL_ARG_TO, g->a}};
    dnnl_exec_arg_t rb[] = {{DNNL_ARG_FROM, g->bf}, {DNNL_ARG_TO, g->b}};
    dnnl_exec_arg_t args[] = {
        {DNNL_ARG_SRC, g->a}, {DNNL_ARG_WEIGHTS, g->b}, {DNNL_ARG_DST, g->c},
        {DNNL_ARG_SCRATCHPAD, g->scratch},
    };
    uint64_t t0 = kern__now_ns();
    int moved = (!g->ra || dnnl_primitive_execute(g->ra, st, 2, ra) == dnnl_success) &&
                (g->own_b ? kern__bf16_vnni((uint16_t *)((char *)ws + g->abytes), b16 ? NULL : b,
                                            b16, k, n, b16 ? n : ldb)
                          : dnnl_primitive_execute(g->rb, st, 2, rb) == dnnl_success);
    kern__layout_since(t0);
    if (!moved || dnnl_primitive_execute(g->prim, st, 4, args) != dnnl_success ||
        dnnl_stream_wait(st) != dnnl_success) {
        gemm_f32(ta, 0, m, n, k, a, lda, b, ldb, b16, b_stale, NULL, beta, c, ldc);
        return 0;
    }
    return 1;
}

/* a16: op(A) rounded by the caller (m rows of k, packed), or NULL */
static int gemm_bf16(int ta, int tb, int m, int n, int k, const uint16_t *a16, const float *a,
                     int lda, const float *b, int ldb, const uint16_t *b16_kept, int b_stale,
                     const float *bias, float beta, float *c, int ldc, void *ws, size_t ws_bytes,
                     int same_a)
{
    if (bias)
        beta = 0.0f; /* C = product + bias */
    dnnl_engine_t eng;
    dnnl_stream_t st;
    size_t abytes = a16 ? 0 : up64((size_t)m * k * 2), bbytes = up64((size_t)k * n * 2);
    gemm_entry *g = NULL;
    if (m > 0 && n > 0 && k > 0 && (beta == 0.0f || beta == 1.0f) && !bf16_off &&
        isa_has_bf16() && ((uintptr_t)ws & 63) == 0 && abytes + bbytes <= ws_bytes &&
        kern__dnnl_engine(&eng, &st)) {
        /* B into the matmul's layout where A is rounded already (a kept
         * B where kern__bf16_vnni makes that layout), or both for a weight
         * gradient's */
        if (!bias && (a16 ? !tb && m >= 256 && n >= 256 : !b16_kept && gemm_blocked(ta, tb, m, n))) {
            int key[KEY_N] = {m, n, k, !a16, 0, beta != 0.0f, ldc, kernels_threads(),
                              !a16 ? 1 : b16_kept ? 3 : 2, a16 ? 0 : lda, b16_kept ? 0 : ldb,
                              0, own_off};
            g = entry_of(key, eng);
            /* blocked layouts pad: where they do not fit, the plain ones */
            if (g && (g->own_b || !b16_kept) &&
                g->abytes + g->bbytes + g->scratch_bytes <= ws_bytes)
                return run_blocked(g, st, ta, m, n, k, a16, a, lda, b, ldb, b16_kept, b_stale, beta,
                                   c, ldc, ws);
        }
        int key[KEY_N] = {m, n, k, ta && !a16, tb != 0, beta != 0.0f, ldc, kernels_threads()};
        key[KEY_BIAS] = bias != NULL;
        g = entry_of(key, eng);
    }
    if (!g || abytes + bbytes + g->scratch_bytes > ws_bytes) {
        gb.a.src = NULL;
        gemm_f32(ta, tb, m, n, k, a, lda, b, ldb, b16_kept, b_stale, bias, beta, c, ldc);
        return 0;
    }
    uint16_t *a_at = a16 ? (uint16_t *)(uintptr_t)a16 : ws;
    uint16_t *b16 = (uint16_t *)((char *)ws + abytes);
    int arows = ta ? k : m, acols = ta ? m : k;
    /* A stored as the last call rounded it: those bits are still at ws */
    if (!a16 && !(same_a && gb.a.src == a && gb.a.ws == ws && gb.a.rows == arows &&
                  gb.a.cols == acols && gb.a.ld == lda))
        pack(a_at, a, arows, acols, lda);
    gb.a.src = NULL; /* until this call has run */
    if (!b16_kept)
        pack(b16, b, tb ? n : k, tb ? k : n, ldb);
    dnnl_memory_set_data_handle(g->a, a_at);
    dnnl_memory_set_data_handle(g->b, b16_kept ? (void *)b16_kept : b16);
    dnnl_memory_set_data_handle(g->c, c);
    dnnl_memory_set_data_handle(g->scratch, (char *)ws + abytes + bbytes);
    if (bias)
        dnnl_memory_set_data_handle(g->bias, (void *)bias);
    dnnl_exec_arg_t args[] = {
        {DNNL_ARG_SRC, g->a}, {DNNL_ARG_WEIGHTS, g->b}, {DNNL_ARG_DST, g->c},
        {DNNL_ARG_SCRATCHPAD, g->scratch}, {DNNL_ARG_BIAS, g->bias},
    };
    if (dnnl_primitive_execute(g->prim, st, bias ? 5 : 4, args) != dnnl_success ||
        dnnl_stream_wait(st) != dnnl_success) {
        /* oneDNN checks its arguments before it writes C: the whole GEMM
         * again in float32 from the operands, which are untouched */
        gemm_f32(ta, tb, m, n, k, a, lda, b, ldb, b16_kept, b_stale, bias, beta, c, ldc);
        return 0;
    }
    gb.a.src = a16 ? NULL : a;
    gb.a.ws = ws;
    gb.a.rows = arows;
    gb.a.cols = acols;
    gb.a.ld = lda;
    return 1;
}

int kern_gemm_bf16(int ta, int tb, int m, int n, int k, const float *a, int lda, const float *b,
                   int ldb, float beta, float *c, int ldc, void *ws, size_t ws_bytes)
{
    return gemm_bf16(ta, tb, m, n, k, NULL, a, lda, b, ldb, NULL, 0, NULL, beta, c, ldc, ws,
                     ws_bytes, 0);
}

int kern_gemm_bf16_same_a(int ta, int tb, int m, int n, int k, const float *a, int lda,
                          const float *b, int ldb, float beta, float *c, int ldc, void *ws,
                          size_t ws_bytes)
{
    return gemm_bf16(ta, tb, m, n, k, NULL, a, lda, b, ldb, NULL, 0, NULL, beta, c, ldc, ws,
                     ws_bytes, 1);
}

int kern_gemm_bf16_kept_b(int ta, int tb, int m, int n, int k, const float *a, int lda,
                          const float *b, int ldb, const uint16_t *b16, int b_stale,
                          const float *bias, float beta, float *c, int ldc, void *ws,
                          size_t ws_bytes, int same_a)
{
    return gemm_bf16(ta, tb, m, n, k, NULL, a, lda, b, ldb, b16, b_stale, bias, beta, c, ldc, ws,
                     ws_bytes, same_a);
}

int kern_gemm_bf16_rounded_a(int ta, int tb, int m, int n, int k, const uint16_t *a16,
                             const float *a, int lda, const float *b, int ldb, const uint16_t *b16,
                             int b_stale, float beta, float *c, int ldc, void *ws, size_t ws_bytes)
{
    return gemm_bf16(ta, tb, m, n, k, a16, a, lda, b, ldb, b16, b_stale, NULL, beta, c, ldc, ws,
                     ws_bytes, 0);
}

#else /* !KERNELS_HAVE_DNNL */

int kernels_bf16_compute(void)
{
    return 0;
}

const char *kernels_bf16_isa(void)
{
    return "none";
}

int kern_gemm_bf16(int ta, int tb, int m, int n, int k, const float *a, int lda, const float *b,
                   int ldb, float beta, float *c, int ldc, void *ws, size_t ws_bytes)
{
    (void)ws;
    (void)ws_bytes;
    kern_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
    return 0;
}


int kern_gemm_bf16_same_a(int ta, int tb, int m, int n, int k, const float *a, int lda,
                          const float *b, int ldb, float beta, float *c, int ldc, void *ws,
                          size_t ws_bytes)
{
    return kern_gemm_bf16(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc, ws, ws_bytes);
}

int kern_gemm_bf16_kept_b(int ta, int tb, int m, int n, int k, const float *a, int lda,
                          const float *b, int ldb, const uint16_t *b16, int b_stale,
                          const float *bias, float beta, float *c, int ldc, void *ws,
                          size_t ws_bytes, int same_a)
{
    (void)same_a;
    (void)ws;
    (void)ws_bytes;
    gemm_f32(ta, tb, m, n, k, a, lda, b, ldb, b16, b_stale, bias, beta, c, ldc);
    return 0;
}

int kern_gemm_bf16_rounded_a(int ta, int tb, int m, int n, int k, const uint16_t *a16,
                             const float *a, int lda, const float *b, int ldb, const uint16_t *b16,
                             int b_stale, float beta, float *c, int ldc, void *ws, size_t ws_bytes)
{
    (void)a16;
    return kern_gemm_bf16_kept_b(ta, tb, m, n, k, a, lda, b, ldb, b16, b_stale, NULL, beta, c,
                                 ldc, ws, ws_bytes, 0);
}

#endif

void kernels_bf16_enable(int on)
{
    bf16_off = !on;
}
