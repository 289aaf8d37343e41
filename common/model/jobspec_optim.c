/* [optimizer]: the learning rate as a number, one of the Cerebras Model
 * Zoo's schedules or a list of them run one after another, and the keys the
 * Model Zoo spells its own way. The schedules become optim_segments: the
 * closed forms of cerebras.pytorch.optim.lr_scheduler (optim.h). */
#include "jobspec_optim.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "nearest.h"
#include "optim.h"
#include "util.h"

/* The parameters of a schedule, each under one or more names (the Model
 * Zoo's releases spelt some two or three ways). */
enum sp_id {
    SP_SCHEDULER,
    SP_MAIN,
    SP_INITIAL,
    SP_END,
    SP_ETA_MIN,
    SP_TOTAL,
    SP_POWER,
    SP_CYCLE,
    SP_RATE,
    SP_STAIRCASE,
    SP_EXPONENT,
    SP_SCALE,
    SP_WARMUP,
    SP_STEP_SIZE,
    SP_TMAX,
    SP_VALUES,
    SP_MILESTONES,
    SP_COUNT,
};

enum sp_type { SPT_STRING, SPT_NUM, SPT_INT, SPT_BOOL, SPT_NUMS, SPT_INTS };

static const struct {
    const char *names[3]; /* the names it goes by, the usual one first */
    enum sp_type type;
    double min, max;      /* numbers: inclusive range */
} sp_spec[SP_COUNT] = {
    [SP_SCHEDULER] = {{"scheduler"}, SPT_STRING, 0, 0},
    [SP_MAIN] = {{"main_scheduler"}, SPT_STRING, 0, 0},
    [SP_INITIAL] = {{"initial_learning_rate", "learning_rate"}, SPT_NUM, 0, 1e6},
    [SP_END] = {{"end_learning_rate"}, SPT_NUM, 0, 1e6},
    [SP_ETA_MIN] = {{"eta_min"}, SPT_NUM, 0, 1e6},
    [SP_TOTAL] = {{"total_iters", "decay_steps", "steps"}, SPT_INT, 1, 1e12},
    [SP_POWER] = {{"power"}, SPT_NUM, 0, 1e3},
    [SP_CYCLE] = {{"cycle"}, SPT_BOOL, 0, 0},
    [SP_RATE] = {{"decay_rate", "gamma"}, SPT_NUM, 0, 1e6},
    [SP_STAIRCASE] = {{"staircase"}, SPT_BOOL, 0, 0},
    [SP_EXPONENT] = {{"step_exponent"}, SPT_NUM, 0, 1e3},
    [SP_SCALE] = {{"scale"}, SPT_NUM, 0, 1e6},
    [SP_WARMUP] = {{"warmup_steps"}, SPT_INT, 1, 1e12},
    [SP_STEP_SIZE] = {{"step_size"}, SPT_INT, 1, 1e12},
    [SP_TMAX] = {{"T_max", "t_max"}, SPT_INT, 1, 1e12},
    [SP_VALUES] = {{"learning_rates", "values"}, SPT_NUMS, 0, 1e6},
    [SP_MILESTONES] = {{"milestones", "boundaries"}, SPT_INTS, 1, 1e12},
};

#define B(x) (1u << (x))
#define SK_PIECEWISE (-1) /* runs of constants between milestones */
#define SK_MULTISTEP (-2) /* initial, times gamma at each milestone */

