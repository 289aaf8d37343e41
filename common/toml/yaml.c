/* YAML job files read through libyaml's event parser (not its document
 * loader: anchors, positions and limits stay ours) into the toml_value tree.
 * Containers are put into the tree when they start, so that each value is
 * placed once; aliases are expanded by copying, within YAML_MAX_VALUES. */
#include "yaml.h" /* this directory's: a quoted include looks here first */

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* libyaml's: toml_lib is built without its own directory on the include
 * path (common/toml/meson.build), so the angle brackets find the system's. */
#include <yaml.h>

/* The tag prefix of YAML's standard types: !!int is "tag:yaml.org,2002:int". */
#define STD_TAG "tag:yaml.org,2002:"

/* An anchor (&name) and what its aliases (*name) copy. */
typedef struct {
    char *name;             /* owned */
    const toml_value *v;    /* the anchored value, owned by the tree or yp.keep; NULL for a null */
    char *text;             /* a scalar's text as written (owned), for an alias used as a key;
                             * NULL for a mapping or a sequence */
    size_t textlen;         /* bytes in text */
    int line;               /* where the anchor is, for "first at line N" */
    bool open;              /* its mapping or sequence has not ended: an alias to it would be a cycle */
} yp_anchor;

enum yp_kind {
    YP_MAP,    /* a mapping: v is its table */
    YP_SEQ,    /* a sequence: v is its array */
    YP_MERGES, /* the sequence of mappings after a <<: nothing is built for it */
};

/* A mapping or sequence being read, innermost last in yp.frames. */
typedef struct {
    enum yp_kind kind;
    toml_value *v;           /* the table or array being filled (owned by the tree or yp.keep) */
    int depth;               /* nesting level of v: the root is 0, as toml_parse counts */
    long anchor;             /* index in yp.anchors of the anchor on v, closed when v ends; -1 */
    long merge_into;         /* a mapping (or YP_MERGES) read for a <<: the frame whose merges
                              * it joins; -1 otherwise */
    /* mappings only */
    bool have_key;           /* a key was read and its value is next */
    bool key_is_merge;       /* ... and that key is <<: the value is merged, not set */
    char *key;               /* the key awaiting its value (owned); NULL for << */
    size_t keylen;           /* bytes in key */
    toml_pos keypos;         /* where key was written */
    bool merged;             /* a << was written (a second one is a duplicate key) */
    toml_pos merge_pos;      /* where that << was written */
    toml_value *nulls;       /* keys whose value was null: absent from v, yet written (owned,
                              * made on first use; the values are placeholders) */
    const toml_value **merges; /* the tables to merge into v when it ends, the first winning */
    size_t nmerges, capmerges;
} yp_frame;

typedef struct {
    const char *text;        /* the input, after any BOM */
    size_t len;              /* bytes in text */
    const char *name;        /* the document's name for messages */
    char *err;               /* caller's buffer for the message */
    size_t errlen;
    bool failed;             /* err holds a message */
    toml_value *root;        /* the document; also the owner of the detached values below */
    bool root_started;       /* the top-level mapping was seen */
    int docs;                /* documents started */
    yp_frame *frames;        /* open mappings and sequences, outermost first */
    int nframes;             /* at most TOML_MAX_DEPTH + 1: every frame is one level deeper */
    yp_anchor *anchors;      /* in order of appearance */
    size_t nanchors, capanchors;
    toml_value *anchor_index; /* anchor name -> its index in anchors (a detached table: the
                               * tree's own hash index serves as the map) */
    toml_value **keep;       /* detached values that anchors and merges may point into,
                              * freed at the end (mappings merged in place, anchored keys) */
    size_t nkeep, capkeep;
    size_t nvalues;          /* values made so far, copies included (<= YAML_MAX_VALUES) */
} yp;

/* ---- errors ------------------------------------------------------------ */

__attribute__((format(printf, 3, 4)))
static int yp__fail(yp *p, toml_pos pos, const char *fmt, ...)
{
    if (p->failed)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    toml_verrorf(p->err, p->errlen, p->name, pos, fmt, ap);
    va_end(ap);
    p->failed = true;
    return -1;
}

static int yp__oom(yp *p)
{
    if (!p->failed && p->err && p->errlen)
        snprintf(p->err, p->errlen, "%s: out of memory", p->name);
    p->failed = true;
    return -1;
}

/* libyaml's marks count from 0; ours from 1. */
static toml_pos yp__pos(yaml_mark_t m)
{
    return (toml_pos){m.line < INT_MAX ? (int)m.line + 1 : INT_MAX,
                      m.column < INT_MAX ? (int)m.column + 1 : INT_MAX};
}

/* The length of a line break at q (as libyaml counts them: LF, CR LF, CR,
 * NEL, LS, PS), or 0. */
static size_t yp__break_at(const char *q, const char *end)
{
    const unsigned char *u = (const unsigned char *)q;
    size_t left = (size_t)(end - q);
    if (left >= 1 && u[0] == '\n')
        return 1;
    if (left >= 1 && u[0] == '\r')
        return left >= 2 && u[1] == '\n' ? 2 : 1;
    if (left >= 2 && u[0] == 0xC2 && u[1] == 0x85)
        return 2;
    if (left >= 3 && u[0] == 0xE2 && u[1] == 0x80 && (u[2] == 0xA8 || u[2] == 0xA9))
        return 3;
    return 0;
}

/* The first byte of line (0-based) in the text, or NULL past the end. */
static const char *yp__line_start(const yp *p, size_t line)
{
    const char *q = p->text, *end = p->text + p->len;
    while (line > 0 && q < end) {
        size_t b = yp__break_at(q, end);
        if (b) {
            q += b;
            line--;
        } else {
            q++;
        }
    }
    return line == 0 ? q : NULL;
}

/* The character at libyaml's mark, or NULL past its line. */
static const char *yp__char_at(const yp *p, yaml_mark_t m)
{
    const char *q = yp__line_start(p, m.line), *end = p->text + p->len;
    for (size_t col = 0; q && col < m.column; col++) {
        if (q >= end || yp__break_at(q, end))
            return NULL;
        for (q++; q < end && ((unsigned char)*q & 0xC0) == 0x80; q++)
            ;
    }
    return q && q < end ? q : NULL;
}

