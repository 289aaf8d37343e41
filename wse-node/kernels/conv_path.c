/* The choice between im2col + GEMM and oneDNN for every convolution shape,
 * and the oneDNN primitives of the shapes that may use it: created once per
 * shape and thread count and kept in a small table, run on the caller's
 * plain NCHW / OIHW tensors with their scratchpad carved from the op's
 * workspace. Without oneDNN (KERNELS_HAVE_DNNL unset) every piece runs on
 * im2col. */
#include "conv_path.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "convplan.h"
#include "kernels.h"
#include "kernels_internal.h"

#ifdef KERNELS_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
#include <omp.h>
#endif
#endif

/* The path in force and what has run on oneDNN. */
static struct {
    int known;               /* path holds the setter's or the env's value */
    kern__conv_path path;    /* the path in force once known */
    unsigned ran;            /* KERN__DNNL_* bits run since last asked */
} conv_mode;

void kern__conv_set_path(kern__conv_path path)
{
    conv_mode.path = path;
    conv_mode.known = 1;
}

kern__conv_path kern__conv_get_path(void)
{
    if (!conv_mode.known) {
        /* Read once; unset or unknown: oneDNN's own layouts where the
         * shape's rule says so, im2col elsewhere, neither depending on
         * timing (auto's choice does, so two runs, or a run and its
         * recovery, could differ in the last bits). The hot path logs
         * nothing. */
        const char *v = getenv("APPLIANCE_CONV_PATH");
        conv_mode.path = KERN__CONV_BLOCKED;
        if (v && strcmp(v, "im2col") == 0)
            conv_mode.path = KERN__CONV_IM2COL;
        else if (v && strcmp(v, "auto") == 0)
            conv_mode.path = KERN__CONV_AUTO;
        else if (v && strcmp(v, "onednn") == 0)
            conv_mode.path = KERN__CONV_ONEDNN;
        conv_mode.known = 1;
    }
    return conv_mode.path;
}

unsigned kern__conv_ran_onednn(void)
{
    unsigned r = conv_mode.ran;
    conv_mode.ran = 0;
    return r;
}

#ifdef KERNELS_HAVE_DNNL

/* Ints of a cache key: transposed, threads, then the params' fields. */
#define KEY_INTS 17
/* Shapes the table holds, grown as shapes come; later shapes run on
 * im2col (a model has a few dozen). */
#define SLOTS 1024
/* Primitives per shape, one per KERN__DNNL_* bit. */
#define NPRIM 5
/* Timed rounds per path at first use, the first of which only warms up. */
#define ROUNDS 3
/* oneDNN is kept when it takes less than this fraction of im2col's time. */
#define ONEDNN_MARGIN 0.9

/* One shape on one thread count. The memories have no buffer of their
 * own: each call points them at its tensors before executing. */
typedef struct conv_entry {
    int key[KEY_INTS];                 /* see key_of */
    dnnl_memory_t src, wei, bias, dst; /* plain NCHW / OIHW (IOHW), (k) */
    signed char made[NPRIM];           /* 0 not tried, 1 made, -1 cannot */
    dnnl_primitive_t prim[NPRIM];      /* valid where made is 1 */
    dnnl_memory_t scratch[NPRIM];      /* scratchpad, NULL if none needed */
    size_t scratch_bytes[NPRIM];       /* its size */
    int slow[NPRIM];                   /* oneDNN's reference loops: auto
                                          never times them */
    char impl[NPRIM][48];              /* implementation name */
    signed char choice[KERN__DNNL_JOBS]; /* auto's pick per job, 0 until
                                          timed */
} conv_entry;

/* The engine, its stream and the table; all used from the operators'
 * thread only. */
static struct {
    int tried;               /* engine creation attempted */
    int ok;                  /* engine and stream usable */
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    conv_entry *slots;       /* the table, cap entries */
    int cap;                 /* entries allocated */
    int nslots;              /* slots in use, filled in order */
    int last;                /* slot of the last hit, looked at first */
} dn;

static int one_if_zero(int v)
{
    return v ? v : 1;
}

