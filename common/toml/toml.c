/* TOML 1.0 parser: a recursive-descent reader over a UTF-8 buffer that builds
 * a tree of toml_value and enforces the specification's redefinition rules.
 * Date-times are parsed and validated, then refused: nothing here needs them. */
#include "toml.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How a table came to exist; decides what may later add keys to it. */
enum tbl_kind {
    TBL_IMPLICIT, /* created as a parent by a header ([a.b] makes a): may be defined once later */
    TBL_HEADER,   /* defined by a [header], or the root, or an element of an array of tables */
    TBL_DOTTED,   /* created by a dotted key (a.b = 1 makes a) */
    TBL_INLINE,   /* an inline table, or inside one: sealed */
};

/* How an array came to exist. */
enum arr_kind {
    ARR_STATIC, /* an array value: [1, 2] */
    ARR_TABLES, /* an array of tables, grown by [[headers]] */
};

/* Tables this small are searched linearly; larger ones get a hash index. */
#define TBL_INDEX_MIN 8

typedef struct {
    char *key;       /* owned, NUL-terminated; may contain NUL (see keylen) */
    size_t keylen;   /* bytes in key, without the terminator */
    toml_pos pos;    /* where the key was written */
    toml_value *val; /* owned */
} toml_entry;

struct toml_value {
    toml_type type;
    uint8_t kind;       /* enum tbl_kind for tables, enum arr_kind for arrays */
    uint16_t depth;     /* nesting level: the root is 0, its values 1, ... */
    toml_pos pos;       /* where the value starts (see toml_pos_of) */
    const char *source; /* the document's name, owned by the root */
    union {
        struct {
            char *ptr;  /* owned, NUL-terminated */
            size_t len; /* bytes, without the terminator */
        } s;
        int64_t i;
        double f;
        bool b;
        struct {
            toml_value **items; /* owned values */
            size_t len, cap;
        } a;
        struct {
            toml_entry *ents; /* in definition order */
            size_t len, cap;
            uint32_t *slots;  /* open-addressing index: entry index + 1, 0 = empty; NULL while small */
            size_t nslots;    /* a power of two, at least twice len */
        } t;
    } u;
};

/* A growing byte buffer. */
typedef struct {
    char *ptr;
    size_t len, cap;
} strbuf;

/* One part of a dotted key. */
typedef struct {
    char *s;      /* owned, NUL-terminated */
    size_t len;   /* bytes in s */
    toml_pos pos; /* where the part was written */
} keypart;

typedef struct {
    keypart *parts;
    size_t n, cap;
} keypath;

typedef struct {
    const char *p;          /* next byte to read */
    const char *end;        /* one past the last byte */
    const char *line_start; /* first byte of the current line */
    int line;               /* current line, 1-based */
    const char *col_mark;   /* a byte on the current line whose column is known ... */
    int col_at_mark;        /* ... and that column: counting forward from it keeps columns linear */
    char *err;              /* caller's buffer for the message */
    size_t errlen;
    bool failed;            /* err holds a message */
    toml_value *root;       /* the document; owns the source name */
    toml_value *cur;        /* the table key/value lines go into */
    strbuf sb;              /* scratch for strings and number tokens */
} parser;

/* ---- positions and errors ---------------------------------------------- */

static void next_line(parser *ps)
{
    ps->line++;
    ps->line_start = ps->p;
    ps->col_mark = ps->p;
    ps->col_at_mark = 1;
}

/* The position of at, a byte of the current line. The text is valid UTF-8
 * by now, so a character is a byte that is not a continuation byte. */
static toml_pos pos_at(parser *ps, const char *at)
{
    assert(at >= ps->line_start);
    if (at < ps->col_mark) {
        ps->col_mark = ps->line_start;
        ps->col_at_mark = 1;
    }
    int col = ps->col_at_mark;
    for (const char *q = ps->col_mark; q < at; q++)
        if (((unsigned char)*q & 0xC0) != 0x80)
            col++;
    ps->col_mark = at;
    ps->col_at_mark = col;
    return (toml_pos){ps->line, col};
}

int toml_verrorf(char *err, size_t errlen, const char *source, toml_pos pos,
                 const char *fmt, va_list ap)
{
    if (err && errlen > 0) {
        int n = snprintf(err, errlen, "%s:%d:%d: ", source, pos.line, pos.col);
        if (n >= 0 && (size_t)n < errlen)
            vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    }
    return -EINVAL;
}

int toml_errorf(char *err, size_t errlen, const char *source, toml_pos pos,
                const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = toml_verrorf(err, errlen, source, pos, fmt, ap);
    va_end(ap);
    return r;
}

__attribute__((format(printf, 3, 4)))
static int fail(parser *ps, toml_pos pos, const char *fmt, ...)
{
    if (ps->failed)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    toml_verrorf(ps->err, ps->errlen, ps->root->source, pos, fmt, ap);
    va_end(ap);
    ps->failed = true;
    return -1;
}

#define fail_at(ps, at, ...) fail((ps), pos_at((ps), (at)), __VA_ARGS__)

static int fail_oom(parser *ps)
{
    return fail_at(ps, ps->p < ps->line_start ? ps->line_start : ps->p, "out of memory");
}

static bool at_eof(const parser *ps)
{
    return ps->p >= ps->end;
}

static bool newline_at(const parser *ps, const char *q)
{
    return q < ps->end && (*q == '\n' || (*q == '\r' && q + 1 < ps->end && q[1] == '\n'));
}

static bool is_control(unsigned char c)
{
    return (c < 0x20 && c != '\t') || c == 0x7F;
}

/* Describes the character at `at` for "found ..." in messages. */
static const char *describe(const parser *ps, const char *at, char *buf, size_t n)
{
    if (at >= ps->end)
        return "end of file";
    unsigned char c = (unsigned char)*at;
    if (newline_at(ps, at))
        return "end of line";
    if (c == '\r')
        return "a carriage return without a line feed";
    if (is_control(c)) {
        snprintf(buf, n, "control character U+%04X", c);
        return buf;
    }
    int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (len > ps->end - at)
        len = (int)(ps->end - at);
    snprintf(buf, n, "'%.*s'", len, at);
    return buf;
}

static const char *a_type(const toml_value *v)
{
    switch (v->type) {
    case TOML_TABLE: return v->kind == TBL_INLINE ? "an inline table" : "a table";
    case TOML_ARRAY: return v->kind == ARR_TABLES ? "an array of tables" : "an array";
    case TOML_STRING: return "a string";
    case TOML_INTEGER: return "an integer";
    case TOML_FLOAT: return "a float";
    case TOML_BOOL: return "a boolean";
    }
    return "a value";
}

static bool is_bare(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-';
}

/* Writes parts[0..n) as a dotted key for a message: "a.b" when every part
 * is bare, else the key as TOML spells it (a.'b c'); long parts are cut.
 * Returns buf. */
