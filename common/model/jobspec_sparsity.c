/* [sparsity] -> jobspec_sparsity, and its patterns resolved over the
 * model's tensors (jobspec_sparsity.h). */
#include "jobspec_sparsity.h"

#include <errno.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nearest.h"
#include "util.h"

static const char *const sp__keys[] = {"type", "sparsity", "init_method", "param_name_patterns",
                                       "schedule", "drop_fraction", "seed", "algorithm",
                                       "update", "param_filter", "compressed_streams",
                                       "init_scale"};

/* The Model Zoo's later spellings (its 2.2 releases on): algorithm for
 * type, update for schedule, param_filter (globs) for param_name_patterns. */
static const char *const sp__aliases[][2] = {
    {"algorithm", "type"}, {"update", "schedule"}, {"param_filter", "param_name_patterns"}};

/* The value of key k of t, or of its alias (both given: refused). */
static int sp__get(const toml_value *t, const char *k, const toml_value **out, const char **name,
                   char *err, size_t errlen)
{
    *out = toml_table_get(t, k);
    *name = k;
    for (size_t a = 0; a < ARRAY_SIZE(sp__aliases); a++) {
        if (strcmp(sp__aliases[a][1], k) != 0)
            continue;
        const toml_value *v = toml_table_get(t, sp__aliases[a][0]);
        if (v && *out)
            return toml_errorf(err, errlen, toml_source_name(t),
                               toml_table_key_pos(t, (size_t)toml_table_find(t, sp__aliases[a][0])),
                               "sparsity.%s: the same as sparsity.%s (line %d); give one of them",
                               sp__aliases[a][0], k, toml_pos_of(*out).line);
        if (v) {
            *out = v;
            *name = sp__aliases[a][0];
        }
    }
    return 0;
}

/* A glob of param_filter (fnmatch's *, ? and [...]) as an extended regular
 * expression; false when it does not fit out. */
static bool sp__glob(const char *g, char *out, size_t size)
{
    size_t o = 0;
    bool in_class = false;
    for (const char *p = g; *p; p++) {
        const char *add;
        char one[3] = {0};
        if (in_class) {
            one[0] = *p;
            add = one;
            in_class = *p != ']';
        } else if (*p == '*') {
            add = ".*";
        } else if (*p == '?') {
            add = ".";
        } else if (*p == '[') {
            add = "[";
            in_class = true;
        } else if (strchr(".^$+(){}|\\", *p)) {
            one[0] = '\\';
            one[1] = *p;
            add = one;
        } else {
            one[0] = *p;
            add = one;
        }
        size_t n = strlen(add);
        if (o + n + 1 > size)
            return false;
        memcpy(out + o, add, n);
        o += n;
    }
    out[o] = 0;
    return true;
}

/* A number (an integer will do); false for anything else. */
static bool sp__num(const toml_value *v, double *x)
{
    if (toml_type_of(v) == TOML_FLOAT)
        *x = toml_float(v);
    else if (toml_type_of(v) == TOML_INTEGER)
        *x = (double)toml_int(v);
    else
        return false;
    return isfinite(*x);
}

/* An unknown key of table t (where: its name in messages) among names. */
static int sp__unknown(const toml_value *t, size_t i, const char *where, const char *const *names,
                       size_t n, char *err, size_t errlen)
{
    const char *key = toml_table_key(t, i);
    const char *near = nearest_name(key, names, n);
    if (near)
        return toml_errorf(err, errlen, toml_source_name(t), toml_table_key_pos(t, i),
                           "unknown key \"%s\" in %s (did you mean \"%s\"?)", key, where, near);
    return toml_errorf(err, errlen, toml_source_name(t), toml_table_key_pos(t, i),
                       "unknown key \"%s\" in %s", key, where);
}