static void key_of(int key[KEY_INTS], int transposed, const void *vp)
{
    memset(key, 0, sizeof(int) * KEY_INTS);
    key[0] = transposed;
    key[1] = kernels_threads();
    if (transposed) {
        const op_conv_transpose2d_params *q = vp;
        int f[] = {q->n, q->c, q->h, q->w, q->k, q->r, q->s, q->stride_h,
                   q->stride_w, q->pad_h, q->pad_w, q->dil_h, q->dil_w,
                   q->out_pad_h, q->out_pad_w};
        memcpy(key + 2, f, sizeof(f));
    } else {
        const op_conv2d_params *p = vp;
        int f[] = {p->n, p->c, p->h, p->w, p->k, p->r, p->s, p->stride_h,
                   p->stride_w, p->pad_h, p->pad_w, p->dil_h, p->dil_w};
        memcpy(key + 2, f, sizeof(f));
    }
}

void kern__dnnl_geom_of(kern__dnnl_geom *g, int transposed, const void *vp)
{
    int n, c, h, w, k, r, s, sh, sw, ph, pw, dh, dw, oh, ow, prh, prw;
    if (transposed) {
        const op_conv_transpose2d_params *q = vp;
        n = q->n; c = q->c; h = q->h; w = q->w; k = q->k; r = q->r; s = q->s;
        sh = one_if_zero(q->stride_h); sw = one_if_zero(q->stride_w);
        dh = one_if_zero(q->dil_h); dw = one_if_zero(q->dil_w);
        ph = q->pad_h; pw = q->pad_w;
        oh = op_conv_transpose2d_out_h(q); ow = op_conv_transpose2d_out_w(q);
        /* the output seen as the input of the convolution it is the
         * adjoint of: extra rows at the bottom are padding taken back */
        prh = ph - q->out_pad_h;
        prw = pw - q->out_pad_w;
    } else {
        const op_conv2d_params *p = vp;
        n = p->n; c = p->c; h = p->h; w = p->w; k = p->k; r = p->r; s = p->s;
        sh = one_if_zero(p->stride_h); sw = one_if_zero(p->stride_w);
        dh = one_if_zero(p->dil_h); dw = one_if_zero(p->dil_w);
        ph = p->pad_h; pw = p->pad_w;
        oh = op_conv2d_out_h(p); ow = op_conv2d_out_w(p);
        /* the bottom and right padding the last window actually reaches
         * (below pad_h when the stride skips the last rows) */
        prh = (oh - 1) * sh + (r - 1) * dh + 1 - h - ph;
        prw = (ow - 1) * sw + (s - 1) * dw + 1 - w - pw;
    }
    g->transposed = transposed;
    dnnl_dims_t src = {n, c, h, w}, wei = {k, c, r, s}, bias = {k};
    dnnl_dims_t dst = {n, k, oh, ow};
    memcpy(g->src, src, sizeof(src));
    memcpy(g->wei, wei, sizeof(wei));
    memcpy(g->bias, bias, sizeof(bias));
    memcpy(g->dst, dst, sizeof(dst));
    g->strides[0] = sh; g->strides[1] = sw;
    g->dil[0] = dh - 1; g->dil[1] = dw - 1;
    g->pad_l[0] = ph; g->pad_l[1] = pw;
    g->pad_r[0] = prh; g->pad_r[1] = prw;
}

/* Makes oneDNN use the operators' thread count: its OpenMP runtime
 * otherwise takes every core while the pool's and OpenBLAS's threads
 * exist too. */
static void set_dnnl_threads(void)
{
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
    int n = kernels_threads();
    if (omp_get_max_threads() != n)
        omp_set_num_threads(n);
#endif
}

static int engine_ready(void)
{
    if (!dn.tried) {
        dn.tried = 1;
        dn.ok = dnnl_engine_create(&dn.eng, dnnl_cpu, 0) == dnnl_success &&
                dnnl_stream_create(&dn.stream, dn.eng,
                                   dnnl_stream_default_flags) == dnnl_success;
    }
    return dn.ok;
}

int kern__dnnl_engine(dnnl_engine_t *eng, dnnl_stream_t *stream)
{
    if (!engine_ready())
        return 0;
    set_dnnl_threads();
    *eng = dn.eng;
    *stream = dn.stream;
    return 1;
}