/* The position of byte offset off: libyaml reports where the input stops
 * being UTF-8 as an offset, and everything before it is UTF-8. */
static toml_pos yp__pos_of_offset(const yp *p, size_t off)
{
    const char *q = p->text, *end = p->text + (off < p->len ? off : p->len);
    toml_pos pos = {1, 1};
    while (q < end) {
        size_t b = yp__break_at(q, p->text + p->len);
        if (b) {
            q += b;
            pos.line++;
            pos.col = 1;
            continue;
        }
        if (((unsigned char)*q & 0xC0) != 0x80)
            pos.col++;
        q++;
    }
    return pos;
}

/* libyaml refused the text: its words, at its place. A tab gets a message
 * of its own, since libyaml's names the symptom ("found character that
 * cannot start any token", or "mapping values are not allowed" at the next
 * ':') rather than the tab. */
static int yp__libyaml_error(yp *p, const yaml_parser_t *lp)
{
    if (lp->error == YAML_MEMORY_ERROR)
        return yp__oom(p);
    if (lp->error == YAML_READER_ERROR) {
        toml_pos pos = yp__pos_of_offset(p, lp->problem_offset);
        const char *problem = lp->problem ? lp->problem : "cannot read the text";
        if (lp->problem_value < 0)
            return yp__fail(p, pos, "%s", problem);
        if (strstr(problem, "UTF-8"))
            return yp__fail(p, pos, "invalid UTF-8: %s (byte 0x%02X)", problem,
                            (unsigned)lp->problem_value & 0xFF);
        return yp__fail(p, pos, "%s (U+%04X)", problem, (unsigned)lp->problem_value);
    }
    toml_pos pos = yp__pos(lp->problem_mark);
    const char *at = yp__char_at(p, lp->problem_mark);
    const char *ls = yp__line_start(p, lp->problem_mark.line), *end = p->text + p->len;
    if (ls) {
        const char *q = ls;
        while (q < end && *q == ' ')
            q++;
        if (q < end && *q == '\t' && (!at || q <= at))
            return yp__fail(p, (toml_pos){pos.line, (int)(q - ls) + 1},
                            "a tab indents this line: YAML indents with spaces only");
    }
    if (at && *at == '\t')
        return yp__fail(p, pos, "a tab where YAML wants a space");
    const char *problem = lp->problem ? lp->problem : "cannot parse the text";
    if (lp->context)
        return yp__fail(p, pos, "%s (%s)", problem, lp->context);
    return yp__fail(p, pos, "%s", problem);
}

/* s as a quoted string for messages: escaped, and cut after 80 bytes. */
static const char *yp__quote(char *buf, size_t cap, const char *s, size_t n)
{
    size_t o = 0;
    buf[o++] = '"';
    for (size_t i = 0; i < n && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i == 80) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        if (c == '"' || c == '\\') {
            buf[o++] = '\\';
            buf[o++] = (char)c;
        } else if (c < 0x20 || c == 0x7F) {
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02X", c);
        } else {
            buf[o++] = (char)c;
        }
    }
    buf[o++] = '"';
    buf[o] = '\0';
    return buf;
}

/* A tag for messages: !!int for the standard ones, the rest as written
 * (cut at 80 bytes). */
static const char *yp__tag_name(char *buf, size_t cap, const char *tag)
{
    size_t n = strlen(STD_TAG);
    if (strncmp(tag, STD_TAG, n) == 0)
        snprintf(buf, cap, "!!%.80s", tag + n);
    else
        snprintf(buf, cap, "%.80s", tag);
    return buf;
}

/* ---- scalars ----------------------------------------------------------- */

/* Whether s is one of the words of list (NULL-terminated). */
static bool yp__one_of(const char *s, size_t n, const char *const *list)
{
    for (; *list; list++)
        if (strlen(*list) == n && memcmp(s, *list, n) == 0)
            return true;
    return false;
}

static bool yp__is_null(const char *s, size_t n)
{
    static const char *const nulls[] = {"~", "null", "Null", "NULL", NULL};
    return n == 0 || yp__one_of(s, n, nulls);
}

/* 1 or 0 for a YAML 1.1 boolean, -1 for anything else. */
static int yp__bool(const char *s, size_t n)
{
    static const char *const yes[] = {"true", "True", "TRUE", "yes", "Yes", "YES",
                                      "on", "On", "ON", NULL};
    static const char *const no[] = {"false", "False", "FALSE", "no", "No", "NO",
                                     "off", "Off", "OFF", NULL};
    return yp__one_of(s, n, yes) ? 1 : yp__one_of(s, n, no) ? 0 : -1;
}

static int yp__digit(unsigned char c, int base)
{
    int d = c >= '0' && c <= '9' ? c - '0'
          : c >= 'a' && c <= 'f' ? c - 'a' + 10
          : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 99;
    return d < base ? d : -1;
}

/* Adds the digits and '_' of [s, e) in base to *acc, refusing anything
 * above max. Returns the number of digits, or -1 for another character,
 * -2 past max. */
static int yp__accumulate(const char *s, const char *e, int base, uint64_t max, uint64_t *acc)
{
    int digits = 0;
    for (; s < e; s++) {
        if (*s == '_')
            continue;
        int d = yp__digit((unsigned char)*s, base);
        if (d < 0)
            return -1;
        if (*acc > (max - (uint64_t)d) / (uint64_t)base)
            return -2;
        *acc = *acc * (uint64_t)base + (uint64_t)d;
        digits++;
    }
    return digits;
}

/* A sexagesimal part after a ':': [0-5]?[0-9]. Returns its value or -1. */
static int yp__sexa_part(const char *s, const char *e)
{
    if (e - s == 1 && s[0] >= '0' && s[0] <= '9')
        return s[0] - '0';
    if (e - s == 2 && s[0] >= '0' && s[0] <= '5' && s[1] >= '0' && s[1] <= '9')
        return (s[0] - '0') * 10 + s[1] - '0';
    return -1;
}

