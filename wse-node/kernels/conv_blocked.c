/* Convolutions on oneDNN's own (blocked) layouts, in float32 or, for mixed
 * precision, in bfloat16 (AMX or AVX512_BF16). Each call reorders its
 * float32 NCHW / OIHW operands into the layouts the primitive chose (into
 * bfloat16, rounding to nearest even, for mixed precision), runs it with
 * float32 accumulation, and reorders the results back into the caller's
 * float32 tensors; every buffer is carved from the caller's workspace. On
 * the plain layouts oneDNN only has its GEMM-based kernels, slower than
 * im2col (conv_path.c); on its own, with the reorders counted,
 * bench_conv_paths measured the U-Net's and resnet_small's convolutions
 * of 16 outputs or more at 0.32 to 0.76 of im2col's time in float32, and
 * those of 8 outputs or more at 0.16 to 0.56 in bfloat16 on AMX.
 *
 * In bfloat16 the weight gradient comes out of oneDNN in bfloat16 (its
 * float32 output has no AMX kernel), as PyTorch's autocast gives the
 * gradient of a bfloat16 weight; the bias and its gradient stay float32.
 * The bias gradient is summed here in double. A shape oneDNN has no fast
 * kernel for, a workspace too small, or (bfloat16) a processor without
 * bfloat16 instructions leaves the call to the caller's other path. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "kernels_internal.h"
#include "op_conv2d.h"

#ifdef KERNELS_HAVE_DNNL

/* Shapes kept; later ones compute in float32. */
#define SLOTS 64

/* A tensor in oneDNN's layout for one primitive: its descriptor, a memory
 * pointed at the workspace per call, and the reorder from (to_user 0) or
 * to (1) the caller's plain float32 tensor. */
typedef struct blk_view {
    dnnl_memory_desc_t md;
    dnnl_memory_t mem;
    dnnl_memory_t user;         /* the plain tensor, pointed per call */
    dnnl_primitive_t reorder;
    size_t bytes;               /* rounded up to 64 */
    int blk16;                  /* 1 + the kern__blk16_kind that runs the
                                 * reorder instead (aBcd16b), or 0 */
    int round;                  /* plain bfloat16: bf16_round runs it */
} blk_view;

enum { V_FX, V_FW, V_FY, V_WX, V_WDY, V_WDW, V_DDY, V_DW, V_DDX, NVIEW };
enum { P_FWD, P_BWD_W, P_BWD_D, NPRIM };

typedef struct blk_entry {
    int key[16];                /* n c h w k r s strides pads dils bias threads bf16 */
    int ok;                     /* 1 usable, -1 not */
    dnnl_primitive_t prim[NPRIM];
    dnnl_memory_t scratch[NPRIM];
    size_t scratch_bytes[NPRIM];
    dnnl_memory_t bias;         /* float32 (k), pointed per call */
    blk_view v[NVIEW];
    int ddy_same;               /* the data gradient reads the weight gradient's dY */
    int keeps_x;                /* the forward pass's input view is the weight
                                 * gradient's, in bfloat16 (a kept input serves) */
    char impl[48];              /* oneDNN's implementation of the forward pass */
    unsigned io;                /* OP_CONV2D_*_BLOCKED: the tensors it can take
                                 * and give in aBcd16b (op_conv2d_blocked_io) */
    size_t fwd_bytes, bwd_bytes; /* workspace each pass needs */
} blk_entry;

static struct {
    blk_entry e[SLOTS];
    int n;
} cb;

static void key_of(int key[16], const op_conv2d_params *p, int bias, int bf16)
{
    int f[16] = {p->n, p->c, p->h, p->w, p->k, p->r, p->s, p->stride_h, p->stride_w,
                 p->pad_h, p->pad_w, p->dil_h, p->dil_w, bias, kernels_threads(), bf16};
    memcpy(key, f, sizeof(f));
}

static size_t round64(size_t v)
{
    return (v + 63) & ~(size_t)63;
}

