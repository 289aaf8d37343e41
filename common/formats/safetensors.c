/* safetensors writing (temporary file, fsync, rename) and strict reading
 * with a small JSON parser that knows only what the header holds. */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsutil.h"
#include "jsonstr.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "safetensors data is little-endian; this code writes host order");

static const struct {
    const char *name;
    size_t size;
} st__dtypes[ST_DTYPE_COUNT] = {
    [ST_F32] = {"F32", 4}, [ST_F64] = {"F64", 8}, [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2}, [ST_I64] = {"I64", 8}, [ST_I32] = {"I32", 4},
    [ST_I16] = {"I16", 2}, [ST_I8] = {"I8", 1}, [ST_U8] = {"U8", 1},
    [ST_BOOL] = {"BOOL", 1},
};

const char *st_dtype_name(st_dtype t)
{
    return (unsigned)t < ST_DTYPE_COUNT ? st__dtypes[t].name : NULL;
}

size_t st_dtype_size(st_dtype t)
{
    return (unsigned)t < ST_DTYPE_COUNT ? st__dtypes[t].size : 0;
}

static int st__dtype_lookup(const char *name)
{
    for (int i = 0; i < ST_DTYPE_COUNT; i++)
        if (strcmp(st__dtypes[i].name, name) == 0)
            return i;
    return -1;
}

static void st__err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void st__err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Product of dims into *out; false on a negative dim or overflow. */
static bool st__numel(const int64_t *dims, int ndim, size_t *out)
{
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] < 0 || (uint64_t)dims[i] > SIZE_MAX)
            return false;
        if (dims[i] != 0 && n > SIZE_MAX / (size_t)dims[i])
            return false;
        n *= (size_t)dims[i];
    }
    *out = n;
    return true;
}

/* ================================================================ writer */

/* A growable byte buffer; oom latches the first allocation failure. */
typedef struct st_buf {
    char *p;     /* the bytes, not NUL-terminated */
    size_t len;  /* bytes used */
    size_t cap;  /* bytes allocated */
    bool oom;    /* an append failed; p holds a prefix */
} st_buf;

static void st__put(st_buf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void st__puts(st_buf *b, const char *s)
{
    st__put(b, s, strlen(s));
}

static void st__putf(st_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void st__putf(st_buf *b, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    st__put(b, tmp, (size_t)n);
}

/* A JSON string literal (jsonstr.h). */
static void st__put_json_string(st_buf *b, const char *s)
{
    size_t n;
    char *q = json_quote_alloc(s, &n);
    if (!q) {
        b->oom = true;
        return;
    }
    st__put(b, q, n);
    free(q);
}

typedef struct st_wtensor {
    char *name;                 /* owned, unique within the writer */
    st_dtype dtype;
    int ndim;                   /* 0..ST_MAX_DIMS */
    int64_t dims[ST_MAX_DIMS];  /* the shape; product * dtype size == nbytes */
    const void *data;           /* borrowed until st_writer_write returns */
    size_t nbytes;              /* length of data in bytes */
    st_fill_fn fill;            /* or made as written (st_writer_add_fill), with: */
    void *ctx;
    uint64_t tag;
} st_wtensor;

struct st_writer {
    st_wtensor *t;     /* tensors in the order added */
    size_t n, cap;     /* tensors used and allocated */
    char **meta;       /* key, value, key, value, ... (owned) */
    size_t nmeta;      /* pairs used */
    size_t metacap;    /* pairs allocated */
};

st_writer *st_writer_new(void)
{
    return calloc(1, sizeof(st_writer));
}

void st_writer_free(st_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n; i++)
        free(w->t[i].name);
    for (size_t i = 0; i < 2 * w->nmeta; i++)
        free(w->meta[i]);
    free(w->t);
    free(w->meta);
    free(w);
}

int st_writer_add(st_writer *w, const char *name, st_dtype dtype, const int64_t *dims,
                  int ndim, const void *data, size_t count)
{
    size_t numel;
    if (!name || !*name || strcmp(name, "__metadata__") == 0 || ndim < 0 ||
        ndim > ST_MAX_DIMS || (unsigned)dtype >= ST_DTYPE_COUNT || (ndim && !dims) ||
        !st__numel(dims, ndim, &numel) || numel != count ||
        count > SIZE_MAX / st_dtype_size(dtype))
        return -EINVAL;
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return -EINVAL;
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 16;
        st_wtensor *t = realloc(w->t, cap * sizeof(*t));
        if (!t)
            return -ENOMEM;
        w->t = t;
        w->cap = cap;
    }
    st_wtensor *t = &w->t[w->n];
    memset(t, 0, sizeof(*t));
    t->name = strdup(name);
    if (!t->name)
        return -ENOMEM;
    t->dtype = dtype;
    t->ndim = ndim;
    if (ndim)
        memcpy(t->dims, dims, (size_t)ndim * sizeof(*dims));
    t->data = data;
    t->nbytes = count * st_dtype_size(dtype);
    w->n++;
    return 0;
}