/* PyYAML's YAML 1.1 integers: [-+]? then 0b[01_]+, 0x[0-9a-fA-F_]+, 0[0-7_]+
 * (octal), 0, [1-9][0-9_]*, or [1-9][0-9_]*(:[0-5]?[0-9])+ (base 60, as in
 * 1:30 = 90); and 0o[0-7_]+, YAML 1.2's octal, which PyYAML leaves a
 * string. Returns 1 with *out set, 0 when s is not an integer, -1 when it
 * is one that does not fit in 64 bits. */
static int yp__int(const char *s, size_t n, int64_t *out)
{
    const char *e = s + n;
    bool neg = false;
    if (s < e && (*s == '-' || *s == '+'))
        neg = *s++ == '-';
    if (s == e || *s < '0' || *s > '9')
        return 0;
    uint64_t max = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, u = 0;
    int r;
    const char *colon = memchr(s, ':', (size_t)(e - s));
    if (colon) {
        /* [1-9][0-9_]* then (:[0-5]?[0-9])+ */
        if (*s == '0')
            return 0;
        r = yp__accumulate(s, colon, 10, max, &u);
        if (r == -1)
            return 0;
        bool over = r == -2;
        for (const char *q = colon; q < e;) {
            const char *next = memchr(q + 1, ':', (size_t)(e - q - 1));
            if (!next)
                next = e;
            int part = yp__sexa_part(q + 1, next);
            if (part < 0)
                return 0;
            if (!over && u > (max - (uint64_t)part) / 60)
                over = true;
            if (!over)
                u = u * 60 + (uint64_t)part;
            q = next;
        }
        if (over)
            return -1;
    } else if (e - s >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'b' || s[1] == 'o')) {
        r = yp__accumulate(s + 2, e, s[1] == 'x' ? 16 : s[1] == 'b' ? 2 : 8, max, &u);
        if (r == -1 || r == 0)
            return 0;
        if (r == -2)
            return -1;
    } else {
        r = yp__accumulate(s, e, s[0] == '0' && e - s > 1 ? 8 : 10, max, &u);
        if (r == -1)
            return 0;
        if (r == -2)
            return -1;
    }
    *out = neg ? (int64_t)(0 - u) : (int64_t)u;
    return 1;
}

/* Skips [0-9_]* from *q; returns the number of digits skipped. */
static int yp__digits_(const char **q, const char *e)
{
    int digits = 0;
    while (*q < e && ((**q >= '0' && **q <= '9') || **q == '_')) {
        digits += **q != '_';
        (*q)++;
    }
    return digits;
}

/* PyYAML's YAML 1.1 floats: [-+]?[0-9][0-9_]*.[0-9_]*([eE][-+][0-9]+)?,
 * .[0-9][0-9_]*([eE][-+][0-9]+)?, base 60 ([-+]?[0-9][0-9_]*(:[0-5]?[0-9])+.[0-9_]*,
 * 1:30.5 = 90.5), [-+]?.inf and .nan, each in three spellings. Also, unlike
 * PyYAML, an exponent after a mantissa without a '.', an exponent without a
 * sign, and a sign before .5: the Model Zoo's configs write learning rates
 * as 1e-4, which PyYAML leaves the string "1e-4" for the Python code to
 * convert, while YAML 1.2 and every other reader make it a number, which is
 * what a job file means by it. Returns 1 with *out set, 0 when s is not a
 * float, -1 when it is beyond a double's range, -2 when out of memory. */
static int yp__float(const char *s, size_t n, double *out)
{
    static const char *const infs[] = {".inf", ".Inf", ".INF", NULL};
    static const char *const nans[] = {".nan", ".NaN", ".NAN", NULL};
    const char *e = s + n, *q = s;
    bool sign = q < e && (*q == '-' || *q == '+');
    q += sign;
    if (yp__one_of(q, (size_t)(e - q), infs)) {
        *out = *s == '-' ? -INFINITY : INFINITY;
        return 1;
    }
    if (!sign && yp__one_of(q, (size_t)(e - q), nans)) {
        *out = NAN;
        return 1;
    }
    bool sexagesimal = false, dot = false, exp = false;
    if (q < e && *q == '.') {
        q++;
        if (q == e || *q < '0' || *q > '9')
            return 0;
        yp__digits_(&q, e);
        dot = true;
    } else {
        if (q == e || *q < '0' || *q > '9')
            return 0;
        yp__digits_(&q, e);
        while (q < e && *q == ':') {
            const char *part = ++q;
            while (q < e && *q >= '0' && *q <= '9')
                q++;
            if (yp__sexa_part(part, q) < 0)
                return 0;
            sexagesimal = true;
        }
        if (q < e && *q == '.') {
            q++;
            yp__digits_(&q, e);
            dot = true;
        } else if (sexagesimal) {
            return 0; /* an integer */
        }
    }
    if (!sexagesimal && q < e && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < e && (*q == '-' || *q == '+'))
            q++;
        const char *d = q;
        while (q < e && *q >= '0' && *q <= '9')
            q++;
        if (q == d)
            return 0;
        exp = true;
    }
    if (q != e || (!dot && !exp))
        return 0;
    /* strtod reads what is left without the '_', one base-60 part at a time */
    char small[64], *buf = n < sizeof(small) ? small : malloc(n + 1);
    if (!buf)
        return -2;
    size_t o = 0;
    for (const char *c = s + sign; c < e; c++)
        if (*c != '_')
            buf[o++] = *c;
    buf[o] = '\0';
    double x = 0;
    bool whole = true;
    for (char *c = buf; whole && *c;) {
        char *endp;
        double part = strtod(c, &endp);
        whole = endp != c && (*endp == '\0' || *endp == ':');
        x = x * 60 + part;
        c = *endp == ':' ? endp + 1 : endp;
    }
    if (buf != small)
        free(buf);
    if (!whole)
        return 0;
    if (isinf(x))
        return -1;
    *out = *s == '-' ? -x : x;
    return 1;
}

static bool yp__is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Takes between min and max digits from *q. */
static bool yp__take_digits(const char **q, const char *e, int min, int max)
{
    int k = 0;
    while (k < max && *q < e && yp__is_digit(**q)) {
        (*q)++;
        k++;
    }
    return k >= min;
}