/* A level: a number in [0, 1). */
static int sp__level(const toml_value *v, const char *where, double *out, char *err, size_t errlen)
{
    double x;
    if (!sp__num(v, &x))
        return toml_errorf(err, errlen, toml_source_name(v), toml_pos_of(v),
                           "%s: expected a sparsity level (a number in [0, 1)), found %s", where,
                           toml_type_name(toml_type_of(v)));
    if (x < 0 || x >= 1)
        return toml_errorf(err, errlen, toml_source_name(v), toml_pos_of(v),
                           "%s: %g is not a sparsity level: it must be in [0, 1) (the fraction "
                           "of weights pruned)", where, x);
    *out = x;
    return 0;
}

/* A value over steps: a number, or a table {type, init, ...}. hi: the
 * largest value it may take (a level: below 1; a fraction: 1). */
static int sp__hp(const toml_value *v, const char *where, bool level, sparse_hp *h, char *err,
                  size_t errlen)
{
    const char *src = toml_source_name(v);
    memset(h, 0, sizeof(*h));
    if (toml_type_of(v) != TOML_TABLE) {
        double x;
        if (level)
            return sp__level(v, where, &h->init, err, errlen);
        if (!sp__num(v, &x) || x < 0 || x > 1)
            return toml_errorf(err, errlen, src, toml_pos_of(v), "%s: expected a fraction in "
                               "[0, 1] or a schedule ({type = \"cosine\", init, half_period})",
                               where);
        h->init = x;
        return 0;
    }
    static const char *const names[] = {"type", "init", "slope", "gamma", "final", "half_period",
                                        "minimum"};
    static const char kinds[] = "constant|linear|exp|cosine";
    double val[ARRAY_SIZE(names)] = {0};
    bool given[ARRAY_SIZE(names)] = {0};
    for (size_t i = 0; i < toml_table_len(v); i++) {
        const char *key = toml_table_key(v, i);
        const toml_value *e = toml_table_value(v, i);
        size_t k = 0;
        while (k < ARRAY_SIZE(names) && strcmp(names[k], key) != 0)
            k++;
        if (k == ARRAY_SIZE(names)) {
            char w[96];
            snprintf(w, sizeof(w), "%s", where);
            return sp__unknown(v, i, w, names, ARRAY_SIZE(names), err, errlen);
        }
        given[k] = true;
        if (k == 0) {
            const char *s = toml_type_of(e) == TOML_STRING ? toml_string(e) : NULL;
            char near[16];
            if (!s)
                return toml_errorf(err, errlen, src, toml_pos_of(e), "%s.type: expected one of %s",
                                   where, kinds);
            if (strcmp(s, "constant") == 0)
                h->kind = SPARSE_HP_CONSTANT;
            else if (strcmp(s, "linear") == 0)
                h->kind = SPARSE_HP_LINEAR;
            else if (strcmp(s, "exp") == 0)
                h->kind = SPARSE_HP_EXP;
            else if (strcmp(s, "cosine") == 0)
                h->kind = SPARSE_HP_COSINE;
            else if (nearest_choice(s, kinds, near, sizeof(near)))
                return toml_errorf(err, errlen, src, toml_pos_of(e), "%s.type: \"%s\" is not one "
                                   "of %s (did you mean \"%s\"?)", where, s, kinds, near);
            else
                return toml_errorf(err, errlen, src, toml_pos_of(e), "%s.type: \"%s\" is not one "
                                   "of %s", where, s, kinds);
            continue;
        }
        if (!sp__num(e, &val[k]))
            return toml_errorf(err, errlen, src, toml_pos_of(e), "%s.%s: expected a number, found "
                               "%s", where, key, toml_type_name(toml_type_of(e)));
    }
    if (!given[0])
        return toml_errorf(err, errlen, src, toml_pos_of(v), "%s: a schedule needs a type (%s)",
                           where, kinds);
    /* which keys each kind takes: init always */
    static const unsigned takes[] = {
        [SPARSE_HP_CONSTANT] = 1u << 1,
        [SPARSE_HP_LINEAR] = 1u << 1 | 1u << 2,
        [SPARSE_HP_EXP] = 1u << 1 | 1u << 3 | 1u << 4,
        [SPARSE_HP_COSINE] = 1u << 1 | 1u << 5 | 1u << 6,
    };
    static const unsigned needs[] = {
        [SPARSE_HP_CONSTANT] = 1u << 1,
        [SPARSE_HP_LINEAR] = 1u << 1 | 1u << 2,
        [SPARSE_HP_EXP] = 1u << 1 | 1u << 3 | 1u << 4,
        [SPARSE_HP_COSINE] = 1u << 1 | 1u << 5,
    };
    for (size_t k = 1; k < ARRAY_SIZE(names); k++) {
        long at = toml_table_find(v, names[k]);
        if (given[k] && !(takes[h->kind] & (1u << k)))
            return toml_errorf(err, errlen, src, toml_table_key_pos(v, (size_t)at),
                               "%s.%s: not a parameter of a %s schedule", where, names[k],
                               toml_string(toml_table_get(v, "type")));
        if (!given[k] && (needs[h->kind] & (1u << k)))
            return toml_errorf(err, errlen, src, toml_pos_of(v), "%s: this schedule needs %s",
                               where, names[k]);
    }
    double hi = level ? 0.999999 : 1.0;
    const char *what = level ? "a sparsity level in [0, 1)" : "a fraction in [0, 1]";
    static const size_t ranged[] = {1, 4, 6}; /* init, final, minimum */
    for (size_t r = 0; r < ARRAY_SIZE(ranged); r++) {
        size_t k = ranged[r];
        if (given[k] && (val[k] < 0 || val[k] > hi))
            return toml_errorf(err, errlen, src,
                               toml_pos_of(toml_table_get(v, names[k])), "%s.%s: %g is not %s",
                               where, names[k], val[k], what);
    }
    if (given[3] && !(val[3] > 0))
        return toml_errorf(err, errlen, src, toml_pos_of(toml_table_get(v, "gamma")),
                           "%s.gamma: must be > 0 (the rate the level approaches final)", where);
    if (given[5] && !(val[5] > 0))
        return toml_errorf(err, errlen, src, toml_pos_of(toml_table_get(v, "half_period")),
                           "%s.half_period: must be > 0 (steps)", where);
    h->init = val[1];
    h->slope = val[2];
    h->gamma = val[3];
    h->final = val[4];
    h->half_period = val[5];
    h->minimum = val[6];
    return 0;
}