int st_writer_add_fill(st_writer *w, const char *name, st_dtype dtype, const int64_t *dims,
                       int ndim, size_t count, st_fill_fn fill, void *ctx, uint64_t tag)
{
    if (!fill)
        return -EINVAL;
    int rc = st_writer_add(w, name, dtype, dims, ndim, NULL, count);
    if (rc == 0) {
        st_wtensor *t = &w->t[w->n - 1];
        t->fill = fill;
        t->ctx = ctx;
        t->tag = tag;
    }
    return rc;
}

static int st__write_all(int fd, const void *p, size_t n);

/* Writes tensor t's bytes made by its fill, a piece at a time. */
static int st__write_fill(int fd, const st_wtensor *t)
{
    enum { PIECE = 1 << 20 };
    size_t es = st_dtype_size(t->dtype), n = t->nbytes / es, per = PIECE / es;
    uint8_t *buf = malloc(PIECE);
    if (!buf)
        return -ENOMEM;
    int rc = 0;
    for (size_t a = 0; rc == 0 && a < n; a += per) {
        size_t c = n - a < per ? n - a : per;
        t->fill(t->ctx, t->tag, a, c, buf);
        rc = st__write_all(fd, buf, c * es);
    }
    free(buf);
    return rc;
}

int st_writer_add_f32(st_writer *w, const char *name, const int64_t *dims, int ndim,
                      const float *data, size_t count)
{
    return st_writer_add(w, name, ST_F32, dims, ndim, data, count);
}

int st_writer_meta(st_writer *w, const char *key, const char *value)
{
    if (!key || !value)
        return -EINVAL;
    for (size_t i = 0; i < w->nmeta; i++)
        if (strcmp(w->meta[2 * i], key) == 0)
            return -EINVAL;
    if (w->nmeta == w->metacap) {
        size_t cap = w->metacap ? 2 * w->metacap : 8;
        char **m = realloc(w->meta, 2 * cap * sizeof(*m));
        if (!m)
            return -ENOMEM;
        w->meta = m;
        w->metacap = cap;
    }
    char *k = strdup(key), *v = strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        return -ENOMEM;
    }
    w->meta[2 * w->nmeta] = k;
    w->meta[2 * w->nmeta + 1] = v;
    w->nmeta++;
    return 0;
}

/* The JSON header padded with spaces to a multiple of 8, into b. */
static void st__build_header(const st_writer *w, st_buf *b)
{
    st__put(b, "{", 1);
    uint64_t off = 0;
    for (size_t i = 0; i < w->n; i++) {
        const st_wtensor *t = &w->t[i];
        if (i)
            st__put(b, ",", 1);
        st__put_json_string(b, t->name);
        st__puts(b, ":{\"dtype\":\"");
        st__puts(b, st_dtype_name(t->dtype));
        st__puts(b, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++)
            st__putf(b, "%s%lld", d ? "," : "", (long long)t->dims[d]);
        st__putf(b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                 (unsigned long long)(off + t->nbytes));
        off += t->nbytes;
    }
    if (w->nmeta) {
        st__puts(b, w->n ? ",\"__metadata__\":{" : "\"__metadata__\":{");
        for (size_t i = 0; i < w->nmeta; i++) {
            if (i)
                st__put(b, ",", 1);
            st__put_json_string(b, w->meta[2 * i]);
            st__put(b, ":", 1);
            st__put_json_string(b, w->meta[2 * i + 1]);
        }
        st__put(b, "}", 1);
    }
    st__put(b, "}", 1);
    while (b->len % 8)
        st__put(b, " ", 1);
}

static int st__write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t k = write(fd, c, n > (1u << 30) ? (1u << 30) : n);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

int st_writer_header(const st_writer *w, size_t total, uint8_t *out, size_t *need)
{
    st_buf b = {0};
    st__build_header(w, &b);
    if (b.oom) {
        free(b.p);
        return -ENOMEM;
    }
    *need = 8 + b.len;
    if (b.len > ST_MAX_HEADER || total % 8 || total < 8 + b.len || total - 8 > ST_MAX_HEADER) {
        free(b.p);
        return -ENOSPC;
    }
    uint64_t hlen = total - 8;
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(hlen >> (8 * i));
    memcpy(out + 8, b.p, b.len);
    memset(out + 8 + b.len, ' ', hlen - b.len);
    free(b.p);
    return 0;
}

