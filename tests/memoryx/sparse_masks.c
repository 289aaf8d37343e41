/* Drives memoryx's update (update.c, mxsparse.c) through the steps of one
 * sparsity type and dumps, for each step, what the mask rule saw and what
 * it chose, for tests/memoryx/sparse_ref.py to hold against its own numpy
 * version of the rule:
 *   sparse_masks TYPE DIR
 * TYPE is static (its tensor compact in memoryx: its kept elements alone,
 * dumped in their dense form), static_dense (the same with dense streams,
 * so held dense with its byte mask), gmp, set or rigl, static_fanin
 * (static with init_scale "fan_in"), or rigl16: RigL with bfloat16 on the wire
 * (the gradient kept in bfloat16, the weights' bfloat16 twin, which must
 * be zero where pruned), or gmp2: GMP with levels per pattern, fc1.weight
 * and fc2.weight each on its own level schedule (PlanTensor.sparsity_level)
 * and the section's a third that neither follows. For fc1.weight DIR gets
 * meta.txt (and for fc2.weight, in gmp2, DIR/t2 the same files); w0.f32 (the weights
 * as made), m0.u8 (the first mask) and wi.f32 (the weights with it); and for each step s from 1:
 * pre<s>.f32 (the weights after the optimizer, before any mask change: the
 * same optimizer applied here to a copy, with the masked gradient),
 * g<s>.f32 (the dense gradient), m<s>.u8, w<s>.f32 and b<s>.f32 (the mask,
 * weights and momentum buffer after the step). */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "mxfix.h"
#include "mxsparse.h"
#include "optim_plan.h"
#include "sstream.h"
#include "update.h"

#define CHUNK 1000
#define STEPS 12

static const fix_tensor tensors[] = {
    {"fc1.weight", 40, 80, 0, "he_normal", true},
    {"fc1.bias", 40, 0, 0, "zeros", true},
    {"fc2.weight", 20, 40, 0, "he_normal", true}, /* (sparse in gmp2 only) */
};
#define NT (sizeof(tensors) / sizeof(tensors[0]))

static void dump(const char *dir, const char *name, int step, const void *data, size_t bytes)
{
    char path[4096];
    if (step >= 0)
        snprintf(path, sizeof(path), "%s/%s%d.%s", dir, name, step,
                 strcmp(name, "m") == 0 ? "u8" : "f32");
    else
        snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, bytes, f) != bytes || fclose(f) != 0) {
        fprintf(stderr, "sparse_masks: cannot write %s\n", path);
        exit(1);
    }
}

static Appliance__PlanSparseValue *value(const char *kind, double init)
{
    Appliance__PlanSparseValue *v = malloc(sizeof(*v));
    appliance__plan_sparse_value__init(v);
    v->kind = strdup(kind);
    v->init = init;
    return v;
}

/* mxsparse_fill_fn: the fixture's weights (fix_job) */
static void fix_fill(void *ctx, mx_tensor *t, uint64_t a, uint64_t b, float *out)
{
    (void)ctx;
    for (uint64_t e = a; e < b; e++)
        out[e - a] = fix_value(t->id, e);
}

/* t's elements of vals (its weights or a state) in their dense form */
static void dense_of(const mx_tensor *t, const float *vals, float *out)
{
    if (t->compact)
        mxsparse_expand(t, vals, sizeof(float), 0, t->n, out);
    else
        memcpy(out, vals, t->n * sizeof(float));
}

/* t's mask, a byte an element */
static void mask_of(const mx_tensor *t, uint8_t *out)
{
    for (uint64_t e = 0; e < t->n; e++)
        out[e] = t->compact ? t->bits[e / 8] >> (e % 8) & 1 : t->mask[e];
}

static const char *type, *dir;
static int result;

