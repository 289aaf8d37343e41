/* job.toml -> jobspec, driven by a table of keys per section. */
#include "jobspec.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "jobspec_optim.h"
#include "modelzoo.h"
#include "nearest.h"
#include "sample.h"
#include "util.h"
#include "yaml.h"

/* K_OWN: a key its section's own reader takes (jobspec_optim.c) */
enum key_kind { K_INT, K_INT_AUTO, K_FLOAT, K_BOOL, K_STRING, K_PATH, K_LIST, K_NUM_OR_NAME, K_OWN };

/* The offset of a key that is read (its type checked) but kept nowhere:
 * the Model Zoo's keys whose meaning the appliance has another way to
 * give, documented in docs/job-file.md. */
#define KEY_ACCEPTED ((size_t)-1)

typedef struct key_spec {
    const char *name;
    enum key_kind kind;
    size_t offset;        /* in the section's struct */
    size_t size;          /* of a string field */
    double min, max;      /* inclusive range of numbers */
    const char *choices;  /* for strings: "a|b|c", or NULL for any */
} key_spec;

#define KI(s, f, lo, hi) {#f, K_INT, offsetof(s, f), 0, lo, hi, NULL}
/* an integer, or "auto" (stored as JOBSPEC_AUTO) */
#define KA(s, f, lo, hi) {#f, K_INT_AUTO, offsetof(s, f), 0, lo, hi, NULL}
#define KF(s, f, lo, hi) {#f, K_FLOAT, offsetof(s, f), 0, lo, hi, NULL}
#define KB(s, f) {#f, K_BOOL, offsetof(s, f), 0, 0, 0, NULL}
#define KS(s, f, ch) {#f, K_STRING, offsetof(s, f), sizeof(((s *)0)->f), 0, 0, ch}
#define KP(s, f) {#f, K_PATH, offsetof(s, f), sizeof(((s *)0)->f), 0, 0, NULL}
/* accepted: an integer, a boolean, a list, a number or one of the names */
#define XI(name, lo, hi) {name, K_INT, KEY_ACCEPTED, 0, lo, hi, NULL}
#define XB(name) {name, K_BOOL, KEY_ACCEPTED, 0, 0, 0, NULL}
#define XL(name) {name, K_LIST, KEY_ACCEPTED, 0, 0, 0, NULL}
#define XN(name, lo, hi, ch) {name, K_NUM_OR_NAME, KEY_ACCEPTED, 0, lo, hi, ch}
#define KO(name) {name, K_OWN, 0, 0, 0, 0, NULL}

static const key_spec runconfig_keys[] = {
    KI(jobspec, max_steps, 1, 1e12),
    KI(jobspec, log_steps, 1, 1e12),
    KI(jobspec, checkpoint_steps, 0, 1e12),
    KB(jobspec, save_initial_checkpoint),
    KI(jobspec, eval_frequency, 0, 1e12),
    KP(jobspec, model_dir),
    KP(jobspec, checkpoint_path),
    KI(jobspec, seed, 0, 9.2e18),
    KI(jobspec, num_csx, 1, 1024),
    KI(jobspec, min_num_csx, 1, 1024),
    KI(jobspec, max_num_restarts, 0, 1000),
    KI(jobspec, step_timeout_seconds, 0, 604800),
    KI(jobspec, num_workers_per_csx, 1, 64),
    KI(jobspec, num_wgt_servers, 1, 64),
    KI(jobspec, swarmx_fanout, 2, 64),
    KB(jobspec, swarmx_relay),
    KS(jobspec, mode, "auto|pipelined|weight_streaming"),
    KS(jobspec, job_priority, "p1|p2|p3"),
    KA(jobspec, spatial_partitions, 1, 64),
    KB(jobspec, sync_batchnorm),
    KI(jobspec, num_act_servers, 1, 64),
    XN("compile_crd_memory_gi", 0, 1e6, NULL),
    XN("wrk_memory_gi", -1, 1e6, NULL),
    XB("show_debug_metrics"),
    XB("save_losses"),
};