/* PyYAML's YAML 1.1 timestamps, which it makes dates and datetimes:
 * YYYY-MM-DD, or YYYY-M-D then [Tt] or blanks, h:mm:ss, an optional
 * fraction and an optional zone (Z, +h, +hh:mm). */
static bool yp__is_time(const char *s, size_t n)
{
    const char *q = s, *e = s + n;
    if (!yp__take_digits(&q, e, 4, 4) || q == e || *q++ != '-')
        return false;
    const char *month = q;
    if (!yp__take_digits(&q, e, 1, 2) || q == e || *q++ != '-')
        return false;
    const char *day = q;
    if (!yp__take_digits(&q, e, 1, 2))
        return false;
    if (q == e)
        return day - month == 3 && q - day == 2;
    if (*q == 'T' || *q == 't') {
        q++;
    } else {
        const char *b = q;
        while (q < e && (*q == ' ' || *q == '\t'))
            q++;
        if (q == b)
            return false;
    }
    if (!yp__take_digits(&q, e, 1, 2) || q == e || *q++ != ':' ||
        !yp__take_digits(&q, e, 2, 2) || q == e || *q++ != ':' || !yp__take_digits(&q, e, 2, 2))
        return false;
    if (q < e && *q == '.') {
        q++;
        yp__take_digits(&q, e, 0, INT_MAX);
    }
    while (q < e && (*q == ' ' || *q == '\t'))
        q++;
    if (q == e)
        return true;
    if (*q == 'Z')
        return q + 1 == e;
    if (*q != '-' && *q != '+')
        return false;
    q++;
    if (!yp__take_digits(&q, e, 1, 2))
        return false;
    if (q < e && *q == ':') {
        q++;
        if (!yp__take_digits(&q, e, 2, 2))
            return false;
    }
    return q == e;
}

/* The standard type a tag names ("str", "int", ...), "" for none (no tag,
 * or "!", which makes a scalar a string), or NULL after an error: tags
 * outside YAML's standard types would ask for objects a job file has no
 * place for (!!python/object:... is how a YAML file runs code). */
static const char *yp__tag(yp *p, const char *tag, toml_pos pos, const char *node)
{
    if (!tag || strcmp(tag, "!") == 0)
        return "";
    char buf[128];
    size_t n = strlen(STD_TAG);
    if (strncmp(tag, STD_TAG, n) == 0) {
        static const char *const scalars[] = {"str", "int", "float", "bool", "null"};
        const char *t = tag + n;
        bool scalar = false;
        for (size_t i = 0; i < sizeof(scalars) / sizeof(*scalars); i++)
            scalar = scalar || strcmp(t, scalars[i]) == 0;
        bool is_map = strcmp(t, "map") == 0, is_seq = strcmp(t, "seq") == 0;
        if (scalar || is_map || is_seq) {
            if ((scalar && strcmp(node, "scalar") == 0) || (is_map && strcmp(node, "mapping") == 0) ||
                (is_seq && strcmp(node, "sequence") == 0))
                return t;
            yp__fail(p, pos, "tag %s does not fit a %s", yp__tag_name(buf, sizeof(buf), tag), node);
            return NULL;
        }
    }
    yp__fail(p, pos, "tag %s is not allowed in a job file (only !!str, !!int, !!float, "
             "!!bool, !!null, !!seq and !!map)", yp__tag_name(buf, sizeof(buf), tag));
    return NULL;
}

/* What a scalar means: 0 with *out the value (NULL for a null), or -1 after
 * an error. */
static int yp__scalar(yp *p, const yaml_event_t *ev, toml_pos pos, toml_value **out)
{
    const char *s = (const char *)ev->data.scalar.value;
    size_t n = ev->data.scalar.length;
    const char *type = yp__tag(p, (const char *)ev->data.scalar.tag, pos, "scalar");
    if (!type)
        return -1;
    bool plain = !ev->data.scalar.tag && ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    char qbuf[128];
    int64_t i;
    double f;
    int r;
    *out = NULL;
    if (plain || strcmp(type, "null") == 0) {
        if (yp__is_null(s, n))
            return 0;
        if (!plain)
            return yp__fail(p, pos, "%s is not a !!null", yp__quote(qbuf, sizeof(qbuf), s, n));
    }
    if (plain || strcmp(type, "bool") == 0) {
        r = yp__bool(s, n);
        if (r >= 0) {
            *out = toml_new_bool(p->root, pos, r == 1);
            return *out ? 0 : yp__oom(p);
        }
        if (!plain)
            return yp__fail(p, pos, "%s is not a !!bool", yp__quote(qbuf, sizeof(qbuf), s, n));
    }
    if (plain || strcmp(type, "int") == 0 || strcmp(type, "float") == 0) {
        r = yp__int(s, n, &i);
        if (r < 0)
            return yp__fail(p, pos, "integer %.*s is out of range (64-bit signed)",
                            (int)(n < 80 ? n : 80), s);
        if (r > 0) {
            *out = strcmp(type, "float") == 0 ? toml_new_float(p->root, pos, (double)i)
                                              : toml_new_int(p->root, pos, i);
            return *out ? 0 : yp__oom(p);
        }
    }
    if (plain || strcmp(type, "float") == 0) {
        r = yp__float(s, n, &f);
        if (r == -2)
            return yp__oom(p);
        if (r < 0)
            return yp__fail(p, pos, "float %.*s is out of range", (int)(n < 80 ? n : 80), s);
        if (r > 0) {
            *out = toml_new_float(p->root, pos, f);
            return *out ? 0 : yp__oom(p);
        }
        if (!plain)
            return yp__fail(p, pos, "%s is not a !!float", yp__quote(qbuf, sizeof(qbuf), s, n));
    }
    if (strcmp(type, "int") == 0)
        return yp__fail(p, pos, "%s is not a !!int", yp__quote(qbuf, sizeof(qbuf), s, n));
    if (plain && yp__is_time(s, n))
        return yp__fail(p, pos, "dates and times are not supported: quote %s to make it a string",
                        yp__quote(qbuf, sizeof(qbuf), s, n));
    *out = toml_new_string(p->root, pos, s, n);
    return *out ? 0 : yp__oom(p);
}

