/* Spatial partitions: where each layer's windows cross a stripe's border. */
#include "spatial.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The model's downsampling: the least multiple of every layer's input
 * rows per output row, so that rows in slices of it split every layer into
 * whole rows. 0 when some layer's rows are not a whole fraction (or
 * multiple) of the input's. */
static int64_t spatial_downsampling(const model *m)
{
    int64_t d = 1, H = m->input.d[1];
    for (int i = 0; i < m->nlayers; i++) {
        const model_shape *o = &m->layers[i].out;
        if (o->ndim < 3 || o->d[1] <= 0)
            continue;
        if (o->d[1] >= H ? o->d[1] % H != 0 : H % o->d[1] != 0)
            return 0;
        if (o->d[1] < H) {
            int64_t r = H / o->d[1], a = d, b = r;
            while (b) { /* d = lcm(d, r) */
                int64_t t = a % b;
                a = b;
                b = t;
            }
            d = d / a * r;
        }
    }
    return d;
}

int spatial_stripe_rows(const model *full, int parts, int part, int64_t *row0, int64_t *rows,
                        char *err, size_t errlen)
{
    const model_shape *in = &full->input;
    if (parts < 1 || part < 0 || part >= parts) {
        snprintf(err, errlen, "stripe %d of %d", part, parts);
        return -EINVAL;
    }
    if (in->ndim != 3 && in->ndim != 4) {
        snprintf(err, errlen, "spatial partitions split images and volumes: the model's input "
                 "is %lld features, not channels x height x width (or x depth x ...)",
                 (long long)in->d[0]);
        return -EINVAL;
    }
    const char *rw = spatial_rows_word(in), *pw = in->ndim == 4 ? "slabs" : "stripes";
    int64_t H = in->d[1], d = spatial_downsampling(full);
    if (d == 0 || H % d != 0) {
        snprintf(err, errlen, "the input's %lld %s do not split into whole %s at every "
                 "layer (a layer's %s are not a whole fraction of them)", (long long)H, rw, rw,
                 rw);
        return -EINVAL;
    }
    int64_t units = H / d;
    if (units < parts) {
        snprintf(err, errlen, "the input's %lld %s make %lld slice(s) of %lld %s, the model's "
                 "downsampling: at most %lld %s, not %d", (long long)H, rw, (long long)units,
                 (long long)d, rw, (long long)units, pw, parts);
        return -EINVAL;
    }
    /* slices of d rows, as even as they go: the first stripes one more */
    int64_t base = units / parts, extra = units % parts;
    *rows = (base + (part < extra ? 1 : 0)) * d;
    *row0 = d * (part * base + (part < extra ? part : extra));
    return 0;
}

/* The halo of layer l of the stripe model, whose input has h rows and
 * output o rows. Returns 0 or -EINVAL with a message. */
