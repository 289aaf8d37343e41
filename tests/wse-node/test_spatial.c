/* Spatial partitions in the executor: a model computed as K horizontal
 * stripes of every sample, each by its own executor on its own thread,
 * the stripes exchanging halo rows and totalling their norms' and loss's
 * sums through an in-process transport, trains to the weights of the
 * unpartitioned executor. Every kind of layer whose windows cross a
 * stripe's border is in the model: padded and dilated convolutions, max
 * and average pooling with padding and stride, a transposed convolution
 * that writes across the border and one that does not, bilinear
 * upsampling, batch and group norm, and the BCE + Dice loss (and the
 * Model Zoo's ssce_dice and multilabel_bce). A 3D U-Net split into slabs
 * of its depth's planes does the same with the volumes' layers: padded,
 * strided and dilated 3D convolutions, 3D pooling, transposed 3D
 * convolutions across the border and not, and trilinear upsampling. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "rng.h"
#include "spatial.h"
#include "toml.h"

static const char *unet_text =
    "[model]\ninput_shape = [3, 64, 64]\nloss = \"bce_dice\"\n"
    "[[model.layers]]\nname = \"c1\"\ntype = \"conv2d\"\nfilters = 8\nkernel_size = 3\npadding = 1\n"
    "[[model.layers]]\nname = \"bn1\"\ntype = \"batch_norm\"\n"
    "[[model.layers]]\nname = \"r1\"\ntype = \"relu\"\n"
    "[[model.layers]]\nname = \"p1\"\ntype = \"max_pool2d\"\nkernel_size = 2\n"
    "[[model.layers]]\nname = \"c2\"\ntype = \"conv2d\"\nfilters = 16\nkernel_size = 3\npadding = 1\n"
    "[[model.layers]]\nname = \"gn1\"\ntype = \"group_norm\"\ngroups = 4\n"
    "[[model.layers]]\nname = \"r2\"\ntype = \"relu\"\n"
    "[[model.layers]]\nname = \"p2\"\ntype = \"avg_pool2d\"\nkernel_size = 3\nstride = 1\n"
    "padding = 1\n"
    "[[model.layers]]\nname = \"p3\"\ntype = \"max_pool2d\"\nkernel_size = 3\nstride = 2\n"
    "padding = 1\n"
    "[[model.layers]]\nname = \"c3\"\ntype = \"conv2d\"\nfilters = 16\nkernel_size = 3\n"
    "padding = 2\ndilation = 2\n"
    "[[model.layers]]\nname = \"bn2\"\ntype = \"batch_norm\"\n"
    "[[model.layers]]\nname = \"r3\"\ntype = \"relu\"\n"
    "[[model.layers]]\nname = \"t1\"\ntype = \"conv_transpose2d\"\nfilters = 16\nkernel_size = 3\n"
    "padding = 1\n"
    "[[model.layers]]\nname = \"u1\"\ntype = \"upsample\"\nscale_factor = 2\nmode = \"bilinear\"\n"
    "[[model.layers]]\nname = \"cat1\"\ntype = \"concat\"\ninputs = [\"u1\", \"r2\"]\n"
    "[[model.layers]]\nname = \"c4\"\ntype = \"conv2d\"\nfilters = 8\nkernel_size = 3\npadding = 1\n"
    "[[model.layers]]\nname = \"t2\"\ntype = \"conv_transpose2d\"\nfilters = 8\nkernel_size = 2\n"
    "stride = 2\n"
    "[[model.layers]]\nname = \"cat2\"\ntype = \"concat\"\ninputs = [\"t2\", \"r1\"]\n"
    "[[model.layers]]\nname = \"c5\"\ntype = \"conv2d\"\nfilters = 1\nkernel_size = 1\n";

/* A volume's model: C x D x H x W of 2 x 32 x 8 x 8 (a downsampling of 8
 * along the depth: 4 slabs of 8 planes at most) */