/* ---- values, anchors and limits ---------------------------------------- */

/* Counts the values of v (v included) into *count, stopping once past
 * limit, and the levels of tables and arrays it nests (0 for a scalar). */
static void yp__measure(const toml_value *v, size_t limit, size_t *count, int *levels)
{
    *count += 1;
    *levels = 0;
    toml_type t = toml_type_of(v);
    if (t != TOML_TABLE && t != TOML_ARRAY)
        return;
    size_t n = t == TOML_TABLE ? toml_table_len(v) : toml_array_len(v);
    int deepest = 0;
    for (size_t i = 0; i < n && *count <= limit; i++) {
        int l;
        yp__measure(t == TOML_TABLE ? toml_table_value(v, i) : toml_array_at(v, i), limit, count, &l);
        if (l > deepest)
            deepest = l;
    }
    *levels = deepest + 1;
}

/* Accounts for n more values, made at pos; copy says whether an alias or a
 * merge made them. */
static int yp__count(yp *p, size_t n, toml_pos pos, bool copy)
{
    if (n > YAML_MAX_VALUES - p->nvalues) {
        if (copy)
            return yp__fail(p, pos, "the document expands to more than %d values (aliases of aliases?)",
                            YAML_MAX_VALUES);
        return yp__fail(p, pos, "the document holds more than %d values", YAML_MAX_VALUES);
    }
    p->nvalues += n;
    return 0;
}

static int yp__check_depth(yp *p, toml_pos pos, int depth)
{
    if (depth > TOML_MAX_DEPTH)
        return yp__fail(p, pos, "nesting deeper than %d levels", TOML_MAX_DEPTH);
    return 0;
}

/* A copy of v for a place at depth, within the limits; NULL after an error. */
static toml_value *yp__copy(yp *p, const toml_value *v, int depth, toml_pos pos)
{
    size_t count = 0;
    int levels;
    yp__measure(v, YAML_MAX_VALUES - p->nvalues, &count, &levels);
    if (yp__count(p, count, pos, true) < 0)
        return NULL;
    if (levels > 0 && yp__check_depth(p, pos, depth + levels - 1) < 0)
        return NULL;
    toml_value *c = toml_clone(p->root, v);
    if (!c)
        yp__oom(p);
    return c;
}

/* Keeps a detached value until the end (anchors may point into it). Takes
 * v, freeing it on failure. */
static int yp__keep(yp *p, toml_value *v)
{
    if (p->nkeep == p->capkeep) {
        size_t cap = p->capkeep ? 2 * p->capkeep : 8;
        toml_value **k = realloc(p->keep, cap * sizeof(*k));
        if (!k) {
            toml_value_free(v);
            return yp__oom(p);
        }
        p->keep = k;
        p->capkeep = cap;
    }
    p->keep[p->nkeep++] = v;
    return 0;
}

/* Index of the anchor name in p->anchors, or -1. */
static long yp__anchor_find(const yp *p, const char *name)
{
    const toml_value *i = toml_table_get(p->anchor_index, name);
    return i ? (long)toml_int(i) : -1;
}

/* Defines the anchor name for v (text: a scalar's text, NULL for a
 * collection, which stays open until it ends). Returns its index or -1
 * after an error. YAML lets a later anchor of the same name replace an
 * earlier one; PyYAML refuses that, and so do we. */
static long yp__anchor(yp *p, const char *name, toml_pos pos, const toml_value *v,
                       const char *text, size_t textlen)
{
    long prev = yp__anchor_find(p, name);
    if (prev >= 0)
        return yp__fail(p, pos, "duplicate anchor &%.80s (first at line %d)", name,
                        p->anchors[prev].line);
    if (p->nanchors == p->capanchors) {
        size_t cap = p->capanchors ? 2 * p->capanchors : 8;
        yp_anchor *a = realloc(p->anchors, cap * sizeof(*a));
        if (!a)
            return yp__oom(p);
        p->anchors = a;
        p->capanchors = cap;
    }
    yp_anchor *a = &p->anchors[p->nanchors];
    memset(a, 0, sizeof(*a));
    a->name = strdup(name);
    a->text = text ? malloc(textlen + 1) : NULL;
    toml_value *idx = toml_new_int(p->root, pos, (int64_t)p->nanchors);
    if (!a->name || (text && !a->text) || !idx ||
        toml_table_set(p->anchor_index, name, strlen(name), pos, idx) < 0) {
        free(a->name);
        free(a->text);
        toml_value_free(idx);
        return yp__oom(p);
    }
    if (text) {
        memcpy(a->text, text, textlen);
        a->text[textlen] = '\0';
    }
    a->textlen = textlen;
    a->v = v;
    a->line = pos.line;
    a->open = text == NULL;
    return (long)p->nanchors++;
}

/* The anchor an alias names, or NULL after an error. */
static const yp_anchor *yp__alias(yp *p, const yaml_event_t *ev, toml_pos pos)
{
    const char *name = (const char *)ev->data.alias.anchor;
    long i = yp__anchor_find(p, name);
    if (i < 0) {
        yp__fail(p, pos, "undefined alias *%.80s (no anchor &%.80s before it)", name, name);
        return NULL;
    }
    const yp_anchor *a = &p->anchors[i];
    if (a->open) {
        yp__fail(p, pos, "alias *%.80s is inside the %s it names (a cycle)", name,
                 toml_type_of(a->v) == TOML_TABLE ? "mapping" : "sequence");
        return NULL;
    }
    return a;
}

/* What an alias's anchor is, for messages. */
static const char *yp__what(const yp_anchor *a)
{
    if (!a->v)
        return "null";
    switch (toml_type_of(a->v)) {
    case TOML_TABLE:
        return "a mapping";
    case TOML_ARRAY:
        return "a sequence";
    default:
        return "a scalar";
    }
}

/* ---- frames ------------------------------------------------------------ */

static yp_frame *yp__top(yp *p)
{
    return p->nframes ? &p->frames[p->nframes - 1] : NULL;
}