static int sp__schedule(const toml_value *v, sparse_schedule *s, char *err, size_t errlen)
{
    const char *src = toml_source_name(v);
    static const char *const names[] = {"freq", "start", "stop"};
    if (toml_type_of(v) != TOML_TABLE)
        return toml_errorf(err, errlen, src, toml_pos_of(v), "sparsity.schedule: expected a table "
                           "{freq, start, stop}, found %s", toml_type_name(toml_type_of(v)));
    int64_t val[3] = {0, 0, 0};
    bool given[3] = {0};
    for (size_t i = 0; i < toml_table_len(v); i++) {
        const char *key = toml_table_key(v, i);
        const toml_value *e = toml_table_value(v, i);
        size_t k = 0;
        while (k < 3 && strcmp(names[k], key) != 0)
            k++;
        if (k == 3)
            return sp__unknown(v, i, "sparsity.schedule", names, 3, err, errlen);
        if (toml_type_of(e) != TOML_INTEGER)
            return toml_errorf(err, errlen, src, toml_pos_of(e), "sparsity.schedule.%s: expected "
                               "an integer (steps), found %s", key,
                               toml_type_name(toml_type_of(e)));
        val[k] = toml_int(e);
        given[k] = true;
        if (val[k] < (k == 0 ? 1 : 0) || val[k] > (int64_t)1e12)
            return toml_errorf(err, errlen, src, toml_pos_of(e), "sparsity.schedule.%s: %lld is "
                               "out of range [%d, 1e12]", key, (long long)val[k], k == 0 ? 1 : 0);
    }
    if (!given[0])
        return toml_errorf(err, errlen, src, toml_pos_of(v), "sparsity.schedule: needs freq "
                           "(steps between mask updates)");
    if (given[2] && val[2] <= val[1])
        return toml_errorf(err, errlen, src, toml_pos_of(toml_table_get(v, "stop")),
                           "sparsity.schedule.stop: %lld is not after start %lld: the mask "
                           "updates from start up to (not including) stop",
                           (long long)val[2], (long long)val[1]);
    s->freq = val[0];
    s->start = val[1];
    s->stop = val[2];
    return 0;
}

