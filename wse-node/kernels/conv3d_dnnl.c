/* 3-D convolutions and deconvolutions on oneDNN's own layouts, as
 * conv_blocked.c runs the 2-D ones: each piece reorders its plain float32
 * NCDHW / OIDHW (IODHW) operands into the layouts its primitive chose
 * (into bfloat16, rounded to nearest even, for mixed precision), runs it
 * with float32 accumulation and reorders the results back, every buffer
 * carved from the caller's workspace. Each piece stands alone: a shape
 * whose weight gradient has only oneDNN's reference or GEMM-based kernel
 * still runs its forward pass here, and that piece on vol2col. */
#include "conv3d_dnnl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "kernels_internal.h"

#ifdef KERNELS_HAVE_DNNL

/* Shapes kept, as conv_blocked.c keeps 2-D ones; later ones run on vol2col
 * (a 3D U-Net has a few dozen in either precision, and a layer run in
 * depth bands (c3d_band.c) up to three more: its first, middle and last
 * bands). */
#define SLOTS 256

/* A tensor in a primitive's layout: its descriptor, a memory pointed at
 * the workspace per call, and the reorder from (to_user 0) or to (1) the
 * caller's plain float32 tensor. */
typedef struct c3d_view {
    dnnl_memory_desc_t md;
    dnnl_memory_t mem;
    dnnl_memory_t user;       /* the plain tensor, pointed per call */
    dnnl_primitive_t reorder;
    size_t bytes;             /* rounded up to 64 */
    int pack16;               /* float32 into aBcde16b's bfloat16: blk16.c
                               * packs it (3 to 6 times oneDNN's reorder) */
    int round;                /* float32 into the plain layout's bfloat16:
                               * blk16.c's rounding over the threads */
    int band;                 /* the plain tensor is a band of planes of a
                               * larger one, into a layout of `block`
                               * channels (kern__blk_pack: oneDNN 2.6's
                               * reorder from a band of a tensor above 4 GiB
                               * runs in its reference kernel, ten times
                               * the time) */
    int block;
    size_t ld, nld;           /* the plain tensor's channel and sample strides */
} c3d_view;

enum { V_FX, V_FW, V_FY, V_WX, V_WDY, V_WDW, V_DDY, V_DW, V_DDX, NVIEW };
enum { P_FWD, P_BWD_W, P_BWD_D, NPRIM };

/* One shape, precision and thread count. */
typedef struct c3d_entry {
    kern__c3d g;                 /* key: the shape, */
    int bf16, threads;           /* the precision and the thread count */
    unsigned fast;               /* KERN__C3D_* pieces with a fast kernel */
    dnnl_primitive_t prim[NPRIM];
    dnnl_memory_t scratch[NPRIM];
    size_t scratch_bytes[NPRIM];
    dnnl_memory_t bias;          /* float32 (k), pointed per call */
    c3d_view v[NVIEW];
    int ddy_same;                /* the data gradient reads the weight
                                  * gradient's dY (one reorder of it) */
    char impl[NPRIM][48];        /* oneDNN's implementation, or why none */
} c3d_entry;

static struct {
    c3d_entry e[SLOTS];
    int n;
} c3;

static size_t round64(size_t v)
{
    return (v + 63) & ~(size_t)63;
}

/* Whether md is the 5-D layout tag of its dims in type t. */
static int has_tag(const dnnl_memory_desc_t *md, dnnl_data_type_t t, dnnl_format_tag_t tag)
{
    dnnl_memory_desc_t want;
    return md->ndims == 5 && md->data_type == t &&
           dnnl_memory_desc_init_by_tag(&want, 5, md->dims, t, tag) == dnnl_success &&
           dnnl_memory_desc_equal(md, &want);
}

/* The view of md (the primitive's) over a plain tensor of plain_md; to
 * the user's tensor adding into it where sum. 0 or -1. */