/* The schedulers a job may name, as the Model Zoo names them. */
static const struct sched_kind {
    const char *name;   /* the Model Zoo's class name without "LR" */
    int kind;           /* optim_sched, SK_PIECEWISE or SK_MULTISTEP */
    bool power_one;     /* Linear: polynomial of power 1 */
    unsigned takes;     /* B(SP_...) of the parameters it takes */
    unsigned needs;     /* those it must be given */
    const char *params; /* what it takes, for messages */
} sched_kinds[] = {
    {"Constant", OPTIM_SCHED_CONSTANT, false, B(SP_INITIAL) | B(SP_TOTAL), B(SP_INITIAL),
     "learning_rate, total_iters"},
    {"Linear", OPTIM_SCHED_POLYNOMIAL, true, B(SP_INITIAL) | B(SP_END) | B(SP_TOTAL) | B(SP_CYCLE),
     B(SP_INITIAL) | B(SP_END) | B(SP_TOTAL),
     "initial_learning_rate, end_learning_rate, total_iters, cycle"},
    {"Polynomial", OPTIM_SCHED_POLYNOMIAL, false,
     B(SP_INITIAL) | B(SP_END) | B(SP_TOTAL) | B(SP_POWER) | B(SP_CYCLE),
     B(SP_INITIAL) | B(SP_END) | B(SP_TOTAL),
     "initial_learning_rate, end_learning_rate, total_iters, power, cycle"},
    {"Exponential", OPTIM_SCHED_EXPONENTIAL, false,
     B(SP_INITIAL) | B(SP_TOTAL) | B(SP_RATE) | B(SP_STAIRCASE),
     B(SP_INITIAL) | B(SP_TOTAL) | B(SP_RATE),
     "initial_learning_rate, total_iters, decay_rate, staircase"},
    {"InverseExponentialTimeDecay", OPTIM_SCHED_INVERSE_EXP_TIME, false,
     B(SP_INITIAL) | B(SP_EXPONENT) | B(SP_TOTAL) | B(SP_RATE) | B(SP_STAIRCASE),
     B(SP_INITIAL) | B(SP_EXPONENT) | B(SP_TOTAL) | B(SP_RATE),
     "initial_learning_rate, step_exponent, total_iters, decay_rate, staircase"},
    {"InverseSquareRootDecay", OPTIM_SCHED_INVERSE_SQRT, false,
     B(SP_INITIAL) | B(SP_SCALE) | B(SP_WARMUP), 0,
     "initial_learning_rate, scale, warmup_steps"},
    {"CosineDecay", OPTIM_SCHED_COSINE_DECAY, false, B(SP_INITIAL) | B(SP_END) | B(SP_TOTAL),
     B(SP_INITIAL) | B(SP_END) | B(SP_TOTAL),
     "initial_learning_rate, end_learning_rate, total_iters"},
    {"PiecewiseConstant", SK_PIECEWISE, false, B(SP_INITIAL) | B(SP_VALUES) | B(SP_MILESTONES),
     B(SP_VALUES) | B(SP_MILESTONES), "learning_rates, milestones, initial_learning_rate"},
    {"Step", OPTIM_SCHED_STEP, false, B(SP_INITIAL) | B(SP_STEP_SIZE) | B(SP_RATE),
     B(SP_INITIAL) | B(SP_STEP_SIZE) | B(SP_RATE), "initial_learning_rate, step_size, gamma"},
    {"MultiStep", SK_MULTISTEP, false, B(SP_INITIAL) | B(SP_RATE) | B(SP_MILESTONES),
     B(SP_INITIAL) | B(SP_RATE) | B(SP_MILESTONES), "initial_learning_rate, gamma, milestones"},
    {"CosineAnnealing", OPTIM_SCHED_COSINE_ANNEALING, false,
     B(SP_INITIAL) | B(SP_TMAX) | B(SP_ETA_MIN), B(SP_INITIAL) | B(SP_TMAX),
     "initial_learning_rate, T_max, eta_min"},
};

static const char sched_list[] = "Constant, Linear, Polynomial, Exponential, "
                                 "InverseExponentialTimeDecay, InverseSquareRootDecay, CosineDecay, "
                                 "PiecewiseConstant, Step, MultiStep, CosineAnnealing";

/* The name a message gives a parameter of sk. */
static const char *sp_display(const struct sched_kind *sk, enum sp_id id)
{
    if (id == SP_INITIAL && sk->kind == OPTIM_SCHED_CONSTANT)
        return "learning_rate";
    if (id == SP_RATE && (sk->kind == OPTIM_SCHED_STEP || sk->kind == SK_MULTISTEP))
        return "gamma";
    return sp_spec[id].names[0];
}