/* One pattern: a non-empty string. */
static int sp__pattern(const toml_value *v, const char *where, char *err, size_t errlen)
{
    if (toml_type_of(v) != TOML_STRING || !toml_string(v)[0])
        return toml_errorf(err, errlen, toml_source_name(v), toml_pos_of(v), "%s: expected a "
                           "regular expression (a non-empty string), found %s", where,
                           toml_type_of(v) == TOML_STRING ? "an empty string"
                                                          : toml_type_name(toml_type_of(v)));
    return 0;
}

/* Appends pattern text p with its level (< 0: the section's) and, for gmp,
 * its level over steps (hp, NULL: the section's). */
static int sp__add(const char *src, toml_pos at, const char *p, double level, const sparse_hp *hp,
                   jobspec_sparsity *s, char *err, size_t errlen)
{
    char from_glob[sizeof(s->patterns[0])];
    if (s->globs) { /* param_filter: fnmatch's globs */
        if (!sp__glob(p, from_glob, sizeof(from_glob)))
            return toml_errorf(err, errlen, src, at, "sparsity.param_filter: \"%.40s...\" is too "
                               "long", p);
        p = from_glob;
    }
    if (s->npatterns >= JOBSPEC_SPARSE_PATTERNS)
        return toml_errorf(err, errlen, src, at,
                           "sparsity: more than %d patterns", JOBSPEC_SPARSE_PATTERNS);
    if (strlen(p) + 8 >= sizeof(s->patterns[0]))
        return toml_errorf(err, errlen, src, at,
                           "sparsity: pattern \"%.40s...\" is too long", p);
    char re[sizeof(s->patterns[0]) + 8];
    snprintf(re, sizeof(re), "^(%s)$", p);
    regex_t rx;
    int rc = regcomp(&rx, re, REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
        char why[128];
        regerror(rc, &rx, why, sizeof(why));
        return toml_errorf(err, errlen, src, at,
                           "sparsity.param_name_patterns: \"%s\" is not a regular expression: %s",
                           p, why);
    }
    regfree(&rx);
    snprintf(s->patterns[s->npatterns], sizeof(s->patterns[0]), "%s", p);
    if (hp)
        s->pattern_hp[s->npatterns] = *hp;
    s->pattern_level[s->npatterns++] = level;
    return 0;
}

/* param_name_patterns (or a table of levels given as sparsity): a string,
 * a list of them, or a table pattern -> level. */