/* Whether md is the 4-D layout tag of its dims in type t */
static int has_tag(const dnnl_memory_desc_t *md, dnnl_data_type_t t, dnnl_format_tag_t tag)
{
    dnnl_memory_desc_t want;
    return md->ndims == 4 && md->data_type == t &&
           dnnl_memory_desc_init_by_tag(&want, 4, md->dims, t, tag) == dnnl_success &&
           dnnl_memory_desc_equal(md, &want);
}

/* Whether md is the aBcd16b layout of its dims in type t, its channels
 * in whole blocks */
static int is_blk16(const dnnl_memory_desc_t *md, dnnl_data_type_t t)
{
    return has_tag(md, t, dnnl_aBcd16b) && md->dims[1] % 16 == 0;
}

/* Whether md is the blocked layout the groups take on this processor
 * (op_conv2d_block_size: aBcd16b or aBcd8b) in type t, whole blocks */
static int is_group_blk(const dnnl_memory_desc_t *md, dnnl_data_type_t t)
{
    int b = op_conv2d_block_size();
    return b == 16 ? is_blk16(md, t)
           : b == 8 ? has_tag(md, t, dnnl_aBcd8b) && md->dims[1] % 8 == 0
                    : 0;
}

/* The view of md (the primitive's) over a plain tensor of plain_md: the
 * reorder from the plain one (to_user 0) or to it (1). 0 or -1. */
static int view_make(blk_view *v, dnnl_engine_t eng, const dnnl_memory_desc_t *md,
                     const dnnl_memory_desc_t *plain_md, int to_user)
{
    dnnl_primitive_desc_t rpd = NULL;
    v->md = *md;
    v->bytes = round64(dnnl_memory_desc_get_size(md));
    int ok = dnnl_memory_create(&v->mem, md, eng, DNNL_MEMORY_NONE) == dnnl_success &&
             dnnl_memory_create(&v->user, plain_md, eng, DNNL_MEMORY_NONE) == dnnl_success &&
             (to_user ? dnnl_reorder_primitive_desc_create(&rpd, md, eng, plain_md, eng, NULL)
                      : dnnl_reorder_primitive_desc_create(&rpd, plain_md, eng, md, eng, NULL)) ==
                 dnnl_success &&
             dnnl_primitive_create(&v->reorder, rpd) == dnnl_success;
    if (rpd)
        dnnl_primitive_desc_destroy(rpd);
    /* float32 packed into aBcd16b's bfloat16: blk16.c's transposes, 3 to 6
     * times as fast as oneDNN's generic reorder (oneDNN's float32 ones,
     * to and from aBcd16b, are faster than blk16.c's) */
    v->blk16 = 0;
    /* float32 rounded into the same plain layout (a first layer's input
     * of a few channels): oneDNN's generic reorder took 0.3 ms for
     * resnet_small's 32 x 3 x 32 x 32, a tenth of that split over the
     * threads */
    v->round = ok && !to_user && has_tag(md, dnnl_bf16, dnnl_abcd);
    if (ok && !to_user && is_blk16(md, dnnl_bf16))
        v->blk16 = 1 + KERN__BLK16_PACK_BF16;
    return ok ? 0 : -1;
}

static void entry_free(blk_entry *e)
{
    for (int i = 0; i < NPRIM; i++) {
        dnnl_primitive_destroy(e->prim[i]);
        dnnl_memory_destroy(e->scratch[i]);
    }
    for (int i = 0; i < NVIEW; i++) {
        dnnl_memory_destroy(e->v[i].mem);
        dnnl_memory_destroy(e->v[i].user);
        dnnl_primitive_destroy(e->v[i].reorder);
    }
    dnnl_memory_destroy(e->bias);
    memset(e, 0, sizeof(*e));
}