/* Descriptors of the plain layouts; 0 or a oneDNN status. */
static int plain_mds(const kern__dnnl_geom *g, dnnl_memory_desc_t *src,
                     dnnl_memory_desc_t *wei, dnnl_memory_desc_t *bias,
                     dnnl_memory_desc_t *dst)
{
    /* the transposed weight is (c, k, r, s) in memory: logical (k, c, r,
     * s) stored input-channel major */
    dnnl_format_tag_t wtag = g->transposed ? dnnl_iohw : dnnl_oihw;
    if (dnnl_memory_desc_init_by_tag(src, 4, g->src, dnnl_f32, dnnl_nchw) ||
        dnnl_memory_desc_init_by_tag(wei, 4, g->wei, dnnl_f32, wtag) ||
        dnnl_memory_desc_init_by_tag(bias, 1, g->bias, dnnl_f32, dnnl_a) ||
        dnnl_memory_desc_init_by_tag(dst, 4, g->dst, dnnl_f32, dnnl_nchw))
        return -1;
    return 0;
}

/* The forward descriptor (also the hint of the backward ones). */
static dnnl_status_t fwd_desc(dnnl_convolution_desc_t *d, const kern__dnnl_geom *g,
                              const dnnl_memory_desc_t *src,
                              const dnnl_memory_desc_t *wei,
                              const dnnl_memory_desc_t *bias,
                              const dnnl_memory_desc_t *dst)
{
    if (g->transposed)
        return dnnl_dilated_deconvolution_forward_desc_init(
            d, dnnl_forward_training, dnnl_deconvolution_direct, src, wei,
            bias, dst, g->strides, g->dil, g->pad_l, g->pad_r);
    return dnnl_dilated_convolution_forward_desc_init(
        d, dnnl_forward_training, dnnl_convolution_direct, src, wei, bias,
        dst, g->strides, g->dil, g->pad_l, g->pad_r);
}

/* Creates primitive i of e (bit 1 << i) for shape p with a user
 * scratchpad, on the thread count set. Returns 1,
 * or -1 when oneDNN cannot run it on the plain layouts. */
static int make_prim(conv_entry *e, int i, int transposed, const void *p)
{
    unsigned bit = 1u << i;
    kern__dnnl_geom geom, *g = &geom;
    int with_bias = bit == KERN__DNNL_FWD_BIAS || bit == KERN__DNNL_BWD_W_BIAS;
    dnnl_memory_desc_t src, wei, bias, dst;
    dnnl_convolution_desc_t fd, bd;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t hint = NULL, pd = NULL;
    const char *name = NULL;
    int ret = -1;

    kern__dnnl_geom_of(g, transposed, p);
    if (plain_mds(g, &src, &wei, &bias, &dst) < 0)
        return -1;
    if (dnnl_primitive_attr_create(&attr) ||
        dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user))
        goto out;
    if (fwd_desc(&fd, g, &src, &wei, with_bias ? &bias : NULL, &dst))
        goto out;
    if (bit == KERN__DNNL_FWD || bit == KERN__DNNL_FWD_BIAS) {
        if (dnnl_primitive_desc_create(&pd, &fd, attr, dn.eng, NULL))
            goto out;
    } else {
        dnnl_status_t st;
        if (dnnl_primitive_desc_create(&hint, &fd, NULL, dn.eng, NULL))
            goto out;
        if (bit == KERN__DNNL_BWD_D)
            st = g->transposed
                ? dnnl_dilated_deconvolution_backward_data_desc_init(
                      &bd, dnnl_deconvolution_direct, &src, &wei, &dst,
                      g->strides, g->dil, g->pad_l, g->pad_r)
                : dnnl_dilated_convolution_backward_data_desc_init(
                      &bd, dnnl_convolution_direct, &src, &wei, &dst,
                      g->strides, g->dil, g->pad_l, g->pad_r);
        else
            st = g->transposed
                ? dnnl_dilated_deconvolution_backward_weights_desc_init(
                      &bd, dnnl_deconvolution_direct, &src, &wei,
                      with_bias ? &bias : NULL, &dst, g->strides, g->dil,
                      g->pad_l, g->pad_r)
                : dnnl_dilated_convolution_backward_weights_desc_init(
                      &bd, dnnl_convolution_direct, &src, &wei,
                      with_bias ? &bias : NULL, &dst, g->strides, g->dil,
                      g->pad_l, g->pad_r);
        if (st || dnnl_primitive_desc_create(&pd, &bd, attr, dn.eng, hint))
            goto out;
    }
    const dnnl_memory_desc_t *smd =
        dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    e->scratch_bytes[i] = smd ? dnnl_memory_desc_get_size(smd) : 0;
    if (e->scratch_bytes[i] &&
        dnnl_memory_create(&e->scratch[i], smd, dn.eng, DNNL_MEMORY_NONE))
        goto out;
    if (dnnl_primitive_create(&e->prim[i], pd)) {
        dnnl_memory_destroy(e->scratch[i]);
        e->scratch[i] = NULL;
        goto out;
    }
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) ||
        !name)
        name = "?";
    snprintf(e->impl[i], sizeof(e->impl[i]), "%s", name);
    e->slow[i] = strncmp(name, "ref", 3) == 0;
    ret = 1;