static const char *vol_text =
    "[model]\ninput_shape = [2, 32, 8, 8]\nloss = \"bce_dice\"\n"
    "[[model.layers]]\nname = \"c1\"\ntype = \"conv3d\"\nfilters = 4\nkernel_size = 3\npadding = 1\n"
    "[[model.layers]]\nname = \"bn1\"\ntype = \"batch_norm\"\n"
    "[[model.layers]]\nname = \"r1\"\ntype = \"relu\"\n"
    "[[model.layers]]\nname = \"p1\"\ntype = \"max_pool3d\"\nkernel_size = 2\n"
    "[[model.layers]]\nname = \"c2\"\ntype = \"conv3d\"\nfilters = 8\nkernel_size = 3\npadding = 1\n"
    "[[model.layers]]\nname = \"gn1\"\ntype = \"group_norm\"\ngroups = 4\n"
    "[[model.layers]]\nname = \"r2\"\ntype = \"relu\"\n"
    "[[model.layers]]\nname = \"p2\"\ntype = \"avg_pool3d\"\nkernel_size = 3\nstride = 1\n"
    "padding = 1\n"
    "[[model.layers]]\nname = \"p3\"\ntype = \"max_pool3d\"\nkernel_size = 3\nstride = 1\n"
    "padding = 1\n"
    "[[model.layers]]\nname = \"s1\"\ntype = \"conv3d\"\nfilters = 8\nkernel_size = 3\n"
    "stride = 2\npadding = 1\n"
    "[[model.layers]]\nname = \"c3\"\ntype = \"conv3d\"\nfilters = 8\nkernel_size = 3\n"
    "padding = 2\ndilation = 2\n"
    "[[model.layers]]\nname = \"r3\"\ntype = \"relu\"\n"
    "[[model.layers]]\nname = \"s2\"\ntype = \"conv3d\"\nfilters = 8\nkernel_size = 3\n"
    "stride = 2\npadding = 1\n"
    "[[model.layers]]\nname = \"t0\"\ntype = \"conv_transpose3d\"\nfilters = 8\nkernel_size = 2\n"
    "stride = 2\n"
    "[[model.layers]]\nname = \"t1\"\ntype = \"conv_transpose3d\"\nfilters = 8\nkernel_size = 3\n"
    "padding = 1\n"
    "[[model.layers]]\nname = \"u1\"\ntype = \"upsample\"\nscale_factor = 2\nmode = \"trilinear\"\n"
    "[[model.layers]]\nname = \"cat1\"\ntype = \"concat\"\ninputs = [\"u1\", \"r2\"]\n"
    "[[model.layers]]\nname = \"c4\"\ntype = \"conv3d\"\nfilters = 4\nkernel_size = 3\npadding = 1\n"
    "[[model.layers]]\nname = \"t2\"\ntype = \"conv_transpose3d\"\nfilters = 4\nkernel_size = 2\n"
    "stride = 2\n"
    "[[model.layers]]\nname = \"cat2\"\ntype = \"concat\"\ninputs = [\"t2\", \"r1\"]\n"
    "[[model.layers]]\nname = \"c5\"\ntype = \"conv3d\"\nfilters = 1\nkernel_size = 1\n";