/* The primitive of pd into slot i with its scratchpad memory. */
static int prim_make(blk_entry *e, int i, const_dnnl_primitive_desc_t pd, dnnl_engine_t eng)
{
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    e->scratch_bytes[i] = smd ? round64(dnnl_memory_desc_get_size(smd)) : 0;
    if (e->scratch_bytes[i] && dnnl_memory_create(&e->scratch[i], smd, eng, DNNL_MEMORY_NONE))
        return -1;
    return dnnl_primitive_create(&e->prim[i], pd) == dnnl_success ? 0 : -1;
}

static const dnnl_memory_desc_t *md_of(const_dnnl_primitive_desc_t pd, dnnl_query_t what)
{
    return dnnl_primitive_desc_query_md(pd, what, 0);
}

/* Makes the entry of shape p: 0, or -1 when oneDNN cannot run it. */
static int entry_make(blk_entry *e, const op_conv2d_params *p, int bias, int bf16, dnnl_engine_t eng)
{
    /* the inputs in the compute type, the outputs float32 but the weight
     * gradient (bfloat16: oneDNN 2.6 has no AMX kernel writing float32) */
    dnnl_data_type_t in_t = bf16 ? dnnl_bf16 : dnnl_f32;
    kern__dnnl_geom g;
    kern__dnnl_geom_of(&g, 0, p);
    const dnnl_dim_t *xd = g.src, *wd = g.wei, *yd = g.dst, *bd = g.bias, *strides = g.strides,
                     *dil = g.dil, *pl = g.pad_l, *pr = g.pad_r;
    dnnl_memory_desc_t x_any, w_any, y_any, dy_any, dx_any, dw_any, b_md, x_pl, w_pl, y_pl;
    dnnl_convolution_desc_t fd, wd_desc, dd_desc;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t fpd = NULL, wpd = NULL, dpd = NULL;
    int ok =
        dnnl_memory_desc_init_by_tag(&x_any, 4, xd, in_t, dnnl_format_tag_any) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&w_any, 4, wd, in_t, dnnl_format_tag_any) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&y_any, 4, yd, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&dy_any, 4, yd, in_t, dnnl_format_tag_any) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&dx_any, 4, xd, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&dw_any, 4, wd, in_t, dnnl_format_tag_any) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&b_md, 1, bd, dnnl_f32, dnnl_a) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&x_pl, 4, xd, dnnl_f32, dnnl_nchw) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&w_pl, 4, wd, dnnl_f32, dnnl_oihw) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&y_pl, 4, yd, dnnl_f32, dnnl_nchw) == dnnl_success &&
        dnnl_primitive_attr_create(&attr) == dnnl_success &&
        dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success &&
        dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct,
                                                   &x_any, &w_any, bias ? &b_md : NULL, &y_any,
                                                   strides, dil, pl, pr) == dnnl_success &&
        dnnl_primitive_desc_create(&fpd, &fd, attr, eng, NULL) == dnnl_success &&
        dnnl_dilated_convolution_backward_weights_desc_init(&wd_desc, dnnl_convolution_direct, &x_any,
                                                            &dw_any, NULL, &dy_any, strides, dil, pl,
                                                            pr) == dnnl_success &&
        dnnl_primitive_desc_create(&wpd, &wd_desc, attr, eng, fpd) == dnnl_success &&
        dnnl_dilated_convolution_backward_data_desc_init(&dd_desc, dnnl_convolution_direct, &dx_any,
                                                         &w_any, &dy_any, strides, dil, pl,
                                                         pr) == dnnl_success &&
        dnnl_primitive_desc_create(&dpd, &dd_desc, attr, eng, fpd) == dnnl_success;
    /* oneDNN's reference loops are no faster than float32 im2col */
    const char *impl[3] = {"ref", "ref", "ref"};
    if (ok)
        ok = dnnl_primitive_desc_query(fpd, dnnl_query_impl_info_str, 0, &impl[0]) == dnnl_success &&
             dnnl_primitive_desc_query(wpd, dnnl_query_impl_info_str, 0, &impl[1]) == dnnl_success &&
             dnnl_primitive_desc_query(dpd, dnnl_query_impl_info_str, 0, &impl[2]) == dnnl_success;
    for (int i = 0; ok && i < 3; i++)
        ok = impl[i] && strncmp(impl[i], "ref", 3) != 0 && !strstr(impl[i], "gemm");
    ok = ok && prim_make(e, P_FWD, fpd, eng) == 0 && prim_make(e, P_BWD_W, wpd, eng) == 0 &&
         prim_make(e, P_BWD_D, dpd, eng) == 0 &&
         dnnl_memory_create(&e->bias, &b_md, eng, DNNL_MEMORY_NONE) == dnnl_success &&
         view_make(&e->v[V_FX], eng, md_of(fpd, dnnl_query_src_md), &x_pl, 0) == 0 &&
         view_make(&e->v[V_FW], eng, md_of(fpd, dnnl_query_weights_md), &w_pl, 0) == 0 &&
         view_make(&e->v[V_FY], eng, md_of(fpd, dnnl_query_dst_md), &y_pl, 1) == 0 &&
         view_make(&e->v[V_WX], eng, md_of(wpd, dnnl_query_src_md), &x_pl, 0) == 0 &&
         view_make(&e->v[V_WDY], eng, md_of(wpd, dnnl_query_diff_dst_md), &y_pl, 0) == 0 &&
         view_make(&e->v[V_WDW], eng, md_of(wpd, dnnl_query_diff_weights_md), &w_pl, 1) == 0 &&
         view_make(&e->v[V_DDY], eng, md_of(dpd, dnnl_query_diff_dst_md), &y_pl, 0) == 0 &&
         view_make(&e->v[V_DW], eng, md_of(dpd, dnnl_query_weights_md), &w_pl, 0) == 0 &&
         view_make(&e->v[V_DDX], eng, md_of(dpd, dnnl_query_diff_src_md), &x_pl, 1) == 0;
    if (ok) {
        e->io = (is_group_blk(&e->v[V_FY].md, dnnl_f32) && is_group_blk(&e->v[V_WDY].md, in_t) &&
                         is_group_blk(&e->v[V_DDY].md, in_t)
                     ? OP_CONV2D_OUT_BLOCKED
                     : 0) |
                (is_group_blk(&e->v[V_FX].md, in_t) && is_group_blk(&e->v[V_WX].md, in_t) &&
                         is_group_blk(&e->v[V_DDX].md, dnnl_f32)
                     ? OP_CONV2D_IN_BLOCKED
                     : 0);
        e->ddy_same = dnnl_memory_desc_equal(&e->v[V_WDY].md, &e->v[V_DDY].md);
        /* whatever the layout (aBcd16b, AMX's channels-last acdb): the
         * bytes the forward pass rounded its input into are what the
         * weight gradient reads where both read one layout */
        e->keeps_x = bf16 && dnnl_memory_desc_equal(&e->v[V_FX].md, &e->v[V_WX].md);
        snprintf(e->impl, sizeof(e->impl), "%s", impl[0]);
        e->fwd_bytes = e->v[V_FX].bytes + e->v[V_FW].bytes + e->v[V_FY].bytes + e->scratch_bytes[P_FWD];
        size_t wgrad = e->v[V_WX].bytes + e->v[V_WDW].bytes + e->scratch_bytes[P_BWD_W];
        size_t dgrad = (e->ddy_same ? 0 : e->v[V_DDY].bytes) + e->v[V_DW].bytes + e->v[V_DDX].bytes +
                       e->scratch_bytes[P_BWD_D];
        e->bwd_bytes = e->v[V_WDY].bytes + (wgrad > dgrad ? wgrad : dgrad);
    }
    if (fpd)
        dnnl_primitive_desc_destroy(fpd);
    if (wpd)
        dnnl_primitive_desc_destroy(wpd);
    if (dpd)
        dnnl_primitive_desc_destroy(dpd);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return ok ? 0 : -1;
}