out:
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_desc_destroy(hint);
    dnnl_primitive_attr_destroy(attr);
    return ret;
}

static conv_entry *find_entry(int transposed, const void *p)
{
    int key[KEY_INTS];
    key_of(key, transposed, p);
    if (dn.last < dn.nslots &&
        memcmp(dn.slots[dn.last].key, key, sizeof(key)) == 0)
        return &dn.slots[dn.last];
    for (int i = 0; i < dn.nslots; i++)
        if (memcmp(dn.slots[i].key, key, sizeof(key)) == 0) {
            dn.last = i;
            return &dn.slots[i];
        }
    return NULL;
}

/* The entry of shape p, made on first use; NULL when the table is full or
 * oneDNN unusable. */
static conv_entry *entry_of(int transposed, const void *p)
{
    conv_entry *e = find_entry(transposed, p);
    if (e || dn.nslots == SLOTS || !engine_ready())
        return e;
    if (dn.nslots == dn.cap) {
        int cap = dn.cap ? 2 * dn.cap : 32;
        conv_entry *t = realloc(dn.slots, sizeof(conv_entry) * cap);
        if (!t)
            return NULL;
        dn.slots = t;
        dn.cap = cap;
    }
    kern__dnnl_geom g;
    dnnl_memory_desc_t src, wei, bias, dst;
    kern__dnnl_geom_of(&g, transposed, p);
    e = &dn.slots[dn.nslots];
    memset(e, 0, sizeof(*e));
    key_of(e->key, transposed, p);
    if (plain_mds(&g, &src, &wei, &bias, &dst) < 0 ||
        dnnl_memory_create(&e->src, &src, dn.eng, DNNL_MEMORY_NONE) ||
        dnnl_memory_create(&e->wei, &wei, dn.eng, DNNL_MEMORY_NONE) ||
        dnnl_memory_create(&e->bias, &bias, dn.eng, DNNL_MEMORY_NONE) ||
        dnnl_memory_create(&e->dst, &dst, dn.eng, DNNL_MEMORY_NONE)) {
        /* the slot stays usable, every primitive refused */
        for (int i = 0; i < NPRIM; i++)
            e->made[i] = -1;
    }
    dn.last = dn.nslots++;
    return e;
}

/* The workspace from its first 64-byte boundary, and the bytes left. */
static void *scratch_base(const kern__conv_bufs *b, size_t *avail)
{
    return kern__ws_aligned(b->ws, b->ws_bytes, avail);
}

/* 1 when every primitive of job exists (making it on first use) and fits
 * its scratchpad in the workspace. */
static int job_ready(conv_entry *e, unsigned job, int transposed,
                     const void *p, const kern__conv_bufs *b)
{
    size_t avail;
    scratch_base(b, &avail);
    for (int i = 0; i < NPRIM; i++) {
        if (!(job & (1u << i)))
            continue;
        if (e->made[i] == 0)
            e->made[i] = (signed char)make_prim(e, i, transposed, p);
        if (e->made[i] < 0 || e->scratch_bytes[i] > avail)
            return 0;
    }
    return 1;
}

