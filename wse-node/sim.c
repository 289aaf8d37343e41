/* wse-node: simulated compute: the option parsed once, each layer's time
 * under it, and the time spent (sim.h). */
#include "sim.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int sim__number(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < 0)
        return -EINVAL;
    *out = v;
    return 0;
}

/* Reads a measured table: "LAYER FWD BWD" a line. */
static int sim__read_table(sim_config *c, const char *path, char *err, size_t errlen)
{
    snprintf(c->source, sizeof(c->source), "%s", path);
    FILE *f = fopen(path, "r");
    if (!f) {
        int rc = -errno;
        snprintf(err, errlen, "--simulate-compute: cannot read the measured table %s: %s", path,
                 strerror(errno));
        return rc;
    }
    char line[512];
    int ln = 0, rc = 0;
    size_t cap = 0;
    while (rc == 0 && fgets(line, sizeof(line), f)) {
        ln++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char name[MODEL_NAME_MAX + 1], a[64], b[64], extra[2];
        int k = sscanf(line, "%64s %63s %63s %1s", name, a, b, extra);
        if (k <= 0)
            continue;
        sim_entry e = {0};
        if (k != 3 || strlen(name) >= MODEL_NAME_MAX || sim__number(a, &e.fwd) < 0 ||
            sim__number(b, &e.bwd) < 0) {
            snprintf(err, errlen, "%s:%d: expected \"LAYER FORWARD_SEC BACKWARD_SEC\" (seconds "
                     "per sample, not negative)", path, ln);
            rc = -EINVAL;
            break;
        }
        snprintf(e.name, sizeof(e.name), "%s", name);
        for (size_t i = 0; i < c->n; i++)
            if (strcmp(c->table[i].name, e.name) == 0) {
                snprintf(err, errlen, "%s:%d: layer \"%s\" twice", path, ln, e.name);
                rc = -EINVAL;
            }
        if (rc == 0 && c->n == cap) {
            cap = cap ? 2 * cap : 16;
            sim_entry *t = realloc(c->table, cap * sizeof(*t));
            if (!t) {
                snprintf(err, errlen, "out of memory reading %s", path);
                rc = -ENOMEM;
                break;
            }
            c->table = t;
        }
        if (rc == 0)
            c->table[c->n++] = e;
    }
    fclose(f);
    if (rc == 0 && c->n == 0) {
        snprintf(err, errlen, "%s: no layer in the measured table", path);
        rc = -EINVAL;
    }
    return rc;
}

int sim_config_parse(sim_config *c, const char *arg, char *err, size_t errlen)
{
    memset(c, 0, sizeof(*c));
    if (!arg || !*arg || strcmp(arg, "off") == 0)
        return 0;
    int rc = 0;
    if (strcmp(arg, "cs2") == 0) {
        c->mode = SIM_CS2;
        c->rate = SIM_CS2_FLOPS;
    } else if (strncmp(arg, "cs2:", 4) == 0) {
        c->mode = SIM_CS2;
        if (sim__number(arg + 4, &c->rate) < 0 || c->rate <= 0) {
            snprintf(err, errlen, "--simulate-compute \"%s\": expected cs2:TFLOPS, a rate above 0",
                     arg);
            rc = -EINVAL;
        }
        c->rate *= 1e12;
    } else if (strncmp(arg, "measured:", 9) == 0) {
        c->mode = SIM_MEASURED;
        rc = sim__read_table(c, arg + 9, err, errlen);
    } else if (sim__number(arg, &c->per_sample) == 0) {
        c->mode = SIM_PER_SAMPLE;
    } else {
        snprintf(err, errlen, "--simulate-compute \"%s\": expected off, cs2, cs2:TFLOPS, "
                 "SECONDS (a step's per sample) or measured:FILE", arg);
        rc = -EINVAL;
    }
    if (rc < 0)
        sim_config_deinit(c);
    return rc;
}

void sim_config_deinit(sim_config *c)
{
    free(c->table);
    memset(c, 0, sizeof(*c));
}

const char *sim_config_describe(const sim_config *c, char *out, size_t len)
{
    switch (c->mode) {
    case SIM_CS2:
        snprintf(out, len, "a CS-2 model: forward FLOPs at %.4g TFLOP/s, backward twice that",
                 c->rate / 1e12);
        break;
    case SIM_PER_SAMPLE:
        snprintf(out, len, "%.6g s per sample a step, split over the layers by FLOPs",
                 c->per_sample);
        break;
    case SIM_MEASURED:
        snprintf(out, len, "the times of %zu layers measured on real kernels (%s)", c->n,
                 c->source);
        break;
    default:
        snprintf(out, len, "off: the kernels compute");
    }
    return out;
}

int sim_times_init(sim_times *t, const sim_config *c, const model *m, char *err, size_t errlen)
{
    memset(t, 0, sizeof(*t));
    int nl = m->nlayers;
    t->nlayers = nl;
    t->fwd = calloc(2 * (size_t)(nl ? nl : 1), sizeof(double));
    if (!t->fwd) {
        snprintf(err, errlen, "out of memory for the simulated times");
        return -ENOMEM;
    }
    t->bwd = t->fwd + nl;
    const model_shape *out = nl ? &m->layers[nl - 1].out : &m->input;
    t->loss = log((double)(out->d[0] > 1 ? out->d[0] : 2));
    double total = 0;
    for (int i = 0; i < nl; i++)
        total += (double)m->layers[i].flops;
    for (int i = 0; i < nl; i++) {
        const model_layer *l = &m->layers[i];
        if (c->mode == SIM_CS2) {
            t->fwd[i] = (double)l->flops / c->rate;
        } else if (c->mode == SIM_PER_SAMPLE) {
            t->fwd[i] = total > 0 ? c->per_sample * (double)l->flops / total / 3 : 0;
        } else if (c->mode == SIM_MEASURED) {
            const sim_entry *e = NULL;
            for (size_t k = 0; k < c->n; k++)
                if (strcmp(c->table[k].name, l->name) == 0)
                    e = &c->table[k];
            if (!e && !model_layer_is_view(l)) {
                snprintf(err, errlen, "the measured table %s has no line for layer \"%s\"",
                         c->source, l->name);
                sim_times_deinit(t);
                return -EINVAL;
            }
            t->fwd[i] = e ? e->fwd : 0;
            t->bwd[i] = e ? e->bwd : 0;
            continue;
        }
        t->bwd[i] = 2 * t->fwd[i];
    }
    for (size_t k = 0; c->mode == SIM_MEASURED && k < c->n; k++) {
        int found = 0;
        for (int i = 0; i < nl && !found; i++)
            found = strcmp(c->table[k].name, m->layers[i].name) == 0;
        if (!found) {
            snprintf(err, errlen, "the measured table %s names layer \"%s\", which the job's "
                     "model has not", c->source, c->table[k].name);
            sim_times_deinit(t);
            return -EINVAL;
        }
    }
    return 0;
}

void sim_times_deinit(sim_times *t)
{
    free(t->fwd);
    memset(t, 0, sizeof(*t));
}

double sim_layer_sec(const sim_times *t, int layer, bool backward, uint32_t samples)
{
    if (layer < 0 || layer >= t->nlayers)
        return 0;
    return (backward ? t->bwd[layer] : t->fwd[layer]) * samples;
}