int st_writer_write(st_writer *w, const char *path, char *err, size_t errlen)
{
    st_buf b = {0};
    char *tmp = NULL;
    int fd = -1;
    int rc;

    st__build_header(w, &b);
    if (b.oom) {
        rc = -ENOMEM;
        st__err(err, errlen, "%s: out of memory building the header", path);
        goto out;
    }
    if (b.len > ST_MAX_HEADER) {
        rc = -E2BIG;
        st__err(err, errlen, "%s: header of %zu bytes exceeds the %u-byte limit", path, b.len,
                ST_MAX_HEADER);
        goto out;
    }
    if (asprintf(&tmp, "%s.tmp-%ld", path, (long)getpid()) < 0) {
        tmp = NULL;
        rc = -ENOMEM;
        st__err(err, errlen, "%s: out of memory", path);
        goto out;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = -errno;
        st__err(err, errlen, "%s: cannot create %s: %s", path, tmp, strerror(-rc));
        goto out;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)((uint64_t)b.len >> (8 * i));
    rc = st__write_all(fd, len8, sizeof(len8));
    if (rc == 0)
        rc = st__write_all(fd, b.p, b.len);
    for (size_t i = 0; rc == 0 && i < w->n; i++)
        rc = w->t[i].fill                        ? st__write_fill(fd, &w->t[i])
             : w->t[i].nbytes && !w->t[i].data ? -EINVAL
                                              : st__write_all(fd, w->t[i].data, w->t[i].nbytes);
    if (rc == 0 && fsync(fd) < 0)
        rc = -errno;
    if (rc < 0) {
        st__err(err, errlen, "%s: writing %s: %s", path, tmp, strerror(-rc));
        goto out;
    }
    int cfd = fd;
    fd = -1;
    if (close(cfd) < 0) {
        rc = -errno;
        st__err(err, errlen, "%s: closing %s: %s", path, tmp, strerror(-rc));
        goto out;
    }
    if (rename(tmp, path) < 0) {
        rc = -errno;
        st__err(err, errlen, "%s: renaming %s into place: %s", path, tmp, strerror(-rc));
        goto out;
    }
    free(tmp);
    tmp = NULL;
    rc = fsutil_sync_dir(path);
    if (rc < 0)
        st__err(err, errlen, "%s: written, but syncing its directory failed: %s", path,
                strerror(-rc));
out:
    if (fd >= 0)
        close(fd);
    if (tmp)
        unlink(tmp);
    free(tmp);
    free(b.p);
    return rc;
}

/* ================================================================ reader */

typedef struct st_entry {
    char *name;                 /* owned, unique within the file */
    st_dtype dtype;
    int ndim;
    int64_t dims[ST_MAX_DIMS];
    uint64_t begin, end;        /* byte range within the data section */
} st_entry;

struct st_file {
    st_entry *t;        /* tensors sorted by begin offset */
    size_t n, cap;      /* tensors used and allocated */
    size_t *by_name;    /* indices into t sorted by name (for st_find) */
    char **meta;        /* key, value, ... in file order (owned) */
    size_t nmeta, metacap;
    size_t *meta_by_key; /* indices of pairs sorted by key */
    uint8_t *data;      /* the data section (malloc'd, so aligned for any dtype); NULL when
                           opened by st_open_header */
    uint64_t data_len;  /* its length in bytes */
    uint64_t data_start; /* its offset in the file */
    int fd;             /* st_open_header: the file, open; else -1 */
};

/* The header parser: a cursor over the JSON text and where errors go. */
typedef struct st_parser {
    const char *s;       /* header text */
    size_t len;          /* its length */
    size_t pos;          /* next byte to read */
    const char *path;    /* for messages */
    char *err;
    size_t errlen;
    bool failed;         /* an error has been written to err */
} st_parser;