/* The entry of shape p, made on first use; NULL when there is none. */
static blk_entry *entry_of(const op_conv2d_params *p, int bias, int bf16, dnnl_engine_t eng)
{
    int key[16];
    key_of(key, p, bias, bf16);
    for (int i = 0; i < cb.n; i++)
        if (!memcmp(cb.e[i].key, key, sizeof(key)))
            return cb.e[i].ok > 0 ? &cb.e[i] : NULL;
    if (cb.n == SLOTS)
        return NULL;
    blk_entry *e = &cb.e[cb.n++];
    memset(e, 0, sizeof(*e));
    if (entry_make(e, p, bias, bf16, eng) < 0) {
        entry_free(e);
        e->ok = -1;
    } else {
        e->ok = 1;
    }
    memcpy(e->key, key, sizeof(key));
    return e->ok > 0 ? e : NULL;
}

/* The floats of a tensor of md's dims at user rounded to bfloat16 into
 * mine, in the layout they are: by the instruction blk16.c packs with,
 * or kern__bf16_rows (the same rounding) where there is none. */
static void bf16_round(void *mine, const float *user, const dnnl_memory_desc_t *md)
{
    const dnnl_dim_t *d = md->dims;
    if (!kern__blk16_reorder(KERN__BLK16_ROUND_BF16, mine, (float *)(uintptr_t)user, (int)d[0],
                             (int)d[1], (size_t)(d[2] * d[3])))
        kern__bf16_rows(mine, user, (int)(d[0] * d[1]), (int)(d[2] * d[3]), (int)(d[2] * d[3]));
}