static int view_make(c3d_view *v, dnnl_engine_t eng, const dnnl_memory_desc_t *md,
                     const dnnl_memory_desc_t *plain_md, int to_user, int sum)
{
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    v->md = *md;
    v->bytes = round64(dnnl_memory_desc_get_size(md));
    int ok = !sum || (dnnl_primitive_attr_create(&attr) == dnnl_success &&
                      dnnl_post_ops_create(&po) == dnnl_success &&
                      dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success &&
                      dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success);
    ok = ok && dnnl_memory_create(&v->mem, md, eng, DNNL_MEMORY_NONE) == dnnl_success &&
         dnnl_memory_create(&v->user, plain_md, eng, DNNL_MEMORY_NONE) == dnnl_success &&
         (to_user ? dnnl_reorder_primitive_desc_create(&rpd, md, eng, plain_md, eng, attr)
                  : dnnl_reorder_primitive_desc_create(&rpd, plain_md, eng, md, eng, NULL)) ==
             dnnl_success &&
         dnnl_primitive_create(&v->reorder, rpd) == dnnl_success;
    if (rpd)
        dnnl_primitive_desc_destroy(rpd);
    if (po)
        dnnl_post_ops_destroy(po);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    /* blk16.c's passes read the plain tensor as (dims[0], dims[1], the
     * rest): abcde, not the transposed weight's bacde */
    int act = has_tag(plain_md, dnnl_f32, dnnl_abcde);
    v->pack16 = ok && !to_user && act && has_tag(md, dnnl_bf16, dnnl_aBcde16b) &&
                md->dims[1] % 16 == 0;
    v->round = ok && !to_user && act && has_tag(md, dnnl_bf16, dnnl_abcde);
    const dnnl_dim_t *pd = plain_md->dims, *st = plain_md->format_desc.blocking.strides;
    dnnl_data_type_t t = md->data_type;
    v->block = has_tag(md, t, dnnl_aBcde16b) ? 16 : has_tag(md, t, dnnl_aBcde8b) ? 8 : 0;
    v->band = ok && !to_user && !act && v->block && (t == dnnl_f32 || t == dnnl_bf16) &&
              plain_md->data_type == dnnl_f32 && plain_md->format_kind == dnnl_blocked &&
              plain_md->format_desc.blocking.inner_nblks == 0 && st[4] == 1 &&
              st[3] == pd[4] && st[2] == pd[3] * pd[4];
    v->ld = v->band ? (size_t)st[1] : 0;
    v->nld = v->band ? (size_t)st[0] : 0;
    return ok ? 0 : -1;
}

static void view_free(c3d_view *v)
{
    dnnl_memory_destroy(v->mem);
    dnnl_memory_destroy(v->user);
    dnnl_primitive_destroy(v->reorder);
    memset(v, 0, sizeof(*v));
}

/* A plain float32 (n, ch, d, h, w) tensor's planes inside one of `full`
 * planes (0: d): NCDHW with that tensor's strides. */
static int plain_md(dnnl_memory_desc_t *md, int n, int ch, const int *dims, int full)
{
    dnnl_dims_t d = {n, ch, dims[0], dims[1], dims[2]};
    if (!full)
        return dnnl_memory_desc_init_by_tag(md, 5, d, dnnl_f32, dnnl_ncdhw) == dnnl_success;
    dnnl_dim_t hw = (dnnl_dim_t)dims[1] * dims[2];
    dnnl_dims_t st = {(dnnl_dim_t)ch * full * hw, (dnnl_dim_t)full * hw, hw, dims[2], 1};
    (void)n;
    return dnnl_memory_desc_init_by_strides(md, 5, d, dnnl_f32, st) == dnnl_success;
}

/* Descriptors of the plain float32 tensors: src (n, c, in), weight (k, c,
 * ker) stored OIDHW or, transposed, IODHW, bias (k), dst (n, k, out); a
 * depth band's src and dst inside the caller's whole tensors. */
static int plain_mds(const kern__c3d *g, dnnl_memory_desc_t *x, dnnl_memory_desc_t *w,
                     dnnl_memory_desc_t *b, dnnl_memory_desc_t *y)
{
    dnnl_dims_t wd = {g->k, g->c, g->ker[0], g->ker[1], g->ker[2]};
    dnnl_dims_t bd = {g->k};
    return plain_md(x, g->n, g->c, g->in, g->x_full) &&
                   dnnl_memory_desc_init_by_tag(w, 5, wd, dnnl_f32,
                                                g->transposed ? dnnl_iodhw : dnnl_oidhw) ==
                       dnnl_success &&
                   dnnl_memory_desc_init_by_tag(b, 1, bd, dnnl_f32, dnnl_a) == dnnl_success &&
                   plain_md(y, g->n, g->k, g->out, g->y_full)
               ? 0
               : -1;
}