static int job_slow(const conv_entry *e, unsigned job)
{
    for (int i = 0; i < NPRIM; i++)
        if ((job & (1u << i)) && e->slow[i])
            return 1;
    return 0;
}

/* Points memory m at ptr and appends it to args as argument `kind`. */
static void add_arg(dnnl_exec_arg_t *args, int *na, int kind, dnnl_memory_t m, const void *ptr)
{
    /* oneDNN only reads the inputs; its API takes every handle non-const */
    dnnl_memory_set_data_handle(m, (void *)(uintptr_t)ptr);
    args[(*na)++] = (dnnl_exec_arg_t){kind, m};
}

/* Runs the primitives of job (weight gradient before data gradient) on
 * the call's tensors. 0, or -1 if oneDNN failed (then the outputs are
 * undefined and the caller runs im2col). */
static int run_job(conv_entry *e, unsigned job, const kern__conv_bufs *b)
{
    size_t avail;
    void *scratch = scratch_base(b, &avail);
    for (int i = 0; i < NPRIM; i++) {
        unsigned bit = 1u << i;
        dnnl_exec_arg_t args[5];
        int na = 0;
        if (!(job & bit))
            continue;
        if (bit == KERN__DNNL_FWD || bit == KERN__DNNL_FWD_BIAS) {
            add_arg(args, &na, DNNL_ARG_SRC, e->src, b->x);
            add_arg(args, &na, DNNL_ARG_WEIGHTS, e->wei, b->w);
            add_arg(args, &na, DNNL_ARG_DST, e->dst, b->y);
            if (bit == KERN__DNNL_FWD_BIAS)
                add_arg(args, &na, DNNL_ARG_BIAS, e->bias, b->b);
        } else if (bit == KERN__DNNL_BWD_D) {
            add_arg(args, &na, DNNL_ARG_DIFF_DST, e->dst, b->dy);
            add_arg(args, &na, DNNL_ARG_WEIGHTS, e->wei, b->w);
            add_arg(args, &na, DNNL_ARG_DIFF_SRC, e->src, b->dx);
        } else {
            add_arg(args, &na, DNNL_ARG_SRC, e->src, b->x);
            add_arg(args, &na, DNNL_ARG_DIFF_DST, e->dst, b->dy);
            add_arg(args, &na, DNNL_ARG_DIFF_WEIGHTS, e->wei, b->dw);
            if (bit == KERN__DNNL_BWD_W_BIAS)
                add_arg(args, &na, DNNL_ARG_DIFF_BIAS, e->bias, b->db);
        }
        if (e->scratch[i]) {
            dnnl_memory_set_data_handle(e->scratch[i], scratch);
            args[na++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, e->scratch[i]};
        }
        if (dnnl_primitive_execute(e->prim[i], dn.stream, na, args) ||
            dnnl_stream_wait(dn.stream)) {
            e->made[i] = -1;
            return -1;
        }
    }
    conv_mode.ran |= job;
    return 0;
}

static double now(void)
{
    return (double)kern__now_ns() * 1e-9;
}

/* Times both paths on the call's buffers, all rounds of im2col first,
 * then those of oneDNN (so that neither runs while the other's threads
 * still spin; the first round of each only warms up), and leaves the
 * winner's results in them. oneDNN must be faster by a margin: its OpenMP
 * threads spinning after it cost the operators around it a little that
 * this timing does not see. Returns the pick. */
static kern__conv_path measure(conv_entry *e, unsigned job, const void *p,
                               const kern__conv_bufs *b,
                               kern__conv_im2col_fn im2col)
{
    double best_i = 1e300, best_o = 1e300;
    for (int round = 0; round < ROUNDS; round++) {
        double t0 = now();
        im2col(p, b);
        double t = now() - t0;
        if (round > 0 && t < best_i)
            best_i = t;
    }
    for (int round = 0; round < ROUNDS; round++) {
        double t0 = now();
        if (run_job(e, job, b) < 0) {
            im2col(p, b);
            return KERN__CONV_IM2COL;
        }
        double t = now() - t0;
        if (round > 0 && t < best_o)
            best_o = t;
    }
    if (best_o < ONEDNN_MARGIN * best_i)
        return KERN__CONV_ONEDNN; /* it ran last */
    im2col(p, b);
    return KERN__CONV_IM2COL;
}