static const char *key_disp(const keypart *parts, size_t n, char *buf, size_t cap)
{
    enum { PART_MAX = 64 };
    bool all_bare = true;
    for (size_t i = 0; i < n; i++) {
        bool bare = parts[i].len > 0;
        for (size_t j = 0; j < parts[i].len; j++)
            if (!is_bare((unsigned char)parts[i].s[j]))
                bare = false;
        all_bare = all_bare && bare;
    }
    size_t o = 0;
    if (all_bare)
        buf[o++] = '"';
    for (size_t i = 0; i < n && o + 16 < cap; i++) {
        const keypart *k = &parts[i];
        bool bare = k->len > 0, plain = true;
        for (size_t j = 0; j < k->len; j++) {
            unsigned char c = (unsigned char)k->s[j];
            if (!is_bare(c))
                bare = false;
            if (c == '\'' || is_control(c))
                plain = false;
        }
        if (i > 0)
            buf[o++] = '.';
        char q = bare ? 0 : plain ? '\'' : '"';
        if (q)
            buf[o++] = q;
        for (size_t j = 0; j < k->len && o + 16 < cap; j++) {
            unsigned char c = (unsigned char)k->s[j];
            if (j >= PART_MAX && (c & 0xC0) != 0x80) {
                o += (size_t)snprintf(buf + o, cap - o, "...");
                break;
            }
            if (q == '"' && (c == '"' || c == '\\'))
                o += (size_t)snprintf(buf + o, cap - o, "\\%c", c);
            else if (q == '"' && is_control(c))
                o += (size_t)snprintf(buf + o, cap - o, "\\u%04X", c);
            else
                buf[o++] = (char)c;
        }
        if (q)
            buf[o++] = q;
    }
    if (all_bare)
        buf[o++] = '"';
    buf[o] = '\0';
    return buf;
}

/* ---- values ------------------------------------------------------------ */

static toml_value *value_new(parser *ps, toml_type type, toml_pos pos, int depth)
{
    toml_value *v = calloc(1, sizeof(*v));
    if (!v)
        return NULL;
    v->type = type;
    v->pos = pos;
    v->depth = (uint16_t)depth;
    v->source = ps->root ? ps->root->source : NULL;
    return v;
}

static void value_free(toml_value *v)
{
    if (!v)
        return;
    switch (v->type) {
    case TOML_TABLE:
        for (size_t i = 0; i < v->u.t.len; i++) {
            free(v->u.t.ents[i].key);
            value_free(v->u.t.ents[i].val);
        }
        free(v->u.t.ents);
        free(v->u.t.slots);
        break;
    case TOML_ARRAY:
        for (size_t i = 0; i < v->u.a.len; i++)
            value_free(v->u.a.items[i]);
        free(v->u.a.items);
        break;
    case TOML_STRING:
        free(v->u.s.ptr);
        break;
    default:
        break;
    }
    free(v);
}

void toml_free(toml_value *root)
{
    if (!root)
        return;
    char *source = (char *)root->source;
    value_free(root);
    free(source);
}