/* The same dims in type t, layout left to the primitive. */
static int any_md(dnnl_memory_desc_t *md, const dnnl_memory_desc_t *plain, dnnl_data_type_t t)
{
    return dnnl_memory_desc_init_by_tag(md, 5, plain->dims, t, dnnl_format_tag_any) ==
                   dnnl_success
               ? 0
               : -1;
}

/* oneDNN's reference loops, and its GEMM-based kernels (whose columns
 * cover whole volumes: a scratchpad of hundreds of MiB at 64^3), are no
 * faster than vol2col. */
static int fast_impl(const char *impl)
{
    return impl && strncmp(impl, "ref", 3) != 0 && !strstr(impl, "gemm");
}

/* Records pd's implementation for piece i; when it is fast, makes the
 * primitive and its scratchpad memory. 1 made, 0 slow, -1 failed. */
static int prim_make(c3d_entry *e, int i, const_dnnl_primitive_desc_t pd, dnnl_engine_t eng)
{
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success)
        impl = NULL;
    snprintf(e->impl[i], sizeof(e->impl[i]), "%s", impl ? impl : "?");
    if (!fast_impl(impl))
        return 0;
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    e->scratch_bytes[i] = smd ? round64(dnnl_memory_desc_get_size(smd)) : 0;
    if (e->scratch_bytes[i] &&
        dnnl_memory_create(&e->scratch[i], smd, eng, DNNL_MEMORY_NONE) != dnnl_success)
        return -1;
    return dnnl_primitive_create(&e->prim[i], pd) == dnnl_success ? 1 : -1;
}

static const dnnl_memory_desc_t *md_of(const_dnnl_primitive_desc_t pd, dnnl_query_t what)
{
    return dnnl_primitive_desc_query_md(pd, what, 0);
}

static dnnl_status_t fwd_desc(dnnl_convolution_desc_t *d, const kern__c3d *g,
                              const dnnl_memory_desc_t *x, const dnnl_memory_desc_t *w,
                              const dnnl_memory_desc_t *b, const dnnl_memory_desc_t *y,
                              const dnnl_dim_t *st, const dnnl_dim_t *dl, const dnnl_dim_t *pl,
                              const dnnl_dim_t *pr)
{
    return g->transposed
               ? dnnl_dilated_deconvolution_forward_desc_init(d, dnnl_forward_training,
                                                              dnnl_deconvolution_direct, x, w, b,
                                                              y, st, dl, pl, pr)
               : dnnl_dilated_convolution_forward_desc_init(d, dnnl_forward_training,
                                                            dnnl_convolution_direct, x, w, b, y,
                                                            st, dl, pl, pr);
}

/* Makes entry e's pieces: every one oneDNN has a fast kernel for, with its
 * views. The forward pass always takes a bias (a zero one when the caller
 * has none: one primitive for both). */