static const key_spec input_keys[] = {
    KS(jobspec_input, data_processor,
       "synthetic_classification|synthetic_segmentation|mnist|png_segmentation|"
       "InriaAerialDataProcessor|SeverstalBinaryClassDataProcessor|CityscapesDataProcessor|"
       "synthetic_volume|SkmDataProcessor"),
    KP(jobspec_input, data_dir),
    KI(jobspec_input, batch_size, 1, 1 << 24),
    KA(jobspec_input, micro_batch_size, 1, 1 << 24),
    KB(jobspec_input, shuffle),
    KI(jobspec_input, shuffle_seed, 0, 9.2e18),
    KI(jobspec_input, num_classes, 1, 1 << 20),
    KI(jobspec_input, num_samples, 1, 1e12),
    KF(jobspec_input, noise, 0, 1e6),
    KB(jobspec_input, random_flip_horizontal),
    KB(jobspec_input, random_flip_vertical),
    KI(jobspec_input, random_crop_padding, 0, 4096),
    KS(jobspec_input, normalize_data_method, "zero_one|zero_centered|standard_score|none"),
    KB(jobspec_input, augment_data),
    KF(jobspec_input, train_test_split, 0, 1),
    KI(jobspec_input, class_id, 0, 1 << 20),
    KS(jobspec_input, echo_type, "echo1|echo2|echo1-echo2-mc|root_sum_of_squares"),
    KB(jobspec_input, aggregate_cartilage),
    XL("image_shape"), /* (the model's input shape: modelzoo_prepare) */
    XI("num_workers", 0, 4096),
    XI("prefetch_factor", 0, 1 << 20),
    XB("persistent_workers"),
    XB("use_worker_cache"),
    XB("use_fast_dataloader"),
};

static const key_spec optimizer_keys[] = {
    KO("optimizer_type"),
    KO("learning_rate"),
    KS(jobspec, lr_schedule, "constant|cosine|step"),
    KI(jobspec, warmup_steps, 0, 1e12),
    KI(jobspec, decay_steps, 0, 1e12),
    KF(jobspec, end_learning_rate, 0, 1e6),
    KI(jobspec, step_size, 1, 1e12),
    KF(jobspec, gamma, 0, 1),
    KF(jobspec, momentum, 0, 1),
    KF(jobspec, dampening, 0, 1),
    KB(jobspec, nesterov),
    KF(jobspec, beta1, 0, 0.999999),
    KF(jobspec, beta2, 0, 0.999999999),
    KF(jobspec, eps, 0, 1),
    KF(jobspec, weight_decay, 0, 1e6),
    KF(jobspec, max_gradient_norm, 0, 1e12),
    KO("weight_decay_rate"),
    KB(jobspec, correct_bias),
    KO("loss_scaling_factor"),
};

static void jobspec__defaults(jobspec *j)
{
    j->max_steps = 100;
    j->log_steps = 10;
    j->eval_frequency = 0;
    strcpy(j->model_dir, "model_dir");
    j->seed = 1;
    j->num_csx = 1;
    j->min_num_csx = 1;
    j->max_num_restarts = 3;
    j->step_timeout_seconds = JOBSPEC_AUTO; /* planner_step_timeout_ms */
    j->num_workers_per_csx = 1;
    j->num_wgt_servers = 1;
    j->swarmx_fanout = 4;
    strcpy(j->mode, "auto");
    strcpy(j->job_priority, "p2");
    j->spatial_partitions = JOBSPEC_AUTO;
    jobspec_input *ins[2] = {&j->train, &j->eval};
    for (int i = 0; i < 2; i++) {
        strcpy(ins[i]->data_processor, "synthetic_classification");
        ins[i]->batch_size = 64;
        ins[i]->shuffle = true;
        ins[i]->num_classes = 10;
        ins[i]->num_samples = 10000;
        ins[i]->noise = 1.0;
        ins[i]->random_flip_horizontal = false;
        ins[i]->random_flip_vertical = false;
        strcpy(ins[i]->normalize_data_method, "zero_one");
        ins[i]->class_id = -1;
        strcpy(ins[i]->echo_type, "echo1");
        ins[i]->aggregate_cartilage = true;
    }
    strcpy(j->optimizer_type, "sgd");
    j->learning_rate = 0.01;
    strcpy(j->lr_schedule, "constant");
    j->step_size = 1;
    j->gamma = 0.1;
    j->beta1 = 0.9;
    j->beta2 = 0.999;
    j->eps = 1e-8;
    j->correct_bias = true;
    j->loss_scaling_factor = 1.0;
}

