/* Weight initializers: the Model Zoo's names and parameters read from a job
 * (model_init_parse), their values as PyTorch's torch.nn.init and the Model
 * Zoo's weight_initializers.py compute them, drawn from the counter-based
 * RNG (model_init_fill), and their copy in the plan. */
#include "init.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "rng.h"
#include "util.h"

/* The parameters an initializer may take, by the names jobs give them. */
enum ip_id {
    IP_VAL,
    IP_A,
    IP_B,
    IP_MEAN,
    IP_STD,
    IP_GAIN,
    IP_SCALE,
    IP_MODE,
    IP_DISTRIBUTION,
    IP_NONLINEARITY,
    IP_COUNT,
};

static const char *const ip_names[IP_COUNT] = {
    "val", "a", "b", "mean", "std", "gain", "scale", "mode", "distribution", "nonlinearity",
};

#define B(x) (1u << (x))

/* The initializers a job may name. */
static const struct init_kind {
    const char *name;   /* as the job writes it (any case) */
    const char *canon;  /* as model_init and the plan hold it */
    unsigned takes;     /* B(IP_...) of its parameters */
    const char *params; /* the same, for messages */
} init_kinds[] = {
    {"constant", "constant", B(IP_VAL), "val"},
    {"ones", "ones", 0, NULL},
    {"zeros", "zeros", 0, NULL},
    {"uniform", "uniform", B(IP_A) | B(IP_B), "a, b"},
    {"normal", "normal", B(IP_MEAN) | B(IP_STD), "mean, std"},
    {"xavier_normal", "xavier_normal", B(IP_GAIN), "gain"},
    {"glorot_normal", "xavier_normal", B(IP_GAIN), "gain"},
    {"xavier_uniform", "xavier_uniform", B(IP_GAIN), "gain"},
    {"glorot_uniform", "xavier_uniform", B(IP_GAIN), "gain"},
    {"truncated_normal", "truncated_normal", B(IP_MEAN) | B(IP_STD) | B(IP_A) | B(IP_B),
     "mean, std, a, b"},
    {"variance_scaling", "variance_scaling", B(IP_SCALE) | B(IP_MODE) | B(IP_DISTRIBUTION),
     "scale, mode, distribution"},
    {"lecun_normal", "lecun_normal", 0, NULL},
    {"lecun_uniform", "lecun_uniform", 0, NULL},
    {"kaiming_normal", "kaiming_normal", B(IP_A) | B(IP_MODE) | B(IP_NONLINEARITY),
     "a, mode, nonlinearity"},
    {"kaiming_uniform", "kaiming_uniform", B(IP_A) | B(IP_MODE) | B(IP_NONLINEARITY),
     "a, mode, nonlinearity"},
};

static const char init_list[] =
    "constant, ones, zeros, uniform, normal, xavier_normal, glorot_normal, xavier_uniform, "
    "glorot_uniform, truncated_normal, variance_scaling, lecun_normal, lecun_uniform, "
    "kaiming_normal, kaiming_uniform";

/* calculate_gain's names and their gains (leaky_relu's is computed). */
static const struct {
    const char *name;
    double gain;
} gains[] = {
    {"linear", 1.0},           {"conv1d", 1.0},           {"conv2d", 1.0},
    {"conv3d", 1.0},           {"conv_transpose1d", 1.0}, {"conv_transpose2d", 1.0},
    {"conv_transpose3d", 1.0}, {"sigmoid", 1.0},          {"tanh", 5.0 / 3.0},
    {"relu", M_SQRT2},         {"selu", 0.75},            {"leaky_relu", 0.0},
};