static int sp__patterns(const toml_value *v, const char *where, jobspec_sparsity *s, char *err,
                        size_t errlen)
{
    toml_type ty = toml_type_of(v);
    if (ty == TOML_STRING) {
        if (sp__pattern(v, where, err, errlen) < 0)
            return -EINVAL;
        return sp__add(toml_source_name(v), toml_pos_of(v), toml_string(v), -1, NULL, s, err,
                      errlen);
    }
    if (ty == TOML_ARRAY) {
        if (toml_array_len(v) == 0)
            return toml_errorf(err, errlen, toml_source_name(v), toml_pos_of(v),
                               "%s: an empty list of patterns", where);
        for (size_t i = 0; i < toml_array_len(v); i++) {
            const toml_value *e = toml_array_at(v, i);
            char w[96];
            snprintf(w, sizeof(w), "%s[%zu]", where, i);
            if (sp__pattern(e, w, err, errlen) < 0 ||
                sp__add(toml_source_name(e), toml_pos_of(e), toml_string(e), -1, NULL, s, err,
                        errlen) < 0)
                return -EINVAL;
        }
        return 0;
    }
    if (ty == TOML_TABLE) {
        for (size_t i = 0; i < toml_table_len(v); i++) {
            const toml_value *e = toml_table_value(v, i);
            char w[320];
            snprintf(w, sizeof(w), "%s.\"%s\"", where, toml_table_key(v, i));
            double level;
            if (toml_type_of(e) == TOML_TABLE && !toml_table_get(e, "type")) {
                /* {sparsity = level}, the Model Zoo's group of a pattern */
                const toml_value *l = toml_table_get(e, "sparsity");
                for (size_t k = 0; k < toml_table_len(e); k++)
                    if (strcmp(toml_table_key(e, k), "sparsity") != 0)
                        return sp__unknown(e, k, w, (const char *const[]){"sparsity"}, 1, err,
                                           errlen);
                if (!l)
                    return toml_errorf(err, errlen, toml_source_name(e), toml_pos_of(e),
                                       "%s: needs sparsity (the level of the tensors it matches)",
                                       w);
                e = l;
            }
            sparse_hp hp = {.kind = SPARSE_HP_CONSTANT};
            if (toml_type_of(e) == TOML_TABLE) { /* gmp: the pattern's own level schedule */
                if (s->type != SPARSE_GMP)
                    return toml_errorf(err, errlen, toml_source_name(e), toml_pos_of(e),
                                       "%s: a level schedule is for type \"gmp\"; %s keeps one "
                                       "level", w, sparse_type_name(s->type));
                if (sp__hp(e, w, true, &hp, err, errlen) < 0)
                    return -EINVAL;
                level = hp.init;
            } else if (sp__level(e, w, &level, err, errlen) < 0) {
                return -EINVAL;
            }
            hp.init = toml_type_of(e) == TOML_TABLE ? hp.init : level;
            if (sp__add(toml_source_name(v), toml_table_key_pos(v, i), toml_table_key(v, i), level,
                        s->type == SPARSE_GMP ? &hp : NULL, s, err, errlen) < 0)
                return -EINVAL;
        }
        return 0;
    }
    return toml_errorf(err, errlen, toml_source_name(v), toml_pos_of(v),
                       "%s: expected a regular expression, a list of them or a table of them "
                       "with their levels, found %s", where, toml_type_name(ty));
}