static int jobspec__resolve(char *dst, size_t size, const char *value, const char *base,
                            const char *src, toml_pos pos, const char *key, char *err, size_t errlen)
{
    int n;
    if (value[0] == '/' || !base || !base[0])
        n = snprintf(dst, size, "%s", value);
    else
        n = snprintf(dst, size, "%s/%s", base, value);
    if (n < 0 || (size_t)n >= size)
        return toml_errorf(err, errlen, src, pos, "%s: path too long", key);
    return 0;
}

/* Where key is written in table t (its key), or t's place. */
static toml_pos jobspec__key_pos(const toml_value *t, const char *key)
{
    long i = toml_table_find(t, key);
    return i < 0 ? toml_pos_of(t) : toml_table_key_pos(t, (size_t)i);
}

/* Whether s is one of the choices "a|b|c". */
static bool jobspec__one_of(const char *s, const char *choices)
{
    size_t sl = strlen(s);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (l == sl && strncmp(p, s, l) == 0)
            return true;
        p += l + (bar ? 1 : 0);
    }
    return false;
}

/* Reads the keys of one section table into the struct at base. */
static int jobspec__section(const toml_value *t, const char *section, const key_spec *keys,
                            size_t nkeys, void *base, const char *dir, char *err, size_t errlen)
{
    const char *src = toml_source_name(t);
    for (size_t i = 0; i < toml_table_len(t); i++) {
        const char *key = toml_table_key(t, i);
        const toml_value *v = toml_table_value(t, i);
        toml_pos kpos = toml_table_key_pos(t, i);
        toml_pos vpos = toml_pos_of(v);
        const key_spec *ks = NULL;
        for (size_t k = 0; k < nkeys; k++)
            if (strcmp(keys[k].name, key) == 0)
                ks = &keys[k];
        if (!ks) {
            const char *names[64];
            size_t nn = 0;
            for (size_t k = 0; k < nkeys && nn < ARRAY_SIZE(names); k++)
                names[nn++] = keys[k].name;
            const char *near = nearest_name(key, names, nn);
            if (near)
                return toml_errorf(err, errlen, src, kpos,
                                   "unknown key \"%s\" in [%s] (did you mean \"%s\"?)", key,
                                   section, near);
            return toml_errorf(err, errlen, src, kpos, "unknown key \"%s\" in [%s]", key, section);
        }
        char *field = ks->offset == KEY_ACCEPTED ? NULL : (char *)base + ks->offset;
        toml_type ty = toml_type_of(v);
        switch (ks->kind) {
        case K_OWN:
            break;
        case K_INT_AUTO:
            if (ty == TOML_STRING && strcmp(toml_string(v), "auto") == 0) {
                if (field)
                    *(int64_t *)field = JOBSPEC_AUTO;
                break;
            }
            if (ty != TOML_INTEGER)
                return toml_errorf(err, errlen, src, vpos, "%s.%s: expected an integer or \"auto\", "
                                   "found %s", section, key,
                                   ty == TOML_STRING ? "another string" : toml_type_name(ty));
            /* fall through */
        case K_INT: {
            if (ty != TOML_INTEGER)
                return toml_errorf(err, errlen, src, vpos, "%s.%s: expected an integer, found %s",
                                   section, key, toml_type_name(ty));
            int64_t x = toml_int(v);
            if ((double)x < ks->min || (double)x > ks->max)
                return toml_errorf(err, errlen, src, vpos, "%s.%s: %lld is out of range [%.0f, %.0f]",
                                   section, key, (long long)x, ks->min, ks->max);
            if (field)
                *(int64_t *)field = x;
            break;
        }
        case K_FLOAT: {
            double x;
            if (ty == TOML_FLOAT)
                x = toml_float(v);
            else if (ty == TOML_INTEGER)
                x = (double)toml_int(v);
            else
                return toml_errorf(err, errlen, src, vpos, "%s.%s: expected a number, found %s",
                                   section, key, toml_type_name(ty));
            if (!isfinite(x) || x < ks->min || x > ks->max)
                return toml_errorf(err, errlen, src, vpos, "%s.%s: %g is out of range [%g, %g]",
                                   section, key, x, ks->min, ks->max);
            if (field)
                *(double *)field = x;
            break;
        }
        case K_LIST:
            if (ty != TOML_ARRAY)
                return toml_errorf(err, errlen, src, vpos, "%s.%s: expected a list, found %s",
                                   section, key, toml_type_name(ty));
            break;
        case K_NUM_OR_NAME: {
            double x = ty == TOML_FLOAT ? toml_float(v) : ty == TOML_INTEGER ? (double)toml_int(v) : 0;
            bool named = ty == TOML_STRING && ks->choices &&
                         jobspec__one_of(toml_string(v), ks->choices);
            if (!named && ty != TOML_FLOAT && ty != TOML_INTEGER)
                return toml_errorf(err, errlen, src, vpos, "%s.%s: expected a number%s%s, found %s",
                                   section, key, ks->choices ? " or " : "",
                                   ks->choices ? ks->choices : "", toml_type_name(ty));
            if (!named && (!isfinite(x) || x < ks->min || x > ks->max))
                return toml_errorf(err, errlen, src, vpos, "%s.%s: %g is out of range [%g, %g]",
                                   section, key, x, ks->min, ks->max);
            break;
        }
        case K_BOOL:
            if (ty != TOML_BOOL)
                return toml_errorf(err, errlen, src, vpos, "%s.%s: expected true or false, found %s",
                                   section, key, toml_type_name(ty));
            if (field)
                *(bool *)field = toml_bool(v);
            break;
        case K_STRING:
        case K_PATH: {
            if (ty != TOML_STRING)
                return toml_errorf(err, errlen, src, vpos, "%s.%s: expected a string, found %s",
                                   section, key, toml_type_name(ty));
            const char *s = toml_string(v);
            if (strlen(s) != toml_string_len(v) || !s[0])
                return toml_errorf(err, errlen, src, vpos, "%s.%s: expected a non-empty string",
                                   section, key);
            if (ks->kind == K_PATH) {
                if (jobspec__resolve(field, ks->size, s, dir, src, vpos, key, err, errlen) < 0)
                    return -EINVAL;
                break;
            }
            if (ks->choices) {
                bool ok = jobspec__one_of(s, ks->choices);
                char near[64];
                if (!ok && nearest_choice(s, ks->choices, near, sizeof(near)))
                    return toml_errorf(err, errlen, src, vpos, "%s.%s: \"%s\" is not one of %s "
                                       "(did you mean \"%s\"?)", section, key, s, ks->choices,
                                       near);
                if (!ok)
                    return toml_errorf(err, errlen, src, vpos, "%s.%s: \"%s\" is not one of %s",
                                       section, key, s, ks->choices);
            }
            if (strlen(s) >= ks->size)
                return toml_errorf(err, errlen, src, vpos, "%s.%s: string too long", section, key);
            strcpy(field, s);
            break;
        }
        }
    }
    return 0;
}