static int spatial_layer_of(const model_layer *l, spatial_layer *s, char *err, size_t errlen)
{
    int64_t h = l->in.d[1], o = l->out.d[1];
    memset(s, 0, sizeof(*s));
    switch (l->type) {
    case LAYER_DENSE:
    case LAYER_FLATTEN:
        snprintf(err, errlen, "layer \"%s\" (%s) needs whole samples; spatial partitions split "
                 "convolutional models, whose layers keep the image's rows", l->name,
                 layer_type_name(l->type));
        return -EINVAL;
    case LAYER_CONV2D:
    case LAYER_MAX_POOL2D:
    case LAYER_AVG_POOL2D:
    case LAYER_CONV3D:
    case LAYER_MAX_POOL3D:
    case LAYER_AVG_POOL3D: {
        bool conv = l->type == LAYER_CONV2D || l->type == LAYER_CONV3D;
        int dil = conv ? l->dilation[0] : 1;
        int64_t ke = (int64_t)dil * (l->kernel[0] - 1) + 1, s_ = l->stride[0], p = l->padding[0];
        if (o * s_ != h) {
            snprintf(err, errlen, "layer \"%s\" (%s, stride %lld): a stripe's %lld input rows "
                     "make %lld output rows, not %lld / %lld", l->name, layer_type_name(l->type),
                     (long long)s_, (long long)h, (long long)o, (long long)h, (long long)s_);
            return -EINVAL;
        }
        s->top = (int)p;
        s->bottom = (int)((o - 1) * s_ - p + ke - h);
        s->kind = s->top > 0 || s->bottom > 0 ? SPATIAL_GATHER : SPATIAL_LOCAL;
        /* (a volume's convolutions run on a copy with the halo planes) */
        s->in_place = s->kind == SPATIAL_GATHER && l->type == LAYER_CONV2D && s_ == 1 &&
                      l->stride[1] == 1 && s->bottom <= p;
        break;
    }
    case LAYER_CONV_TRANSPOSE2D:
    case LAYER_CONV_TRANSPOSE3D: {
        int64_t ke = (int64_t)l->dilation[0] * (l->kernel[0] - 1) + 1, s_ = l->stride[0],
                p = l->padding[0];
        if (o != h * s_) {
            snprintf(err, errlen, "layer \"%s\" (%s, stride %lld): a stripe's "
                     "%lld input rows make %lld output rows, not %lld x %lld", l->name,
                     layer_type_name(l->type), (long long)s_, (long long)h, (long long)o,
                     (long long)h, (long long)s_);
            return -EINVAL;
        }
        s->top = (int)p;
        s->bottom = (int)((h - 1) * s_ + ke - p - o);
        if (s->top == 0 && s->bottom <= 0)
            break;
        if (l->output_padding[0] != 0) {
            snprintf(err, errlen, "layer \"%s\" (%s): output_padding along the "
                     "rows with a window that crosses stripes is not supported in spatial "
                     "partitions", l->name, layer_type_name(l->type));
            return -EINVAL;
        }
        if (s->bottom < 0)
            s->bottom = 0;
        s->kind = SPATIAL_SCATTER;
        break;
    }
    case LAYER_UPSAMPLE:
        if ((l->mode == UPSAMPLE_BILINEAR || l->mode == UPSAMPLE_TRILINEAR) && l->scale > 1) {
            s->kind = SPATIAL_BILINEAR;
            s->top = s->bottom = 1;
        }
        break;
    default:
        break;
    }
    int64_t reach = s->top > s->bottom ? s->top : s->bottom;
    int64_t rows = s->kind == SPATIAL_SCATTER ? o : h;
    if (s->kind != SPATIAL_LOCAL && reach > rows) {
        bool vol = l->in.ndim == 4;
        snprintf(err, errlen, "layer \"%s\" (%s) reaches %lld %s beyond its %s, which has "
                 "only %lld %s there: use fewer %s or a larger %s", l->name,
                 layer_type_name(l->type), (long long)reach, vol ? "planes" : "rows",
                 vol ? "slab" : "stripe", (long long)rows, vol ? "planes" : "rows",
                 vol ? "slabs" : "stripes", vol ? "volume" : "image");
        return -EINVAL;
    }
    return 0;
}