/* The scheduler called name: in any case, with or without "LR". */
static const struct sched_kind *sched_lookup(const char *name)
{
    size_t n = strlen(name);
    if (n > 2 && strcasecmp(name + n - 2, "lr") == 0)
        n -= 2;
    for (size_t i = 0; i < ARRAY_SIZE(sched_kinds); i++)
        if (sched_kinds[i].kind < 0 && strlen(sched_kinds[i].name) == n &&
            strncasecmp(name, sched_kinds[i].name, n) == 0)
            return &sched_kinds[i];
    optim_sched kind;
    bool one;
    if (optim_sched_from_name(name, &kind, &one) < 0)
        return NULL;
    for (size_t i = 0; i < ARRAY_SIZE(sched_kinds); i++)
        if (sched_kinds[i].kind == (int)kind && sched_kinds[i].power_one == one)
            return &sched_kinds[i];
    return NULL;
}

/* A number (an integer will do); false for anything else. */
static bool num_of(const toml_value *v, double *x)
{
    if (toml_type_of(v) == TOML_FLOAT)
        *x = toml_float(v);
    else if (toml_type_of(v) == TOML_INTEGER)
        *x = (double)toml_int(v);
    else
        return false;
    return true;
}

/* One schedule's parameters, as given. */
typedef struct sched_args {
    const toml_value *v[SP_COUNT]; /* the value of each, or NULL */
    const char *key[SP_COUNT];     /* the name it was given by */
    double num[SP_COUNT];          /* numbers and integers, read */
} sched_args;

/* Checks the value of one parameter against its type and range. */
static int sched_value(const toml_value *v, enum sp_id id, const char *where, const char *key,
                       double *out, char *err, size_t errlen)
{
    const char *src = toml_source_name(v);
    toml_pos pos = toml_pos_of(v);
    toml_type ty = toml_type_of(v);
    double x = 0;
    switch (sp_spec[id].type) {
    case SPT_STRING:
        if (ty != TOML_STRING)
            return toml_errorf(err, errlen, src, pos, "%s.%s: expected a string, found %s", where,
                               key, toml_type_name(ty));
        return 0;
    case SPT_BOOL:
        if (ty != TOML_BOOL)
            return toml_errorf(err, errlen, src, pos, "%s.%s: expected true or false, found %s",
                               where, key, toml_type_name(ty));
        *out = toml_bool(v);
        return 0;
    case SPT_INT:
        if (ty != TOML_INTEGER)
            return toml_errorf(err, errlen, src, pos, "%s.%s: expected an integer, found %s",
                               where, key, toml_type_name(ty));
        x = (double)toml_int(v);
        if (x < sp_spec[id].min || x > sp_spec[id].max)
            return toml_errorf(err, errlen, src, pos, "%s.%s: %lld is out of range [%.0f, %.0f]",
                               where, key, (long long)toml_int(v), sp_spec[id].min,
                               sp_spec[id].max);
        *out = x;
        return 0;
    case SPT_NUM:
        if (!num_of(v, &x))
            return toml_errorf(err, errlen, src, pos, "%s.%s: expected a number, found %s", where,
                               key, toml_type_name(ty));
        if (!isfinite(x) || x < sp_spec[id].min || x > sp_spec[id].max)
            return toml_errorf(err, errlen, src, pos, "%s.%s: %g is out of range [%g, %g]", where,
                               key, x, sp_spec[id].min, sp_spec[id].max);
        *out = x;
        return 0;
    case SPT_NUMS:
    case SPT_INTS: {
        bool ints = sp_spec[id].type == SPT_INTS;
        if (ty != TOML_ARRAY || toml_array_len(v) == 0)
            return toml_errorf(err, errlen, src, pos, "%s.%s: expected a list of %s, found %s",
                               where, key, ints ? "integers" : "numbers",
                               ty == TOML_ARRAY ? "an empty list" : toml_type_name(ty));
        for (size_t i = 0; i < toml_array_len(v); i++) {
            const toml_value *e = toml_array_at(v, i);
            toml_pos epos = toml_pos_of(e);
            bool ok = ints ? toml_type_of(e) == TOML_INTEGER : num_of(e, &x);
            if (!ok)
                return toml_errorf(err, errlen, src, epos, "%s.%s[%zu]: expected %s, found %s",
                                   where, key, i, ints ? "an integer" : "a number",
                                   toml_type_name(toml_type_of(e)));
            if (ints)
                x = (double)toml_int(e);
            if (!isfinite(x) || x < sp_spec[id].min || x > sp_spec[id].max)
                return toml_errorf(err, errlen, src, epos, "%s.%s[%zu]: %g is out of range [%g, %g]",
                                   where, key, i, x, sp_spec[id].min, sp_spec[id].max);
            /* each after the one before */
            if (ints && i > 0 && toml_int(e) <= toml_int(toml_array_at(v, i - 1)))
                return toml_errorf(err, errlen, src, epos, "%s.%s[%zu]: %lld is not after the "
                                   "milestone before it (%lld): milestones must increase",
                                   where, key, i, (long long)toml_int(e),
                                   (long long)toml_int(toml_array_at(v, i - 1)));
        }
        return 0;
    }
    }
    return 0;
}