int model_init_gain(const char *nonlinearity, double param, bool has_param, double *gain)
{
    if (nonlinearity && strcmp(nonlinearity, "leaky_relu") == 0) {
        double slope = has_param ? param : 0.01;
        *gain = sqrt(2.0 / (1.0 + slope * slope));
        return 0;
    }
    for (size_t i = 0; nonlinearity && i < ARRAY_SIZE(gains); i++)
        if (strcmp(nonlinearity, gains[i].name) == 0) {
            *gain = gains[i].gain;
            return 0;
        }
    return -EINVAL;
}

static const struct init_kind *init_lookup(const char *name, bool any_case)
{
    for (size_t i = 0; name && i < ARRAY_SIZE(init_kinds); i++)
        if ((any_case ? strcasecmp : strcmp)(name, init_kinds[i].name) == 0)
            return &init_kinds[i];
    return NULL;
}

/* The defaults of the Model Zoo's create_initializer for kind k. */
static void init_defaults(const struct init_kind *k, model_init *out)
{
    model_init d;
    memset(&d, 0, sizeof(d));
    const char *n = k->canon;
    snprintf(d.name, sizeof(d.name), "%s", n);
    if (!strcmp(n, "uniform")) {
        d.a = -0.05;
        d.b = 0.05;
    } else if (!strcmp(n, "normal") || !strcmp(n, "truncated_normal")) {
        d.std = 0.05; /* truncated_normal's a and b follow std: after the parameters */
    } else if (!strcmp(n, "xavier_normal") || !strcmp(n, "xavier_uniform")) {
        d.gain = 1.0;
    } else if (!strcmp(n, "variance_scaling") || !strcmp(n, "lecun_normal") ||
               !strcmp(n, "lecun_uniform")) {
        d.scale = 1.0;
        memcpy(d.mode, "fan_in", sizeof("fan_in"));
        if (strcmp(n, "lecun_uniform") != 0)
            memcpy(d.distribution, "truncated_normal", sizeof("truncated_normal"));
        else
            memcpy(d.distribution, "uniform", sizeof("uniform"));
    } else if (!strncmp(n, "kaiming_", 8)) {
        memcpy(d.mode, "fan_in", sizeof("fan_in"));
        memcpy(d.nonlinearity, "leaky_relu", sizeof("leaky_relu"));
    }
    *out = d;
}

/* Checks a resolved initializer: its modes and names known, its numbers
 * finite and in range. Returns NULL or what is wrong. */
static const char *init_check(const model_init *in)
{
    const char *n = in->name;
    double g;
    const double nums[] = {in->val, in->a, in->b, in->mean, in->std, in->gain, in->scale};
    for (size_t i = 0; i < ARRAY_SIZE(nums); i++)
        if (!isfinite(nums[i]))
            return "a parameter is not a finite number";
    if (!strcmp(n, "uniform") && !(in->a <= in->b))
        return "a must not be above b";
    if (!strcmp(n, "normal") && !(in->std >= 0))
        return "std must be >= 0";
    if (!strcmp(n, "truncated_normal") && (!(in->std > 0) || !(in->a < in->b)))
        return "std must be > 0 and a below b";
    if (!strcmp(n, "variance_scaling") || !strcmp(n, "lecun_normal") || !strcmp(n, "lecun_uniform")) {
        if (!(in->scale > 0))
            return "scale must be > 0";
        if (strcmp(in->mode, "fan_in") && strcmp(in->mode, "fan_out") && strcmp(in->mode, "fan_avg"))
            return "mode must be one of fan_in|fan_out|fan_avg";
        if (strcmp(in->distribution, "truncated_normal") && strcmp(in->distribution, "normal") &&
            strcmp(in->distribution, "uniform"))
            return "distribution must be one of truncated_normal|normal|uniform";
    }
    if (!strncmp(n, "kaiming_", 8)) {
        if (strcmp(in->mode, "fan_in") && strcmp(in->mode, "fan_out"))
            return "mode must be one of fan_in|fan_out";
        if (model_init_gain(in->nonlinearity, in->a, true, &g) < 0)
            return "nonlinearity must be one of linear|conv1d|conv2d|conv3d|conv_transpose1d|"
                   "conv_transpose2d|conv_transpose3d|sigmoid|tanh|relu|leaky_relu|selu";
    }
    return NULL;
}