/* Readers of files need to know where the files are. */
static int jobspec__check_input(const toml_value *root, const char *section, const jobspec_input *in,
                                char *err, size_t errlen)
{
    if (!in->present || in->data_dir[0] ||
        (strcmp(in->data_processor, "mnist") != 0 &&
         strcmp(in->data_processor, "png_segmentation") != 0))
        return 0;
    const toml_value *t = toml_table_get(root, section);
    const toml_value *dp = toml_table_get(t, "data_processor");
    return toml_errorf(err, errlen, toml_source_name(root), toml_pos_of(dp ? dp : t),
                       "%s.data_dir: required by data_processor \"%s\"", section,
                       in->data_processor);
}

/* Keys the appliance reads but cannot act on yet are refused, never
 * ignored: a user who asks for them must learn that they do nothing. */
static int jobspec__refuse_unbuilt(const toml_value *root, const jobspec *j, char *err,
                                   size_t errlen)
{
    const struct {
        const char *section, *key;
        bool set;
        const char *what;
    } unbuilt[] = {
        {"optimizer", "max_gradient_norm", j->max_gradient_norm > 0 && j->num_wgt_servers > 1,
         "gradient-norm clipping across several memoryx shards (num_wgt_servers > 1)"},
    };
    const char *src = toml_source_name(root);
    for (size_t i = 0; i < ARRAY_SIZE(unbuilt); i++) {
        const toml_value *t = toml_table_get(root, unbuilt[i].section);
        long k = t ? toml_table_find(t, unbuilt[i].key) : -1;
        if (k >= 0 && unbuilt[i].set)
            return toml_errorf(err, errlen, src, toml_table_key_pos(t, (size_t)k),
                               "%s.%s: %s is not available in this version yet", unbuilt[i].section,
                               unbuilt[i].key, unbuilt[i].what);
    }
    const toml_value *ev = toml_table_get(root, "eval_input");
    long mk = ev ? toml_table_find(ev, "micro_batch_size") : -1;
    if (mk >= 0)
        return toml_errorf(err, errlen, src, toml_table_key_pos(ev, (size_t)mk),
                           "eval_input.micro_batch_size: micro-batches are for training; an "
                           "evaluation batch is never larger than what a replica computes at once");
    const toml_value *rc = toml_table_get(root, "runconfig");
    long k = rc ? toml_table_find(rc, "eval_frequency") : -1;
    if (k >= 0 && j->eval_frequency > 0 && !j->eval.present)
        return toml_errorf(err, errlen, src, toml_table_key_pos(rc, (size_t)k),
                           "runconfig.eval_frequency: evaluation needs an [eval_input] section");
    return 0;
}