/* Reorders between the caller's tensor at user and view v at mine. */
static int reorder(dnnl_stream_t st, blk_view *v, const void *user, void *mine, int to_user)
{
    const dnnl_dim_t *d = v->md.dims;
    uint64_t t0 = kern__now_ns();
    dnnl_memory_set_data_handle(v->user, (void *)(uintptr_t)user);
    dnnl_memory_set_data_handle(v->mem, mine); /* (the primitive's argument too) */
    int rc = 0;
    if (v->round)
        bf16_round(mine, user, &v->md);
    else if (!v->blk16 ||
        !kern__blk16_reorder((kern__blk16_kind)(v->blk16 - 1), mine, (float *)(uintptr_t)user,
                             (int)d[0], (int)d[1], (size_t)d[2] * (size_t)d[3])) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, to_user ? v->mem : v->user},
                                   {DNNL_ARG_TO, to_user ? v->user : v->mem}};
        rc = dnnl_primitive_execute(v->reorder, st, 2, args) == dnnl_success ? 0 : -1;
    }
    kern__layout_since(t0);
    return rc;
}

static int exec(blk_entry *e, int i, dnnl_stream_t st, dnnl_exec_arg_t *args, int na, void *scratch)
{
    if (e->scratch[i]) {
        dnnl_memory_set_data_handle(e->scratch[i], scratch);
        args[na++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, e->scratch[i]};
    }
    return dnnl_primitive_execute(e->prim[i], st, na, args) == dnnl_success ? 0 : -1;
}

/* The entry for a call, or NULL for the caller's other path. */
static blk_entry *usable(int bf16, const op_conv2d_params *p, int bias, void *ws, size_t ws_bytes,
                         int backward, dnnl_stream_t *st)
{
    dnnl_engine_t eng;
    size_t avail;
    if (!ws || p->n <= 0 || (bf16 && !kernels_bf16_compute()) || !kern__dnnl_engine(&eng, st))
        return NULL;
    blk_entry *e = entry_of(p, bias, bf16, eng);
    kern__ws_aligned(ws, ws_bytes, &avail);
    if (!e || (backward ? e->bwd_bytes : e->fwd_bytes) > avail)
        return NULL;
    return e;
}

/* Where a kept input of keep_bytes at keep holds this entry's: NULL when
 * it cannot (another layout, too small, misaligned). */