/* One parameter's value: a number (or a nonlinearity's name, its gain), or
 * a string for mode, distribution and nonlinearity. */
static int init_param(const toml_value *v, enum ip_id id, const char *iname, const char *key,
                      model_init *out, char *err, size_t errlen)
{
    const char *src = toml_source_name(v);
    toml_pos pos = toml_pos_of(v);
    toml_type ty = toml_type_of(v);
    if (id == IP_MODE || id == IP_DISTRIBUTION || id == IP_NONLINEARITY) {
        if (ty != TOML_STRING)
            return toml_errorf(err, errlen, src, pos, "initializer \"%s\": %s: expected a string, "
                               "found %s", iname, key, toml_type_name(ty));
        char *dst = id == IP_MODE ? out->mode : id == IP_DISTRIBUTION ? out->distribution
                                                                        : out->nonlinearity;
        size_t size = id == IP_MODE ? sizeof(out->mode) : id == IP_DISTRIBUTION
                                                              ? sizeof(out->distribution)
                                                              : sizeof(out->nonlinearity);
        const char *s = toml_string(v);
        double g;
        bool ok = id == IP_NONLINEARITY ? model_init_gain(s, 0, false, &g) == 0
                : id == IP_MODE ? (!strcmp(s, "fan_in") || !strcmp(s, "fan_out") ||
                                   (!strcmp(s, "fan_avg") && !strncmp(iname, "variance", 8)))
                                : (!strcmp(s, "truncated_normal") || !strcmp(s, "normal") ||
                                   !strcmp(s, "uniform"));
        if (!ok || strlen(s) >= size)
            return toml_errorf(err, errlen, src, pos, "initializer \"%s\": %s: \"%s\" is not one of %s",
                               iname, key, s,
                               id == IP_NONLINEARITY ? "linear|conv1d|conv2d|conv3d|"
                                                       "conv_transpose1d|conv_transpose2d|"
                                                       "conv_transpose3d|sigmoid|tanh|relu|"
                                                       "leaky_relu|selu"
                               : id == IP_DISTRIBUTION ? "truncated_normal|normal|uniform"
                               : !strncmp(iname, "variance", 8) ? "fan_in|fan_out|fan_avg"
                                                                : "fan_in|fan_out");
        snprintf(dst, size, "%s", s);
        return 0;
    }
    double x;
    if (ty == TOML_FLOAT)
        x = toml_float(v);
    else if (ty == TOML_INTEGER)
        x = (double)toml_int(v);
    else if (ty == TOML_STRING && model_init_gain(toml_string(v), 0, false, &x) == 0)
        ; /* the Model Zoo reads a nonlinearity's name as its gain */
    else
        return toml_errorf(err, errlen, src, pos, "initializer \"%s\": %s: expected a number (or "
                           "a nonlinearity's name for its gain), found %s%s%s%s", iname, key,
                           toml_type_name(ty), ty == TOML_STRING ? " \"" : "",
                           ty == TOML_STRING ? toml_string(v) : "", ty == TOML_STRING ? "\"" : "");
    if (!isfinite(x))
        return toml_errorf(err, errlen, src, pos, "initializer \"%s\": %s: %g is not a finite number",
                           iname, key, x);
    double *dst[] = {[IP_VAL] = &out->val,     [IP_A] = &out->a,     [IP_B] = &out->b,
                     [IP_MEAN] = &out->mean,   [IP_STD] = &out->std, [IP_GAIN] = &out->gain,
                     [IP_SCALE] = &out->scale};
    *dst[id] = x;
    return 0;
}