static toml_value *parse(const char *text, const char *from, const char *to)
{
    static char buf[1 << 14];
    const char *at = from ? strstr(text, from) : NULL;
    if (at)
        snprintf(buf, sizeof(buf), "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    else
        snprintf(buf, sizeof(buf), "%s", text);
    char err[256];
    toml_value *root = toml_parse(buf, strlen(buf), "spatial.toml", err, sizeof(err));
    ck_assert_msg(root != NULL, "%s", err);
    return root;
}

/* ---- an in-process transport: mailboxes between neighbours, sums in
 * stripe order ---- */

enum { MAXP = 8, DEPTH = 4 };

typedef struct msg {
    uint32_t tag;
    size_t n;
    float *data;
} msg;

typedef struct bus {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int parts;
    msg box[MAXP][2][DEPTH]; /* [receiver][0: from above, 1: from below] */
    int count[MAXP][2];
    /* sums */
    double *vec[MAXP];
    size_t len;
    int arrived;
    uint64_t gen;
    double *result[2];
    uint64_t sums, exchanges;
} bus;

typedef struct stripe_ctx {
    bus *b;
    int part;
} stripe_ctx;

static void post(bus *b, int to, int dir, uint32_t tag, const float *data, size_t n)
{
    pthread_mutex_lock(&b->mu);
    ck_assert_int_lt(b->count[to][dir], DEPTH);
    msg *m = &b->box[to][dir][b->count[to][dir]++];
    m->tag = tag;
    m->n = n;
    m->data = malloc(n * sizeof(float) + 1);
    memcpy(m->data, data, n * sizeof(float));
    b->exchanges++;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

static void take(bus *b, int me, int dir, uint32_t tag, float *into, size_t n)
{
    pthread_mutex_lock(&b->mu);
    while (b->count[me][dir] == 0)
        pthread_cond_wait(&b->cv, &b->mu);
    msg m = b->box[me][dir][0];
    memmove(&b->box[me][dir][0], &b->box[me][dir][1], (DEPTH - 1) * sizeof(msg));
    b->count[me][dir]--;
    pthread_mutex_unlock(&b->mu);
    ck_assert_msg(m.tag == tag && m.n == n, "stripe %d: tag %u of %zu floats, expected %u of %zu",
                  me, m.tag, m.n, tag, n);
    memcpy(into, m.data, n * sizeof(float));
    free(m.data);
}

static int bus_begin(void *ctx, uint32_t tag, const exec_halo *h)
{
    stripe_ctx *s = ctx;
    if (h->n_up)
        post(s->b, s->part - 1, 1, tag, h->up, h->n_up);
    if (h->n_down)
        post(s->b, s->part + 1, 0, tag, h->down, h->n_down);
    return 0;
}

static int bus_end(void *ctx, uint32_t tag, const exec_halo *h)
{
    stripe_ctx *s = ctx;
    if (h->n_from_up)
        take(s->b, s->part, 0, tag, h->from_up, h->n_from_up);
    if (h->n_from_down)
        take(s->b, s->part, 1, tag, h->from_down, h->n_from_down);
    return 0;
}

static int bus_sum(void *ctx, uint32_t tag, bool batch, double *v, size_t count)
{
    (void)tag;
    (void)batch;
    stripe_ctx *s = ctx;
    bus *b = s->b;
    pthread_mutex_lock(&b->mu);
    uint64_t gen = b->gen;
    b->vec[s->part] = v;
    b->len = count;
    if (++b->arrived == b->parts) {
        double *r = b->result[gen % 2] = realloc(b->result[gen % 2], count * sizeof(double) + 1);
        for (size_t i = 0; i < count; i++) {
            r[i] = 0;
            for (int p = 0; p < b->parts; p++)
                r[i] += b->vec[p][i];
        }
        b->arrived = 0;
        b->gen++;
        b->sums++;
        pthread_cond_broadcast(&b->cv);
    }
    while (b->gen == gen)
        pthread_cond_wait(&b->cv, &b->mu);
    memcpy(v, b->result[gen % 2], count * sizeof(double));
    pthread_mutex_unlock(&b->mu);
    return 0;
}

/* ---- a network: weights shared by every stripe, gradients each its own ---- */

static float **init_weights(const model *m)
{
    float **w = calloc((size_t)m->ntensors, sizeof(float *));
    for (int i = 0; i < m->ntensors; i++) {
        const model_tensor *mt = &m->tensors[i];
        const model_layer *l = &m->layers[mt->layer];
        const char *dot = strrchr(mt->name, '.');
        bool norm = l->type == LAYER_BATCH_NORM || l->type == LAYER_GROUP_NORM;
        w[i] = malloc(mt->elems * sizeof(float));
        bool t = l->type == LAYER_CONV_TRANSPOSE2D || l->type == LAYER_CONV_TRANSPOSE3D;
        double fan_in = (double)mt->elems / (double)mt->dims[t];
        for (uint64_t k = 0; k < mt->elems; k++) {
            double u = 2.0 * rng_uniform(7, (uint64_t)i, k) - 1.0;
            if (strcmp(dot, ".running_var") == 0)
                w[i][k] = 1.0f;
            else if (strcmp(dot, ".running_mean") == 0)
                w[i][k] = 0.0f;
            else if (norm) /* scale near 1, shift near 0: both matter */
                w[i][k] = (float)((strcmp(dot, ".weight") == 0 ? 1.0 : 0.0) + 0.2 * u);
            else
                w[i][k] = (float)(u * sqrt(3.0 / fan_in));
        }
    }
    return w;
}

static float **zeros(const model *m)
{
    float **g = calloc((size_t)m->ntensors, sizeof(float *));
    for (int i = 0; i < m->ntensors; i++)
        g[i] = calloc(m->tensors[i].elems, sizeof(float));
    return g;
}

static void free_all(const model *m, float **t)
{
    for (int i = 0; i < m->ntensors; i++)
        free(t[i]);
    free(t);
}

typedef struct stripe {
    exec e;
    stripe_ctx ctx;
    const model *m;
    float *x;      /* this stripe's rows of the batch */
    uint8_t *y;
    int64_t step;
    double loss;
} stripe;

static double run_step(exec *e, const model *m, const float *x, const void *y, int64_t step,
                       float scale)
{
    for (int i = 0; i < m->nlayers; i++)
        exec_forward(e, i, x, step, true);
    double loss = exec_loss(e, x, y, scale);
    for (int i = m->nlayers - 1; i >= 0; i--)
        exec_backward(e, i, x, step);
    return loss;
}

static void *stripe_main(void *arg)
{
    stripe *s = arg;
    s->loss = run_step(&s->e, s->m, s->x, s->y, s->step, 1.0f / (float)s->e.n);
    return NULL;
}

/* SGD on the summed gradients; running statistics arrive already
 * averaged (each stripe's times its share). */
static void sgd(const model *m, float **w, float **const *g, int parts)
{
    for (int i = 0; i < m->ntensors; i++)
        for (uint64_t k = 0; k < m->tensors[i].elems; k++) {
            double sum = 0;
            for (int p = 0; p < parts; p++)
                sum += g[p][i][k];
            w[i][k] = m->tensors[i].trainable ? (float)(w[i][k] - 0.05 * sum) : (float)sum;
        }
}

/* The batch of step `step`: inputs in [0, 1), labels a disc that moves
 * (class 1), and with 3 classes or more a band at the left (class 2). */
static void make_batch(const model *m, int n, int64_t step, float *x, uint8_t *y)
{
    /* a volume's planes as an image's rows */
    int c = (int)m->input.d[0], h = (int)m->input.d[1], w = (int)spatial_row_elems(&m->input);
    int classes = (int)m->layers[m->nlayers - 1].out.d[0];
    for (int s = 0; s < n; s++) {
        double cy = h * (0.3 + 0.1 * s + 0.05 * step), cx = w * 0.5, r = h * 0.25;
        for (int i = 0; i < h; i++)
            for (int j = 0; j < w; j++) {
                bool in = (i - cy) * (i - cy) + (j - cx) * (j - cx) < r * r;
                y[((size_t)s * h + i) * w + j] = classes > 2 && j < w / 4 ? 2 : in;
                for (int k = 0; k < c; k++)
                    x[(((size_t)s * c + k) * h + i) * w + j] =
                        (float)(0.6 * rng_uniform(5, (uint64_t)step,
                                                  (((uint64_t)s * c + k) * h + i) * w + j) +
                                (in ? 0.4 * (k + 1) / c : 0.0));
            }
    }
}

/* Trains the model whole and in `parts` stripes for `steps` steps; the
 * weights and every loss agree within tol (relative to each tensor's
 * size). */
static void train_striped(const char *text, int parts, int n, int steps, double tol)
{
    char err[512];
    toml_value *root = parse(text, NULL, NULL);
    model *full = model_compile_document(root, err, sizeof(err));
    ck_assert_msg(full != NULL, "%s", err);
    full->labels_u8 = true;
    const toml_value *mt = toml_table_get(root, "model");
    model *sm[MAXP];
    spatial_plan sp[MAXP];
    for (int p = 0; p < parts; p++)
        ck_assert_msg(spatial_compile(mt, full, parts, p, NULL, &sm[p], &sp[p], err, sizeof(err)) == 0,
                      "%s", err);
    int kinds[4] = {0};
    for (int i = 0; i < full->nlayers; i++)
        kinds[sp[0].layers[i].kind]++;
    ck_assert_msg(kinds[SPATIAL_GATHER] >= 5, "gather %d", kinds[SPATIAL_GATHER]);

    float **w = init_weights(full), **g = zeros(full);
    float **sw = init_weights(full); /* the same values: one copy the stripes share */
    exec whole;
    ck_assert_int_eq(exec_init(&whole, full, n, 1, w, g, err, sizeof(err)), 0);
    whole.seed = 11;
    bus b = {.parts = parts};
    pthread_mutex_init(&b.mu, NULL);
    pthread_cond_init(&b.cv, NULL);
    stripe st[MAXP];
    float **sg[MAXP];
    int c = (int)full->input.d[0], H = (int)full->input.d[1];
    int W = (int)spatial_row_elems(&full->input);
    for (int p = 0; p < parts; p++) {
        int h = (int)sp[p].rows;
        sg[p] = zeros(full);
        ck_assert_int_eq(exec_init(&st[p].e, sm[p], n, 1, sw, sg[p], err, sizeof(err)), 0);
        st[p].ctx = (stripe_ctx){&b, p};
        exec_parts ep = {.part = p, .parts = parts, .sp = &sp[p], .exchange_begin = bus_begin,
                         .exchange_end = bus_end, .sum = bus_sum, .ctx = &st[p].ctx};
        ck_assert_msg(exec_set_parts(&st[p].e, &ep, err, sizeof(err)) == 0, "%s", err);
        st[p].e.seed = 11;
        st[p].e.replica_share = 1.0f / (float)parts;
        st[p].m = sm[p];
        st[p].x = malloc((size_t)n * c * h * W * sizeof(float));
        sm[p]->labels_u8 = true;
        ck_assert(sm[p]->include_background == full->include_background);
        st[p].y = malloc((size_t)n * h * W);
    }
    float *x = malloc((size_t)n * c * H * W * sizeof(float));
    uint8_t *y = malloc((size_t)n * H * W);
    for (int64_t step = 0; step < steps; step++) {
        make_batch(full, n, step, x, y);
        for (int p = 0; p < parts; p++)
            for (int s = 0; s < n; s++) {
                size_t h = (size_t)sp[p].rows, r0 = (size_t)sp[p].row0;
                for (int k = 0; k < c; k++)
                    memcpy(st[p].x + (((size_t)s * c + k) * h) * W,
                           x + (((size_t)s * c + k) * H + r0) * W,
                           (size_t)h * W * sizeof(float));
                memcpy(st[p].y + (size_t)s * h * W, y + ((size_t)s * H + r0) * W, h * W);
            }
        double ref = run_step(&whole, full, x, y, step, 1.0f / (float)n);
        for (int i = 0; i < full->ntensors; i++)
            for (uint64_t k = 0; k < full->tensors[i].elems; k++)
                w[i][k] = full->tensors[i].trainable ? w[i][k] - 0.05f * g[i][k] : g[i][k];
        pthread_t th[MAXP];
        for (int p = 0; p < parts; p++) {
            st[p].step = step;
            ck_assert_int_eq(pthread_create(&th[p], NULL, stripe_main, &st[p]), 0);
        }
        double loss = 0;
        for (int p = 0; p < parts; p++) {
            pthread_join(th[p], NULL);
            ck_assert_int_eq(exec_parts_error(&st[p].e), 0);
            loss += st[p].loss;
        }
        sgd(full, sw, sg, parts);
        ck_assert_msg(fabs(loss - ref) <= tol * fabs(ref), "step %lld: loss %.9g in %d stripes, "
                      "%.9g whole", (long long)step, loss, parts, ref);
    }
    double worst = 0;
    const char *where = "";
    for (int i = 0; i < full->ntensors; i++) {
        double d = 0, nn = 0;
        for (uint64_t k = 0; k < full->tensors[i].elems; k++) {
            d += pow((double)sw[i][k] - w[i][k], 2);
            nn += pow(w[i][k], 2);
        }
        double rel = sqrt(d) / (sqrt(nn) + 1e-12);
        if (rel > worst) {
            worst = rel;
            where = full->tensors[i].name;
        }
    }
    printf("%d %s of %lld to %lld of %d rows: after %d steps the weights within %.2g "
           "(relative, worst %s) of the whole model's; %llu exchanges, %llu sums\n",
           parts, full->input.ndim == 4 ? "slabs" : "stripes", (long long)sp[parts - 1].rows,
           (long long)sp[0].rows, H, steps, worst, where,
           (unsigned long long)b.exchanges, (unsigned long long)b.sums);
    ck_assert_msg(worst <= tol, "%d stripes: %s differs by %g", parts, where, worst);
    for (int p = 0; p < parts; p++) {
        exec_deinit(&st[p].e);
        free_all(full, sg[p]);
        free(st[p].x);
        free(st[p].y);
    }
    exec_deinit(&whole);
    free(b.result[0]);
    free(b.result[1]);
    free(x);
    free(y);
    free_all(full, w);
    free_all(full, g);
    free_all(full, sw);
    for (int p = 0; p < parts; p++) {
        spatial_plan_free(&sp[p]);
        model_free(sm[p]);
    }
    model_free(full);
    toml_free(root);
}

/* examples/unet.toml: four pooling levels, 2 rows a stripe at the coarsest */
static char *example_unet(const char *shape)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/examples/unet.toml", SOURCE_DIR);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s", path);
    static char text[1 << 16];
    size_t len = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[len] = '\0';
    char *m = strstr(text, "[model]");
    ck_assert(m != NULL);
    char *out = malloc(1 << 16);
    const char *at = strstr(m, "input_shape = [3, 512, 512]");
    ck_assert(at != NULL);
    snprintf(out, 1 << 16, "%.*s%s%s", (int)(at - m), m, shape, at + strlen("input_shape = [3, 512, 512]"));
    return out;
}