void jobspec_input_encoding(const jobspec_input *in, bool *input_unorm8, bool *labels_u8)
{
    /* (a standard score is each sample's own: made where the whole sample
     * is, by the input worker, in float32) */
    *input_unorm8 = strcmp(in->data_processor, "synthetic_classification") != 0 &&
                    strcmp(in->data_processor, "SkmDataProcessor") != 0 && /* 16-bit echoes */
                    strcmp(in->normalize_data_method, "standard_score") != 0;
    *labels_u8 = in->num_classes <= 256;
}

static bool jobspec__ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcasecmp(s + n - k, suffix) == 0;
}

jobspec_format jobspec_format_of(const char *name, const char *text, size_t len)
{
    if (jobspec__ends_with(name, ".toml"))
        return JOBSPEC_FORMAT_TOML;
    if (jobspec__ends_with(name, ".yaml") || jobspec__ends_with(name, ".yml"))
        return JOBSPEC_FORMAT_YAML;
    const char *p = text, *end = text + len;
    while (p < end) { /* the first line that is not blank or a comment */
        while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
            p++;
        if (p < end && *p == '#') {
            while (p < end && *p != '\n')
                p++;
            continue;
        }
        break;
    }
    if (p == end)
        return JOBSPEC_FORMAT_TOML; /* (empty: either says so) */
    if (*p == '[')
        return JOBSPEC_FORMAT_TOML;
    /* a bare, quoted or dotted key, then "=" */
    while (p < end && *p != '\n' && *p != '=' && *p != ':') {
        if (*p == '"' || *p == '\'') {
            char q = *p++;
            while (p < end && *p != q && *p != '\n')
                p++;
        }
        if (p < end)
            p++;
    }
    return p < end && *p == '=' ? JOBSPEC_FORMAT_TOML : JOBSPEC_FORMAT_YAML;
}