int jobspec_sparsity_read(const toml_value *t, jobspec_sparsity *s, char *err, size_t errlen)
{
    const char *src = toml_source_name(t);
    memset(s, 0, sizeof(*s));
    s->present = true;
    s->type = SPARSE_STATIC;
    s->init_method = SPARSE_INIT_RANDOM;
    s->drop_fraction.init = 0.3;
    for (size_t i = 0; i < toml_table_len(t); i++) {
        const char *key = toml_table_key(t, i);
        size_t k = 0;
        while (k < ARRAY_SIZE(sp__keys) && strcmp(sp__keys[k], key) != 0)
            k++;
        if (k == ARRAY_SIZE(sp__keys))
            return sp__unknown(t, i, "[sparsity]", sp__keys, ARRAY_SIZE(sp__keys), err, errlen);
    }
    const toml_value *v;
    const char *kn;
    if (sp__get(t, "type", &v, &kn, err, errlen) < 0)
        return -EINVAL;
    if (v) {
        static const char types[] = "static|gmp|set|rigl";
        char near[16];
        if (toml_type_of(v) != TOML_STRING)
            return toml_errorf(err, errlen, src, toml_pos_of(v), "sparsity.%s: expected one of "
                               "%s, found %s", kn, types, toml_type_name(toml_type_of(v)));
        if (sparse_type_from_name(toml_string(v), &s->type) < 0) {
            if (nearest_choice(toml_string(v), types, near, sizeof(near)))
                return toml_errorf(err, errlen, src, toml_pos_of(v), "sparsity.%s: \"%s\" is "
                                   "not one of %s (did you mean \"%s\"?)", kn, toml_string(v),
                                   types, near);
            return toml_errorf(err, errlen, src, toml_pos_of(v), "sparsity.%s: \"%s\" is not "
                               "one of %s", kn, toml_string(v), types);
        }
    }
    if ((v = toml_table_get(t, "init_method"))) {
        static const char methods[] = "random|topk";
        const char *m = toml_type_of(v) == TOML_STRING ? toml_string(v) : "";
        char near[16];
        if (strcmp(m, "random") == 0)
            s->init_method = SPARSE_INIT_RANDOM;
        else if (strcmp(m, "topk") == 0)
            s->init_method = SPARSE_INIT_TOPK;
        else if (m[0] && nearest_choice(m, methods, near, sizeof(near)))
            return toml_errorf(err, errlen, src, toml_pos_of(v), "sparsity.init_method: \"%s\" is "
                               "not one of %s (did you mean \"%s\"?)", m, methods, near);
        else
            return toml_errorf(err, errlen, src, toml_pos_of(v), "sparsity.init_method: expected "
                               "one of %s", methods);
    }
    bool dynamic = s->type != SPARSE_STATIC;
    v = toml_table_get(t, "sparsity");
    if (!v) {
        /* (the levels may all come with the patterns, below) */
    } else if (toml_type_of(v) == TOML_TABLE && toml_table_get(v, "type")) {
        if (s->type != SPARSE_GMP)
            return toml_errorf(err, errlen, src, toml_pos_of(v), "sparsity.sparsity: a level "
                               "schedule is for type \"gmp\"; %s keeps one level",
                               sparse_type_name(s->type));
        if (sp__hp(v, "sparsity.sparsity", true, &s->level_hp, err, errlen) < 0)
            return -EINVAL;
    } else if (toml_type_of(v) == TOML_TABLE) { /* levels per pattern (gmp: or schedules) */
        if (sp__patterns(v, "sparsity.sparsity", s, err, errlen) < 0)
            return -EINVAL;
    } else if (sp__hp(v, "sparsity.sparsity", true, &s->level_hp, err, errlen) < 0) {
        return -EINVAL;
    }
    s->level = s->level_hp.init;
    if (sp__get(t, "param_name_patterns", &v, &kn, err, errlen) < 0)
        return -EINVAL;
    if (v) {
        char where[48];
        snprintf(where, sizeof(where), "sparsity.%s", kn);
        if (s->npatterns > 0)
            return toml_errorf(err, errlen, src, toml_pos_of(v), "%s: the patterns are the keys "
                               "of sparsity.sparsity already; give one of them", where);
        s->globs = strcmp(kn, "param_filter") == 0;
        if (sp__patterns(v, where, s, err, errlen) < 0)
            return -EINVAL;
    }
    bool every_level = s->npatterns > 0; /* each pattern gives its own level */
    for (size_t k = 0; k < s->npatterns; k++)
        every_level &= s->pattern_level[k] >= 0;
    if (!toml_table_get(t, "sparsity") && !every_level)
        return toml_errorf(err, errlen, src, toml_pos_of(t), "[sparsity]: needs sparsity (the "
                           "level: the fraction of weights pruned, in [0, 1))");
    if (sp__get(t, "schedule", &v, &kn, err, errlen) < 0)
        return -EINVAL;
    if (v) {
        if (!dynamic)
            return toml_errorf(err, errlen, src, toml_table_key_pos(t, (size_t)toml_table_find(t, kn)),
                               "sparsity.%s: a static mask never changes; a schedule is "
                               "for gmp, set and rigl", kn);
        if (sp__schedule(v, &s->schedule, err, errlen) < 0)
            return -EINVAL;
    } else if (dynamic) {
        return toml_errorf(err, errlen, src, toml_pos_of(t), "[sparsity]: type \"%s\" needs a "
                           "schedule (freq, and start, stop) of its mask updates",
                           sparse_type_name(s->type));
    }
    if ((v = toml_table_get(t, "drop_fraction"))) {
        if (s->type != SPARSE_SET && s->type != SPARSE_RIGL)
            return toml_errorf(err, errlen, src, toml_table_key_pos(t, (size_t)toml_table_find(t, "drop_fraction")),
                               "sparsity.drop_fraction: only set and rigl drop and regrow");
        if (sp__hp(v, "sparsity.drop_fraction", false, &s->drop_fraction, err, errlen) < 0)
            return -EINVAL;
    }
    if ((v = toml_table_get(t, "seed"))) {
        if (toml_type_of(v) != TOML_INTEGER || toml_int(v) < 0)
            return toml_errorf(err, errlen, src, toml_pos_of(v), "sparsity.seed: expected an "
                               "integer >= 0");
        s->seed = toml_int(v);
        s->seed_given = true;
    }
    if ((v = toml_table_get(t, "compressed_streams"))) {
        if (toml_type_of(v) != TOML_BOOL)
            return toml_errorf(err, errlen, src, toml_pos_of(v), "sparsity.compressed_streams: "
                               "expected true or false");
        s->dense_streams = !toml_bool(v);
    }
    if ((v = toml_table_get(t, "init_scale"))) {
        static const char scales[] = "none|fan_in";
        const char *m = toml_type_of(v) == TOML_STRING ? toml_string(v) : "";
        char near[16];
        if (strcmp(m, "fan_in") == 0)
            s->init_scale_fan_in = true;
        else if (strcmp(m, "none") == 0)
            s->init_scale_fan_in = false;
        else if (m[0] && nearest_choice(m, scales, near, sizeof(near)))
            return toml_errorf(err, errlen, src, toml_pos_of(v), "sparsity.init_scale: \"%s\" is "
                               "not one of %s (did you mean \"%s\"?)", m, scales, near);
        else
            return toml_errorf(err, errlen, src, toml_pos_of(v), "sparsity.init_scale: expected "
                               "one of %s (\"fan_in\": the kept initial weights scaled to the "
                               "dense layer's fan-in variance)", scales);
    }
    return 0;
}