static void entry_make(c3d_entry *e, dnnl_engine_t eng)
{
    const kern__c3d *g = &e->g;
    dnnl_data_type_t in_t = e->bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_dims_t st, dl, pl, pr;
    for (int a = 0; a < 3; a++) {
        st[a] = g->stride[a];
        dl[a] = g->dil[a] - 1;
        pl[a] = g->pad_l[a];
        pr[a] = g->pad_r[a];
    }
    dnnl_memory_desc_t x_pl, w_pl, b_md, y_pl, x_any, w_any, y_any, dy_any, dx_any, dw_any;
    dnnl_convolution_desc_t fd, wd, dd;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t fpd = NULL, wpd = NULL, dpd = NULL;
    snprintf(e->impl[P_FWD], sizeof(e->impl[0]), "no primitive");
    snprintf(e->impl[P_BWD_W], sizeof(e->impl[0]), "no primitive");
    snprintf(e->impl[P_BWD_D], sizeof(e->impl[0]), "no primitive");
    if (plain_mds(g, &x_pl, &w_pl, &b_md, &y_pl) < 0 || any_md(&x_any, &x_pl, in_t) < 0 ||
        any_md(&w_any, &w_pl, in_t) < 0 || any_md(&y_any, &y_pl, dnnl_f32) < 0 ||
        any_md(&dy_any, &y_pl, in_t) < 0 || any_md(&dx_any, &x_pl, dnnl_f32) < 0 ||
        dnnl_primitive_attr_create(&attr) != dnnl_success ||
        dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) != dnnl_success ||
        fwd_desc(&fd, g, &x_any, &w_any, &b_md, &y_any, st, dl, pl, pr) != dnnl_success ||
        dnnl_primitive_desc_create(&fpd, &fd, attr, eng, NULL) != dnnl_success)
        goto out;
    if (prim_make(e, P_FWD, fpd, eng) > 0 &&
        dnnl_memory_create(&e->bias, &b_md, eng, DNNL_MEMORY_NONE) == dnnl_success &&
        view_make(&e->v[V_FX], eng, md_of(fpd, dnnl_query_src_md), &x_pl, 0, 0) == 0 &&
        view_make(&e->v[V_FW], eng, md_of(fpd, dnnl_query_weights_md), &w_pl, 0, 0) == 0 &&
        view_make(&e->v[V_FY], eng, md_of(fpd, dnnl_query_dst_md), &y_pl, 1,
                  g->vol_sum && g->transposed) == 0)
        e->fast |= KERN__C3D_FWD;
    /* the weight gradient in float32 where oneDNN has a fast kernel for it
     * (AVX512_BF16 does), else in the inputs' type (AMX's bfloat16) */
    for (int t = 0; t < (e->bf16 ? 2 : 1) && !(e->fast & KERN__C3D_BWD_W); t++) {
        if (wpd)
            dnnl_primitive_desc_destroy(wpd);
        wpd = NULL;
        dnnl_primitive_destroy(e->prim[P_BWD_W]);
        e->prim[P_BWD_W] = NULL;
        dnnl_memory_destroy(e->scratch[P_BWD_W]);
        e->scratch[P_BWD_W] = NULL;
        if (any_md(&dw_any, &w_pl, t ? in_t : dnnl_f32) < 0)
            break;
        dnnl_status_t s =
            g->transposed
                ? dnnl_dilated_deconvolution_backward_weights_desc_init(
                      &wd, dnnl_deconvolution_direct, &x_any, &dw_any, NULL, &dy_any, st, dl, pl, pr)
                : dnnl_dilated_convolution_backward_weights_desc_init(
                      &wd, dnnl_convolution_direct, &x_any, &dw_any, NULL, &dy_any, st, dl, pl, pr);
        if (s == dnnl_success &&
            dnnl_primitive_desc_create(&wpd, &wd, attr, eng, fpd) == dnnl_success &&
            prim_make(e, P_BWD_W, wpd, eng) > 0 &&
            view_make(&e->v[V_WX], eng, md_of(wpd, dnnl_query_src_md), &x_pl, 0, 0) == 0 &&
            view_make(&e->v[V_WDY], eng, md_of(wpd, dnnl_query_diff_dst_md), &y_pl, 0, 0) == 0 &&
            view_make(&e->v[V_WDW], eng, md_of(wpd, dnnl_query_diff_weights_md), &w_pl, 1, 0) ==
                0)
            e->fast |= KERN__C3D_BWD_W;
        else
            for (int v = V_WX; v <= V_WDW; v++)
                view_free(&e->v[v]);
    }
    {
        dnnl_status_t s =
            g->transposed
                ? dnnl_dilated_deconvolution_backward_data_desc_init(
                      &dd, dnnl_deconvolution_direct, &dx_any, &w_any, &dy_any, st, dl, pl, pr)
                : dnnl_dilated_convolution_backward_data_desc_init(
                      &dd, dnnl_convolution_direct, &dx_any, &w_any, &dy_any, st, dl, pl, pr);
        if (s == dnnl_success &&
            dnnl_primitive_desc_create(&dpd, &dd, attr, eng, fpd) == dnnl_success &&
            prim_make(e, P_BWD_D, dpd, eng) > 0 &&
            view_make(&e->v[V_DDY], eng, md_of(dpd, dnnl_query_diff_dst_md), &y_pl, 0, 0) == 0 &&
            view_make(&e->v[V_DW], eng, md_of(dpd, dnnl_query_weights_md), &w_pl, 0, 0) == 0 &&
            view_make(&e->v[V_DDX], eng, md_of(dpd, dnnl_query_diff_src_md), &x_pl, 1,
                      g->vol_sum && !g->transposed) == 0)
            e->fast |= KERN__C3D_BWD_D;
    }
    e->ddy_same = (e->fast & KERN__C3D_BWD_W) && (e->fast & KERN__C3D_BWD_D) &&
                  dnnl_memory_desc_equal(&e->v[V_WDY].md, &e->v[V_DDY].md);