const char *jobspec_format_name(jobspec_format f)
{
    return f == JOBSPEC_FORMAT_YAML ? "yaml" : f == JOBSPEC_FORMAT_TOML ? "toml" : "auto";
}

int jobspec_format_parse(const char *s, jobspec_format *out)
{
    if (strcasecmp(s, "yaml") == 0 || strcasecmp(s, "yml") == 0)
        *out = JOBSPEC_FORMAT_YAML;
    else if (strcasecmp(s, "toml") == 0)
        *out = JOBSPEC_FORMAT_TOML;
    else if (strcasecmp(s, "auto") == 0)
        *out = JOBSPEC_FORMAT_AUTO;
    else
        return -EINVAL;
    return 0;
}

jobspec *jobspec_parse(const char *text, size_t len, const char *name, const char *base_dir,
                       char *err, size_t errlen)
{
    return jobspec_parse_as(text, len, name, JOBSPEC_FORMAT_AUTO, base_dir, err, errlen);
}

jobspec *jobspec_parse_as(const char *text, size_t len, const char *name, jobspec_format format,
                          const char *base_dir, char *err, size_t errlen)
{
    if (format == JOBSPEC_FORMAT_AUTO)
        format = jobspec_format_of(name, text, len);
    toml_value *root = format == JOBSPEC_FORMAT_YAML ? yaml_parse(text, len, name, err, errlen)
                                                     : toml_parse(text, len, name, err, errlen);
    if (!root)
        return NULL;
    jobspec *j = calloc(1, sizeof(*j));
    if (!j) {
        snprintf(err, errlen, "%s: out of memory", name);
        goto fail;
    }
    snprintf(j->source, sizeof(j->source), "%s", name);
    jobspec__defaults(j);
    if (modelzoo_prepare(root, err, errlen) < 0)
        goto fail;
    const toml_value *model_table = NULL;
    for (size_t i = 0; i < toml_table_len(root); i++) {
        const char *key = toml_table_key(root, i);
        const toml_value *v = toml_table_value(root, i);
        toml_pos pos = toml_table_key_pos(root, i);
        int rc = 0;
        bool is_table = toml_type_of(v) == TOML_TABLE;
        if (strcmp(key, "model") == 0 && is_table) {
            model_table = v;
            continue;
        }
        if (!is_table && (!strcmp(key, "runconfig") || !strcmp(key, "train_input") ||
                          !strcmp(key, "eval_input") || !strcmp(key, "optimizer") ||
                          !strcmp(key, "model") || !strcmp(key, "sparsity"))) {
            toml_errorf(err, errlen, name, pos, "\"%s\" must be a table ([%s])", key, key);
            goto fail;
        }
        if (strcmp(key, "runconfig") == 0)
            rc = jobspec__section(v, key, runconfig_keys, ARRAY_SIZE(runconfig_keys), j, base_dir,
                                  err, errlen);
        else if (strcmp(key, "train_input") == 0) {
            j->train.present = true;
            rc = jobspec__section(v, key, input_keys, ARRAY_SIZE(input_keys), &j->train, base_dir,
                                  err, errlen);
        } else if (strcmp(key, "eval_input") == 0) {
            j->eval.present = true;
            rc = jobspec__section(v, key, input_keys, ARRAY_SIZE(input_keys), &j->eval, base_dir,
                                  err, errlen);
        } else if (strcmp(key, "optimizer") == 0) {
            rc = jobspec__section(v, key, optimizer_keys, ARRAY_SIZE(optimizer_keys), j, base_dir,
                                  err, errlen);
            if (rc == 0)
                rc = jobspec_optimizer(v, &(jobspec_optim_dest){j->optimizer_type,
                                                                sizeof(j->optimizer_type),
                                                                &j->learning_rate,
                                                                &j->n_lr_segments, j->lr_segments,
                                                                &j->weight_decay, &j->correct_bias,
                                                                &j->loss_scaling_factor},
                                       err, errlen);
        } else if (strcmp(key, "sparsity") == 0) {
            rc = jobspec_sparsity_read(v, &j->sparsity, err, errlen);
        } else {
            toml_errorf(err, errlen, name, pos,
                        "unknown section \"%s\" (expected runconfig, train_input, eval_input, "
                        "model, optimizer or sparsity)",
                        key);
            goto fail;
        }
        if (rc < 0)
            goto fail;
    }
    if (j->num_act_servers > 0) /* the Model Zoo's name for the workers of a replica */
        j->num_workers_per_csx = j->num_act_servers;
    if (!j->train.present) {
        snprintf(err, errlen, "%s: missing section [train_input]", name);
        goto fail;
    }
    if (!model_table) {
        snprintf(err, errlen, "%s: missing section [model]", name);
        goto fail;
    }
    int64_t parts = jobspec_parts(j);
    if (j->num_csx % parts != 0) {
        const toml_value *rc = toml_table_get(root, "runconfig");
        toml_errorf(err, errlen, name, toml_pos_of(toml_table_get(rc, "spatial_partitions")),
                    "runconfig.spatial_partitions %lld does not divide runconfig.num_csx %lld: "
                    "each replica takes that many wse-nodes",
                    (long long)parts, (long long)j->num_csx);
        goto fail;
    }
    if (j->min_num_csx > j->num_csx) {
        const toml_value *rc = toml_table_get(root, "runconfig");
        toml_errorf(err, errlen, name, toml_pos_of(toml_table_get(rc, "min_num_csx")),
                    "runconfig.min_num_csx %lld is larger than runconfig.num_csx %lld",
                    (long long)j->min_num_csx, (long long)j->num_csx);
        goto fail;
    }
    if (jobspec__check_input(root, "train_input", &j->train, err, errlen) < 0 ||
        jobspec__check_input(root, "eval_input", &j->eval, err, errlen) < 0)
        goto fail;
    if (jobspec__refuse_unbuilt(root, j, err, errlen) < 0)
        goto fail;
    if (j->nesterov && (j->momentum <= 0 || j->dampening != 0)) {
        const toml_value *o = toml_table_get(root, "optimizer");
        toml_errorf(err, errlen, name, toml_pos_of(toml_table_get(o, "nesterov")),
                    "optimizer.nesterov: needs momentum > 0 and dampening = 0");
        goto fail;
    }
    j->model = model_compile(model_table, err, errlen);
    if (!j->model)
        goto fail;
    if (j->sparsity.present) {
        const toml_value *st = toml_table_get(root, "sparsity");
        if (!j->sparsity.seed_given)
            j->sparsity.seed = j->seed;
        if (jobspec_sparsity_resolve(st, &j->sparsity, j->model, j->max_steps, err, errlen) < 0)
            goto fail;
        /* the masks are memoryx's: its optimizer applies the updates */
        if (strcmp(j->mode, "pipelined") == 0) {
            const toml_value *rc = toml_table_get(root, "runconfig");
            toml_errorf(err, errlen, name, jobspec__key_pos(rc, "mode"),
                        "runconfig.mode \"pipelined\": a sparse model (the [sparsity] section, "
                        "line %d) trains in Weight Streaming, where memoryx keeps the masks; use "
                        "\"weight_streaming\" or \"auto\"", toml_pos_of(st).line);
            goto fail;
        }
    }
    /* One scale of 8-bit inputs: the training input's (an evaluation on
     * other inputs than it trained on would measure nothing) */
    if (j->eval.present &&
        strcmp(j->eval.normalize_data_method, j->train.normalize_data_method) != 0) {
        const toml_value *ev = toml_table_get(root, "eval_input");
        toml_errorf(err, errlen, name, jobspec__key_pos(ev, "normalize_data_method"),
                    "eval_input.normalize_data_method \"%s\" differs from train_input's "
                    "\"%s\": the model is evaluated on inputs scaled as it trained",
                    j->eval.normalize_data_method, j->train.normalize_data_method);
        goto fail;
    }
    const char *norm = j->train.normalize_data_method;
    j->model->input_scale = strcmp(norm, "zero_centered") == 0 ? SAMPLE_ZERO_CENTERED
                            : strcmp(norm, "none") == 0        ? SAMPLE_RAW
                                                               : SAMPLE_ZERO_ONE;
    /* One encoding for the job's batches: what both of its inputs can take. */
    jobspec_input_encoding(&j->train, &j->model->input_unorm8, &j->model->labels_u8);
    if (j->eval.present) {
        bool unorm8, labels_u8;
        jobspec_input_encoding(&j->eval, &unorm8, &labels_u8);
        j->model->input_unorm8 &= unorm8;
        j->model->labels_u8 &= labels_u8;
        j->model->eval_batch = j->eval.batch_size < UINT32_MAX ? (uint32_t)j->eval.batch_size
                                                                : UINT32_MAX;
    }
    /* "auto" stripes of a model that splits: the plan checks the batch
     * against the stripes it picks (down to one sample on num_csx stripes) */
    if (j->spatial_partitions == JOBSPEC_AUTO && model_splits(j->model))
        parts = j->num_csx;
    if (j->train.batch_size < j->num_csx / parts) {
        const toml_value *rc = toml_table_get(root, "train_input");
        toml_pos pos = toml_pos_of(toml_table_get(rc, "batch_size") ? toml_table_get(rc, "batch_size") : rc);
        if (parts > 1)
            toml_errorf(err, errlen, name, pos,
                        "train_input.batch_size %lld is smaller than the %lld replica(s) of "
                        "runconfig.num_csx %lld in stripes of %lld: every replica needs at "
                        "least one sample", (long long)j->train.batch_size,
                        (long long)(j->num_csx / parts), (long long)j->num_csx, (long long)parts);
        else
            toml_errorf(err, errlen, name, pos,
                        "train_input.batch_size %lld is smaller than runconfig.num_csx %lld: "
                        "every replica needs at least one sample",
                        (long long)j->train.batch_size, (long long)j->num_csx);
        goto fail;
    }
    if (j->model->loss == LOSS_SOFTMAX_CROSS_ENTROPY) {
        const model_layer *last = &j->model->layers[j->model->nlayers - 1];
        if (last->out.ndim != 1 || last->out.d[0] != j->train.num_classes) {
            char shape[64];
            model_shape_str(&last->out, shape, sizeof(shape));
            toml_errorf(err, errlen, name, last->pos,
                        "layer \"%s\": softmax_cross_entropy needs %lld logits "
                        "(train_input.num_classes), the layer gives %s",
                        last->name, (long long)j->train.num_classes, shape);
            goto fail;
        }
    }
    if (!(j->text = strndup(text, len))) {
        snprintf(err, errlen, "%s: out of memory", name);
        goto fail;
    }
    j->doc = root;
    return j;
fail:
    jobspec_free(j);
    toml_free(root);
    return NULL;
}

const toml_value *jobspec_model_table(const jobspec *j)
{
    return toml_table_get(j->doc, "model");
}

int64_t jobspec_parts(const jobspec *j)
{
    return j->spatial_partitions > 1 ? j->spatial_partitions : 1;
}

void jobspec_free(jobspec *j)
{
    if (!j)
        return;
    model_free(j->model);
    jobspec_sparsity_deinit(&j->sparsity);
    toml_free(j->doc);
    free(j->text);
    free(j);
}