/* The value of element i of a list of numbers. */
static double nums_at(const toml_value *a, size_t i)
{
    double x = 0;
    num_of(toml_array_at(a, i), &x);
    return x;
}

/* Appends one segment, or fails when the list is full. */
static int seg_push(const jobspec_optim_dest *j, const optim_segment *s, const toml_value *at, const char *where,
                    char *err, size_t errlen)
{
    if ((*j->n_lr_segments) >= OPTIM_MAX_SEGMENTS)
        return toml_errorf(err, errlen, toml_source_name(at), toml_pos_of(at),
                           "%s: more than %d schedules (a PiecewiseConstant or MultiStep counts one "
                           "per piece)", where, OPTIM_MAX_SEGMENTS);
    j->lr_segments[(*j->n_lr_segments)++] = *s;
    return 0;
}

/* One schedule, the table t (where names it in messages: "optimizer.learning_rate" or
 * "optimizer.learning_rate[1]"); last: the last of its list. Appends its segments to j. */
static int sched_read(const toml_value *t, const char *where, bool last, const jobspec_optim_dest *j, char *err,
                      size_t errlen)
{
    const char *src = toml_source_name(t);
    if (toml_type_of(t) != TOML_TABLE)
        return toml_errorf(err, errlen, src, toml_pos_of(t),
                           "%s: expected a schedule (a table with a \"scheduler\"), found %s",
                           where, toml_type_name(toml_type_of(t)));
    const toml_value *sv = toml_table_get(t, "scheduler");
    if (!sv)
        return toml_errorf(err, errlen, src, toml_pos_of(t), "%s: missing \"scheduler\" (one of %s)",
                           where, sched_list);
    double unused;
    if (sched_value(sv, SP_SCHEDULER, where, "scheduler", &unused, err, errlen) < 0)
        return -EINVAL;
    const struct sched_kind *sk = sched_lookup(toml_string(sv));
    if (!sk)
        return toml_errorf(err, errlen, src, toml_pos_of(sv),
                           "%s.scheduler: unknown scheduler \"%s\" (known: %s)", where,
                           toml_string(sv), sched_list);
    sched_args a;
    memset(&a, 0, sizeof(a));
    for (size_t i = 0; i < toml_table_len(t); i++) {
        const char *key = toml_table_key(t, i);
        toml_pos kpos = toml_table_key_pos(t, i);
        int id = -1;
        for (int p = 0; p < SP_COUNT && id < 0; p++)
            for (int n = 0; n < 3 && sp_spec[p].names[n]; n++)
                if (strcmp(sp_spec[p].names[n], key) == 0)
                    id = p;
        unsigned takes = sk->takes | B(SP_SCHEDULER) | B(SP_MAIN);
        if (id < 0 || !(takes & B(id)))
            return toml_errorf(err, errlen, src, kpos, "%s.%s: not a parameter of %s (it takes %s)",
                               where, key, sk->name, sk->params);
        if (a.v[id]) {
            toml_pos first = toml_pos_of(a.v[id]);
            return toml_errorf(err, errlen, src, kpos, "%s.%s: the same parameter as %s (line %d); "
                               "give one of them", where, key, a.key[id], first.line);
        }
        a.v[id] = toml_table_value(t, i);
        a.key[id] = key;
        if (sched_value(a.v[id], (enum sp_id)id, where, key, &a.num[id], err, errlen) < 0)
            return -EINVAL;
    }
    for (int p = 0; p < SP_COUNT; p++)
        if ((sk->needs & B(p)) && !a.v[p])
            return toml_errorf(err, errlen, src, toml_pos_of(t), "%s: %s needs %s", where,
                               sk->name, sp_display(sk, (enum sp_id)p));
    if (a.v[SP_MAIN]) {
        const char *m = toml_string(a.v[SP_MAIN]);
        if (strcasecmp(m, "chained") == 0)
            return toml_errorf(err, errlen, src, toml_pos_of(a.v[SP_MAIN]),
                               "%s.main_scheduler: \"chained\" (the Model Zoo's ChainedScheduler, "
                               "which multiplies the schedules) is not available in this version; "
                               "\"sequential\" is", where);
        if (strcasecmp(m, "sequential") != 0)
            return toml_errorf(err, errlen, src, toml_pos_of(a.v[SP_MAIN]),
                               "%s.main_scheduler: \"%s\" is not one of sequential|chained", where,
                               m);
    }
    if (!last && !(sk->takes & B(SP_TOTAL)))
        return toml_errorf(err, errlen, src, toml_pos_of(sv),
                           "%s: %s runs to the end of training: only the last schedule of a list "
                           "can be one", where, sk->name);
    if (!last && !a.v[SP_TOTAL])
        return toml_errorf(err, errlen, src, toml_pos_of(t),
                           "%s: needs total_iters, the steps it runs before the next schedule of "
                           "the list starts (every one but the last)", where);

    optim_segment s;
    memset(&s, 0, sizeof(s));
    s.initial = a.v[SP_INITIAL] ? a.num[SP_INITIAL] : 1.0;
    s.total_iters = (int64_t)a.num[SP_TOTAL];
    if (sk->kind == SK_PIECEWISE || sk->kind == SK_MULTISTEP) {
        /* runs of constants: the first to the first milestone, each next
         * to its milestone, the last to the end (the Model Zoo's
         * PiecewiseConstantLR is this list; MultiStepLR's closed form the
         * same values). A PiecewiseConstant's initial_learning_rate is
         * not used (its first value is), as in the Model Zoo. */
        const toml_value *ms = a.v[SP_MILESTONES];
        size_t nm = toml_array_len(ms);
        if (sk->kind == SK_PIECEWISE && toml_array_len(a.v[SP_VALUES]) != nm + 1)
            return toml_errorf(err, errlen, src, toml_pos_of(a.v[SP_VALUES]),
                               "%s.%s: %zu rates for %zu milestones: give one more rate than "
                               "milestones (the first before the first milestone, the last "
                               "from the last one on)", where, a.key[SP_VALUES],
                               toml_array_len(a.v[SP_VALUES]), nm);
        int64_t prev = 0;
        for (size_t i = 0; i <= nm; i++) {
            optim_segment c;
            memset(&c, 0, sizeof(c));
            c.kind = OPTIM_SCHED_CONSTANT;
            c.initial = sk->kind == SK_PIECEWISE ? nums_at(a.v[SP_VALUES], i)
                                                 : s.initial * pow(a.num[SP_RATE], (double)i);
            if (i < nm) {
                int64_t m = toml_int(toml_array_at(ms, i));
                c.total_iters = m - prev;
                prev = m;
            }
            if (seg_push(j, &c, t, where, err, errlen) < 0)
                return -EINVAL;
        }
        return 0;
    }
    s.kind = (optim_sched)sk->kind;
    switch (s.kind) {
    case OPTIM_SCHED_POLYNOMIAL:
        s.end = a.num[SP_END];
        s.power = sk->power_one || !a.v[SP_POWER] ? 1.0 : a.num[SP_POWER];
        break;
    case OPTIM_SCHED_EXPONENTIAL:
    case OPTIM_SCHED_INVERSE_EXP_TIME:
        s.rate = a.num[SP_RATE];
        s.staircase = a.num[SP_STAIRCASE] != 0;
        s.exponent = a.num[SP_EXPONENT];
        break;
    case OPTIM_SCHED_INVERSE_SQRT:
        s.scale = a.v[SP_SCALE] ? a.num[SP_SCALE] : 1.0;
        s.period = a.v[SP_WARMUP] ? (int64_t)a.num[SP_WARMUP] : 1;
        break;
    case OPTIM_SCHED_COSINE_DECAY:
        s.end = a.num[SP_END];
        break;
    case OPTIM_SCHED_STEP:
        s.rate = a.num[SP_RATE];
        s.period = (int64_t)a.num[SP_STEP_SIZE];
        break;
    case OPTIM_SCHED_COSINE_ANNEALING:
        s.end = a.num[SP_ETA_MIN];
        s.period = (int64_t)a.num[SP_TMAX];
        break;
    case OPTIM_SCHED_CONSTANT:
    default:
        break;
    }
    return seg_push(j, &s, t, where, err, errlen);
}

