/* st-compare: compares two safetensors checkpoints tensor by tensor, so a
 * recovered or differently-sharded run can be checked against a reference. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: st-compare A.safetensors B.safetensors [--rtol R]\n"
            "\n"
            "Compares every tensor of A with the tensor of the same name in B\n"
            "(both files must hold the same names and shapes). Prints per tensor\n"
            "  NAME rel=||a-b||/||a|| maxabs=max|a-b|\n"
            "Exit status: 0 if every rel <= R (default 1e-5), 1 otherwise or on a\n"
            "mismatch of names or shapes, 2 when a file cannot be read.\n");
}

/* Element j of tensor i as a double; false for dtypes not compared. */
static bool value_at(const st_file *f, size_t i, size_t j, double *out)
{
    size_t nbytes;
    const unsigned char *p = st_data_raw(f, i, &nbytes);
    switch (st_type(f, i)) {
    case ST_F32: { float v; memcpy(&v, p + 4 * j, 4); *out = v; return true; }
    case ST_F64: { double v; memcpy(&v, p + 8 * j, 8); *out = v; return true; }
    case ST_I64: { int64_t v; memcpy(&v, p + 8 * j, 8); *out = (double)v; return true; }
    case ST_I32: { int32_t v; memcpy(&v, p + 4 * j, 4); *out = v; return true; }
    case ST_I16: { int16_t v; memcpy(&v, p + 2 * j, 2); *out = v; return true; }
    case ST_I8: *out = (int8_t)p[j]; return true;
    case ST_U8:
    case ST_BOOL: *out = p[j]; return true;
    default: return false;
    }
}

static bool same_shape(const st_file *a, size_t i, const st_file *b, size_t k)
{
    int na, nb;
    const int64_t *da = st_dims(a, i, &na), *db = st_dims(b, k, &nb);
    return na == nb && (na == 0 || memcmp(da, db, (size_t)na * sizeof(*da)) == 0);
}

static void print_shape(FILE *f, const st_file *s, size_t i)
{
    int n;
    const int64_t *d = st_dims(s, i, &n);
    fputc('[', f);
    for (int j = 0; j < n; j++)
        fprintf(f, "%s%lld", j ? ", " : "", (long long)d[j]);
    fputc(']', f);
}

int main(int argc, char **argv)
{
    const char *path[2] = {NULL, NULL};
    int npath = 0;
    double rtol = 1e-5;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--rtol") == 0 || strncmp(argv[i], "--rtol=", 7) == 0) {
            const char *v = argv[i][6] == '=' ? argv[i] + 7 : (i + 1 < argc ? argv[++i] : NULL);
            char *end;
            errno = 0;
            rtol = v ? strtod(v, &end) : -1;
            if (!v || *end || end == v || errno || !(rtol >= 0)) {
                fprintf(stderr, "st-compare: --rtol needs a non-negative number\n");
                return 2;
            }
            continue;
        }
        if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "st-compare: unknown option \"%s\" (see --help)\n", argv[i]);
            return 2;
        }
        if (npath == 2) {
            fprintf(stderr, "st-compare: more than two files given (see --help)\n");
            return 2;
        }
        path[npath++] = argv[i];
    }
    if (npath != 2) {
        usage(stderr);
        return 2;
    }

    char err[512];
    st_file *a = st_open(path[0], err, sizeof(err));
    if (!a) {
        fprintf(stderr, "st-compare: %s\n", err);
        return 2;
    }
    st_file *b = st_open(path[1], err, sizeof(err));
    if (!b) {
        fprintf(stderr, "st-compare: %s\n", err);
        st_close(a);
        return 2;
    }

    int rc = 0;
    /* Names and shapes first: a structural mismatch makes numbers meaningless. */
    for (size_t i = 0; i < st_count(a); i++) {
        long k = st_find(b, st_name(a, i));
        if (k < 0) {
            fprintf(stderr, "st-compare: tensor \"%s\" is in %s but not in %s\n", st_name(a, i),
                    path[0], path[1]);
            rc = 1;
        } else if (!same_shape(a, i, b, (size_t)k)) {
            fprintf(stderr, "st-compare: tensor \"%s\" has shape ", st_name(a, i));
            print_shape(stderr, a, i);
            fprintf(stderr, " in %s but ", path[0]);
            print_shape(stderr, b, (size_t)k);
            fprintf(stderr, " in %s\n", path[1]);
            rc = 1;
        }
    }
    for (size_t k = 0; k < st_count(b); k++) {
        if (st_find(a, st_name(b, k)) < 0) {
            fprintf(stderr, "st-compare: tensor \"%s\" is in %s but not in %s\n", st_name(b, k),
                    path[1], path[0]);
            rc = 1;
        }
    }
    if (rc)
        goto out;

    for (size_t i = 0; i < st_count(a); i++) {
        size_t k = (size_t)st_find(b, st_name(a, i));
        size_t n = st_numel(a, i);
        double diff2 = 0, norm2 = 0, maxabs = 0;
        for (size_t j = 0; j < n; j++) {
            double x, y;
            if (!value_at(a, i, j, &x) || !value_at(b, k, j, &y)) {
                fprintf(stderr, "st-compare: tensor \"%s\": cannot compare dtypes %s and %s\n",
                        st_name(a, i), st_dtype_name(st_type(a, i)), st_dtype_name(st_type(b, k)));
                rc = 1;
                break;
            }
            double d = fabs(x - y);
            diff2 += d * d;
            norm2 += x * x;
            /* A NaN must show, not be skipped as fmax would. */
            if (isnan(d) || d > maxabs)
                maxabs = d;
        }
        double rel = sqrt(diff2) / fmax(sqrt(norm2), 1e-30);
        printf("%s rel=%.6e maxabs=%.6e\n", st_name(a, i), rel, maxabs);
        if (!(rel <= rtol))
            rc = 1;
    }
out:
    st_close(a);
    st_close(b);
    return rc;
}
