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
            "Usage: st-compare A.safetensors B.safetensors [--rtol R] [--atol A] [--moved INIT]\n"
            "\n"
            "Compares every tensor of A with the tensor of the same name in B\n"
            "(both must hold the same names and shapes). A or B may list several\n"
            "files separated by commas, the shards of one checkpoint, which are\n"
            "taken together. Prints per tensor\n"
            "  NAME rel=||a-b||/||a|| maxabs=max|a-b|\n"
            "Exit status: 0 if every tensor has rel <= R (default 1e-5) or maxabs <= A\n"
            "(default 0: a tensor whose values are all near zero, such as a bias a\n"
            "norm cancels, may differ in relative terms and still agree), 1 otherwise or on a\n"
            "mismatch of names or shapes, 2 when a file cannot be read.\n"
            "\n"
            "--moved INIT measures each difference against how far training moved the\n"
            "tensor from INIT (the checkpoint both runs started from, with the same\n"
            "names and shapes): rel is then ||a-b||/||a-init||, printed with\n"
            "moved=||a-init||, so that two runs which sum in other orders (other\n"
            "processors, thread counts, partitions) are held to a bound of their own\n"
            "scale rather than of the weights' size. A tensor training did not move\n"
            "must then be equal (or within A).\n");
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

/* One side of the comparison: the files of one checkpoint, taken together. */
typedef struct side {
    st_file *f[64];
    size_t n;
    const char *spec; /* as given */
} side;

/* A tensor of a side: its file and index. */
typedef struct ref {
    const st_file *f;
    size_t i;
} ref;