/* Whether tensor ti of m is a bias or a norm's (never pruned). */
static bool sp__never(const model *m, const model_tensor *ti)
{
    const model_layer *l = &m->layers[ti->layer];
    size_t n = strlen(ti->name);
    return l->type == LAYER_BATCH_NORM || l->type == LAYER_GROUP_NORM || !ti->trainable ||
           (n >= 5 && strcmp(ti->name + n - 5, ".bias") == 0);
}

/* Whether tensor ti is pruned by default: the weight of a dense layer or
 * of a convolution. */
static bool sp__default(const model *m, const model_tensor *ti)
{
    const model_layer *l = &m->layers[ti->layer];
    size_t n = strlen(ti->name);
    bool weight = n >= 7 && strcmp(ti->name + n - 7, ".weight") == 0;
    return weight && (l->type == LAYER_DENSE || l->type == LAYER_CONV2D ||
                      l->type == LAYER_CONV_TRANSPOSE2D || l->type == LAYER_CONV3D ||
                      l->type == LAYER_CONV_TRANSPOSE3D);
}

/* Where pattern k was written: the k-th string of param_name_patterns or
 * key of sparsity.sparsity's table. */
static toml_pos sp__pattern_pos(const toml_value *t, size_t k)
{
    const toml_value *v = toml_table_get(t, "param_name_patterns");
    if (!v)
        v = toml_table_get(t, "param_filter");
    if (!v)
        v = toml_table_get(t, "sparsity");
    if (toml_type_of(v) == TOML_ARRAY && k < toml_array_len(v))
        return toml_pos_of(toml_array_at(v, k));
    if (toml_type_of(v) == TOML_TABLE && k < toml_table_len(v))
        return toml_table_key_pos(v, k);
    return toml_pos_of(v ? v : t);
}