out:
    if (fpd)
        dnnl_primitive_desc_destroy(fpd);
    if (wpd)
        dnnl_primitive_desc_destroy(wpd);
    if (dpd)
        dnnl_primitive_desc_destroy(dpd);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
}

/* The entry of shape g, made on first use; NULL when the table is full or
 * there is no engine. */
static c3d_entry *entry_of(const kern__c3d *g, int bf16, dnnl_stream_t *st)
{
    dnnl_engine_t eng;
    if (g->n <= 0 || (bf16 && !kernels_bf16_compute()) || !kern__dnnl_engine(&eng, st))
        return NULL;
    int threads = kernels_threads();
    for (int i = 0; i < c3.n; i++)
        if (!memcmp(&c3.e[i].g, g, sizeof(*g)) && c3.e[i].bf16 == bf16 &&
            c3.e[i].threads == threads)
            return &c3.e[i];
    if (c3.n == SLOTS)
        return NULL;
    c3d_entry *e = &c3.e[c3.n++];
    memset(e, 0, sizeof(*e));
    e->g = *g;
    e->bf16 = bf16;
    e->threads = threads;
    entry_make(e, eng);
    return e;
}

unsigned kern__c3d_whole_pieces(const kern__c3d *g, int bf16)
{
    dnnl_stream_t st;
    c3d_entry *e = entry_of(g, bf16, &st);
    return e ? e->fast : 0;
}

/* Bytes the backward pieces `pieces` take: dY once where both read one
 * layout, beside the larger of the two pieces' other buffers (they run
 * one after the other). */
static size_t bwd_bytes(const c3d_entry *e, unsigned pieces)
{
    int w = (pieces & KERN__C3D_BWD_W) != 0, d = (pieces & KERN__C3D_BWD_D) != 0;
    size_t wgrad = e->v[V_WX].bytes + e->v[V_WDW].bytes + e->scratch_bytes[P_BWD_W];
    size_t dgrad = e->v[V_DW].bytes + e->v[V_DDX].bytes + e->scratch_bytes[P_BWD_D];
    if (w && d) {
        if (!e->ddy_same)
            dgrad += e->v[V_DDY].bytes;
        return e->v[V_WDY].bytes + (wgrad > dgrad ? wgrad : dgrad);
    }
    if (w)
        return e->v[V_WDY].bytes + wgrad;
    return d ? e->v[V_DDY].bytes + dgrad : 0;
}

static size_t fwd_bytes(const c3d_entry *e)
{
    /* and a zero bias of k floats for calls without one */
    return e->v[V_FX].bytes + e->v[V_FW].bytes + e->v[V_FY].bytes + e->scratch_bytes[P_FWD] +
           round64((size_t)e->g.k * sizeof(float));
}

size_t kern__c3d_whole_bytes(const kern__c3d *g, int bf16, unsigned pieces)
{
    dnnl_stream_t st;
    c3d_entry *e = entry_of(g, bf16, &st);
    if (!e || !(pieces &= e->fast))
        return 0;
    size_t f = pieces & KERN__C3D_FWD ? fwd_bytes(e) : 0, b = bwd_bytes(e, pieces);
    return (f > b ? f : b) + 64;
}

/* The floats of a plain tensor at user rounded to bfloat16 into mine:
 * blk16.c's instruction over the threads, or kern__bf16_rows. */
static void bf16_round(void *mine, const float *user, const dnnl_memory_desc_t *md)
{
    const dnnl_dim_t *d = md->dims;
    size_t vol = (size_t)(d[2] * d[3] * d[4]);
    if (!kern__blk16_reorder(KERN__BLK16_ROUND_BF16, mine, (float *)(uintptr_t)user, (int)d[0],
                             (int)d[1], vol))
        kern__bf16_rows(mine, user, (int)(d[0] * d[1]), (int)vol, (int)vol);
}