static uint64_t key_hash(const char *k, size_t n)
{
    uint64_t h = 14695981039346656037ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)k[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static long tbl_index(const toml_value *t, const char *k, size_t n)
{
    if (t->u.t.slots) {
        size_t mask = t->u.t.nslots - 1;
        for (size_t s = key_hash(k, n) & mask;; s = (s + 1) & mask) {
            uint32_t e = t->u.t.slots[s];
            if (e == 0)
                return -1;
            const toml_entry *en = &t->u.t.ents[e - 1];
            if (en->keylen == n && memcmp(en->key, k, n) == 0)
                return (long)e - 1;
        }
    }
    for (size_t i = 0; i < t->u.t.len; i++) {
        const toml_entry *en = &t->u.t.ents[i];
        if (en->keylen == n && memcmp(en->key, k, n) == 0)
            return (long)i;
    }
    return -1;
}

static toml_entry *tbl_find(toml_value *t, const keypart *k)
{
    long i = tbl_index(t, k->s, k->len);
    return i < 0 ? NULL : &t->u.t.ents[i];
}

static void slot_put(uint32_t *slots, size_t nslots, const toml_entry *en, uint32_t idx1)
{
    size_t mask = nslots - 1;
    size_t s = key_hash(en->key, en->keylen) & mask;
    while (slots[s])
        s = (s + 1) & mask;
    slots[s] = idx1;
}

/* Appends key -> v to t (copying the key), taking ownership of v.
 * Returns 0, or -1 when out of memory (then v is still the caller's). */
static int tbl_add(toml_value *t, const keypart *k, toml_value *v)
{
    if (t->u.t.len == t->u.t.cap) {
        size_t cap = t->u.t.cap ? 2 * t->u.t.cap : 4;
        if (cap > UINT32_MAX / 4)
            return -1;
        toml_entry *e = realloc(t->u.t.ents, cap * sizeof(*e));
        if (!e)
            return -1;
        t->u.t.ents = e;
        t->u.t.cap = cap;
    }
    size_t len = t->u.t.len + 1;
    if (len >= TBL_INDEX_MIN && 2 * len > t->u.t.nslots) {
        size_t nslots = 16;
        while (nslots < 4 * len)
            nslots *= 2;
        uint32_t *slots = calloc(nslots, sizeof(*slots));
        if (!slots)
            return -1;
        for (size_t i = 0; i < t->u.t.len; i++)
            slot_put(slots, nslots, &t->u.t.ents[i], (uint32_t)i + 1);
        free(t->u.t.slots);
        t->u.t.slots = slots;
        t->u.t.nslots = nslots;
    }
    char *key = malloc(k->len + 1);
    if (!key)
        return -1;
    memcpy(key, k->s, k->len + 1);
    toml_entry *en = &t->u.t.ents[t->u.t.len];
    en->key = key;
    en->keylen = k->len;
    en->pos = k->pos;
    en->val = v;
    if (t->u.t.slots)
        slot_put(t->u.t.slots, t->u.t.nslots, en, (uint32_t)len);
    t->u.t.len = len;
    return 0;
}

/* Appends v to a, taking ownership. Returns 0, or -1 when out of memory. */
static int arr_add(toml_value *a, toml_value *v)
{
    if (a->u.a.len == a->u.a.cap) {
        size_t cap = a->u.a.cap ? 2 * a->u.a.cap : 4;
        toml_value **items = realloc(a->u.a.items, cap * sizeof(*items));
        if (!items)
            return -1;
        a->u.a.items = items;
        a->u.a.cap = cap;
    }
    a->u.a.items[a->u.a.len++] = v;
    return 0;
}

/* An inline table is complete when it closes: nothing may add to it or to
 * the tables its dotted keys made. */
static void seal(toml_value *t)
{
    t->kind = TBL_INLINE;
    for (size_t i = 0; i < t->u.t.len; i++) {
        toml_value *v = t->u.t.ents[i].val;
        if (v->type == TOML_TABLE && v->kind != TBL_INLINE)
            seal(v);
    }
}

/* ---- buffers and keys -------------------------------------------------- */

static int sb_put(strbuf *sb, const char *s, size_t n)
{
    if (sb->len + n + 1 > sb->cap) {
        size_t cap = sb->cap ? sb->cap : 64;
        while (cap < sb->len + n + 1)
            cap *= 2;
        char *p = realloc(sb->ptr, cap);
        if (!p)
            return -1;
        sb->ptr = p;
        sb->cap = cap;
    }
    memcpy(sb->ptr + sb->len, s, n);
    sb->len += n;
    sb->ptr[sb->len] = '\0';
    return 0;
}

static char *sb_dup(const strbuf *sb)
{
    char *s = malloc(sb->len + 1);
    if (s) {
        if (sb->len)
            memcpy(s, sb->ptr, sb->len);
        s[sb->len] = '\0';
    }
    return s;
}

static void keypath_clear(keypath *kp)
{
    for (size_t i = 0; i < kp->n; i++)
        free(kp->parts[i].s);
    kp->n = 0;
}

static void keypath_deinit(keypath *kp)
{
    keypath_clear(kp);
    free(kp->parts);
    kp->parts = NULL;
    kp->cap = 0;
}

/* ---- lexical pieces ---------------------------------------------------- */

static void skip_ws(parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t'))
        ps->p++;
}

/* Consumes a newline (LF or CRLF) if one is next. */
static bool eat_newline(parser *ps)
{
    if (!newline_at(ps, ps->p))
        return false;
    ps->p += *ps->p == '\r' ? 2 : 1;
    next_line(ps);
    return true;
}

/* Consumes a comment up to (not including) its newline, if one is next. */
static int skip_comment(parser *ps)
{
    if (at_eof(ps) || *ps->p != '#')
        return 0;
    for (ps->p++; ps->p < ps->end; ps->p++) {
        unsigned char c = (unsigned char)*ps->p;
        if (c == '\n' || newline_at(ps, ps->p))
            return 0;
        if (c == '\r')
            return fail_at(ps, ps->p, "carriage return without a line feed in comment");
        if (is_control(c))
            return fail_at(ps, ps->p, "control character U+%04X in comment", c);
    }
    return 0;
}

/* After a key/value or a header: spaces, a comment, then a newline or the end. */
static int expect_eol(parser *ps, const char *after)
{
    char buf[32];
    skip_ws(ps);
    if (skip_comment(ps) < 0)
        return -1;
    if (at_eof(ps) || eat_newline(ps))
        return 0;
    return fail_at(ps, ps->p, "expected end of line after %s, found %s", after,
                   describe(ps, ps->p, buf, sizeof(buf)));
}

/* Inside arrays: spaces, newlines and comments. */
static int skip_ws_nl(parser *ps)
{
    for (;;) {
        skip_ws(ps);
        if (skip_comment(ps) < 0)
            return -1;
        if (!eat_newline(ps))
            return 0;
    }
}

static int hexval(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int put_utf8(strbuf *sb, uint32_t cp)
{
    char b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (char)(0xC0 | (cp >> 6));
        b[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (char)(0xE0 | (cp >> 12));
        b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        b[0] = (char)(0xF0 | (cp >> 18));
        b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return sb_put(sb, b, n);
}

/* An escape sequence of a basic string; ps->p is at the backslash. */
static int parse_escape(parser *ps)
{
    const char *bs = ps->p;
    char buf[32];
    if (bs + 1 >= ps->end)
        return fail_at(ps, bs, "unterminated escape sequence");
    char c = bs[1], out;
    switch (c) {
    case 'b': out = '\b'; break;
    case 't': out = '\t'; break;
    case 'n': out = '\n'; break;
    case 'f': out = '\f'; break;
    case 'r': out = '\r'; break;
    case '"': out = '"'; break;
    case '\\': out = '\\'; break;
    case 'u':
    case 'U': {
        int n = c == 'u' ? 4 : 8;
        uint32_t cp = 0;
        for (int i = 0; i < n; i++) {
            const char *q = bs + 2 + i;
            if (q >= ps->end || hexval((unsigned char)*q) < 0)
                return fail_at(ps, bs, "\"\\%c\" must be followed by %d hexadecimal digits", c, n);
            cp = cp << 4 | (uint32_t)hexval((unsigned char)*q);
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return fail_at(ps, bs, "\"\\%.*s\" is not a Unicode scalar value", n + 1, bs + 1);
        if (put_utf8(&ps->sb, cp) < 0)
            return fail_oom(ps);
        ps->p = bs + 2 + n;
        return 0;
    }
    default:
        if ((unsigned char)c > ' ' && (unsigned char)c < 0x7F)
            return fail_at(ps, bs, "invalid escape sequence \"\\%c\"", c);
        return fail_at(ps, bs, "invalid escape sequence: backslash followed by %s",
                       describe(ps, bs + 1, buf, sizeof(buf)));
    }
    if (sb_put(&ps->sb, &out, 1) < 0)
        return fail_oom(ps);
    ps->p = bs + 2;
    return 0;
}

/* Copies a run of plain characters (not the delimiter, a backslash when
 * escapes count, a newline or a control character) into the scratch buffer. */
static int copy_run(parser *ps, char delim, bool escapes)
{
    const char *s = ps->p;
    while (ps->p < ps->end) {
        unsigned char c = (unsigned char)*ps->p;
        if (c == (unsigned char)delim || (escapes && c == '\\') || is_control(c))
            break;
        ps->p++;
    }
    if (ps->p > s && sb_put(&ps->sb, s, (size_t)(ps->p - s)) < 0)
        return fail_oom(ps);
    return 0;
}

/* A single-line basic ("...") or literal ('...') string into ps->sb; ps->p
 * is at the opening quote. */
static int parse_line_string(parser *ps)
{
    char q = *ps->p, buf[48];
    bool escapes = q == '"';
    const char *open = ps->p;
    toml_pos start = pos_at(ps, open);
    ps->sb.len = 0;
    ps->p++;
    for (;;) {
        if (copy_run(ps, q, escapes) < 0)
            return -1;
        if (at_eof(ps) || newline_at(ps, ps->p))
            return fail(ps, start, "unterminated string");
        unsigned char c = (unsigned char)*ps->p;
        if (c == (unsigned char)q) {
            ps->p++;
            return 0;
        }
        if (escapes && c == '\\') {
            if (parse_escape(ps) < 0)
                return -1;
            continue;
        }
        return fail_at(ps, ps->p, "%s in string", describe(ps, ps->p, buf, sizeof(buf)));
    }
}

/* A multi-line basic ("""...""") or literal ('''...''') string into ps->sb;
 * ps->p is at the opening quotes. */
static int parse_ml_string(parser *ps)
{
    char q = *ps->p, buf[48];
    bool escapes = q == '"';
    toml_pos start = pos_at(ps, ps->p);
    ps->sb.len = 0;
    ps->p += 3;
    eat_newline(ps); /* a newline right after the opening quotes is trimmed */
    for (;;) {
        if (copy_run(ps, q, escapes) < 0)
            return -1;
        if (at_eof(ps))
            return fail(ps, start, "unterminated multi-line string");
        unsigned char c = (unsigned char)*ps->p;
        if (c == (unsigned char)q) {
            size_t n = 0;
            while (ps->p + n < ps->end && ps->p[n] == q)
                n++;
            if (n < 3) {
                if (sb_put(&ps->sb, ps->p, n) < 0)
                    return fail_oom(ps);
                ps->p += n;
                continue;
            }
            /* Up to two quotes may end the content right before the closing three. */
            size_t extra = n - 3 > 2 ? 2 : n - 3;
            if (extra && sb_put(&ps->sb, ps->p, extra) < 0)
                return fail_oom(ps);
            ps->p += 3 + extra;
            return 0;
        }
        if (c == '\n' || newline_at(ps, ps->p)) {
            if (sb_put(&ps->sb, "\n", 1) < 0)
                return fail_oom(ps);
            eat_newline(ps);
            continue;
        }
        if (escapes && c == '\\') {
            const char *r = ps->p + 1;
            while (r < ps->end && (*r == ' ' || *r == '\t'))
                r++;
            if (newline_at(ps, r)) {
                /* A line-ending backslash trims all whitespace and newlines after it. */
                ps->p = r;
                for (;;) {
                    skip_ws(ps);
                    if (!eat_newline(ps))
                        break;
                }
                continue;
            }
            if (parse_escape(ps) < 0)
                return -1;
            continue;
        }
        return fail_at(ps, ps->p, "%s in string", describe(ps, ps->p, buf, sizeof(buf)));
    }
}

static bool starts_ml(const parser *ps)
{
    return ps->end - ps->p >= 3 && ps->p[1] == ps->p[0] && ps->p[2] == ps->p[0];
}

/* A key, possibly dotted, into kp; ps->p is at its first character. Leaves
 * ps->p after the spaces that follow it. */
static int parse_key(parser *ps, keypath *kp)
{
    char buf[48];
    keypath_clear(kp);
    for (;;) {
        skip_ws(ps);
        if (kp->n == kp->cap) {
            size_t cap = kp->cap ? 2 * kp->cap : 4;
            keypart *parts = realloc(kp->parts, cap * sizeof(*parts));
            if (!parts)
                return fail_oom(ps);
            kp->parts = parts;
            kp->cap = cap;
        }
        keypart *k = &kp->parts[kp->n];
        k->pos = pos_at(ps, ps->p);
        k->s = NULL;
        if (!at_eof(ps) && is_bare((unsigned char)*ps->p)) {
            const char *s = ps->p;
            while (ps->p < ps->end && is_bare((unsigned char)*ps->p))
                ps->p++;
            ps->sb.len = 0;
            if (sb_put(&ps->sb, s, (size_t)(ps->p - s)) < 0)
                return fail_oom(ps);
        } else if (!at_eof(ps) && (*ps->p == '"' || *ps->p == '\'')) {
            if (starts_ml(ps))
                return fail_at(ps, ps->p, "a multi-line string cannot be a key");
            if (parse_line_string(ps) < 0)
                return -1;
        } else if (kp->n > 0) {
            return fail_at(ps, ps->p, "expected a key after '.', found %s",
                           describe(ps, ps->p, buf, sizeof(buf)));
        } else {
            return fail_at(ps, ps->p, "expected a key, found %s",
                           describe(ps, ps->p, buf, sizeof(buf)));
        }
        k->len = ps->sb.len;
        k->s = sb_dup(&ps->sb);
        if (!k->s)
            return fail_oom(ps);
        kp->n++;
        skip_ws(ps);
        if (at_eof(ps) || *ps->p != '.')
            return 0;
        ps->p++;
    }
}

/* ---- numbers, booleans, date-times -------------------------------------- */

static bool is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static bool is_token(unsigned char c)
{
    return is_bare(c) || c == '.' || c == '+' || c == ':';
}

/* Reads exactly n decimal digits at *q. */
static bool take_digits(const char **q, const char *end, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (*q + i >= end || !is_digit((unsigned char)(*q)[i]))
            return false;
        v = v * 10 + ((*q)[i] - '0');
    }
    *q += n;
    *out = v;
    return true;
}

static int days_in_month(int y, int m)
{
    static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0))
        return 29;
    return days[m - 1];
}

/* A date-time (offset or local), a local date or a local time at ps->p:
 * checked against RFC 3339 as TOML 1.0 restricts it, then refused. */
static int parse_datetime(parser *ps)
{
    const char *s = ps->p, *q = s, *e = ps->end;
    toml_pos pos = pos_at(ps, s);
    int y = 0, mo = 0, d = 0, h, mi, sec;
    bool date = e - s >= 5 && s[4] == '-';
    bool time = !date;
    const char *what = "local time";
    if (date) {
        what = "local date";
        if (!take_digits(&q, e, 4, &y) || q >= e || *q++ != '-' || !take_digits(&q, e, 2, &mo) ||
            q >= e || *q++ != '-' || !take_digits(&q, e, 2, &d))
            return fail(ps, pos, "invalid date: expected YYYY-MM-DD");
        if (mo < 1 || mo > 12)
            return fail(ps, pos, "invalid date: month %02d is not 01 to 12", mo);
        if (d < 1 || d > days_in_month(y, mo))
            return fail(ps, pos, "invalid date: %04d-%02d has no day %02d", y, mo, d);
        if (q < e && (*q == 'T' || *q == 't')) {
            q++;
            time = true;
        } else if (e - q >= 4 && *q == ' ' && is_digit((unsigned char)q[1]) &&
                   is_digit((unsigned char)q[2]) && q[3] == ':') {
            q++;
            time = true;
        }
    }
    if (time) {
        if (date)
            what = "local date-time";
        if (!take_digits(&q, e, 2, &h) || q >= e || *q++ != ':' || !take_digits(&q, e, 2, &mi) ||
            q >= e || *q++ != ':' || !take_digits(&q, e, 2, &sec))
            return fail(ps, pos, "invalid time: expected HH:MM:SS");
        if (h > 23 || mi > 59 || sec > 60)
            return fail(ps, pos, "invalid time: %02d:%02d:%02d is out of range", h, mi, sec);
        if (q < e && *q == '.') {
            q++;
            if (q >= e || !is_digit((unsigned char)*q))
                return fail(ps, pos, "invalid time: expected digits after '.'");
            while (q < e && is_digit((unsigned char)*q))
                q++;
        }
        if (date && q < e && (*q == 'Z' || *q == 'z')) {
            q++;
            what = "offset date-time";
        } else if (date && q < e && (*q == '+' || *q == '-')) {
            int oh, om;
            q++;
            if (!take_digits(&q, e, 2, &oh) || q >= e || *q++ != ':' || !take_digits(&q, e, 2, &om))
                return fail(ps, pos, "invalid date-time: expected a time offset like +01:00");
            if (oh > 23 || om > 59)
                return fail(ps, pos, "invalid date-time: time offset out of range");
            what = "offset date-time";
        }
    }
    if (q < e && is_token((unsigned char)*q))
        return fail(ps, pos, "invalid %s: unexpected '%c'", what, *q);
    return fail(ps, pos, "date-times are not supported (found %s %s)",
                what[0] == 'o' ? "an" : "a", what);
}

/* Consumes digits of the given base separated by single underscores.
 * Returns the number of digits, or -1 when an underscore is misplaced. */
static int scan_digits(const char **sp, const char *e, int base)
{
    const char *s = *sp;
    int n = 0;
    while (s < e) {
        int dv = hexval((unsigned char)*s);
        if (dv >= 0 && dv < base) {
            n++;
            s++;
        } else if (*s == '_') {
            if (n == 0 || s + 1 >= e || hexval((unsigned char)s[1]) < 0 ||
                hexval((unsigned char)s[1]) >= base)
                return -1;
            s++;
        } else {
            break;
        }
    }
    *sp = s;
    return n;
}

/* Accumulates the digits of [s, e) (underscores skipped) in base, limited to
 * max. Returns false on overflow. */
static bool accumulate(const char *s, const char *e, int base, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    for (; s < e; s++) {
        if (*s == '_')
            continue;
        uint64_t dv = (uint64_t)hexval((unsigned char)*s);
        if (v > (max - dv) / (uint64_t)base)
            return false;
        v = v * (uint64_t)base + dv;
    }
    *out = v;
    return true;
}

/* A number, boolean, inf/nan or date-time starting at ps->p. */
static int parse_scalar_token(parser *ps, toml_value **out, int depth)
{
    const char *s = ps->p, *e = ps->end;
    toml_pos pos = pos_at(ps, s);
    /* Date-times start like "1979-" or "07:". */
    if (e - s >= 5 && is_digit((unsigned char)s[0]) && is_digit((unsigned char)s[1]) &&
        is_digit((unsigned char)s[2]) && is_digit((unsigned char)s[3]) && s[4] == '-')
        return parse_datetime(ps);
    if (e - s >= 3 && is_digit((unsigned char)s[0]) && is_digit((unsigned char)s[1]) && s[2] == ':')
        return parse_datetime(ps);

    const char *te = s;
    while (te < e && is_token((unsigned char)*te))
        te++;
    int tl = (int)(te - s);
    if (tl == 0) {
        char buf[48];
        return fail(ps, pos, "expected a value, found %s", describe(ps, s, buf, sizeof(buf)));
    }
    const char *t = s;
    bool neg = false, sign = false;
    if (*t == '+' || *t == '-') {
        neg = *t == '-';
        sign = true;
        t++;
    }
    size_t rest = (size_t)(te - t);
    toml_value *v = NULL;
    if (!sign && rest == 4 && memcmp(t, "true", 4) == 0) {
        v = value_new(ps, TOML_BOOL, pos, depth);
        if (v)
            v->u.b = true;
    } else if (!sign && rest == 5 && memcmp(t, "false", 5) == 0) {
        v = value_new(ps, TOML_BOOL, pos, depth);
        if (v)
            v->u.b = false;
    } else if (rest == 3 && (memcmp(t, "inf", 3) == 0 || memcmp(t, "nan", 3) == 0)) {
        v = value_new(ps, TOML_FLOAT, pos, depth);
        if (v) {
            double x = t[0] == 'i' ? INFINITY : NAN;
            v->u.f = neg ? -x : x;
        }
    } else if (rest == 0 || !is_digit((unsigned char)*t)) {
        bool digits = false;
        for (const char *c = s; c < te; c++)
            digits = digits || is_digit((unsigned char)*c);
        if (!sign && !digits)
            return fail(ps, pos, "invalid value \"%.*s\" (strings must be quoted)", tl, s);
        return fail(ps, pos, "invalid number \"%.*s\"", tl, s);
    } else if (memchr(s, ':', (size_t)tl)) {
        return fail(ps, pos, "invalid date-time \"%.*s\"", tl, s);
    } else if (rest > 1 && t[0] == '0' && (t[1] == 'x' || t[1] == 'o' || t[1] == 'b')) {
        int base = t[1] == 'x' ? 16 : t[1] == 'o' ? 8 : 2;
        const char *name = base == 16 ? "hexadecimal" : base == 8 ? "octal" : "binary";
        if (sign)
            return fail(ps, pos, "%s integers cannot have a sign: \"%.*s\"", name, tl, s);
        const char *d = t + 2;
        int nd = scan_digits(&d, te, base);
        if (nd < 0 || (nd == 0 && d < te && *d == '_'))
            return fail(ps, pos, "invalid %s integer \"%.*s\": '_' must be between digits", name, tl, s);
        if (nd == 0 || d != te)
            return fail(ps, pos, "invalid %s integer \"%.*s\"", name, tl, s);
        uint64_t u;
        if (!accumulate(t + 2, te, base, INT64_MAX, &u))
            return fail(ps, pos, "integer %.*s is out of range (64-bit signed)", tl, s);
        v = value_new(ps, TOML_INTEGER, pos, depth);
        if (v)
            v->u.i = (int64_t)u;
    } else {
        const char *d = t;
        int nint = scan_digits(&d, te, 10);
        bool is_float = false;
        const char *why = NULL;
        if (nint < 0)
            why = "'_' must be between digits";
        else if (nint > 1 && t[0] == '0')
            why = "leading zeros are not allowed";
        if (!why && d < te && *d == '.') {
            is_float = true;
            d++;
            int nf = scan_digits(&d, te, 10);
            if (nf < 0 || (nf == 0 && d < te && *d == '_'))
                why = "'_' must be between digits";
            else if (nf == 0)
                why = "expected digits after '.'";
        }
        if (!why && d < te && (*d == 'e' || *d == 'E')) {
            is_float = true;
            d++;
            if (d < te && (*d == '+' || *d == '-'))
                d++;
            int ne = scan_digits(&d, te, 10);
            if (ne < 0 || (ne == 0 && d < te && *d == '_'))
                why = "'_' must be between digits";
            else if (ne == 0)
                why = "expected digits in the exponent";
        }
        if (!why && d != te)
            why = "unexpected characters";
        if (why) {
            /* A '-' that is not an exponent's sign means a date was meant. */
            for (const char *c = t; c < te; c++)
                if (*c == '-' && c[-1] != 'e' && c[-1] != 'E')
                    return fail(ps, pos, "invalid date-time \"%.*s\"", tl, s);
            return fail(ps, pos, "invalid %s \"%.*s\": %s", is_float ? "float" : "number", tl, s, why);
        }
        if (is_float) {
            ps->sb.len = 0;
            for (const char *c = s; c < te; c++)
                if (*c != '_' && sb_put(&ps->sb, c, 1) < 0)
                    return fail_oom(ps);
            char *endp;
            errno = 0;
            double x = strtod(ps->sb.ptr, &endp);
            if (endp != ps->sb.ptr + ps->sb.len)
                return fail(ps, pos, "invalid float \"%.*s\"", tl, s);
            if (isinf(x))
                return fail(ps, pos, "float %.*s is out of range", tl, s);
            v = value_new(ps, TOML_FLOAT, pos, depth);
            if (v)
                v->u.f = x;
        } else {
            uint64_t u;
            if (!accumulate(t, te, 10, neg ? (uint64_t)INT64_MAX + 1 : INT64_MAX, &u))
                return fail(ps, pos, "integer %.*s is out of range (64-bit signed)", tl, s);
            v = value_new(ps, TOML_INTEGER, pos, depth);
            if (v)
                v->u.i = neg ? (int64_t)(0 - u) : (int64_t)u;
        }
    }
    if (!v)
        return fail_oom(ps);
    ps->p = te;
    *out = v;
    return 0;
}

/* ---- values and tables ------------------------------------------------- */

static int parse_value(parser *ps, int depth, toml_value **out);
static int parse_keyval(parser *ps, toml_value *base);

static int check_depth(parser *ps, toml_pos pos, int depth)
{
    if (depth > TOML_MAX_DEPTH)
        return fail(ps, pos, "nesting deeper than %d levels", TOML_MAX_DEPTH);
    return 0;
}

static int parse_array(parser *ps, int depth, toml_value **out)
{
    char buf[48];
    toml_pos pos = pos_at(ps, ps->p);
    if (check_depth(ps, pos, depth) < 0)
        return -1;
    toml_value *a = value_new(ps, TOML_ARRAY, pos, depth);
    if (!a)
        return fail_oom(ps);
    a->kind = ARR_STATIC;
    ps->p++;
    for (;;) {
        if (skip_ws_nl(ps) < 0)
            goto fail;
        if (at_eof(ps)) {
            fail(ps, pos, "unterminated array");
            goto fail;
        }
        if (*ps->p == ']')
            break;
        toml_value *v;
        if (parse_value(ps, depth + 1, &v) < 0)
            goto fail;
        if (arr_add(a, v) < 0) {
            value_free(v);
            fail_oom(ps);
            goto fail;
        }
        if (skip_ws_nl(ps) < 0)
            goto fail;
        if (at_eof(ps)) {
            fail(ps, pos, "unterminated array");
            goto fail;
        }
        if (*ps->p == ',') {
            ps->p++;
            continue;
        }
        if (*ps->p == ']')
            break;
        fail_at(ps, ps->p, "expected ',' or ']' after an array element, found %s",
                describe(ps, ps->p, buf, sizeof(buf)));
        goto fail;
    }
    ps->p++;
    *out = a;
    return 0;
fail:
    value_free(a);
    return -1;
}

static int parse_inline_table(parser *ps, int depth, toml_value **out)
{
    char buf[48];
    toml_pos pos = pos_at(ps, ps->p);
    if (check_depth(ps, pos, depth) < 0)
        return -1;
    toml_value *t = value_new(ps, TOML_TABLE, pos, depth);
    if (!t)
        return fail_oom(ps);
    t->kind = TBL_HEADER; /* open to its own keys until sealed */
    ps->p++;
    skip_ws(ps);
    if (!at_eof(ps) && *ps->p == '}') {
        ps->p++;
        goto done;
    }
    for (;;) {
        if (parse_keyval(ps, t) < 0)
            goto fail;
        skip_ws(ps);
        if (!at_eof(ps) && *ps->p == ',') {
            ps->p++;
            skip_ws(ps);
            if (!at_eof(ps) && *ps->p == '}') {
                fail_at(ps, ps->p, "trailing comma not allowed in an inline table");
                goto fail;
            }
            continue;
        }
        if (!at_eof(ps) && *ps->p == '}') {
            ps->p++;
            break;
        }
        if (at_eof(ps) || newline_at(ps, ps->p))
            fail_at(ps, ps->p, "expected ',' or '}' in inline table, found %s "
                    "(an inline table must be on one line)", describe(ps, ps->p, buf, sizeof(buf)));
        else
            fail_at(ps, ps->p, "expected ',' or '}' in inline table, found %s",
                    describe(ps, ps->p, buf, sizeof(buf)));
        goto fail;
    }
done:
    seal(t);
    *out = t;
    return 0;
fail:
    value_free(t);
    return -1;
}

static int parse_value(parser *ps, int depth, toml_value **out)
{
    char buf[48];
    if (at_eof(ps) || newline_at(ps, ps->p) || *ps->p == '#')
        return fail_at(ps, ps->p, "expected a value, found %s",
                       at_eof(ps) || *ps->p != '#' ? describe(ps, ps->p, buf, sizeof(buf))
                                                   : "a comment");
    char c = *ps->p;
    if (c == '"' || c == '\'') {
        toml_pos pos = pos_at(ps, ps->p);
        if ((starts_ml(ps) ? parse_ml_string(ps) : parse_line_string(ps)) < 0)
            return -1;
        toml_value *v = value_new(ps, TOML_STRING, pos, depth);
        if (!v)
            return fail_oom(ps);
        v->u.s.len = ps->sb.len;
        v->u.s.ptr = sb_dup(&ps->sb);
        if (!v->u.s.ptr) {
            free(v);
            return fail_oom(ps);
        }
        *out = v;
        return 0;
    }
    if (c == '[')
        return parse_array(ps, depth, out);
    if (c == '{')
        return parse_inline_table(ps, depth, out);
    return parse_scalar_token(ps, out, depth);
}

/* Walks the dotted key kp[0..n-1) from base for a key/value line, creating
 * tables as needed, and returns the table the last part goes into. */
static toml_value *resolve_dotted(parser *ps, toml_value *base, keypath *kp)
{
    char kb[256];
    toml_value *t = base;
    for (size_t i = 0; i + 1 < kp->n; i++) {
        keypart *k = &kp->parts[i];
        toml_entry *en = tbl_find(t, k);
        if (!en) {
            if (check_depth(ps, k->pos, t->depth + 1) < 0)
                return NULL;
            toml_value *nt = value_new(ps, TOML_TABLE, k->pos, t->depth + 1);
            if (!nt || tbl_add(t, k, nt) < 0) {
                free(nt);
                fail_oom(ps);
                return NULL;
            }
            nt->kind = TBL_DOTTED;
            t = nt;
            continue;
        }
        toml_value *v = en->val;
        if (v->type == TOML_TABLE && (v->kind == TBL_DOTTED || v->kind == TBL_IMPLICIT)) {
            v->kind = TBL_DOTTED;
            t = v;
            continue;
        }
        key_disp(kp->parts, i + 1, kb, sizeof(kb));
        if (v->type == TOML_TABLE && v->kind == TBL_INLINE)
            fail(ps, k->pos, "cannot extend inline table %s (defined at %d:%d)", kb,
                 v->pos.line, v->pos.col);
        else if (v->type == TOML_TABLE)
            fail(ps, k->pos, "cannot add keys to table %s (defined at %d:%d) with dotted keys",
                 kb, v->pos.line, v->pos.col);
        else
            fail(ps, k->pos, "key %s is %s (defined at %d:%d), not a table", kb, a_type(v),
                 en->pos.line, en->pos.col);
        return NULL;
    }
    return t;
}

/* A key/value pair into base; ps->p is at the key. */
static int parse_keyval(parser *ps, toml_value *base)
{
    char kb[256], buf[48];
    keypath kp = {0};
    int r = -1;
    if (parse_key(ps, &kp) < 0)
        goto out;
    if (at_eof(ps) || *ps->p != '=') {
        fail_at(ps, ps->p, "expected '=' after key %s, found %s",
                key_disp(kp.parts, kp.n, kb, sizeof(kb)), describe(ps, ps->p, buf, sizeof(buf)));
        goto out;
    }
    ps->p++;
    skip_ws(ps);
    toml_value *t = resolve_dotted(ps, base, &kp);
    if (!t)
        goto out;
    keypart *last = &kp.parts[kp.n - 1];
    toml_entry *en = tbl_find(t, last);
    if (en) {
        fail(ps, last->pos, "duplicate key %s (first defined at %d:%d)",
             key_disp(kp.parts, kp.n, kb, sizeof(kb)), en->pos.line, en->pos.col);
        goto out;
    }
    toml_value *v;
    if (parse_value(ps, t->depth + 1, &v) < 0)
        goto out;
    if (tbl_add(t, last, v) < 0) {
        value_free(v);
        fail_oom(ps);
        goto out;
    }
    r = 0;
out:
    keypath_deinit(&kp);
    return r;
}

/* A [table] or [[array of tables]] header; ps->p is at the first '['. */
static int parse_header(parser *ps)
{
    char kb[256], buf[48];
    keypath kp = {0};
    int r = -1;
    const char *open = ps->p;
    toml_pos pos = pos_at(ps, open);
    bool aot = ps->end - open >= 2 && open[1] == '[';
    ps->p += aot ? 2 : 1;
    if (parse_key(ps, &kp) < 0)
        goto out;
    if (at_eof(ps) || *ps->p != ']' || (aot && (ps->end - ps->p < 2 || ps->p[1] != ']'))) {
        fail_at(ps, ps->p, "expected '%s' after table name %s, found %s", aot ? "]]" : "]",
                key_disp(kp.parts, kp.n, kb, sizeof(kb)), describe(ps, ps->p, buf, sizeof(buf)));
        goto out;
    }
    ps->p += aot ? 2 : 1;

    toml_value *t = ps->root;
    for (size_t i = 0; i + 1 < kp.n; i++) {
        keypart *k = &kp.parts[i];
        toml_entry *en = tbl_find(t, k);
        if (!en) {
            if (check_depth(ps, k->pos, t->depth + 1) < 0)
                goto out;
            toml_value *nt = value_new(ps, TOML_TABLE, k->pos, t->depth + 1);
            if (!nt || tbl_add(t, k, nt) < 0) {
                free(nt);
                fail_oom(ps);
                goto out;
            }
            nt->kind = TBL_IMPLICIT;
            t = nt;
            continue;
        }
        toml_value *v = en->val;
        key_disp(kp.parts, i + 1, kb, sizeof(kb));
        if (v->type == TOML_TABLE && v->kind != TBL_INLINE) {
            t = v;
        } else if (v->type == TOML_TABLE) {
            fail(ps, k->pos, "cannot extend inline table %s (defined at %d:%d)", kb,
                 v->pos.line, v->pos.col);
            goto out;
        } else if (v->type == TOML_ARRAY && v->kind == ARR_TABLES) {
            t = v->u.a.items[v->u.a.len - 1];
        } else if (v->type == TOML_ARRAY) {
            fail(ps, k->pos, "cannot extend static array %s (defined at %d:%d)", kb,
                 en->pos.line, en->pos.col);
            goto out;
        } else {
            fail(ps, k->pos, "key %s is %s (defined at %d:%d), not a table", kb, a_type(v),
                 en->pos.line, en->pos.col);
            goto out;
        }
    }

    keypart *last = &kp.parts[kp.n - 1];
    key_disp(kp.parts, kp.n, kb, sizeof(kb));
    toml_entry *en = tbl_find(t, last);
    if (check_depth(ps, last->pos, t->depth + (aot ? 2 : 1)) < 0)
        goto out;
    if (!aot) {
        if (!en) {
            toml_value *nt = value_new(ps, TOML_TABLE, pos, t->depth + 1);
            if (!nt || tbl_add(t, last, nt) < 0) {
                free(nt);
                fail_oom(ps);
                goto out;
            }
            nt->kind = TBL_HEADER;
            ps->cur = nt;
        } else if (en->val->type == TOML_TABLE && en->val->kind == TBL_IMPLICIT) {
            en->val->kind = TBL_HEADER;
            en->val->pos = pos;
            en->pos = last->pos;
            ps->cur = en->val;
        } else {
            toml_value *v = en->val;
            if (v->type == TOML_TABLE && v->kind == TBL_HEADER)
                fail(ps, pos, "table %s already defined at %d:%d", kb, v->pos.line, v->pos.col);
            else if (v->type == TOML_TABLE && v->kind == TBL_DOTTED)
                fail(ps, pos, "table %s already defined by dotted keys at %d:%d", kb,
                     en->pos.line, en->pos.col);
            else
                fail(ps, pos, "key %s already defined as %s at %d:%d", kb, a_type(v),
                     en->pos.line, en->pos.col);
            goto out;
        }
    } else {
        toml_value *arr;
        if (!en) {
            arr = value_new(ps, TOML_ARRAY, pos, t->depth + 1);
            if (!arr || tbl_add(t, last, arr) < 0) {
                free(arr);
                fail_oom(ps);
                goto out;
            }
            arr->kind = ARR_TABLES;
        } else if (en->val->type == TOML_ARRAY && en->val->kind == ARR_TABLES) {
            arr = en->val;
        } else if (en->val->type == TOML_ARRAY) {
            fail(ps, pos, "cannot append to static array %s (defined at %d:%d)", kb,
                 en->pos.line, en->pos.col);
            goto out;
        } else {
            fail(ps, pos, "key %s already defined as %s at %d:%d", kb, a_type(en->val),
                 en->pos.line, en->pos.col);
            goto out;
        }
        toml_value *nt = value_new(ps, TOML_TABLE, pos, arr->depth + 1);
        if (!nt || arr_add(arr, nt) < 0) {
            free(nt);
            fail_oom(ps);
            goto out;
        }
        nt->kind = TBL_HEADER;
        ps->cur = nt;
    }
    r = expect_eol(ps, aot ? "array-of-tables header" : "table header");
out:
    keypath_deinit(&kp);
    return r;
}

/* Checks that the whole text is UTF-8 before anything counts characters. */
static int check_utf8(parser *ps)
{
    const unsigned char *s = (const unsigned char *)ps->p, *e = (const unsigned char *)ps->end;
    while (s < e) {
        unsigned char c = *s;
        size_t n;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c < 0x80) {
            if (c == '\n') {
                ps->p = (const char *)s + 1;
                next_line(ps);
            }
            s++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            n = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 2;
            if (c == 0xE0)
                lo = 0xA0;
            if (c == 0xED)
                hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 3;
            if (c == 0xF0)
                lo = 0x90;
            if (c == 0xF4)
                hi = 0x8F;
        } else {
            goto bad;
        }
        if ((size_t)(e - s) <= n)
            goto bad;
        if (s[1] < lo || s[1] > hi)
            goto bad;
        for (size_t i = 2; i <= n; i++)
            if ((s[i] & 0xC0) != 0x80)
                goto bad;
        s += n + 1;
    }
    return 0;
bad:
    return fail_at(ps, (const char *)s, "invalid UTF-8 (byte 0x%02X)", *s);
}