/* Opens a frame for v, one level below the innermost (the root's is 0). */
static yp_frame *yp__push(yp *p, enum yp_kind kind, toml_value *v, toml_pos pos)
{
    int depth = p->nframes ? yp__top(p)->depth + 1 : 0;
    if (yp__check_depth(p, pos, depth) < 0)
        return NULL;
    yp_frame *f = &p->frames[p->nframes++];
    memset(f, 0, sizeof(*f));
    f->kind = kind;
    f->v = v;
    f->depth = depth;
    f->anchor = -1;
    f->merge_into = -1;
    return f;
}

static void yp__entry_done(yp_frame *f)
{
    free(f->key);
    f->key = NULL;
    f->have_key = false;
    f->key_is_merge = false;
}

static void yp__frame_free(yp_frame *f)
{
    free(f->key);
    toml_value_free(f->nulls);
    free(f->merges);
}

/* Index of key in t, or -1: for "first at line N" on the way to an error. */
static long yp__key_index(const toml_value *t, const char *k, size_t kl)
{
    if (!t || !toml_table_getn(t, k, kl))
        return -1;
    for (size_t i = 0; i < toml_table_len(t); i++)
        if (toml_table_key_len(t, i) == kl && memcmp(toml_table_key(t, i), k, kl) == 0)
            return (long)i;
    return -1;
}

/* Reads a key of the mapping f: it must be new to the mapping, null values
 * included. */
static int yp__key(yp *p, yp_frame *f, const char *k, size_t kl, toml_pos pos)
{
    const toml_value *tables[2] = {f->v, f->nulls};
    for (int t = 0; t < 2; t++) {
        long i = yp__key_index(tables[t], k, kl);
        if (i >= 0) {
            char q[128];
            return yp__fail(p, pos, "duplicate key %s (first at line %d)",
                            yp__quote(q, sizeof(q), k, kl), toml_table_key_pos(tables[t], (size_t)i).line);
        }
    }
    f->key = malloc(kl + 1);
    if (!f->key)
        return yp__oom(p);
    memcpy(f->key, k, kl);
    f->key[kl] = '\0';
    f->keylen = kl;
    f->keypos = pos;
    f->have_key = true;
    return 0;
}

/* Puts v, a value that is not null, into the innermost frame (a mapping
 * awaiting a value or a sequence), taking it. */
static int yp__put(yp *p, toml_value *v)
{
    yp_frame *f = yp__top(p);
    int rc;
    if (f->kind == YP_MAP) {
        rc = toml_table_set(f->v, f->key, f->keylen, f->keypos, v);
        yp__entry_done(f);
    } else {
        rc = toml_array_push(f->v, v);
    }
    if (rc < 0) {
        toml_value_free(v); /* the key is new (yp__key): only memory fails */
        return yp__oom(p);
    }
    return 0;
}

/* The value of the innermost frame's entry is null. The tree has no null
 * (TOML has none), so the key is left out of the table and whoever reads
 * it finds its default, as if the line were not written: "key:" with
 * nothing after it reads as "not set". A sequence has no such reading of a
 * hole, so a null item is an error; what says which null it was. The key
 * is remembered, for duplicates and so that a merge does not fill it. */
static int yp__put_null(yp *p, toml_pos pos, const char *what)
{
    yp_frame *f = yp__top(p);
    if (f->kind == YP_SEQ)
        return yp__fail(p, pos, "null item in a sequence (%s)", what);
    if (!f->nulls) {
        f->nulls = toml_new_table(p->root, f->keypos);
        if (!f->nulls)
            return yp__oom(p);
    }
    toml_value *mark = toml_new_bool(p->root, f->keypos, true);
    if (!mark || toml_table_set(f->nulls, f->key, f->keylen, f->keypos, mark) < 0) {
        toml_value_free(mark);
        return yp__oom(p);
    }
    yp__entry_done(f);
    return 0;
}

/* Adds a table to the merges of frame i (a mapping, or the YP_MERGES in
 * one). */
static int yp__add_merge(yp *p, long i, const toml_value *t)
{
    yp_frame *f = &p->frames[i];
    if (f->kind == YP_MERGES)
        f = &p->frames[f->merge_into];
    if (f->nmerges == f->capmerges) {
        size_t cap = f->capmerges ? 2 * f->capmerges : 4;
        const toml_value **m = realloc(f->merges, cap * sizeof(*m));
        if (!m)
            return yp__oom(p);
        f->merges = m;
        f->capmerges = cap;
    }
    f->merges[f->nmerges++] = t;
    return 0;
}

/* A mapping ends: the keys of its merged mappings that it lacks are added,
 * the first merged mapping's first. PyYAML keeps a merged key's place in
 * its dict before the keys written; we put merged keys after them, which
 * spares moving keys already in the tree. Mappings are unordered in YAML
 * and nothing downstream reads the order. A null in a merged mapping left
 * its key out of it, so a later merged mapping may fill that key, where
 * PyYAML would keep the None. A key passed over counts as a value: else
 * <<: [*a, *a, ...] would cost time without end and no values. */
static int yp__merge(yp *p, yp_frame *f)
{
    for (size_t m = 0; m < f->nmerges; m++) {
        const toml_value *src = f->merges[m];
        for (size_t i = 0; i < toml_table_len(src); i++) {
            const char *k = toml_table_key(src, i);
            size_t kl = toml_table_key_len(src, i);
            if (toml_table_getn(f->v, k, kl) || (f->nulls && toml_table_getn(f->nulls, k, kl))) {
                if (yp__count(p, 1, f->merge_pos, true) < 0)
                    return -1;
                continue;
            }
            toml_value *c = yp__copy(p, toml_table_value(src, i), f->depth + 1, f->merge_pos);
            if (!c)
                return -1;
            if (toml_table_set(f->v, k, kl, toml_table_key_pos(src, i), c) < 0) {
                toml_value_free(c);
                return yp__oom(p);
            }
        }
    }
    return 0;
}

/* ---- events ------------------------------------------------------------ */