void kern__conv_run(int transposed, const void *p, unsigned job,
                    const kern__conv_bufs *b, kern__conv_im2col_fn im2col)
{
    kern__conv_path path = kern__conv_get_path();
    conv_entry *e = path == KERN__CONV_AUTO || path == KERN__CONV_ONEDNN ? entry_of(transposed, p)
                                                                         : NULL;
    if (e) {
        signed char *c = &e->choice[job];
        if (path == KERN__CONV_AUTO && *c == KERN__CONV_IM2COL)
            goto classic;
        set_dnnl_threads();
        if (!job_ready(e, job, transposed, p, b)) {
            /* decided by the first call: the planner gives a shape the
             * same workspace every time */
            if (path == KERN__CONV_AUTO && *c == 0)
                *c = KERN__CONV_IM2COL;
            goto classic;
        }
        if (path == KERN__CONV_ONEDNN || *c == KERN__CONV_ONEDNN) {
            if (run_job(e, job, b) == 0)
                return;
            goto classic;
        }
        if (job_slow(e, job)) {
            *c = KERN__CONV_IM2COL;
            goto classic;
        }
        *c = (signed char)measure(e, job, p, b, im2col);
        return;
    }
classic:
    im2col(p, b);
}

int kern__conv_have_onednn(void)
{
    return engine_ready();
}

kern__conv_path kern__conv_choice(int transposed, const void *p, unsigned job)
{
    conv_entry *e = job < KERN__DNNL_JOBS ? find_entry(transposed, p) : NULL;
    return e ? (kern__conv_path)e->choice[job] : KERN__CONV_AUTO;
}

size_t kern__conv_scratch(int transposed, const void *p, unsigned job)
{
    conv_entry *e = entry_of(transposed, p);
    size_t need = 0;
    if (!e)
        return SIZE_MAX;
    set_dnnl_threads();
    for (int i = 0; i < NPRIM; i++) {
        if (!(job & (1u << i)))
            continue;
        if (e->made[i] == 0)
            e->made[i] = (signed char)make_prim(e, i, transposed, p);
        if (e->made[i] < 0)
            return SIZE_MAX;
        if (e->scratch_bytes[i] > need)
            need = e->scratch_bytes[i];
    }
    return need ? need + 64 : 0;
}

const char *kern__conv_impl(int transposed, const void *p, unsigned prim)
{
    conv_entry *e = find_entry(transposed, p);
    for (int i = 0; e && i < NPRIM; i++)
        if (prim == 1u << i && e->made[i] == 1)
            return e->impl[i];
    return NULL;
}

#else /* !KERNELS_HAVE_DNNL */

void kern__conv_run(int transposed, const void *p, unsigned job,
                    const kern__conv_bufs *b, kern__conv_im2col_fn im2col)
{
    im2col(p, b);
}

int kern__conv_have_onednn(void)
{
    return 0;
}

kern__conv_path kern__conv_choice(int transposed, const void *p, unsigned job)
{
    return KERN__CONV_IM2COL;
}

size_t kern__conv_scratch(int transposed, const void *p, unsigned job)
{
    return SIZE_MAX;
}

const char *kern__conv_impl(int transposed, const void *p, unsigned prim)
{
    return NULL;
}

#endif

void *kern__ws_aligned(void *ws, size_t ws_bytes, size_t *avail)
{
    uintptr_t a = (uintptr_t)ws, al = (a + 63) & ~(uintptr_t)63;
    size_t skip = al - a;
    *avail = ws_bytes > skip ? ws_bytes - skip : 0;
    return (void *)al;
}

int kernels_omp_wait(char **argv)
{
#if defined(KERNELS_HAVE_DNNL) && DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT"))
        return 1; /* the user's choice, or this image already runs with it */
    if (setenv("GOMP_SPINCOUNT", KERNELS_OMP_SPINCOUNT, 1) < 0)
        return -1;
    fflush(NULL);
    kern__exec_self(argv);
    return -1;
#else
    (void)argv;
    return 0;
#endif
}