int model_init_parse(const toml_value *v, model_init *out, char *err, size_t errlen)
{
    const char *src = toml_source_name(v);
    toml_type ty = toml_type_of(v);
    const toml_value *nv = v;
    if (ty == TOML_TABLE) {
        nv = toml_table_get(v, "name");
        if (!nv)
            return toml_errorf(err, errlen, src, toml_pos_of(v), "initializer: missing \"name\" "
                               "(one of %s)", init_list);
    } else if (ty != TOML_STRING) {
        return toml_errorf(err, errlen, src, toml_pos_of(v), "initializer: expected a name or a "
                           "table with a name and parameters, found %s", toml_type_name(ty));
    }
    if (toml_type_of(nv) != TOML_STRING)
        return toml_errorf(err, errlen, src, toml_pos_of(nv), "initializer: name: expected a "
                           "string, found %s", toml_type_name(toml_type_of(nv)));
    const char *iname = toml_string(nv);
    const struct init_kind *k = init_lookup(iname, true);
    if (!k || strlen(iname) != toml_string_len(nv))
        return toml_errorf(err, errlen, src, toml_pos_of(nv),
                           "unknown initializer \"%s\" (known: %s)", iname, init_list);
    init_defaults(k, out);
    bool a_given = false, b_given = false;
    for (size_t i = 0; ty == TOML_TABLE && i < toml_table_len(v); i++) {
        const char *key = toml_table_key(v, i);
        if (strcmp(key, "name") == 0)
            continue;
        int id = -1;
        for (int p = 0; p < IP_COUNT; p++)
            if (strcmp(ip_names[p], key) == 0)
                id = p;
        if (id < 0 || !(k->takes & B(id))) {
            if (k->params)
                return toml_errorf(err, errlen, src, toml_table_key_pos(v, i), "initializer "
                                   "\"%s\": unknown parameter \"%s\" (it takes %s)", k->name, key,
                                   k->params);
            return toml_errorf(err, errlen, src, toml_table_key_pos(v, i), "initializer \"%s\": "
                               "unknown parameter \"%s\" (it takes none)", k->name, key);
        }
        if (init_param(toml_table_value(v, i), (enum ip_id)id, k->name, key, out, err, errlen) < 0)
            return -EINVAL;
        a_given |= id == IP_A;
        b_given |= id == IP_B;
    }
    /* truncated_normal's cut-offs default to 2 std either side of 0 (not of
     * the mean), as the Model Zoo's */
    if (!strcmp(out->name, "truncated_normal")) {
        if (!a_given)
            out->a = -2.0 * out->std;
        if (!b_given)
            out->b = 2.0 * out->std;
    }
    const char *why = init_check(out);
    if (why)
        return toml_errorf(err, errlen, src, toml_pos_of(v), "initializer \"%s\": %s", k->name, why);
    return 0;
}

bool model_init_needs_fans(const model_init *in)
{
    return !strncmp(in->name, "xavier_", 7) || !strncmp(in->name, "kaiming_", 8) ||
           !strncmp(in->name, "lecun_", 6) || !strcmp(in->name, "variance_scaling") ||
           !strcmp(in->name, "he_normal");
}

int model_init_fans(const int64_t *dims, int ndim, uint64_t *fan_in, uint64_t *fan_out)
{
    if (ndim < 2)
        return -EINVAL;
    uint64_t r = 1;
    for (int d = 2; d < ndim; d++)
        r *= (uint64_t)dims[d];
    *fan_in = (uint64_t)dims[1] * r;
    *fan_out = (uint64_t)dims[0] * r;
    return 0;
}

/* The standard normal CDF. */
static double init__phi(double x)
{
    return 0.5 * erfc(-x / M_SQRT2);
}

/* Its inverse: Abramowitz and Stegun 26.2.23 (within 4.5e-4), then three
 * Halley steps on init__phi (each triples the digits). */