/* Reorders between the caller's tensor at user and view v at mine. */
static int reorder(dnnl_stream_t st, c3d_view *v, const void *user, void *mine, int to_user)
{
    const dnnl_dim_t *d = v->md.dims;
    uint64_t t0 = kern__now_ns();
    dnnl_memory_set_data_handle(v->user, (void *)(uintptr_t)user);
    dnnl_memory_set_data_handle(v->mem, mine); /* (the primitive's argument too) */
    int rc = 0;
    if (v->round)
        bf16_round(mine, user, &v->md);
    else if (v->band)
        kern__blk_pack(mine, v->md.data_type == dnnl_bf16, v->block, user, (int)d[0], (int)d[1],
                       (size_t)(d[2] * d[3] * d[4]), v->ld, v->nld);
    else if (!v->pack16 ||
             !kern__blk16_reorder(KERN__BLK16_PACK_BF16, mine, (float *)(uintptr_t)user,
                                  (int)d[0], (int)d[1], (size_t)(d[2] * d[3] * d[4]))) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, to_user ? v->mem : v->user},
                                   {DNNL_ARG_TO, to_user ? v->user : v->mem}};
        rc = dnnl_primitive_execute(v->reorder, st, 2, args) == dnnl_success ? 0 : -1;
    }
    kern__layout_since(t0);
    return rc;
}

static int exec(c3d_entry *e, int i, dnnl_stream_t st, dnnl_exec_arg_t *args, int na,
                void *scratch)
{
    if (e->scratch[i]) {
        dnnl_memory_set_data_handle(e->scratch[i], scratch);
        args[na++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, e->scratch[i]};
    }
    return dnnl_primitive_execute(e->prim[i], st, na, args) == dnnl_success ? 0 : -1;
}

int kern__c3d_whole_forward(int bf16, const kern__c3d *g, float *out, const float *in,
                      const float *weight, const float *bias, void *ws, size_t ws_bytes)
{
    dnnl_stream_t st;
    size_t avail;
    c3d_entry *e = entry_of(g, bf16, &st);
    if (!e || !(e->fast & KERN__C3D_FWD) || !ws)
        return 0;
    char *x = kern__ws_aligned(ws, ws_bytes, &avail);
    if (fwd_bytes(e) > avail)
        return 0;
    char *w = x + e->v[V_FX].bytes, *y = w + e->v[V_FW].bytes, *sp = y + e->v[V_FY].bytes;
    float *zero = (float *)(sp + e->scratch_bytes[P_FWD]);
    if (!bias) {
        memset(zero, 0, sizeof(float) * (size_t)g->k);
        bias = zero;
    }
    dnnl_memory_set_data_handle(e->bias, (void *)(uintptr_t)bias);
    dnnl_memory_set_data_handle(e->v[V_FY].mem, y);
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, e->v[V_FX].mem},
                               {DNNL_ARG_WEIGHTS, e->v[V_FW].mem},
                               {DNNL_ARG_DST, e->v[V_FY].mem},
                               {DNNL_ARG_BIAS, e->bias}};
    /* the stream runs in order: the primitive reads what the reorders
     * wrote; oneDNN checks its arguments before it writes, so on failure
     * the caller's path computes it all again */
    return reorder(st, &e->v[V_FX], in, x, 0) == 0 && reorder(st, &e->v[V_FW], weight, w, 0) == 0 &&
           exec(e, P_FWD, st, args, 4, sp) == 0 && reorder(st, &e->v[V_FY], out, y, 1) == 0 &&
           dnnl_stream_wait(st) == dnnl_success;
}