/* Where the next node goes. */
enum yp_slot {
    SLOT_ROOT,       /* the document's top level */
    SLOT_KEY,        /* a key of a mapping */
    SLOT_VALUE,      /* the value of a mapping's key */
    SLOT_MERGE,      /* the value of a mapping's << */
    SLOT_ITEM,       /* an item of a sequence */
    SLOT_MERGE_ITEM, /* an item of the sequence after a << */
};

static enum yp_slot yp__slot(yp *p)
{
    yp_frame *f = yp__top(p);
    if (!f)
        return SLOT_ROOT;
    if (f->kind == YP_SEQ)
        return SLOT_ITEM;
    if (f->kind == YP_MERGES)
        return SLOT_MERGE_ITEM;
    if (!f->have_key)
        return SLOT_KEY;
    return f->key_is_merge ? SLOT_MERGE : SLOT_VALUE;
}

static int yp__root_error(yp *p, toml_pos pos, const char *found)
{
    return yp__fail(p, pos, "a job file's top level is a mapping of sections "
                    "(train_input:, model:, ...), found %s", found);
}

static int yp__merge_error(yp *p, toml_pos pos, const char *found)
{
    return yp__fail(p, pos, "<< merges a mapping or a sequence of mappings, found %s", found);
}

static int yp__on_scalar(yp *p, const yaml_event_t *ev)
{
    toml_pos pos = yp__pos(ev->start_mark);
    const char *s = (const char *)ev->data.scalar.value;
    size_t n = ev->data.scalar.length;
    const char *anchor = (const char *)ev->data.scalar.anchor;
    yp_frame *f = yp__top(p);
    toml_value *v = NULL;
    switch (yp__slot(p)) {
    case SLOT_ROOT:
        if (yp__scalar(p, ev, pos, &v) < 0)
            return -1;
        toml_value_free(v);
        return yp__root_error(p, pos, v ? "a scalar" : "an empty document");
    case SLOT_MERGE:
    case SLOT_MERGE_ITEM:
        return yp__merge_error(p, pos, "a scalar");
    case SLOT_KEY: {
        const char *type = yp__tag(p, (const char *)ev->data.scalar.tag, pos, "scalar");
        if (!type)
            return -1;
        bool plain = !ev->data.scalar.tag && ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
        if ((plain && yp__is_null(s, n)) || strcmp(type, "null") == 0) {
            char q[128];
            if (n == 0)
                return yp__fail(p, pos, "empty key: a key needs a name");
            return yp__fail(p, pos, "key %s is null: quote it to make it a string",
                            yp__quote(q, sizeof(q), s, n));
        }
        if (plain && n == 2 && memcmp(s, "<<", 2) == 0) {
            /* a merge: its value is read into f->merges, and applied when f ends */
            if (f->merged)
                return yp__fail(p, pos, "duplicate key \"<<\" (first at line %d)", f->merge_pos.line);
            f->merged = true;
            f->merge_pos = pos;
            f->have_key = true;
            f->key_is_merge = true;
        } else if (yp__key(p, f, s, n, pos) < 0) {
            return -1;
        }
        if (anchor) {
            /* an alias of a key may be a value elsewhere: keep the value too */
            if (yp__scalar(p, ev, pos, &v) < 0 || (v && yp__keep(p, v) < 0))
                return -1;
            if (yp__anchor(p, anchor, pos, v, s, n) < 0)
                return -1;
        }
        return 0;
    }
    case SLOT_VALUE:
    case SLOT_ITEM:
        if (yp__scalar(p, ev, pos, &v) < 0)
            return -1;
        if (anchor && yp__anchor(p, anchor, pos, v, s, n) < 0) {
            toml_value_free(v);
            return -1;
        }
        if (!v)
            return yp__put_null(p, pos, "empty, ~ or null: quote it for a string");
        if (yp__count(p, 1, pos, false) < 0) {
            toml_value_free(v);
            return -1;
        }
        return yp__put(p, v);
    }
    return 0;
}

static int yp__on_alias(yp *p, const yaml_event_t *ev)
{
    toml_pos pos = yp__pos(ev->start_mark);
    enum yp_slot slot = yp__slot(p);
    if (slot == SLOT_ROOT)
        return yp__root_error(p, pos, "an alias");
    const yp_anchor *a = yp__alias(p, ev, pos);
    if (!a)
        return -1;
    yp_frame *f = yp__top(p);
    char what[160];
    switch (slot) {
    case SLOT_ROOT:
        break;
    case SLOT_KEY:
        if (!a->v)
            return yp__fail(p, pos, "key *%.80s is null: a key needs a name", a->name);
        if (!a->text)
            return yp__fail(p, pos, "a key must be a scalar, found an alias of %s (*%.80s)",
                            yp__what(a), a->name);
        return yp__key(p, f, a->text, a->textlen, pos);
    case SLOT_MERGE:
    case SLOT_MERGE_ITEM:
        if (!a->v || toml_type_of(a->v) != TOML_TABLE) {
            snprintf(what, sizeof(what), "an alias of %s (*%.80s)", yp__what(a), a->name);
            return yp__merge_error(p, pos, what);
        }
        if (yp__add_merge(p, p->nframes - 1, a->v) < 0)
            return -1;
        if (slot == SLOT_MERGE)
            yp__entry_done(f);
        return 0;
    case SLOT_VALUE:
    case SLOT_ITEM: {
        if (!a->v) {
            snprintf(what, sizeof(what), "*%.80s is null", a->name);
            return yp__put_null(p, pos, what);
        }
        toml_value *c = yp__copy(p, a->v, f->depth + 1, pos);
        return c ? yp__put(p, c) : -1;
    }
    }
    return 0;
}