/* learning_rate: a number (or a string of one, as a YAML reader may leave
 * "1e-5"), one schedule, or a list of them. */
static int lr_read(const toml_value *v, const jobspec_optim_dest *j, char *err, size_t errlen)
{
    const char *src = toml_source_name(v);
    toml_pos pos = toml_pos_of(v);
    toml_type ty = toml_type_of(v);
    double x;
    if (ty == TOML_TABLE)
        return sched_read(v, "optimizer.learning_rate", true, j, err, errlen);
    if (ty == TOML_ARRAY) {
        size_t n = toml_array_len(v);
        if (n == 0)
            return toml_errorf(err, errlen, src, pos,
                               "optimizer.learning_rate: an empty list of schedules");
        for (size_t i = 0; i < n; i++) {
            char where[64];
            snprintf(where, sizeof(where), "optimizer.learning_rate[%zu]", i);
            if (sched_read(toml_array_at(v, i), where, i + 1 == n, j, err, errlen) < 0)
                return -EINVAL;
        }
        return 0;
    }
    if (ty == TOML_STRING) {
        char *end;
        const char *s = toml_string(v);
        x = strtod(s, &end);
        if (!s[0] || *end || end == s)
            return toml_errorf(err, errlen, src, pos, "optimizer.learning_rate: \"%s\" is not a "
                               "number (a rate, a schedule or a list of schedules)", s);
    } else if (!num_of(v, &x)) {
        return toml_errorf(err, errlen, src, pos, "optimizer.learning_rate: expected a number, a "
                           "schedule or a list of schedules, found %s", toml_type_name(ty));
    }
    if (!isfinite(x) || x < 0 || x > 1e6)
        return toml_errorf(err, errlen, src, pos,
                           "optimizer.learning_rate: %g is out of range [0, 1e+06]", x);
    (*j->learning_rate) = x;
    return 0;
}