START_TEST(example_unet_in_four_stripes)
{
    char *text = example_unet("input_shape = [3, 128, 128]");
    train_striped(text, 4, 4, 3, 1e-4);
    free(text);
}
END_TEST

/* 72 rows in slices of 4 (the model's downsampling) make 4 stripes of 20,
 * 20, 16 and 16 rows */
START_TEST(unequal_stripes_train_as_the_whole)
{
    char *text = malloc(1 << 14);
    const char *at = strstr(unet_text, "[3, 64, 64]");
    snprintf(text, 1 << 14, "%.*s[3, 72, 64]%s", (int)(at - unet_text), unet_text, at + 11);
    train_striped(text, 4, 2, 5, 1e-4);
    free(text);
}
END_TEST

START_TEST(two_stripes_train_as_the_whole)
{
    train_striped(unet_text, 2, 2, 5, 1e-4);
}
END_TEST

START_TEST(four_stripes_train_as_the_whole)
{
    train_striped(unet_text, 4, 2, 5, 1e-4);
}
END_TEST

/* The test model with one of the Model Zoo's U-Net losses (and what
 * follows it in [model]): 3 classes out */
static char *with_loss(const char *loss)
{
    char *text = malloc(1 << 14);
    const char *at = strstr(unet_text, "\"bce_dice\""), *f = strstr(unet_text, "filters = 1\n");
    ck_assert(at && f && at < f);
    snprintf(text, 1 << 14, "%.*s%s%.*sfilters = 3\n%s", (int)(at - unet_text), unet_text,
             loss, (int)(f - at - 10), at + 10, f + 12);
    return text;
}