static int side_open(side *sd, const char *spec)
{
    sd->n = 0;
    sd->spec = spec;
    char *copy = strdup(spec);
    char *save = NULL;
    for (char *p = strtok_r(copy, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        char err[512];
        if (sd->n == 64 || !(sd->f[sd->n] = st_open(p, err, sizeof(err)))) {
            fprintf(stderr, "st-compare: %s\n", sd->n == 64 ? "more than 64 files on one side" : err);
            free(copy);
            return -1;
        }
        sd->n++;
    }
    free(copy);
    return sd->n ? 0 : -1;
}

static void side_close(side *sd)
{
    for (size_t k = 0; k < sd->n; k++)
        st_close(sd->f[k]);
}

static bool side_find(const side *sd, const char *name, ref *r)
{
    for (size_t k = 0; k < sd->n; k++) {
        long i = st_find(sd->f[k], name);
        if (i >= 0) {
            r->f = sd->f[k];
            r->i = (size_t)i;
            return true;
        }
    }
    return false;
}

int main(int argc, char **argv)
{
    const char *path[2] = {NULL, NULL}, *init_path = NULL;
    int npath = 0;
    double rtol = 1e-5, atol = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
        bool r = strcmp(argv[i], "--rtol") == 0 || strncmp(argv[i], "--rtol=", 7) == 0;
        if (r || strcmp(argv[i], "--atol") == 0 || strncmp(argv[i], "--atol=", 7) == 0) {
            const char *v = argv[i][6] == '=' ? argv[i] + 7 : (i + 1 < argc ? argv[++i] : NULL);
            char *end;
            errno = 0;
            double x = v ? strtod(v, &end) : -1;
            if (!v || *end || end == v || errno || !(x >= 0)) {
                fprintf(stderr, "st-compare: --%s needs a non-negative number\n", r ? "rtol" : "atol");
                return 2;
            }
            *(r ? &rtol : &atol) = x;
            continue;
        }
        if (strcmp(argv[i], "--moved") == 0 || strncmp(argv[i], "--moved=", 8) == 0) {
            init_path = argv[i][7] == '=' ? argv[i] + 8 : (i + 1 < argc ? argv[++i] : NULL);
            if (!init_path || !*init_path) {
                fprintf(stderr, "st-compare: --moved needs the initial checkpoint\n");
                return 2;
            }
            continue;
        }
        if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "st-compare: unknown option \"%s\" (see --help)\n", argv[i]);
            return 2;
        }
        if (npath == 2) {
            fprintf(stderr, "st-compare: more than two checkpoints given (see --help)\n");
            return 2;
        }
        path[npath++] = argv[i];
    }
    if (npath != 2) {
        usage(stderr);
        return 2;
    }

    static side a, b, c;
    if (side_open(&a, path[0]) < 0) {
        side_close(&a);
        return 2;
    }
    if (side_open(&b, path[1]) < 0) {
        side_close(&a);
        side_close(&b);
        return 2;
    }
    if (init_path && side_open(&c, init_path) < 0) {
        side_close(&a);
        side_close(&b);
        side_close(&c);
        return 2;
    }

    int rc = 0;
    /* Names and shapes first: a structural mismatch makes numbers meaningless. */
    for (size_t fa = 0; fa < a.n; fa++)
        for (size_t i = 0; i < st_count(a.f[fa]); i++) {
            const char *name = st_name(a.f[fa], i);
            ref r;
            if (!side_find(&b, name, &r)) {
                fprintf(stderr, "st-compare: tensor \"%s\" is in %s but not in %s\n", name, path[0],
                        path[1]);
                rc = 1;
            } else if (!same_shape(a.f[fa], i, r.f, r.i)) {
                fprintf(stderr, "st-compare: tensor \"%s\" has shape ", name);
                print_shape(stderr, a.f[fa], i);
                fprintf(stderr, " in %s but ", path[0]);
                print_shape(stderr, r.f, r.i);
                fprintf(stderr, " in %s\n", path[1]);
                rc = 1;
            }
        }
    for (size_t fb = 0; fb < b.n; fb++)
        for (size_t k = 0; k < st_count(b.f[fb]); k++) {
            ref r;
            if (!side_find(&a, st_name(b.f[fb], k), &r)) {
                fprintf(stderr, "st-compare: tensor \"%s\" is in %s but not in %s\n",
                        st_name(b.f[fb], k), path[1], path[0]);
                rc = 1;
            }
        }
    if (rc)
        goto out;

    for (size_t fa = 0; fa < a.n; fa++)
        for (size_t i = 0; i < st_count(a.f[fa]); i++) {
            const st_file *af = a.f[fa];
            ref r = {0}, r0 = {0};
            side_find(&b, st_name(af, i), &r); /* found: names were checked above */
            if (init_path) {
                if (!side_find(&c, st_name(af, i), &r0) || !same_shape(af, i, r0.f, r0.i)) {
                    fprintf(stderr, "st-compare: tensor \"%s\" is not in %s with the same "
                            "shape\n", st_name(af, i), init_path);
                    rc = 1;
                    continue;
                }
            }
            size_t n = st_numel(af, i);
            double diff2 = 0, norm2 = 0, maxabs = 0;
            for (size_t j = 0; j < n; j++) {
                double x, y, x0 = 0;
                if (!value_at(af, i, j, &x) || !value_at(r.f, r.i, j, &y) ||
                    (init_path && !value_at(r0.f, r0.i, j, &x0))) {
                    fprintf(stderr, "st-compare: tensor \"%s\": cannot compare dtypes %s and %s\n",
                            st_name(af, i), st_dtype_name(st_type(af, i)),
                            st_dtype_name(st_type(r.f, r.i)));
                    rc = 1;
                    break;
                }
                double d = fabs(x - y);
                diff2 += d * d;
                norm2 += (x - x0) * (x - x0); /* x0 is 0 without --moved */
                /* A NaN must show, not be skipped as fmax would. */
                if (isnan(d) || d > maxabs)
                    maxabs = d;
            }
            double rel = sqrt(diff2) / fmax(sqrt(norm2), 1e-30);
            if (init_path)
                printf("%s rel=%.6e maxabs=%.6e moved=%.6e\n", st_name(af, i), rel, maxabs,
                       sqrt(norm2));
            else
                printf("%s rel=%.6e maxabs=%.6e\n", st_name(af, i), rel, maxabs);
            if (!(rel <= rtol) && !(maxabs <= atol))
                rc = 1;
        }
out:
    side_close(&a);
    side_close(&b);
    if (init_path)
        side_close(&c);
    return rc;
}