static double init__phi_inv(double p)
{
    if (!(p > 0))
        return -INFINITY;
    if (!(p < 1))
        return INFINITY;
    double q = p < 0.5 ? p : 1.0 - p;
    double t = sqrt(-2.0 * log(q));
    double x = t - (2.515517 + t * (0.802853 + t * 0.010328)) /
                       (1.0 + t * (1.432788 + t * (0.189269 + t * 0.001308)));
    if (p < 0.5)
        x = -x;
    for (int k = 0; k < 3; k++) {
        double e = init__phi(x) - p;
        double u = e * sqrt(2.0 * M_PI) * exp(x * x / 2.0);
        x -= u / (1.0 + x * u / 2.0);
    }
    return x;
}

/* Normal draws scaled: out[i] = mean + sd * z(lo + i). */
static void init__normal(double mean, double sd, uint64_t seed, uint64_t stream, uint64_t lo,
                         uint64_t hi, float *out)
{
    double z[512];
    for (uint64_t i0 = lo; i0 < hi; i0 += 512) {
        size_t len = (size_t)(hi - i0 < 512 ? hi - i0 : 512);
        rng_normal_n(seed, stream, i0, len, z);
        for (size_t i = 0; i < len; i++)
            out[i0 - lo + i] = (float)(mean == 0.0 ? sd * z[i] : mean + sd * z[i]);
    }
}

/* Uniform draws in [-bound, bound). */
static void init__symmetric(double bound, uint64_t seed, uint64_t stream, uint64_t lo,
                            uint64_t hi, float *out)
{
    for (uint64_t i = lo; i < hi; i++)
        out[i - lo] = (float)(bound * (2.0 * rng_uniform(seed, stream, i) - 1.0));
}

/* A normal of mean and sd cut to [a, b]: the uniform draw between the
 * CDF's values at a and b, through the inverse CDF, clamped (as the Model
 * Zoo's trunc_normal_). */
static void init__truncated(double mean, double sd, double a, double b, uint64_t seed,
                            uint64_t stream, uint64_t lo, uint64_t hi, float *out)
{
    double l = init__phi((a - mean) / sd), u = init__phi((b - mean) / sd);
    for (uint64_t i = lo; i < hi; i++) {
        double p = l + (u - l) * rng_uniform(seed, stream, i);
        double x = mean + sd * init__phi_inv(p);
        out[i - lo] = (float)(x < a ? a : x > b ? b : x);
    }
}