START_TEST(ssce_dice_in_stripes_as_the_whole)
{
    char *text = with_loss("\"ssce_dice\"");
    train_striped(text, 3, 2, 4, 1e-4);
    free(text);
    text = with_loss("\"ssce_dice\"\ninclude_background = true");
    train_striped(text, 2, 3, 3, 1e-4);
    free(text);
}
END_TEST

START_TEST(multilabel_bce_in_stripes_as_the_whole)
{
    char *text = with_loss("\"multilabel_bce\"");
    train_striped(text, 3, 2, 4, 1e-4);
    free(text);
}
END_TEST

/* 32 planes in slices of 8: 2 slabs of 16, 4 of 8, 3 of 16, 8 and 8 */
START_TEST(slabs_train_as_the_whole_volume)
{
    train_striped(vol_text, 2, 2, 4, 1e-4);
    train_striped(vol_text, 4, 1, 3, 1e-4);
    train_striped(vol_text, 3, 2, 3, 1e-4);
}
END_TEST

START_TEST(slabs_with_ssce_dice_as_the_whole_volume)
{
    char *text = malloc(1 << 14);
    const char *at = strstr(vol_text, "\"bce_dice\""), *f = strstr(vol_text, "filters = 1\n");
    ck_assert(at && f && at < f);
    snprintf(text, 1 << 14, "%.*s\"ssce_dice\"%.*sfilters = 3\n%s", (int)(at - vol_text),
             vol_text, (int)(f - at - 10), at + 10, f + 12);
    train_striped(text, 2, 2, 3, 1e-4);
    free(text);
}
END_TEST

static Suite *spatial_suite(void)
{
    Suite *s = suite_create("spatial");
    TCase *t = tcase_create("train");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, two_stripes_train_as_the_whole);
    tcase_add_test(t, four_stripes_train_as_the_whole);
    tcase_add_test(t, example_unet_in_four_stripes);
    tcase_add_test(t, unequal_stripes_train_as_the_whole);
    tcase_add_test(t, ssce_dice_in_stripes_as_the_whole);
    tcase_add_test(t, multilabel_bce_in_stripes_as_the_whole);
    tcase_add_test(t, slabs_train_as_the_whole_volume);
    tcase_add_test(t, slabs_with_ssce_dice_as_the_whole_volume);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    /* The kernels' oneDNN state (its stream, the table of 3-D convolution
     * primitives) belongs to a process's one compute thread; here every
     * stripe's executor runs on its own thread of one process, so the
     * convolutions take the lowering (vol2col, im2col), which keeps no state.
     * The slabs' oneDNN path runs in wse-node processes in the cluster test
     * (tests/cluster/volume.sh). */
    setenv("APPLIANCE_CONV_PATH", "im2col", 1);
    SRunner *r = srunner_create(spatial_suite());
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