static void *kept_x(const blk_entry *e, const void *keep, size_t keep_bytes)
{
    return e->keeps_x && keep && ((uintptr_t)keep & 63) == 0 && keep_bytes >= e->v[V_FX].bytes
               ? (void *)(uintptr_t)keep
               : NULL;
}

/* The buffer view v's primitive reads for the caller's tensor at user,
 * into *buf (and v's memory): the tensor reordered into mine; or, where
 * the caller's is in aBcd16b (user_blk, v's layout then, in float32 or
 * bfloat16), the tensor itself, or its values rounded into mine. 0 or
 * -1. */
static int take(dnnl_stream_t st, blk_view *v, const float *user, void *mine, int user_blk,
                void **buf)
{
    *buf = mine;
    if (!user_blk)
        return reorder(st, v, user, mine, 0);
    if (v->md.data_type == dnnl_f32) {
        *buf = (void *)(uintptr_t)user;
    } else {
        uint64_t t0 = kern__now_ns();
        bf16_round(mine, user, &v->md);
        kern__layout_since(t0);
    }
    dnnl_memory_set_data_handle(v->mem, *buf);
    return 0;
}

int kern__conv_blocked_forward(int bf16, float *out, const float *in, const float *weight,
                               const float *bias, const op_conv2d_params *p, void *ws,
                               size_t ws_bytes, void *keep, size_t keep_bytes, unsigned blocked)
{
    dnnl_stream_t st;
    size_t avail;
    blk_entry *e = usable(bf16, p, bias != NULL, ws, ws_bytes, 0, &st);
    if (e && (blocked & ~e->io) == 0) {
        char *x = (char *)kern__ws_aligned(ws, ws_bytes, &avail), *w = x + e->v[V_FX].bytes, *y = w + e->v[V_FW].bytes;
        char *kx = kept_x(e, keep, keep_bytes);
        int ob = (blocked & OP_CONV2D_OUT_BLOCKED) != 0;
        void *xb;
        if (kx) /* the input rounded once, for the weight gradient too */
            x = kx;
        dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, e->v[V_FX].mem},
                                   {DNNL_ARG_WEIGHTS, e->v[V_FW].mem},
                                   {DNNL_ARG_DST, e->v[V_FY].mem}};
        int na = 3;
        if (bias) {
            dnnl_memory_set_data_handle(e->bias, (void *)(uintptr_t)bias);
            args[na++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, e->bias};
        }
        /* a blocked output is written where the caller wants it */
        dnnl_memory_set_data_handle(e->v[V_FY].mem, ob ? (void *)out : y);
        /* the stream runs in order: the primitive reads what the reorders wrote */
        if (take(st, &e->v[V_FX], in, x, (blocked & OP_CONV2D_IN_BLOCKED) != 0, &xb) == 0 &&
            reorder(st, &e->v[V_FW], weight, w, 0) == 0 &&
            exec(e, P_FWD, st, args, na, y + e->v[V_FY].bytes) == 0 &&
            (ob || reorder(st, &e->v[V_FY], out, y, 1) == 0) && dnnl_stream_wait(st) == dnnl_success)
            return kx && xb == kx ? 2 : 1;
        /* oneDNN checks its arguments before it writes: the caller's path
         * computes it all again */
    }
    return 0;
}