static void st__fail(st_parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Records the first error as "path: message". */
static void st__fail(st_parser *p, const char *fmt, ...)
{
    if (p->failed)
        return;
    p->failed = true;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    st__err(p->err, p->errlen, "%s: %s", p->path, msg);
}

static void st__syntax(st_parser *p, const char *what)
{
    if (p->pos >= p->len)
        st__fail(p, "bad JSON header: %s, found the end of the header", what);
    else
        st__fail(p, "bad JSON header at byte %zu: %s", p->pos, what);
}

static void st__ws(st_parser *p)
{
    while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
                               p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
        p->pos++;
}

static bool st__peek(st_parser *p, char c)
{
    st__ws(p);
    return p->pos < p->len && p->s[p->pos] == c;
}

static bool st__expect(st_parser *p, char c, const char *what)
{
    if (!st__peek(p, c)) {
        st__syntax(p, what);
        return false;
    }
    p->pos++;
    return true;
}

static int st__hex4(st_parser *p)
{
    if (p->len - p->pos < 4)
        return -1;
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->s[p->pos + i];
        int d = c >= '0' && c <= '9' ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    p->pos += 4;
    return v;
}

static void st__utf8(st_buf *b, uint32_t cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        u[0] = (char)(0xf0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    st__put(b, u, n);
}

/* Length of the well-formed UTF-8 sequence at s (at most n bytes), or 0. */
static size_t st__utf8_len(const unsigned char *s, size_t n)
{
    size_t k;
    uint32_t min, cp;
    if (s[0] < 0x80)
        return 1;
    if ((s[0] & 0xe0) == 0xc0) {
        k = 2; min = 0x80; cp = s[0] & 0x1f;
    } else if ((s[0] & 0xf0) == 0xe0) {
        k = 3; min = 0x800; cp = s[0] & 0x0f;
    } else if ((s[0] & 0xf8) == 0xf0) {
        k = 4; min = 0x10000; cp = s[0] & 0x07;
    } else {
        return 0;
    }
    if (k > n)
        return 0;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return k;
}

/* A JSON string into a new NUL-terminated string (caller frees), or NULL. */
static char *st__string(st_parser *p)
{
    if (!st__expect(p, '"', "expected a string"))
        return NULL;
    st_buf b = {0};
    for (;;) {
        if (p->pos >= p->len) {
            st__syntax(p, "unterminated string");
            goto fail;
        }
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') {
            p->pos++;
            break;
        }
        if (c < 0x20) {
            st__syntax(p, "control character in string");
            goto fail;
        }
        if (c != '\\') {
            size_t k = st__utf8_len((const unsigned char *)p->s + p->pos, p->len - p->pos);
            if (!k) {
                st__syntax(p, "invalid UTF-8 in string");
                goto fail;
            }
            st__put(&b, p->s + p->pos, k);
            p->pos += k;
            continue;
        }
        p->pos++;
        if (p->pos >= p->len) {
            st__syntax(p, "unterminated string");
            goto fail;
        }
        char e = p->s[p->pos++];
        switch (e) {
        case '"': st__put(&b, "\"", 1); break;
        case '\\': st__put(&b, "\\", 1); break;
        case '/': st__put(&b, "/", 1); break;
        case 'b': st__put(&b, "\b", 1); break;
        case 'f': st__put(&b, "\f", 1); break;
        case 'n': st__put(&b, "\n", 1); break;
        case 'r': st__put(&b, "\r", 1); break;
        case 't': st__put(&b, "\t", 1); break;
        case 'u': {
            int hi = st__hex4(p);
            uint32_t cp;
            if (hi < 0) {
                st__syntax(p, "bad \\u escape");
                goto fail;
            }
            if (hi >= 0xd800 && hi <= 0xdbff) {
                int lo = -1;
                if (p->len - p->pos >= 2 && p->s[p->pos] == '\\' && p->s[p->pos + 1] == 'u') {
                    p->pos += 2;
                    lo = st__hex4(p);
                }
                if (lo < 0xdc00 || lo > 0xdfff) {
                    st__syntax(p, "unpaired surrogate in \\u escape");
                    goto fail;
                }
                cp = 0x10000 + (((uint32_t)hi - 0xd800) << 10) + ((uint32_t)lo - 0xdc00);
            } else if (hi >= 0xdc00 && hi <= 0xdfff) {
                st__syntax(p, "unpaired surrogate in \\u escape");
                goto fail;
            } else if (hi == 0) {
                st__syntax(p, "\\u0000 in string");
                goto fail;
            } else {
                cp = (uint32_t)hi;
            }
            st__utf8(&b, cp);
            break;
        }
        default:
            p->pos--;
            st__syntax(p, "unknown escape in string");
            goto fail;
        }
    }
    st__put(&b, "", 1);
    if (b.oom) {
        st__fail(p, "out of memory reading the header");
        goto fail;
    }
    return b.p;
fail:
    free(b.p);
    return NULL;
}

/* A non-negative JSON integer (no sign, fraction or exponent). */
static bool st__uint(st_parser *p, uint64_t *out)
{
    st__ws(p);
    size_t start = p->pos;
    uint64_t v = 0;
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        unsigned d = (unsigned)(p->s[p->pos] - '0');
        if (v > (UINT64_MAX - d) / 10) {
            st__syntax(p, "integer too large");
            return false;
        }
        v = v * 10 + d;
        p->pos++;
    }
    if (p->pos == start) {
        st__syntax(p, "expected a non-negative integer");
        return false;
    }
    if (p->pos - start > 1 && p->s[start] == '0') {
        p->pos = start;
        st__syntax(p, "leading zero in integer");
        return false;
    }
    if (p->pos < p->len && (p->s[p->pos] == '.' || p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        st__syntax(p, "expected an integer, found a fraction or exponent");
        return false;
    }
    *out = v;
    return true;
}

/* An array of at most max non-negative integers; *n gets the count. */
static bool st__uint_array(st_parser *p, uint64_t *out, int max, int *n, const char *what)
{
    *n = 0;
    if (!st__expect(p, '[', "expected '['"))
        return false;
    if (st__peek(p, ']')) {
        p->pos++;
        return true;
    }
    for (;;) {
        if (*n == max) {
            st__fail(p, "%s has more than %d entries", what, max);
            return false;
        }
        if (!st__uint(p, &out[(*n)++]))
            return false;
        if (st__peek(p, ',')) {
            p->pos++;
            continue;
        }
        return st__expect(p, ']', "expected ',' or ']'");
    }
}

/* The body of "__metadata__": an object of string values. */
static bool st__parse_meta(st_parser *p, st_file *f)
{
    if (!st__expect(p, '{', "expected '{' after \"__metadata__\""))
        return false;
    if (st__peek(p, '}')) {
        p->pos++;
        return true;
    }
    for (;;) {
        char *k = st__string(p);
        if (!k)
            return false;
        if (!st__expect(p, ':', "expected ':'") || !st__peek(p, '"')) {
            if (!p->failed)
                st__fail(p, "metadata \"%s\": value is not a string", k);
            free(k);
            return false;
        }
        char *v = st__string(p);
        if (!v) {
            free(k);
            return false;
        }
        if (f->nmeta == f->metacap) {
            size_t cap = f->metacap ? 2 * f->metacap : 8;
            char **m = realloc(f->meta, 2 * cap * sizeof(*m));
            if (!m) {
                free(k);
                free(v);
                st__fail(p, "out of memory reading the header");
                return false;
            }
            f->meta = m;
            f->metacap = cap;
        }
        f->meta[2 * f->nmeta] = k;
        f->meta[2 * f->nmeta + 1] = v;
        f->nmeta++;
        if (st__peek(p, ',')) {
            p->pos++;
            continue;
        }
        return st__expect(p, '}', "expected ',' or '}'");
    }
}

/* The body of one tensor entry; name is owned by the caller until stored. */
static bool st__parse_tensor(st_parser *p, st_file *f, char *name)
{
    st_entry e = {.name = name, .dtype = ST_DTYPE_COUNT};
    bool have_shape = false, have_offsets = false;
    uint64_t shape[ST_MAX_DIMS], off[2];

    if (!st__expect(p, '{', "expected '{' for a tensor entry"))
        return false;
    if (!st__peek(p, '}')) {
        for (;;) {
            char *k = st__string(p);
            if (!k)
                return false;
            if (!st__expect(p, ':', "expected ':'")) {
                free(k);
                return false;
            }
            bool ok = true;
            if (strcmp(k, "dtype") == 0) {
                if (e.dtype != ST_DTYPE_COUNT) {
                    st__fail(p, "tensor \"%s\": duplicate key \"dtype\"", name);
                    ok = false;
                } else {
                    char *d = st__string(p);
                    int t = d ? st__dtype_lookup(d) : -1;
                    if (d && t < 0)
                        st__fail(p, "tensor \"%s\": unknown dtype \"%s\"", name, d);
                    free(d);
                    ok = t >= 0;
                    if (ok)
                        e.dtype = (st_dtype)t;
                }
            } else if (strcmp(k, "shape") == 0) {
                if (have_shape) {
                    st__fail(p, "tensor \"%s\": duplicate key \"shape\"", name);
                    ok = false;
                } else {
                    ok = st__uint_array(p, shape, ST_MAX_DIMS, &e.ndim, "shape");
                    have_shape = true;
                }
            } else if (strcmp(k, "data_offsets") == 0) {
                int n;
                if (have_offsets) {
                    st__fail(p, "tensor \"%s\": duplicate key \"data_offsets\"", name);
                    ok = false;
                } else if ((ok = st__uint_array(p, off, 2, &n, "data_offsets")) && n != 2) {
                    st__fail(p, "tensor \"%s\": data_offsets needs two entries, has %d", name, n);
                    ok = false;
                }
                have_offsets = true;
            } else {
                st__fail(p, "tensor \"%s\": unknown key \"%s\"", name, k);
                ok = false;
            }
            free(k);
            if (!ok)
                return false;
            if (st__peek(p, ',')) {
                p->pos++;
                continue;
            }
            if (!st__expect(p, '}', "expected ',' or '}'"))
                return false;
            break;
        }
    } else {
        p->pos++;
    }
    if (e.dtype == ST_DTYPE_COUNT || !have_shape || !have_offsets) {
        st__fail(p, "tensor \"%s\": missing \"%s\"", name,
                 e.dtype == ST_DTYPE_COUNT ? "dtype" : !have_shape ? "shape" : "data_offsets");
        return false;
    }
    for (int i = 0; i < e.ndim; i++) {
        if (shape[i] > INT64_MAX) {
            st__fail(p, "tensor \"%s\": dimension %d too large", name, i);
            return false;
        }
        e.dims[i] = (int64_t)shape[i];
    }
    e.begin = off[0];
    e.end = off[1];
    if (e.begin > e.end) {
        st__fail(p, "tensor \"%s\": data_offsets [%llu, %llu] end before they begin", name,
                 (unsigned long long)e.begin, (unsigned long long)e.end);
        return false;
    }
    size_t numel;
    if (!st__numel(e.dims, e.ndim, &numel) || numel > SIZE_MAX / st_dtype_size(e.dtype)) {
        st__fail(p, "tensor \"%s\": shape too large", name);
        return false;
    }
    if (numel * st_dtype_size(e.dtype) != e.end - e.begin) {
        st__fail(p, "tensor \"%s\": %zu elements of %s need %zu bytes, data_offsets [%llu, %llu] "
                 "hold %llu", name, numel, st_dtype_name(e.dtype), numel * st_dtype_size(e.dtype),
                 (unsigned long long)e.begin, (unsigned long long)e.end,
                 (unsigned long long)(e.end - e.begin));
        return false;
    }
    if (e.end > f->data_len) {
        st__fail(p, "tensor \"%s\": data_offsets [%llu, %llu] run past the end of the data "
                 "section (%llu bytes; file truncated?)", name, (unsigned long long)e.begin,
                 (unsigned long long)e.end, (unsigned long long)f->data_len);
        return false;
    }
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 16;
        st_entry *t = realloc(f->t, cap * sizeof(*t));
        if (!t) {
            st__fail(p, "out of memory reading the header");
            return false;
        }
        f->t = t;
        f->cap = cap;
    }
    f->t[f->n++] = e;
    return true;
}