static int run(void)
{
    fix_init(2, true);
    bool wire16 = strcmp(type, "rigl16") == 0, gmp2 = strcmp(type, "gmp2") == 0;
    bool fan_in = strcmp(type, "static_fanin") == 0;
    bool static_dense = strcmp(type, "static_dense") == 0;
    if (wire16)
        type = "rigl";
    /* gmp's run on AdamW (weight decay 0.01): between its mask's changes,
     * memoryx leaves pruned weights to the update, which must keep them
     * zero as SGD's does */
    bool adamw = strcmp(type, "gmp") == 0;
    if (fan_in || static_dense)
        type = "static";
    if (gmp2)
        type = "gmp";
    fix_spec spec = {tensors, NT, 1, adamw ? "adamw" : "sgd", 0.9, 0, CHUNK, 7, STEPS, wire16,
                     NULL};
    Appliance__Plan *p = fix_plan(&spec);
    /* the section, as the planner would make it */
    Appliance__PlanSparsity *ps = malloc(sizeof(*ps));
    appliance__plan_sparsity__init(ps);
    ps->type = strdup(type);
    ps->seed = 11;
    float level = 0.9f;
    if (strcmp(type, "static") == 0) {
        ps->init_method = strdup("random");
        ps->level = value("constant", 0.9);
        ps->drop_fraction = value("constant", 0.3);
    } else if (strcmp(type, "gmp") == 0) {
        ps->init_method = strdup("topk");
        ps->level = value("exp", 0.0);
        ps->level->final = 0.9;
        ps->level->gamma = 0.2;
        ps->drop_fraction = value("constant", 0.3);
        ps->freq = 3;
        ps->stop = 10;
    } else if (strcmp(type, "set") == 0) {
        level = 0.8f;
        ps->init_method = strdup("topk");
        ps->level = value("constant", 0.8);
        ps->drop_fraction = value("cosine", 0.3);
        ps->drop_fraction->half_period = 12;
        ps->freq = 3;
        ps->stop = 12;
    } else if (strcmp(type, "rigl") == 0) {
        level = 0.75f;
        ps->init_method = strdup("random");
        ps->level = value("constant", 0.75);
        ps->drop_fraction = value("constant", 0.25);
        ps->freq = 2;
        ps->start = 2;
        ps->stop = 11;
    } else {
        fprintf(stderr, "sparse_masks: unknown type %s\n", type);
        return 2;
    }
    ps->init_scale = strdup(fan_in ? "fan_in" : "none");
    ps->dense_streams = static_dense;
    p->sparsity = ps;
    p->tensors[0]->sparsity = level;
    if (gmp2) { /* each its own schedule; the section's (0.5 throughout) is neither */
        free(ps->level->kind);
        ps->level->kind = strdup("constant");
        ps->level->init = 0.5;
        p->tensors[0]->sparsity_level = value("exp", 0.0);
        p->tensors[0]->sparsity_level->final = 0.9;
        p->tensors[0]->sparsity_level->gamma = 0.2;
        p->tensors[2]->sparsity_level = value("linear", 0.2);
        p->tensors[2]->sparsity_level->slope = 0.05;
        p->tensors[0]->sparsity = (float)(0.9 - 0.9 * exp(-0.2 * 9));
        p->tensors[2]->sparsity = 0.65f;
    }
    mx_job *j = fix_job(p, 0, wire16 ? FIX_G16 | FIX_TWINS : 0, NULL, 0);
    char why[512];
    uint64_t bytes = 0;
    if (mxsparse_setup(j, &bytes, why, sizeof(why)) < 0) {
        fprintf(stderr, "sparse_masks: %s\n", why);
        return 1;
    }
    /* the parts again, now that the job knows its masks change */
    for (size_t i = 0; i < j->nt; i++)
        free(j->t[i].parts);
    free(j->ready);
    if (update_parts(j) < 0)
        return 1;
    /* the masked tensors, each dumped into its own directory */
    mx_tensor *ts[NT];
    char tdir[NT][4096];
    size_t nts = 0;
    for (size_t i = 0; i < j->nt; i++) {
        mx_tensor *t = &j->t[i];
        if (!(t->level > 0))
            continue;
        if (nts == 0)
            snprintf(tdir[nts], sizeof(tdir[0]), "%s", dir);
        else
            snprintf(tdir[nts], sizeof(tdir[0]), "%s/t%u", dir, t->id);
        mkdir(tdir[nts], 0755);
        const Appliance__PlanSparseValue *lv =
            p->tensors[t->id]->sparsity_level ? p->tensors[t->id]->sparsity_level : ps->level;
        FILE *meta = fopen(strcat(strcpy((char[4200]){0}, tdir[nts]), "/meta.txt"), "w");
        fprintf(meta, "type %s\nn %llu\nlevel %.17g\nseed %llu\ntensor_id %u\ninit %s\nfreq %lld\n"
                "start %lld\nstop %lld\nlevel_kind %s\nlevel_init %.17g\nlevel_final %.17g\n"
                "level_gamma %.17g\nlevel_slope %.17g\ndrop_kind %s\ndrop_init %.17g\n"
                "drop_half_period %.17g\nsteps %d\nparts %u\nrows %llu\ninit_scale %s\n",
                type, (unsigned long long)t->n, (double)t->level, (unsigned long long)ps->seed,
                t->id, ps->init_method, (long long)ps->freq, (long long)ps->start,
                (long long)ps->stop, lv->kind, lv->init, lv->final, lv->gamma, lv->slope,
                ps->drop_fraction->kind, ps->drop_fraction->init, ps->drop_fraction->half_period,
                STEPS, t->nparts, (unsigned long long)p->tensors[t->id]->dims[0], ps->init_scale);
        fclose(meta);
        dump(tdir[nts], "w0.f32", -1, t->w, t->n * sizeof(float));
        ts[nts++] = t;
    }
    if (mxsparse_alloc(j, why, sizeof(why)) < 0 || mxsparse_init(j, why, sizeof(why)) < 0) {
        fprintf(stderr, "sparse_masks: %s\n", why);
        return 1;
    }
    /* a compact tensor, as memoryx's load makes it: its weights made again
     * a piece at a time (the fixture's, dumped above) and their kept ones
     * kept, its gradient and state made for the kept elements alone */
    bool compact = false;
    for (size_t k = 0; k < nts; k++) {
        mx_tensor *t = ts[k];
        if (!t->compact)
            continue;
        compact = true;
        free(t->g);
        free(t->g16);
        free(t->w);
        t->g = NULL;
        t->g16 = NULL;
        t->w = NULL;
        optim_state_deinit(&t->st);
        if (mxsparse_compact_made(j, t, fix_fill, NULL, why, sizeof(why)) < 0) {
            fprintf(stderr, "sparse_masks: %s\n", why);
            return 1;
        }
        if (t->nk >= t->n || mx_len(t) != t->nk) {
            fprintf(stderr, "sparse_masks: %s kept %llu of %llu\n", t->name,
                    (unsigned long long)t->nk, (unsigned long long)t->n);
            return 1;
        }
    }
    if (compact != (strcmp(type, "static") == 0 && !static_dense)) {
        fprintf(stderr, "sparse_masks: compact tensors %s a %s job\n", compact ? "in" : "not in",
                static_dense ? "static_dense" : type);
        return 1;
    }
    float *g[NT], *pre[NT], *gm[NT], *wd[NT], *bd[NT];
    uint8_t *md[NT];
    optim_state ref[NT];
    for (size_t k = 0; k < nts; k++) {
        wd[k] = malloc(ts[k]->n * sizeof(float));
        bd[k] = malloc(ts[k]->n * sizeof(float));
        md[k] = malloc(ts[k]->n);
        dense_of(ts[k], ts[k]->w, wd[k]);
        mask_of(ts[k], md[k]);
        dump(tdir[k], "m", 0, md[k], ts[k]->n);
        dump(tdir[k], "wi.f32", -1, wd[k], ts[k]->n * sizeof(float));
        g[k] = malloc(ts[k]->n * sizeof(float));
        pre[k] = malloc(ts[k]->n * sizeof(float));
        gm[k] = malloc(ts[k]->n * sizeof(float));
        if (optim_state_init(&ref[k], &j->cfg, ts[k]->n) < 0)
            return 1;
    }
    for (int s = 1; s <= STEPS; s++) {
        /* the reference of the optimizer's part: the same update of a copy
         * with the gradient masked by the mask before the step */
        for (size_t k = 0; k < nts; k++) {
            mx_tensor *t = ts[k];
            for (uint64_t e = 0; e < t->n; e++) {
                g[k][e] = fix_value(100 + 10 * (uint64_t)s + 1000 * t->id, e);
                if (wire16) { /* the gradient as the wire rounds it */
                    uint16_t h;
                    bf16_pack(&h, &g[k][e], 1);
                    bf16_unpack(&g[k][e], &h, 1);
                }
                gm[k][e] = md[k][e] ? g[k][e] : 0.0f;
            }
            dense_of(t, t->w, pre[k]);
            dense_of(t, t->st.tensor[0], ref[k].tensor[0]);
            optim_state_set_step(&ref[k], optim_state_step(&t->st));
            optim_update(&j->cfg, &ref[k], pre[k], gm[k], t->n, true, 1.0f, (int64_t)j->step);
        }
        update_start(j);
        for (size_t i = j->nt; i-- > 0;) {
            mx_tensor *x = &j->t[i];
            const float *gx = NULL;
            for (size_t k = 0; k < nts; k++)
                if (ts[k] == x)
                    gx = g[k];
            for (uint64_t off = 0; off < x->n; off += CHUNK) {
                uint64_t count = x->n - off < CHUNK ? x->n - off : CHUNK;
                float f[CHUNK];
                uint16_t h[CHUNK];
                for (uint64_t e = 0; e < count; e++)
                    f[e] = gx ? gx[off + e] : fix_value(999, off + e);
                if (wire16)
                    bf16_pack(h, f, count);
                if (update_grad_land(j, x, off, count, wire16 ? (const void *)h : (const void *)f,
                                     0, 0, why, sizeof(why)) < 0) {
                    fprintf(stderr, "sparse_masks: %s\n", why);
                    return 1;
                }
                update_grad_in(j, x, off, count);
            }
        }
        fix_run();
        if (j->updated != j->nt) {
            fprintf(stderr, "sparse_masks: step %d: %zu of %zu tensors updated\n", s, j->updated,
                    j->nt);
            return 1;
        }
        for (size_t k = 0; k < nts; k++) {
            mx_tensor *t = ts[k];
            mask_of(t, md[k]);
            dense_of(t, t->w, wd[k]);
            dense_of(t, t->st.tensor[0], bd[k]);
            for (uint64_t e = 0; t->w16 && t->mask && e < t->n; e++)
                if (!t->mask[e] && t->w16[e] != 0) {
                    fprintf(stderr, "sparse_masks: step %d: the bfloat16 twin of pruned element "
                            "%llu is not zero\n", s, (unsigned long long)e);
                    return 1;
                }
            if (wire16 && (!t->w16 || !t->g16)) {
                fprintf(stderr, "sparse_masks: no bfloat16 gradient or twin\n");
                return 1;
            }
            dump(tdir[k], "pre", s, pre[k], t->n * sizeof(float));
            dump(tdir[k], "g", s, g[k], t->n * sizeof(float));
            dump(tdir[k], "m", s, md[k], t->n);
            dump(tdir[k], "w", s, wd[k], t->n * sizeof(float));
            dump(tdir[k], "b", s, bd[k], t->n * sizeof(float));
        }
        j->step++;
    }
    /* a compact tensor refuses a packed gradient whose index keeps other
     * elements than its mask, naming the first, and takes its own */
    for (size_t k = 0; compact && k < nts; k++) {
        mx_tensor *t = ts[k];
        uint64_t count = t->n < CHUNK ? t->n : CHUNK, kept;
        uint32_t pk = sstream_choose_bits(t->bits, 0, count, sizeof(float), &kept);
        uint8_t *pl = malloc(sstream_bytes(pk, count, kept, sizeof(float)));
        float *vals = calloc(count, sizeof(float));
        sstream_pack_kept(pk, t->bits, 0, vals, count, kept, sizeof(float), pl);
        if (update_grad_land(j, t, 0, count, pl, pk, kept, why, sizeof(why)) != 0) {
            fprintf(stderr, "sparse_masks: its own index refused: %s\n", why);
            return 1;
        }
        uint64_t flip = 0; /* the first pruned element, kept in the payload's bits */
        while (t->bits[flip / 8] >> (flip % 8) & 1)
            flip++;
        uint8_t *bits = malloc((t->n + 7) / 8);
        memcpy(bits, t->bits, (t->n + 7) / 8);
        bits[flip / 8] |= (uint8_t)(1u << (flip % 8));
        pk = sstream_choose_bits(bits, 0, count, sizeof(float), &kept);
        free(pl);
        pl = malloc(sstream_bytes(pk, count, kept, sizeof(float)));
        sstream_pack_kept(pk, bits, 0, vals, count, kept, sizeof(float), pl);
        char want[64];
        snprintf(want, sizeof(want), "differ at element %llu", (unsigned long long)flip);
        if (pk == SSTREAM_DENSE ||
            update_grad_land(j, t, 0, count, pl, pk, kept, why, sizeof(why)) != -EINVAL ||
            !strstr(why, want)) {
            fprintf(stderr, "sparse_masks: a gradient index keeping element %llu, which the mask "
                    "prunes, was not refused so: %s\n", (unsigned long long)flip, why);
            return 1;
        }
        free(bits);
        free(pl);
        free(vals);
    }
    for (size_t k = 0; k < nts; k++) {
        optim_state_deinit(&ref[k]);
        free(g[k]);
        free(gm[k]);
        free(pre[k]);
        free(wd[k]);
        free(bd[k]);
        free(md[k]);
    }
    fix_end();
    return 0;
}

/* (in a check test, so that the fixture's assertions report) */
START_TEST(masks)
{
    result = run();
}
END_TEST

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: sparse_masks static|static_dense|static_fanin|gmp|gmp2|set|rigl|rigl16 DIR\n");
        return 2;
    }
    type = argv[1];
    dir = argv[2];
    result = 1;
    Suite *s = suite_create("sparse-masks");
    TCase *tc = tcase_create("masks");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, masks);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : result;
}