static int parse_document(parser *ps)
{
    char buf[48];
    while (!at_eof(ps)) {
        skip_ws(ps);
        if (at_eof(ps))
            break;
        char c = *ps->p;
        if (c == '#' || newline_at(ps, ps->p)) {
            if (expect_eol(ps, "comment") < 0)
                return -1;
        } else if (c == '[') {
            if (parse_header(ps) < 0)
                return -1;
        } else if (is_bare((unsigned char)c) || c == '"' || c == '\'') {
            if (parse_keyval(ps, ps->cur) < 0 || expect_eol(ps, "value") < 0)
                return -1;
        } else {
            return fail_at(ps, ps->p, "expected a key or a [table], found %s",
                           describe(ps, ps->p, buf, sizeof(buf)));
        }
    }
    return 0;
}

toml_value *toml_parse(const char *text, size_t len, const char *name, char *err, size_t errlen)
{
    parser ps = {0};
    if (err && errlen)
        err[0] = '\0';
    if (!name)
        name = "<input>";
    char *source = strdup(name);
    ps.root = source ? value_new(&ps, TOML_TABLE, (toml_pos){1, 1}, 0) : NULL;
    if (!ps.root) {
        free(source);
        if (err && errlen)
            snprintf(err, errlen, "%s: out of memory", name);
        return NULL;
    }
    ps.root->source = source;
    ps.root->kind = TBL_HEADER;
    ps.cur = ps.root;
    ps.err = err;
    ps.errlen = errlen;
    ps.p = text ? text : "";
    ps.end = ps.p + (text ? len : 0);
    ps.line = 0;
    next_line(&ps);
    if (ps.end - ps.p >= 3 && memcmp(ps.p, "\xEF\xBB\xBF", 3) == 0) {
        ps.p += 3;
        ps.line = 0;
        next_line(&ps);
    }
    const char *start = ps.p;
    int r = check_utf8(&ps);
    if (r == 0) {
        ps.p = start;
        ps.line = 0;
        next_line(&ps);
        r = parse_document(&ps);
    }
    free(ps.sb.ptr);
    if (r < 0) {
        toml_free(ps.root);
        return NULL;
    }
    return ps.root;
}