static bool st__parse_header(st_parser *p, st_file *f)
{
    bool seen_meta = false;
    if (!st__expect(p, '{', "expected '{' at the start of the header"))
        return false;
    if (st__peek(p, '}')) {
        p->pos++;
    } else {
        for (;;) {
            char *k = st__string(p);
            if (!k)
                return false;
            if (!st__expect(p, ':', "expected ':'")) {
                free(k);
                return false;
            }
            if (strcmp(k, "__metadata__") == 0) {
                free(k);
                if (seen_meta) {
                    st__fail(p, "duplicate \"__metadata__\"");
                    return false;
                }
                seen_meta = true;
                if (!st__parse_meta(p, f))
                    return false;
            } else if (!st__parse_tensor(p, f, k)) {
                free(k);
                return false;
            }
            if (st__peek(p, ',')) {
                p->pos++;
                continue;
            }
            if (!st__expect(p, '}', "expected ',' or '}'"))
                return false;
            break;
        }
    }
    st__ws(p);
    if (p->pos != p->len) {
        st__syntax(p, "trailing characters after the header object");
        return false;
    }
    return true;
}

static int st__cmp_offset(const void *a, const void *b)
{
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int st__cmp_name(const void *a, const void *b, void *ctx)
{
    const st_entry *t = ctx;
    return strcmp(t[*(const size_t *)a].name, t[*(const size_t *)b].name);
}

static int st__cmp_key(const void *a, const void *b, void *ctx)
{
    char *const *m = ctx;
    return strcmp(m[2 * *(const size_t *)a], m[2 * *(const size_t *)b]);
}

/* Offsets contiguous from 0 to the end of the data; names and keys unique. */
static bool st__check_layout(st_parser *p, st_file *f)
{
    if (f->n > 1)
        qsort(f->t, f->n, sizeof(*f->t), st__cmp_offset);
    uint64_t expect = 0;
    for (size_t i = 0; i < f->n; i++) {
        const st_entry *e = &f->t[i];
        if (e->begin < expect) {
            const st_entry *prev = &f->t[i - 1];
            st__fail(p, "tensor \"%s\" data_offsets [%llu, %llu] overlap tensor \"%s\" [%llu, %llu]",
                     e->name, (unsigned long long)e->begin, (unsigned long long)e->end, prev->name,
                     (unsigned long long)prev->begin, (unsigned long long)prev->end);
            return false;
        }
        if (e->begin > expect) {
            st__fail(p, "gap of %llu bytes before tensor \"%s\" at data offset %llu",
                     (unsigned long long)(e->begin - expect), e->name,
                     (unsigned long long)e->begin);
            return false;
        }
        expect = e->end;
    }
    if (expect != f->data_len) {
        st__fail(p, "data section has %llu bytes but the tensors cover %llu",
                 (unsigned long long)f->data_len, (unsigned long long)expect);
        return false;
    }

    f->by_name = malloc((f->n ? f->n : 1) * sizeof(size_t));
    f->meta_by_key = malloc((f->nmeta ? f->nmeta : 1) * sizeof(size_t));
    if (!f->by_name || !f->meta_by_key) {
        st__fail(p, "out of memory");
        return false;
    }
    for (size_t i = 0; i < f->n; i++)
        f->by_name[i] = i;
    if (f->n > 1)
        qsort_r(f->by_name, f->n, sizeof(size_t), st__cmp_name, f->t);
    for (size_t i = 1; i < f->n; i++) {
        if (strcmp(f->t[f->by_name[i]].name, f->t[f->by_name[i - 1]].name) == 0) {
            st__fail(p, "duplicate tensor name \"%s\"", f->t[f->by_name[i]].name);
            return false;
        }
    }
    for (size_t i = 0; i < f->nmeta; i++)
        f->meta_by_key[i] = i;
    if (f->nmeta > 1)
        qsort_r(f->meta_by_key, f->nmeta, sizeof(size_t), st__cmp_key, f->meta);
    for (size_t i = 1; i < f->nmeta; i++) {
        if (strcmp(f->meta[2 * f->meta_by_key[i]], f->meta[2 * f->meta_by_key[i - 1]]) == 0) {
            st__fail(p, "duplicate metadata key \"%s\"", f->meta[2 * f->meta_by_key[i]]);
            return false;
        }
    }
    return true;
}

/* Reads exactly n bytes; 0, or -1 with errno set (EIO at an early end). */
static int st__read_all(int fd, void *buf, size_t n)
{
    char *c = buf;
    while (n) {
        ssize_t k = read(fd, c, n > (1u << 30) ? (1u << 30) : n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1;
        if (k == 0) {
            errno = EIO;
            return -1;
        }
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

static st_file *st__open(const char *path, bool header_only, char *err, size_t errlen)
{
    st_file *f = NULL;
    char *header = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        st__err(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fd, &sb) < 0) {
        st__err(err, errlen, "%s: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        st__err(err, errlen, "%s: not a regular file", path);
        goto fail;
    }
    uint64_t size = (uint64_t)sb.st_size;
    uint8_t len8[8];
    if (size < 8) {
        st__err(err, errlen, "%s: %llu bytes is too short for the 8-byte header length", path,
                (unsigned long long)size);
        goto fail;
    }
    if (st__read_all(fd, len8, 8) < 0) {
        st__err(err, errlen, "%s: reading: %s", path, strerror(errno));
        goto fail;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | len8[i];
    if (hlen > ST_MAX_HEADER) {
        st__err(err, errlen, "%s: header length %llu exceeds the %u-byte limit", path,
                (unsigned long long)hlen, ST_MAX_HEADER);
        goto fail;
    }
    if (hlen > size - 8) {
        st__err(err, errlen, "%s: header length %llu runs past the end of the file (%llu bytes)",
                path, (unsigned long long)hlen, (unsigned long long)size);
        goto fail;
    }
    if (hlen < 2) {
        st__err(err, errlen, "%s: header length %llu is too short for a JSON object", path,
                (unsigned long long)hlen);
        goto fail;
    }
    f = calloc(1, sizeof(*f));
    if (f)
        f->fd = -1;
    header = malloc(hlen);
    if (!f || !header) {
        st__err(err, errlen, "%s: out of memory", path);
        goto fail;
    }
    f->data_len = size - 8 - hlen;
    f->data_start = 8 + hlen;
    if (!header_only &&
        (f->data_len > SIZE_MAX || !(f->data = malloc(f->data_len ? f->data_len : 1)))) {
        st__err(err, errlen, "%s: cannot hold %llu bytes of tensor data", path,
                (unsigned long long)f->data_len);
        goto fail;
    }
    if (st__read_all(fd, header, hlen) < 0 ||
        (!header_only && st__read_all(fd, f->data, f->data_len) < 0)) {
        st__err(err, errlen, "%s: reading: %s", path,
                errno == EIO ? "file shrank while being read" : strerror(errno));
        goto fail;
    }
    if (header_only) {
        f->fd = fd;
    } else {
        close(fd);
    }
    fd = -1;

    st_parser p = {.s = header, .len = hlen, .path = path, .err = err, .errlen = errlen};
    if (!st__parse_header(&p, f) || !st__check_layout(&p, f))
        goto fail;
    free(header);
    return f;
fail:
    if (fd >= 0)
        close(fd);
    free(header);
    st_close(f);
    return NULL;
}

st_file *st_open(const char *path, char *err, size_t errlen)
{
    return st__open(path, false, err, errlen);
}

st_file *st_open_header(const char *path, char *err, size_t errlen)
{
    return st__open(path, true, err, errlen);
}

int st_fd(const st_file *f)
{
    return f->fd;
}

uint64_t st_file_offset(const st_file *f, size_t i)
{
    return i < f->n ? f->data_start + f->t[i].begin : 0;
}

int st_read(const st_file *f, size_t i, uint64_t offset, void *dst, size_t nbytes)
{
    if (i >= f->n || offset > f->t[i].end - f->t[i].begin ||
        nbytes > f->t[i].end - f->t[i].begin - offset)
        return -EINVAL;
    if (f->data) {
        memcpy(dst, f->data + f->t[i].begin + offset, nbytes);
        return 0;
    }
    return fsutil_pread_all(f->fd, dst, nbytes, f->data_start + f->t[i].begin + offset);
}

void st_close(st_file *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n; i++)
        free(f->t[i].name);
    for (size_t i = 0; i < 2 * f->nmeta; i++)
        free(f->meta[i]);
    free(f->t);
    free(f->by_name);
    free(f->meta);
    free(f->meta_by_key);
    free(f->data);
    if (f->fd >= 0)
        close(f->fd);
    free(f);
}

size_t st_count(const st_file *f)
{
    return f->n;
}

const char *st_name(const st_file *f, size_t i)
{
    return i < f->n ? f->t[i].name : NULL;
}

st_dtype st_type(const st_file *f, size_t i)
{
    return i < f->n ? f->t[i].dtype : ST_DTYPE_COUNT;
}

const int64_t *st_dims(const st_file *f, size_t i, int *ndim)
{
    if (i >= f->n) {
        *ndim = 0;
        return NULL;
    }
    *ndim = f->t[i].ndim;
    return f->t[i].dims;
}

size_t st_numel(const st_file *f, size_t i)
{
    if (i >= f->n)
        return 0;
    return (size_t)(f->t[i].end - f->t[i].begin) / st_dtype_size(f->t[i].dtype);
}

const float *st_data(const st_file *f, size_t i)
{
    if (i >= f->n || f->t[i].dtype != ST_F32 || !f->data)
        return NULL;
    /* data is malloc'd, so aligned; a file from elsewhere may still put an
     * F32 tensor after an odd number of I8 bytes: refuse a misaligned pointer. */
    if (f->t[i].begin % sizeof(float))
        return NULL;
    return (const float *)(f->data + f->t[i].begin);
}

const void *st_data_raw(const st_file *f, size_t i, size_t *nbytes)
{
    if (i >= f->n) {
        *nbytes = 0;
        return NULL;
    }
    *nbytes = (size_t)(f->t[i].end - f->t[i].begin);
    return f->data ? f->data + f->t[i].begin : NULL;
}

long st_find(const st_file *f, const char *name)
{
    size_t lo = 0, hi = f->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, f->t[f->by_name[mid]].name);
        if (c == 0)
            return (long)f->by_name[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return -1;
}

const char *st_meta(const st_file *f, const char *key)
{
    size_t lo = 0, hi = f->nmeta;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        size_t j = f->meta_by_key[mid];
        int c = strcmp(key, f->meta[2 * j]);
        if (c == 0)
            return f->meta[2 * j + 1];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

size_t st_meta_count(const st_file *f)
{
    return f->nmeta;
}

const char *st_meta_key(const st_file *f, size_t i)
{
    return i < f->nmeta ? f->meta[2 * i] : NULL;
}

const char *st_meta_value(const st_file *f, size_t i)
{
    return i < f->nmeta ? f->meta[2 * i + 1] : NULL;
}