unsigned kern__c3d_whole_backward(int bf16, const kern__c3d *g, unsigned pieces, float *din,
                            float *dweight, const float *dout, const float *in,
                            const float *weight, void *ws, size_t ws_bytes)
{
    dnnl_stream_t st;
    size_t avail;
    c3d_entry *e = entry_of(g, bf16, &st);
    pieces &= KERN__C3D_BWD_W | KERN__C3D_BWD_D;
    if (!e || !pieces || (pieces & e->fast) != pieces || !ws)
        return 0;
    char *base = kern__ws_aligned(ws, ws_bytes, &avail);
    if (bwd_bytes(e, pieces) > avail)
        return 0;
    int ok = 1;
    char *dy = NULL, *rest = base;
    if (pieces & KERN__C3D_BWD_W) {
        dy = base;
        rest = dy + e->v[V_WDY].bytes;
        char *x = rest, *dw = x + e->v[V_WX].bytes;
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, e->v[V_WX].mem},
                                   {DNNL_ARG_DIFF_DST, e->v[V_WDY].mem},
                                   {DNNL_ARG_DIFF_WEIGHTS, e->v[V_WDW].mem}};
        dnnl_memory_set_data_handle(e->v[V_WDW].mem, dw);
        ok = reorder(st, &e->v[V_WDY], dout, dy, 0) == 0 &&
             reorder(st, &e->v[V_WX], in, x, 0) == 0 &&
             exec(e, P_BWD_W, st, args, 3, dw + e->v[V_WDW].bytes) == 0 &&
             reorder(st, &e->v[V_WDW], dweight, dw, 1) == 0;
    }
    if (ok && (pieces & KERN__C3D_BWD_D)) {
        int reuse = dy && e->ddy_same;
        char *ddy = reuse ? dy : rest;
        char *w = ddy == rest ? rest + e->v[V_DDY].bytes : rest, *dx = w + e->v[V_DW].bytes;
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_DIFF_DST, e->v[V_DDY].mem},
                                   {DNNL_ARG_WEIGHTS, e->v[V_DW].mem},
                                   {DNNL_ARG_DIFF_SRC, e->v[V_DDX].mem}};
        if (reuse)
            dnnl_memory_set_data_handle(e->v[V_DDY].mem, ddy);
        else
            ok = reorder(st, &e->v[V_DDY], dout, ddy, 0) == 0;
        dnnl_memory_set_data_handle(e->v[V_DDX].mem, dx);
        ok = ok && reorder(st, &e->v[V_DW], weight, w, 0) == 0 &&
             exec(e, P_BWD_D, st, args, 3, dx + e->v[V_DDX].bytes) == 0 &&
             reorder(st, &e->v[V_DDX], din, dx, 1) == 0;
    }
    return ok && dnnl_stream_wait(st) == dnnl_success ? pieces : 0;
}

/* The name of md's layout among those oneDNN's convolutions pick. */
static const char *tag_name(const dnnl_memory_desc_t *md)
{
    static const struct {
        dnnl_format_tag_t tag;
        const char *name;
    } tags[] = {{dnnl_abcde, "abcde"},     {dnnl_acdeb, "acdeb"},     {dnnl_aBcde8b, "aBcde8b"},
                {dnnl_aBcde16b, "aBcde16b"}, {dnnl_aBcde32b, "aBcde32b"}, {dnnl_aBcde4b, "aBcde4b"}};
    for (size_t i = 0; i < sizeof(tags) / sizeof(tags[0]); i++)
        if (has_tag(md, md->data_type, tags[i].tag))
            return tags[i].name;
    return "another layout";
}

unsigned kern__c3d_whole_describe(const kern__c3d *g, int bf16, char *out, size_t len)
{
    dnnl_stream_t st;
    c3d_entry *e = entry_of(g, bf16, &st);
    if (!e) {
        snprintf(out, len, "%s", bf16 && !kernels_bf16_compute() ? "no bfloat16 instructions"
                                                                 : "no oneDNN engine");
        return 0;
    }
    static const char *const piece[NPRIM] = {"forward", "weight gradient", "data gradient"};
    static const int act[NPRIM] = {V_FX, V_WDY, V_DDY};
    size_t at = 0;
    out[0] = '\0';
    for (int i = 0; i < NPRIM && at < len; i++) {
        int n = (e->fast >> i) & 1
                    ? snprintf(out + at, len - at, "%s%s oneDNN %s (%s)", i ? "; " : "", piece[i],
                               e->impl[i], tag_name(&e->v[act[i]].md))
                    : snprintf(out + at, len - at, "%s%s vol2col (oneDNN has %s)", i ? "; " : "",
                               piece[i], e->impl[i]);
        if (n < 0)
            break;
        at += (size_t)n;
    }
    return e->fast;
}

#else /* !KERNELS_HAVE_DNNL */

unsigned kern__c3d_whole_pieces(const kern__c3d *g, int bf16)
{
    return 0;
}

size_t kern__c3d_whole_bytes(const kern__c3d *g, int bf16, unsigned pieces)
{
    return 0;
}

int kern__c3d_whole_forward(int bf16, const kern__c3d *g, float *out, const float *in,
                      const float *weight, const float *bias, void *ws, size_t ws_bytes)
{
    return 0;
}

unsigned kern__c3d_whole_backward(int bf16, const kern__c3d *g, unsigned pieces, float *din,
                            float *dweight, const float *dout, const float *in,
                            const float *weight, void *ws, size_t ws_bytes)
{
    return 0;
}

unsigned kern__c3d_whole_describe(const kern__c3d *g, int bf16, char *out, size_t len)
{
    snprintf(out, len, "built without oneDNN");
    return 0;
}

#endif