toml_value *toml_read_file(const char *path, toml_parse_fn parse, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    size_t len = 0, cap = 0;
    toml_value *root = NULL;
    if (!f) {
        if (err && errlen)
            snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    for (;;) {
        if (len == cap) {
            cap = cap ? 2 * cap : 65536;
            char *p = realloc(text, cap);
            if (!p) {
                if (err && errlen)
                    snprintf(err, errlen, "%s: out of memory", path);
                goto out;
            }
            text = p;
        }
        size_t n = fread(text + len, 1, cap - len, f);
        len += n;
        if (n == 0)
            break;
    }
    if (ferror(f)) {
        if (err && errlen)
            snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        goto out;
    }
    root = parse(text, len, path, err, errlen);
out:
    free(text);
    fclose(f);
    return root;
}

toml_value *toml_parse_file(const char *path, char *err, size_t errlen)
{
    return toml_read_file(path, toml_parse, err, errlen);
}

/* ---- accessors --------------------------------------------------------- */

toml_type toml_type_of(const toml_value *v)
{
    return v->type;
}

const char *toml_type_name(toml_type t)
{
    switch (t) {
    case TOML_TABLE: return "table";
    case TOML_ARRAY: return "array";
    case TOML_STRING: return "string";
    case TOML_INTEGER: return "integer";
    case TOML_FLOAT: return "float";
    case TOML_BOOL: return "boolean";
    }
    return "unknown";
}

toml_pos toml_pos_of(const toml_value *v)
{
    return v->pos;
}

const char *toml_source_name(const toml_value *v)
{
    return v->source;
}

size_t toml_table_len(const toml_value *t)
{
    assert(t->type == TOML_TABLE);
    return t->u.t.len;
}

const char *toml_table_key(const toml_value *t, size_t i)
{
    assert(t->type == TOML_TABLE && i < t->u.t.len);
    return t->u.t.ents[i].key;
}

size_t toml_table_key_len(const toml_value *t, size_t i)
{
    assert(t->type == TOML_TABLE && i < t->u.t.len);
    return t->u.t.ents[i].keylen;
}

toml_pos toml_table_key_pos(const toml_value *t, size_t i)
{
    assert(t->type == TOML_TABLE && i < t->u.t.len);
    return t->u.t.ents[i].pos;
}

const toml_value *toml_table_value(const toml_value *t, size_t i)
{
    assert(t->type == TOML_TABLE && i < t->u.t.len);
    return t->u.t.ents[i].val;
}

const toml_value *toml_table_getn(const toml_value *t, const char *key, size_t keylen)
{
    assert(t->type == TOML_TABLE);
    long i = tbl_index(t, key, keylen);
    return i < 0 ? NULL : t->u.t.ents[i].val;
}

const toml_value *toml_table_get(const toml_value *t, const char *key)
{
    return toml_table_getn(t, key, strlen(key));
}

long toml_table_find(const toml_value *t, const char *key)
{
    assert(t->type == TOML_TABLE);
    return tbl_index(t, key, strlen(key));
}

size_t toml_array_len(const toml_value *a)
{
    assert(a->type == TOML_ARRAY);
    return a->u.a.len;
}

const toml_value *toml_array_at(const toml_value *a, size_t i)
{
    assert(a->type == TOML_ARRAY && i < a->u.a.len);
    return a->u.a.items[i];
}

const char *toml_string(const toml_value *v)
{
    assert(v->type == TOML_STRING);
    return v->u.s.ptr;
}

size_t toml_string_len(const toml_value *v)
{
    assert(v->type == TOML_STRING);
    return v->u.s.len;
}

int64_t toml_int(const toml_value *v)
{
    assert(v->type == TOML_INTEGER);
    return v->u.i;
}

double toml_float(const toml_value *v)
{
    assert(v->type == TOML_FLOAT);
    return v->u.f;
}

bool toml_bool(const toml_value *v)
{
    assert(v->type == TOML_BOOL);
    return v->u.b;
}

/* ---- building ---------------------------------------------------------- */

toml_value *toml_new_root(const char *source)
{
    toml_value *root = calloc(1, sizeof(*root));
    char *name = strdup(source ? source : "");
    if (!root || !name) {
        free(root);
        free(name);
        return NULL;
    }
    root->type = TOML_TABLE;
    root->kind = TBL_HEADER;
    root->pos = (toml_pos){1, 1};
    root->source = name;
    return root;
}

static toml_value *build__new(const toml_value *root, toml_type type, toml_pos pos)
{
    toml_value *v = calloc(1, sizeof(*v));
    if (!v)
        return NULL;
    v->type = type;
    v->kind = type == TOML_TABLE ? TBL_HEADER : ARR_STATIC;
    v->pos = pos;
    v->source = root->source;
    return v;
}

toml_value *toml_new_table(const toml_value *root, toml_pos pos)
{
    return build__new(root, TOML_TABLE, pos);
}

toml_value *toml_new_array(const toml_value *root, toml_pos pos)
{
    return build__new(root, TOML_ARRAY, pos);
}

toml_value *toml_new_string(const toml_value *root, toml_pos pos, const char *s, size_t len)
{
    toml_value *v = build__new(root, TOML_STRING, pos);
    char *p = v ? malloc(len + 1) : NULL;
    if (!p) {
        free(v);
        return NULL;
    }
    memcpy(p, s, len);
    p[len] = '\0';
    v->u.s.ptr = p;
    v->u.s.len = len;
    return v;
}

toml_value *toml_new_int(const toml_value *root, toml_pos pos, int64_t i)
{
    toml_value *v = build__new(root, TOML_INTEGER, pos);
    if (v)
        v->u.i = i;
    return v;
}

toml_value *toml_new_float(const toml_value *root, toml_pos pos, double f)
{
    toml_value *v = build__new(root, TOML_FLOAT, pos);
    if (v)
        v->u.f = f;
    return v;
}

toml_value *toml_new_bool(const toml_value *root, toml_pos pos, bool b)
{
    toml_value *v = build__new(root, TOML_BOOL, pos);
    if (v)
        v->u.b = b;
    return v;
}

/* Sets the depth of v and everything under it, v at depth. */
static void build__depth(toml_value *v, int depth)
{
    v->depth = (uint16_t)(depth > UINT16_MAX ? UINT16_MAX : depth);
    if (v->type == TOML_TABLE)
        for (size_t i = 0; i < v->u.t.len; i++)
            build__depth(v->u.t.ents[i].val, depth + 1);
    else if (v->type == TOML_ARRAY)
        for (size_t i = 0; i < v->u.a.len; i++)
            build__depth(v->u.a.items[i], depth + 1);
}

int toml_table_set(toml_value *t, const char *key, size_t keylen, toml_pos keypos, toml_value *v)
{
    assert(t->type == TOML_TABLE);
    if (tbl_index(t, key, keylen) >= 0)
        return -EEXIST;
    char *copy = malloc(keylen + 1);
    if (!copy)
        return -ENOMEM;
    memcpy(copy, key, keylen);
    copy[keylen] = '\0';
    keypart k = {copy, keylen, keypos};
    int rc = tbl_add(t, &k, v);
    free(copy);
    if (rc < 0)
        return -ENOMEM;
    build__depth(v, t->depth + 1);
    return 0;
}

toml_value *toml_table_take(toml_value *t, const char *key)
{
    assert(t->type == TOML_TABLE);
    long i = tbl_index(t, key, strlen(key));
    if (i < 0)
        return NULL;
    toml_value *v = t->u.t.ents[i].val;
    free(t->u.t.ents[i].key);
    memmove(&t->u.t.ents[i], &t->u.t.ents[i + 1],
            (t->u.t.len - (size_t)i - 1) * sizeof(toml_entry));
    t->u.t.len--;
    if (t->u.t.slots) { /* indexes moved: the index again */
        memset(t->u.t.slots, 0, t->u.t.nslots * sizeof(*t->u.t.slots));
        for (size_t k = 0; k < t->u.t.len; k++)
            slot_put(t->u.t.slots, t->u.t.nslots, &t->u.t.ents[k], (uint32_t)k + 1);
    }
    return v;
}

int toml_array_push(toml_value *a, toml_value *v)
{
    assert(a->type == TOML_ARRAY);
    if (arr_add(a, v) < 0)
        return -ENOMEM;
    build__depth(v, a->depth + 1);
    return 0;
}

toml_value *toml_clone(const toml_value *root, const toml_value *v)
{
    toml_value *c = build__new(root, v->type, v->pos);
    if (!c)
        return NULL;
    switch (v->type) {
    case TOML_TABLE:
        for (size_t i = 0; i < v->u.t.len; i++) {
            const toml_entry *en = &v->u.t.ents[i];
            toml_value *e = toml_clone(root, en->val);
            if (!e || toml_table_set(c, en->key, en->keylen, en->pos, e) < 0) {
                value_free(e);
                value_free(c);
                return NULL;
            }
        }
        break;
    case TOML_ARRAY:
        for (size_t i = 0; i < v->u.a.len; i++) {
            toml_value *e = toml_clone(root, v->u.a.items[i]);
            if (!e || toml_array_push(c, e) < 0) {
                value_free(e);
                value_free(c);
                return NULL;
            }
        }
        break;
    case TOML_STRING:
        value_free(c);
        return toml_new_string(root, v->pos, v->u.s.ptr, v->u.s.len);
    default:
        c->u = v->u;
        break;
    }
    return c;
}

void toml_value_free(toml_value *v)
{
    value_free(v);
}