int jobspec_optimizer(const toml_value *t, const jobspec_optim_dest *j, char *err, size_t errlen)
{
    const char *src = toml_source_name(t);
    const toml_value *v;
    if ((v = toml_table_get(t, "optimizer_type"))) {
        static const char choices[] = "sgd|adam|adamw";
        toml_pos pos = toml_pos_of(v);
        if (toml_type_of(v) != TOML_STRING)
            return toml_errorf(err, errlen, src, pos,
                               "optimizer.optimizer_type: expected a string, found %s",
                               toml_type_name(toml_type_of(v)));
        const char *s = toml_string(v);
        optim_type type;
        char near[16];
        if (optim_type_from_name(s, &type) < 0) {
            if (nearest_choice(s, choices, near, sizeof(near)))
                return toml_errorf(err, errlen, src, pos,
                                   "optimizer.optimizer_type: \"%s\" is not one of SGD, Adam, "
                                   "AdamW (any case) (did you mean \"%s\"?)", s, near);
            return toml_errorf(err, errlen, src, pos, "optimizer.optimizer_type: \"%s\" is not "
                               "one of SGD, Adam, AdamW (any case)", s);
        }
        snprintf(j->optimizer_type, j->type_size, "%s", optim_type_name(type));
    }
    if ((v = toml_table_get(t, "weight_decay_rate"))) {
        double x;
        toml_pos pos = toml_pos_of(v);
        long k = toml_table_find(t, "weight_decay");
        if (k >= 0)
            return toml_errorf(err, errlen, src, toml_table_key_pos(t, (size_t)toml_table_find(t, "weight_decay_rate")),
                               "optimizer.weight_decay_rate: the same as optimizer.weight_decay "
                               "(line %d); give one of them", toml_table_key_pos(t, (size_t)k).line);
        if (!num_of(v, &x))
            return toml_errorf(err, errlen, src, pos, "optimizer.weight_decay_rate: expected a "
                               "number, found %s", toml_type_name(toml_type_of(v)));
        if (!isfinite(x) || x < 0 || x > 1e6)
            return toml_errorf(err, errlen, src, pos,
                               "optimizer.weight_decay_rate: %g is out of range [0, 1e+06]", x);
        (*j->weight_decay) = x;
    }
    if ((v = toml_table_get(t, "loss_scaling_factor"))) {
        double x;
        toml_pos pos = toml_pos_of(v);
        if (toml_type_of(v) == TOML_STRING && strcmp(toml_string(v), "dynamic") == 0) {
            (*j->loss_scaling_factor) = 0;
        } else if (!num_of(v, &x) || !isfinite(x) || x < 1 || x > 1e12) {
            return toml_errorf(err, errlen, src, pos, "optimizer.loss_scaling_factor: expected "
                               "\"dynamic\" or a number >= 1");
        } else {
            (*j->loss_scaling_factor) = x;
        }
    }
    if ((v = toml_table_get(t, "learning_rate")) && lr_read(v, j, err, errlen) < 0)
        return -EINVAL;
    if ((*j->n_lr_segments) > 0) {
        /* the appliance's own schedule keys say what the list says */
        static const char *const own[] = {"lr_schedule", "warmup_steps", "decay_steps",
                                          "end_learning_rate", "step_size", "gamma"};
        toml_pos lp = toml_table_key_pos(t, (size_t)toml_table_find(t, "learning_rate"));
        for (size_t i = 0; i < ARRAY_SIZE(own); i++) {
            long k = toml_table_find(t, own[i]);
            if (k >= 0)
                return toml_errorf(err, errlen, src, toml_table_key_pos(t, (size_t)k),
                                   "optimizer.%s: goes with a learning_rate number, not with the "
                                   "schedule of optimizer.learning_rate (line %d): give it as "
                                   "a schedule of the list (a warm-up: a Linear from 0)", own[i],
                                   lp.line);
        }
        if (optim_segments_check(j->lr_segments, (*j->n_lr_segments)) < 0)
            return toml_errorf(err, errlen, src, lp, "optimizer.learning_rate: not a schedule the "
                               "optimizer can follow");
        optim_config c;
        optim_config_defaults(&c, OPTIM_SGD);
        c.nsegments = (*j->n_lr_segments);
        memcpy(c.segments, j->lr_segments, sizeof(c.segments));
        (*j->learning_rate) = optim_lr_at(&c, 0); /* its first rate, for people reading the spec */
    }
    long k = toml_table_find(t, "correct_bias");
    if (k >= 0 && !(*j->correct_bias) && strcmp(j->optimizer_type, "sgd") == 0)
        return toml_errorf(err, errlen, src, toml_table_key_pos(t, (size_t)k),
                           "optimizer.correct_bias: only Adam and AdamW correct a bias; SGD has "
                           "none to correct");
    return 0;
}