int kern__conv_blocked_backward(int bf16, float *din, float *dweight, float *dbias,
                                const float *dout, const float *in, const float *weight,
                                const op_conv2d_params *p, void *ws, size_t ws_bytes,
                                const void *kept, size_t kept_bytes, unsigned blocked)
{
    dnnl_stream_t st;
    size_t avail;
    blk_entry *e = usable(bf16, p, 0, ws, ws_bytes, 1, &st);
    if (e && (blocked & ~e->io) == 0) {
        int ob = (blocked & OP_CONV2D_OUT_BLOCKED) != 0, ib = (blocked & OP_CONV2D_IN_BLOCKED) != 0;
        char *dy = (char *)kern__ws_aligned(ws, ws_bytes, &avail), *rest = dy + e->v[V_WDY].bytes;
        char *x = rest, *dw = x + e->v[V_WX].bytes;
        char *kx = kept_x(e, kept, kept_bytes);
        void *dyb, *xb;
        dnnl_exec_arg_t wargs[4] = {{DNNL_ARG_SRC, e->v[V_WX].mem},
                                    {DNNL_ARG_DIFF_DST, e->v[V_WDY].mem},
                                    {DNNL_ARG_DIFF_WEIGHTS, e->v[V_WDW].mem}};
        int ok = take(st, &e->v[V_WDY], dout, dy, ob, &dyb) == 0;
        if (kx) /* as the forward pass rounded it */
            dnnl_memory_set_data_handle(e->v[V_WX].mem, kx);
        else
            ok = ok && take(st, &e->v[V_WX], in, x, ib, &xb) == 0;
        if (ok) {
            dnnl_memory_set_data_handle(e->v[V_WDW].mem, dw);
            ok = exec(e, P_BWD_W, st, wargs, 3, dw + e->v[V_WDW].bytes) == 0 &&
                 reorder(st, &e->v[V_WDW], dweight, dw, 1) == 0;
        }
        if (ok && din) {
            char *ddy = e->ddy_same ? dy : rest;
            char *w = rest + (e->ddy_same ? 0 : e->v[V_DDY].bytes), *dx = w + e->v[V_DW].bytes;
            void *ddyb = dyb;
            dnnl_exec_arg_t dargs[4] = {{DNNL_ARG_DIFF_DST, e->v[V_DDY].mem},
                                        {DNNL_ARG_WEIGHTS, e->v[V_DW].mem},
                                        {DNNL_ARG_DIFF_SRC, e->v[V_DDX].mem}};
            ok = (e->ddy_same || take(st, &e->v[V_DDY], dout, ddy, ob, &ddyb) == 0) &&
                 reorder(st, &e->v[V_DW], weight, w, 0) == 0;
            if (ok) {
                dnnl_memory_set_data_handle(e->v[V_DDY].mem, ddyb);
                dnnl_memory_set_data_handle(e->v[V_DDX].mem, ib ? (void *)din : dx);
                ok = exec(e, P_BWD_D, st, dargs, 3, dx + e->v[V_DDX].bytes) == 0 &&
                     (ib || reorder(st, &e->v[V_DDX], din, dx, 1) == 0);
            }
        }
        ok = ok && dnnl_stream_wait(st) == dnnl_success;
        if (ok) {
            if (dbias)
                kern__conv_dbias(dbias, dout, p->n, p->k,
                                 (size_t)op_conv2d_out_h(p) * (size_t)op_conv2d_out_w(p),
                                 ob ? op_conv2d_block_size() : 0);
            return 1;
        }
    }
    return 0;
}

unsigned kern__conv_blocked_io(int bf16, const op_conv2d_params *p, int bias, size_t ws_bytes)
{
    dnnl_stream_t st;
    /* the room of a workspace at any alignment */
    size_t room = ws_bytes > 64 ? ws_bytes - 64 : 0;
    blk_entry *f = usable(bf16, p, bias, room ? (void *)64 : NULL, room, 0, &st);
    blk_entry *b = usable(bf16, p, 0, room ? (void *)64 : NULL, room, 1, &st);
    return f && b ? f->io & b->io : 0;
}

/* The name of md's layout among those oneDNN's convolutions pick. */
static const char *tag_name(const dnnl_memory_desc_t *md)
{
    static const struct {
        dnnl_format_tag_t tag;
        const char *name;
    } tags[] = {{dnnl_abcd, "abcd"},       {dnnl_acdb, "acdb"},       {dnnl_aBcd8b, "aBcd8b"},
                {dnnl_aBcd16b, "aBcd16b"}, {dnnl_aBcd32b, "aBcd32b"}, {dnnl_aBcd4b, "aBcd4b"}};
    for (size_t i = 0; i < sizeof(tags) / sizeof(tags[0]); i++)
        if (has_tag(md, md->data_type, tags[i].tag))
            return tags[i].name;
    return "another layout";
}