int spatial_plan_init(spatial_plan *sp, const model *full, const model *stripe, int parts,
                      int part, char *err, size_t errlen)
{
    memset(sp, 0, sizeof(*sp));
    if (full->nlayers != stripe->nlayers || (full->input.ndim != 3 && full->input.ndim != 4)) {
        snprintf(err, errlen, "the stripe's model is not the model's");
        return -EINVAL;
    }
    sp->parts = parts;
    sp->part = part;
    sp->full_h = full->input.d[1];
    sp->rows = stripe->input.d[1];
    sp->nlayers = full->nlayers;
    if (!(sp->layers = calloc((size_t)full->nlayers, sizeof(*sp->layers)))) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    if (parts <= 1)
        return 0;
    int64_t row0, rows;
    if (spatial_stripe_rows(full, parts, part, &row0, &rows, err, errlen) < 0)
        goto bad;
    if (rows != sp->rows) {
        snprintf(err, errlen, "stripe %d has %lld rows, its model %lld", part, (long long)rows,
                 (long long)sp->rows);
        goto bad;
    }
    sp->row0 = row0;
    for (int i = 0; i < full->nlayers; i++) {
        const model_layer *f = &full->layers[i], *l = &stripe->layers[i];
        if (f->out.ndim >= 3 &&
            (l->out.d[1] * sp->full_h != f->out.d[1] * sp->rows ||
             spatial_row_elems(&l->out) != spatial_row_elems(&f->out))) {
            snprintf(err, errlen, "layer \"%s\": a stripe of %lld of the input's %lld rows makes "
                     "%lld of its %lld output rows", f->name, (long long)sp->rows,
                     (long long)sp->full_h, (long long)l->out.d[1], (long long)f->out.d[1]);
            goto bad;
        }
        spatial_layer *s = &sp->layers[i];
        if (spatial_layer_of(l, s, err, errlen) < 0) {
            char why[384];
            snprintf(why, sizeof(why), "%s", err);
            snprintf(err, errlen, "%s:%d:%d: %s", full->source ? full->source : "model",
                     f->pos.line, f->pos.col, why);
            goto bad;
        }
        if (s->kind == SPATIAL_LOCAL)
            continue;
        int bottom = s->bottom > 0 ? s->bottom : 0;
        uint64_t ext = 0;
        if (s->kind == SPATIAL_GATHER) {
            ext = s->in_place ? 0 : (uint64_t)l->in.d[0] * (uint64_t)(l->in.d[1] + s->top + bottom) *
                                        (uint64_t)spatial_row_elems(&l->in);
            sp->kept_elems += (uint64_t)l->in.d[0] * (uint64_t)(s->top + bottom) *
                              (uint64_t)spatial_row_elems(&l->in);
        } else if (s->kind == SPATIAL_SCATTER) {
            ext = (uint64_t)l->out.d[0] * (uint64_t)(l->out.d[1] + s->top + bottom) *
                  (uint64_t)spatial_row_elems(&l->out);
        } else { /* bilinear: the rows above and below, kept, and their gradients */
            sp->kept_elems += 2 * (uint64_t)l->in.d[0] * (uint64_t)spatial_row_elems(&l->in);
            ext = 2 * (uint64_t)l->in.d[0] * (uint64_t)spatial_row_elems(&l->in);
        }
        uint64_t msg = (uint64_t)(s->kind == SPATIAL_SCATTER ? l->out.d[0] : l->in.d[0]) *
                       (uint64_t)(s->kind == SPATIAL_BILINEAR ? 1 : (s->top > bottom ? s->top
                                                                                      : bottom)) *
                       (uint64_t)spatial_row_elems(s->kind == SPATIAL_SCATTER ? &l->out : &l->in);
        if (msg > sp->msg_elems)
            sp->msg_elems = msg;
        /* the rows in flight, sent and received, share the same buffers */
        uint64_t flight = 2 * (uint64_t)(s->kind == SPATIAL_SCATTER ? l->out.d[0] : l->in.d[0]) *
                          (uint64_t)(s->kind == SPATIAL_BILINEAR ? 2 : s->top + bottom) *
                          (uint64_t)spatial_row_elems(s->kind == SPATIAL_SCATTER ? &l->out : &l->in);
        if (flight > ext)
            ext = flight;
        if (ext > sp->halo_elems)
            sp->halo_elems = ext;
    }
    for (int i = 0; i < full->nlayers; i++) {
        const model_layer *l = &stripe->layers[i];
        uint64_t r = 0;
        if (l->type == LAYER_BATCH_NORM)
            r = 2 * (uint64_t)l->in.d[0];
        else if (l->type == LAYER_GROUP_NORM)
            r = 2 * (uint64_t)l->groups;
        if (r > sp->red_doubles)
            sp->red_doubles = r;
    }
    if (sp->red_doubles < 2)
        sp->red_doubles = 2; /* the Dice loss: two sums per sample */
    return 0;
bad:
    spatial_plan_free(sp);
    return -EINVAL;
}

void spatial_plan_free(spatial_plan *sp)
{
    free(sp->layers);
    memset(sp, 0, sizeof(*sp));
}

uint64_t spatial_extra_bytes(const spatial_plan *sp, int n)
{
    if (sp->parts <= 1)
        return 0;
    return ((2 * sp->halo_elems + sp->kept_elems) * (uint64_t)n) * sizeof(float) +
           (sp->red_doubles * (uint64_t)n + 1) * sizeof(double);
}

int spatial_compile(const toml_value *model_table, const model *full, int parts, int part,
                    const model_options *plan, model **stripe, spatial_plan *sp, char *err,
                    size_t errlen)
{
    *stripe = NULL;
    memset(sp, 0, sizeof(*sp));
    int64_t row0, rows;
    char why[384];
    int rc = spatial_stripe_rows(full, parts, part, &row0, &rows, why, sizeof(why));
    if (rc < 0) {
        snprintf(err, errlen, "%s: runconfig.spatial_partitions = %d: %s",
                 full->source ? full->source : "model", parts, why);
        return rc;
    }
    model_shape sh = full->input;
    sh.d[1] = rows;
    model_options o = plan ? *plan : (model_options){0};
    o.input = &sh;
    model *m = model_recompile(model_table, full, &o, err, errlen);
    if (!m)
        return -EINVAL;
    if ((rc = spatial_plan_init(sp, full, m, parts, part, err, errlen)) < 0) {
        model_free(m);
        return rc;
    }
    *stripe = m;
    return 0;
}