static int yp__on_start(yp *p, const yaml_event_t *ev, bool is_map)
{
    toml_pos pos = yp__pos(ev->start_mark);
    const char *node = is_map ? "mapping" : "sequence";
    const char *tag = (const char *)(is_map ? ev->data.mapping_start.tag : ev->data.sequence_start.tag);
    const char *anchor = (const char *)(is_map ? ev->data.mapping_start.anchor
                                               : ev->data.sequence_start.anchor);
    if (!yp__tag(p, tag, pos, node))
        return -1;
    enum yp_slot slot = yp__slot(p);
    long parent = p->nframes - 1;
    toml_value *v = NULL;
    yp_frame *f = NULL;
    switch (slot) {
    case SLOT_ROOT:
        if (!is_map)
            return yp__root_error(p, pos, "a sequence");
        p->root_started = true;
        f = yp__push(p, YP_MAP, p->root, pos);
        break;
    case SLOT_KEY:
        return yp__fail(p, pos, "a key must be a scalar, found a %s", node);
    case SLOT_VALUE:
    case SLOT_ITEM:
        if (yp__check_depth(p, pos, yp__top(p)->depth + 1) < 0 || yp__count(p, 1, pos, false) < 0)
            return -1;
        v = is_map ? toml_new_table(p->root, pos) : toml_new_array(p->root, pos);
        if (!v)
            return yp__oom(p);
        if (yp__put(p, v) < 0)
            return -1;
        f = yp__push(p, is_map ? YP_MAP : YP_SEQ, v, pos);
        break;
    case SLOT_MERGE:
    case SLOT_MERGE_ITEM:
        if (!is_map) {
            if (slot == SLOT_MERGE_ITEM)
                return yp__merge_error(p, pos, "a sequence in its sequence");
            if (anchor)
                return yp__fail(p, pos, "an anchor on the sequence after << is not supported");
            yp__entry_done(yp__top(p));
            f = yp__push(p, YP_MERGES, NULL, pos);
            if (f)
                f->merge_into = parent;
            return f ? 0 : -1;
        }
        /* a mapping written in place to be merged: built aside, kept for
         * its anchors, and merged when its mapping ends */
        if (yp__count(p, 1, pos, false) < 0)
            return -1;
        v = toml_new_table(p->root, pos);
        if (!v)
            return yp__oom(p);
        if (yp__keep(p, v) < 0)
            return -1;
        if (slot == SLOT_MERGE)
            yp__entry_done(yp__top(p));
        f = yp__push(p, YP_MAP, v, pos);
        if (f)
            f->merge_into = parent;
        break;
    }
    if (!f)
        return -1;
    if (anchor) {
        long a = yp__anchor(p, anchor, pos, f->v, NULL, 0);
        if (a < 0)
            return -1;
        yp__top(p)->anchor = a;
    }
    return 0;
}

static int yp__on_end(yp *p)
{
    yp_frame *f = yp__top(p);
    if (f->kind == YP_MAP && yp__merge(p, f) < 0)
        return -1;
    if (f->anchor >= 0)
        p->anchors[f->anchor].open = false;
    if (f->kind == YP_MAP && f->merge_into >= 0 && yp__add_merge(p, f->merge_into, f->v) < 0)
        return -1;
    yp__frame_free(f);
    p->nframes--;
    return 0;
}

/* One event; 1 at the end of the stream. */
static int yp__event(yp *p, const yaml_event_t *ev)
{
    switch (ev->type) {
    case YAML_DOCUMENT_START_EVENT:
        if (p->docs++ > 0)
            return yp__fail(p, yp__pos(ev->start_mark),
                            "a second document: a job file is one YAML document");
        return 0;
    case YAML_SCALAR_EVENT:
        return yp__on_scalar(p, ev);
    case YAML_ALIAS_EVENT:
        return yp__on_alias(p, ev);
    case YAML_MAPPING_START_EVENT:
    case YAML_SEQUENCE_START_EVENT:
        return yp__on_start(p, ev, ev->type == YAML_MAPPING_START_EVENT);
    case YAML_MAPPING_END_EVENT:
    case YAML_SEQUENCE_END_EVENT:
        return yp__on_end(p);
    case YAML_STREAM_END_EVENT:
        if (!p->root_started)
            return yp__root_error(p, (toml_pos){1, 1}, "an empty document");
        return 1;
    default:
        return 0;
    }
}

toml_value *yaml_parse(const char *text, size_t len, const char *name, char *err, size_t errlen)
{
    yp p = {0};
    yaml_parser_t lp;
    bool lp_ready = false;
    if (err && errlen)
        err[0] = '\0';
    p.name = name ? name : "<input>";
    p.err = err;
    p.errlen = errlen;
    p.text = text ? text : "";
    p.len = text ? len : 0;
    if (p.len >= 3 && memcmp(p.text, "\xEF\xBB\xBF", 3) == 0) {
        p.text += 3;
        p.len -= 3;
    }
    p.root = toml_new_root(p.name);
    p.anchor_index = p.root ? toml_new_table(p.root, (toml_pos){1, 1}) : NULL;
    /* every frame is one level deeper than the last, up to TOML_MAX_DEPTH */
    p.frames = calloc(TOML_MAX_DEPTH + 1, sizeof(*p.frames));
    if (!p.root || !p.anchor_index || !p.frames || !yaml_parser_initialize(&lp)) {
        yp__oom(&p);
        goto out;
    }
    lp_ready = true;
    /* UTF-8 only: libyaml would also take UTF-16 after its BOM */
    yaml_parser_set_encoding(&lp, YAML_UTF8_ENCODING);
    yaml_parser_set_input_string(&lp, (const unsigned char *)p.text, p.len);
    for (;;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&lp, &ev)) {
            yp__libyaml_error(&p, &lp);
            break;
        }
        int r = yp__event(&p, &ev);
        yaml_event_delete(&ev);
        if (r != 0)
            break;
    }
out:
    if (lp_ready)
        yaml_parser_delete(&lp);
    for (int i = 0; i < p.nframes; i++)
        yp__frame_free(&p.frames[i]);
    free(p.frames);
    for (size_t i = 0; i < p.nanchors; i++) {
        free(p.anchors[i].name);
        free(p.anchors[i].text);
    }
    free(p.anchors);
    toml_value_free(p.anchor_index);
    for (size_t i = 0; i < p.nkeep; i++)
        toml_value_free(p.keep[i]);
    free(p.keep);
    if (p.failed) {
        toml_free(p.root);
        return NULL;
    }
    return p.root;
}

toml_value *yaml_parse_file(const char *path, char *err, size_t errlen)
{
    return toml_read_file(path, yaml_parse, err, errlen);
}