int jobspec_sparsity_resolve(const toml_value *t, jobspec_sparsity *s, const model *m,
                             int64_t max_steps, char *err, size_t errlen)
{
    const char *src = toml_source_name(t);
    size_t nt = (size_t)m->ntensors;
    free(s->tensor_level);
    s->tensor_level = calloc(nt ? nt : 1, sizeof(float));
    if (!s->tensor_level) {
        snprintf(err, errlen, "%s: out of memory", src);
        return -ENOMEM;
    }
    free(s->tensor_hp);
    s->tensor_hp = NULL;
    /* gmp: the last step the mask may change, whose level the plan shows */
    int64_t last = s->schedule.stop > 0 && s->schedule.stop - 1 < max_steps ? s->schedule.stop - 1
                                                                             : max_steps;
    bool own_hp = false;
    if (s->type == SPARSE_GMP) {
        s->level = sparse_hp_at(&s->level_hp, last, 0.999999);
        for (size_t k = 0; k < s->npatterns; k++)
            own_hp |= s->pattern_level[k] >= 0;
    }
    if (own_hp && !(s->tensor_hp = calloc(nt ? nt : 1, sizeof(sparse_hp)))) {
        snprintf(err, errlen, "%s: out of memory", src);
        return -ENOMEM;
    }
    if (s->npatterns == 0) {
        for (size_t i = 0; i < nt; i++)
            if (sp__default(m, &m->tensors[i]))
                s->tensor_level[i] = (float)s->level;
        return 0;
    }
    bool *given = calloc(nt ? nt : 1, sizeof(bool)); /* a pattern gave the tensor its level */
    if (!given) {
        snprintf(err, errlen, "%s: out of memory", src);
        return -ENOMEM;
    }
    int rc = 0;
    for (size_t k = 0; k < s->npatterns && rc == 0; k++) {
        char re[sizeof(s->patterns[0]) + 8];
        snprintf(re, sizeof(re), "^(%s)$", s->patterns[k]);
        regex_t rx;
        if (regcomp(&rx, re, REG_EXTENDED | REG_NOSUB) != 0) { /* (checked when read) */
            rc = toml_errorf(err, errlen, src, sp__pattern_pos(t, k), "bad pattern");
            break;
        }
        size_t hits = 0;
        for (size_t i = 0; i < nt && rc == 0; i++) {
            const model_tensor *ti = &m->tensors[i];
            if (regexec(&rx, ti->name, 0, NULL, 0) != 0)
                continue;
            if (sp__never(m, ti)) {
                rc = toml_errorf(err, errlen, src, sp__pattern_pos(t, k),
                                 "sparsity: pattern \"%s\" matches \"%s\", a %s: only weights "
                                 "are pruned, never biases or norms", s->patterns[k], ti->name,
                                 m->layers[ti->layer].type == LAYER_BATCH_NORM ||
                                         m->layers[ti->layer].type == LAYER_GROUP_NORM
                                     ? "norm's tensor"
                                     : "bias");
                break;
            }
            hits++;
            if (given[i]) /* the first pattern that matches gives the level */
                continue;
            given[i] = true;
            const sparse_hp *hp = s->pattern_level[k] >= 0 ? &s->pattern_hp[k] : &s->level_hp;
            if (s->tensor_hp) {
                s->tensor_hp[i] = *hp;
                s->tensor_level[i] = (float)sparse_hp_at(hp, last, 0.999999);
            } else {
                s->tensor_level[i] =
                    (float)(s->pattern_level[k] >= 0 ? s->pattern_level[k] : s->level);
            }
        }
        regfree(&rx);
        if (rc == 0 && hits == 0) {
            const char *names[256];
            size_t nn = 0;
            for (size_t i = 0; i < nt && nn < ARRAY_SIZE(names); i++)
                names[nn++] = m->tensors[i].name;
            const char *near = nearest_name(s->patterns[k], names, nn);
            if (near)
                rc = toml_errorf(err, errlen, src, sp__pattern_pos(t, k),
                                 "sparsity: pattern \"%s\" matches no tensor of the model (did "
                                 "you mean \"%s\"?)", s->patterns[k], near);
            else
                rc = toml_errorf(err, errlen, src, sp__pattern_pos(t, k),
                                 "sparsity: pattern \"%s\" matches no tensor of the model (its "
                                 "tensors are named <layer>.weight, <layer>.bias)",
                                 s->patterns[k]);
        }
    }
    free(given);
    return rc;
}

void jobspec_sparsity_deinit(jobspec_sparsity *s)
{
    free(s->tensor_level);
    s->tensor_level = NULL;
    free(s->tensor_hp);
    s->tensor_hp = NULL;
}

bool jobspec_sparsity_compact(const jobspec_sparsity *s)
{
    return s->present && s->type == SPARSE_STATIC && !s->dense_streams;
}