void model_init_fill(const model_init *in, uint64_t fan_in, uint64_t fan_out, uint64_t seed,
                     uint64_t stream, uint64_t lo, uint64_t hi, float *out)
{
    const char *n = in->name;
    double fi = (double)fan_in, fo = (double)fan_out;
    if (!strcmp(n, "zeros") || !strcmp(n, "ones") || !strcmp(n, "constant")) {
        float c = !strcmp(n, "ones") ? 1.0f : !strcmp(n, "zeros") ? 0.0f : (float)in->val;
        for (uint64_t i = lo; i < hi; i++)
            out[i - lo] = c;
    } else if (!strcmp(n, "uniform")) {
        for (uint64_t i = lo; i < hi; i++)
            out[i - lo] = (float)(in->a + (in->b - in->a) * rng_uniform(seed, stream, i));
    } else if (!strcmp(n, "normal")) {
        init__normal(in->mean, in->std, seed, stream, lo, hi, out);
    } else if (!strcmp(n, "truncated_normal")) {
        init__truncated(in->mean, in->std, in->a, in->b, seed, stream, lo, hi, out);
    } else if (!strcmp(n, "he_normal")) {
        /* the planner's default, as it always was: sqrt(2 / fan_in) */
        init__normal(0.0, sqrt(2.0 / (fi > 0 ? fi : 1.0)), seed, stream, lo, hi, out);
    } else if (!strcmp(n, "xavier_normal")) {
        init__normal(0.0, in->gain * sqrt(2.0 / (fi + fo > 0 ? fi + fo : 1.0)), seed, stream, lo,
                     hi, out);
    } else if (!strncmp(n, "kaiming_", 8)) {
        double gain = 1.0, fan = !strcmp(in->mode, "fan_out") ? fo : fi;
        model_init_gain(in->nonlinearity, in->a, true, &gain);
        double sd = gain / sqrt(fan > 0 ? fan : 1.0);
        if (!strcmp(n, "kaiming_normal"))
            init__normal(0.0, sd, seed, stream, lo, hi, out);
        else
            init__symmetric(sqrt(3.0) * sd, seed, stream, lo, hi, out);
    } else if (!strcmp(n, "variance_scaling") || !strncmp(n, "lecun_", 6)) {
        double denom = !strcmp(in->mode, "fan_out") ? fo
                       : !strcmp(in->mode, "fan_avg") ? (fi + fo) / 2.0 : fi;
        double var = in->scale / (denom > 1.0 ? denom : 1.0);
        if (!strcmp(in->distribution, "normal"))
            init__normal(0.0, sqrt(var), seed, stream, lo, hi, out);
        else if (!strcmp(in->distribution, "uniform"))
            init__symmetric(sqrt(3.0 * var), seed, stream, lo, hi, out);
        else /* the Model Zoo's: std corrected for the cut at 2 std
              * (0.8796...: the std of a standard normal cut there), but
              * the cut made at -2 and 2 themselves, trunc_normal_'s
              * defaults */
            init__truncated(0.0, sqrt(var) / 0.87962566103423978, -2.0, 2.0, seed, stream, lo, hi,
                            out);
    } else { /* xavier_uniform */
        init__symmetric(in->gain * sqrt(6.0 / (fi + fo > 0 ? fi + fo : 1.0)), seed, stream, lo, hi,
                        out);
    }
}

int model_init_from_plan(const Appliance__PlanTensor *pt, model_init *out)
{
    memset(out, 0, sizeof(*out));
    const Appliance__PlanInit *pi = pt->initializer;
    if (!pi) {
        /* the planner's defaults */
        const char *n = pt->init ? pt->init : "";
        if (strcmp(n, "he_normal") && strcmp(n, "xavier_uniform") && strcmp(n, "zeros") &&
            strcmp(n, "ones"))
            return -EINVAL;
        snprintf(out->name, sizeof(out->name), "%s", n);
        out->gain = 1.0;
        return 0;
    }
    const struct init_kind *k = init_lookup(pi->name, false);
    if (!k || strcmp(k->canon, pi->name) != 0)
        return -EINVAL;
    snprintf(out->name, sizeof(out->name), "%s", k->canon);
    out->val = pi->val;
    out->a = pi->a;
    out->b = pi->b;
    out->mean = pi->mean;
    out->std = pi->std;
    out->gain = pi->gain;
    out->scale = pi->scale;
    const char *strs[3] = {pi->mode, pi->distribution, pi->nonlinearity};
    char *dst[3] = {out->mode, out->distribution, out->nonlinearity};
    size_t size[3] = {sizeof(out->mode), sizeof(out->distribution), sizeof(out->nonlinearity)};
    for (int i = 0; i < 3; i++) {
        if (strs[i] && strlen(strs[i]) >= size[i])
            return -EINVAL;
        snprintf(dst[i], size[i], "%s", strs[i] ? strs[i] : "");
    }
    return init_check(out) ? -EINVAL : 0;
}

void model_init_to_plan(const model_init *in, Appliance__PlanInit *pi)
{
    appliance__plan_init__init(pi);
    pi->name = (char *)in->name;
    pi->val = in->val;
    pi->a = in->a;
    pi->b = in->b;
    pi->mean = in->mean;
    pi->std = in->std;
    pi->gain = in->gain;
    pi->scale = in->scale;
    pi->mode = (char *)in->mode;
    pi->distribution = (char *)in->distribution;
    pi->nonlinearity = (char *)in->nonlinearity;
}