unsigned kern__conv_blocked_describe(int bf16, const op_conv2d_params *p, int bias,
                                     size_t ws_bytes, char *out, size_t len)
{
    dnnl_stream_t st;
    dnnl_engine_t eng;
    if (p->n <= 0 || !kern__dnnl_engine(&eng, &st)) {
        snprintf(out, len, "no oneDNN engine");
        return 0;
    }
    blk_entry *e = entry_of(p, bias, bf16, eng);
    if (!e) {
        snprintf(out, len, "oneDNN has no fast kernel for the shape (only its reference or GEMM "
                           "ones)");
        return 0;
    }
    size_t need = e->fwd_bytes > e->bwd_bytes ? e->fwd_bytes : e->bwd_bytes;
    size_t room = ws_bytes > 64 ? ws_bytes - 64 : 0;
    size_t kb = bf16 ? convplan_conv2d_bf16_kept_bytes(p) : 0;
    unsigned r = need <= room ? OP_CONV2D_ON_ONEDNN : 0;
    if (r && e->keeps_x && kb >= e->v[V_FX].bytes)
        r |= OP_CONV2D_KEEPS_INPUT;
    int n = snprintf(out, len, "oneDNN %s, input %s, output %s, weight gradient's input %s",
                     e->impl, tag_name(&e->v[V_FX].md), tag_name(&e->v[V_FY].md),
                     tag_name(&e->v[V_WX].md));
    const char *more = need > room ? NULL
                       : !(e->io & OP_CONV2D_OUT_BLOCKED) ? "; its output not in the groups' "
                                                            "blocked layout: plain between "
                                                            "layers"
                       : !bf16                            ? ""
                       : !e->keeps_x  ? "; the input rounded again for the weight gradient "
                                        "(another layout)"
                       : !kb          ? "; the input rounded again for the weight gradient "
                                        "(its channels not in blocks of 16)"
                       : kb < e->v[V_FX].bytes ? "; the input rounded again for the weight "
                                                 "gradient (larger than planned)"
                                               : "; the input kept as rounded";
    if (n > 0 && (size_t)n < len) {
        if (!more)
            snprintf(out + n, len - (size_t)n,
                     "; a workspace of %zu bytes, below the %zu it needs: float32", room, need);
        else
            snprintf(out + n, len - (size_t)n, "%s", more);
    }
    return r;
}

#else /* !KERNELS_HAVE_DNNL */

unsigned kern__conv_blocked_describe(int bf16, const op_conv2d_params *p, int bias,
                                     size_t ws_bytes, char *out, size_t len)
{
    snprintf(out, len, "built without oneDNN");
    return 0;
}

int kern__conv_blocked_forward(int bf16, float *out, const float *in, const float *weight,
                               const float *bias, const op_conv2d_params *p, void *ws,
                               size_t ws_bytes, void *keep, size_t keep_bytes, unsigned blocked)
{
    return 0;
}

int kern__conv_blocked_backward(int bf16, float *din, float *dweight, float *dbias,
                                const float *dout, const float *in, const float *weight,
                                const op_conv2d_params *p, void *ws, size_t ws_bytes,
                                const void *kept, size_t kept_bytes, unsigned blocked)
{
    return 0;
}

unsigned kern__conv_blocked_io(int bf16, const op_conv2d_params *p, int bias, size_t ws_bytes)
{
    return 0;
}

#endif

/* The blocks of channels of the groups' blocked layout on this processor:
 * 16 with AVX-512, 8 with AVX2, 0 without oneDNN's blocked kernels. */
int op_conv2d_block_size(void)
{
#ifdef KERNELS_HAVE_DNNL
    kernels_isa isa = kernels_isa_level();
    return isa >= KERNELS_ISA_AVX512 ? 16 : isa >= KERNELS_ISA_AVX2 ? 8 : 0;
#else
    return 0;
#endif
}
