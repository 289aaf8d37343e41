/* Unit tests of the YAML reader: a params.yaml in the Model Zoo's layout
 * read to the exact tree, PyYAML's typing of scalars, anchors and merges,
 * nulls, the limits, and the exact text of every error a user sees. */
#include "yaml.h"

#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char err[512];

static toml_value *parse(const char *text)
{
    toml_value *root = yaml_parse(text, strlen(text), "params.yaml", err, sizeof(err));
    ck_assert_msg(root != NULL, "unexpected error: %s", err);
    return root;
}

/* Parses text, which must fail with exactly the message want. */
#define ck_parse_error(text, want)                                                        \
    do {                                                                                  \
        toml_value *r_ = yaml_parse((text), strlen(text), "params.yaml", err, sizeof(err)); \
        ck_assert_msg(r_ == NULL, "parsed, but must fail with: %s", (want));              \
        ck_assert_str_eq(err, (want));                                                    \
    } while (0)

/* ---- the tree as text: {key: value, ...}, [a, b], "string", 1, 1.5, true */

typedef struct {
    char buf[8192];
    size_t len;
} text;

__attribute__((format(printf, 2, 3)))
static void put(text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->len, sizeof(t->buf) - t->len, fmt, ap);
    va_end(ap);
    ck_assert(n >= 0 && (size_t)n < sizeof(t->buf) - t->len);
    t->len += (size_t)n;
}

/* A float as the shortest %g that reads back as it, integral ones below
 * 1e15 as "%.1f": a float never reads as an integer here. */
static void put_float(text *t, double x)
{
    char num[64];
    if (x == floor(x) && fabs(x) < 1e15) {
        snprintf(num, sizeof(num), "%.1f", x);
    } else {
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(num, sizeof(num), "%.*g", prec, x);
            if (isnan(x) || isinf(x) || strtod(num, NULL) == x)
                break;
        }
    }
    put(t, "%s", num);
}

static void render(text *t, const toml_value *v)
{
    switch (toml_type_of(v)) {
    case TOML_TABLE:
        put(t, "{");
        for (size_t i = 0; i < toml_table_len(v); i++) {
            put(t, "%s%s: ", i ? ", " : "", toml_table_key(v, i));
            render(t, toml_table_value(v, i));
        }
        put(t, "}");
        break;
    case TOML_ARRAY:
        put(t, "[");
        for (size_t i = 0; i < toml_array_len(v); i++) {
            put(t, "%s", i ? ", " : "");
            render(t, toml_array_at(v, i));
        }
        put(t, "]");
        break;
    case TOML_STRING:
        put(t, "\"%s\"", toml_string(v));
        break;
    case TOML_INTEGER:
        put(t, "%" PRId64, toml_int(v));
        break;
    case TOML_FLOAT:
        put_float(t, toml_float(v));
        break;
    case TOML_BOOL:
        put(t, "%s", toml_bool(v) ? "true" : "false");
        break;
    }
}

/* Parses text and checks its whole tree against want. */
#define ck_tree(text_, want)                                 \
    do {                                                     \
        toml_value *r_ = parse(text_);                       \
        text t_ = {.len = 0};                                \
        render(&t_, r_);                                     \
        ck_assert_str_eq(t_.buf, (want));                    \
        toml_free(r_);                                       \
    } while (0)

static void ck_pos(toml_pos pos, int line, int col)
{
    ck_assert_msg(pos.line == line && pos.col == col, "at %d:%d, want %d:%d", pos.line, pos.col,
                  line, col);
}

/* ---- a params.yaml ----------------------------------------------------- */

static const char params_yaml[] =
    "# FC-MNIST, in the layout of the Model Zoo's params.yaml\n"      /* 1 */
    "train_input: &train_input\n"                                     /* 2 */
    "  data_processor: MNISTDataProcessor\n"                          /* 3 */
    "  data_dir: \"./mnist\"\n"                                       /* 4 */
    "  batch_size: 128\n"                                             /* 5 */
    "  shuffle: True\n"                                               /* 6 */
    "  drop_last_batch: yes\n"                                        /* 7 */
    "  num_workers: 2\n"                                              /* 8 */
    "\n"                                                              /* 9 */
    "eval_input:\n"                                                   /* 10 */
    "  <<: *train_input\n"                                            /* 11 */
    "  batch_size: 256   # larger batches to evaluate\n"              /* 12 */
    "  shuffle: False\n"                                              /* 13 */
    "\n"                                                              /* 14 */
    "model:\n"                                                        /* 15 */
    "  name: fc_mnist\n"                                              /* 16 */
    "  hidden_sizes: [256, 256]  # one per layer\n"                   /* 17 */
    "  dropout: 0.0\n"                                                /* 18 */
    "  activation_fn: relu\n"                                         /* 19 */
    "  initializer:\n"                                                /* 20 */
    "    name: glorot_uniform\n"                                      /* 21 */
    "    gain: 1.0\n"                                                 /* 22 */
    "  bias_initializer: {name: zeros}\n"                             /* 23 */
    "  mixed_precision:\n"                                            /* 24 */
    "  to_float16: ~\n"                                               /* 25 */
    "\n"                                                              /* 26 */
    "optimizer:\n"                                                    /* 27 */
    "  optimizer_type: SGD\n"                                         /* 28 */
    "  momentum: .9\n"                                                /* 29 */
    "  learning_rate:\n"                                              /* 30 */
    "    - scheduler: Linear\n"                                       /* 31 */
    "      initial_learning_rate: 1e-4\n"                             /* 32 */
    "      end_learning_rate: 1.0e-3\n"                               /* 33 */
    "      total_iters: 100\n"                                        /* 34 */
    "    - {scheduler: Constant, learning_rate: 1.0e-3}\n"            /* 35 */
    "  weight_decay: 5.0e-4\n"                                        /* 36 */
    "  loss_scaling_factor: \"dynamic\"\n"                            /* 37 */
    "\n"                                                              /* 38 */
    "runconfig:\n"                                                    /* 39 */
    "  max_steps: 10_000\n"                                           /* 40 */
    "  checkpoint_steps: 0x400\n"                                     /* 41 */
    "  seed: 1\n";                                                    /* 42 */

START_TEST(test_params_yaml)
{
    ck_tree(params_yaml,
            "{train_input: {data_processor: \"MNISTDataProcessor\", data_dir: \"./mnist\", "
            "batch_size: 128, shuffle: true, drop_last_batch: true, num_workers: 2}, "
            /* written keys first, then the merged ones in their mapping's order */
            "eval_input: {batch_size: 256, shuffle: false, data_processor: \"MNISTDataProcessor\", "
            "data_dir: \"./mnist\", drop_last_batch: true, num_workers: 2}, "
            /* mixed_precision and to_float16 are null: left out */
            "model: {name: \"fc_mnist\", hidden_sizes: [256, 256], dropout: 0.0, "
            "activation_fn: \"relu\", initializer: {name: \"glorot_uniform\", gain: 1.0}, "
            "bias_initializer: {name: \"zeros\"}}, "
            "optimizer: {optimizer_type: \"SGD\", momentum: 0.9, learning_rate: "
            "[{scheduler: \"Linear\", initial_learning_rate: 0.0001, end_learning_rate: 0.001, "
            "total_iters: 100}, {scheduler: \"Constant\", learning_rate: 0.001}], "
            "weight_decay: 0.0005, loss_scaling_factor: \"dynamic\"}, "
            "runconfig: {max_steps: 10000, checkpoint_steps: 1024, seed: 1}}");

    toml_value *r = parse(params_yaml);
    ck_assert_str_eq(toml_source_name(r), "params.yaml");
    ck_pos(toml_table_key_pos(r, 0), 2, 1);   /* train_input */
    ck_pos(toml_table_key_pos(r, 1), 10, 1);  /* eval_input */
    ck_pos(toml_table_key_pos(r, 4), 39, 1);  /* runconfig */
    const toml_value *eval = toml_table_get(r, "eval_input");
    ck_pos(toml_pos_of(eval), 11, 3);         /* a block mapping starts at its first key */
    ck_pos(toml_table_key_pos(eval, 0), 12, 3);                          /* batch_size, written */
    ck_pos(toml_pos_of(toml_table_value(eval, 0)), 12, 15);
    ck_pos(toml_table_key_pos(eval, 2), 3, 3);                           /* merged: where it was written */
    ck_pos(toml_pos_of(toml_table_value(eval, 2)), 3, 19);
    /* a merged value is a copy */
    const toml_value *train = toml_table_get(r, "train_input");
    ck_assert_ptr_ne(toml_table_get(eval, "data_dir"), toml_table_get(train, "data_dir"));
    ck_pos(toml_pos_of(train), 2, 14);        /* the anchor before it */

    const toml_value *model = toml_table_get(r, "model");
    ck_assert_int_eq(toml_table_len(model), 6);
    ck_assert_ptr_null(toml_table_get(model, "mixed_precision"));
    const toml_value *init = toml_table_get(model, "initializer");
    ck_assert_int_eq(toml_type_of(init), TOML_TABLE);
    ck_pos(toml_table_key_pos(init, 1), 22, 5);
    ck_assert_int_eq(toml_type_of(toml_table_get(init, "gain")), TOML_FLOAT);
    const toml_value *hidden = toml_table_get(model, "hidden_sizes");
    ck_pos(toml_pos_of(hidden), 17, 17);
    ck_pos(toml_pos_of(toml_array_at(hidden, 1)), 17, 23);

    const toml_value *lr = toml_table_get(toml_table_get(r, "optimizer"), "learning_rate");
    ck_assert_int_eq(toml_type_of(lr), TOML_ARRAY);
    ck_pos(toml_pos_of(toml_array_at(lr, 0)), 31, 7);
    ck_pos(toml_table_key_pos(toml_array_at(lr, 1), 1), 35, 29);
    ck_assert(toml_float(toml_table_get(toml_array_at(lr, 0), "initial_learning_rate")) == 1e-4);
    toml_free(r);
}
END_TEST

/* The same job in TOML and in YAML reads to the same tree. */
START_TEST(test_same_tree_as_toml)
{
    static const char toml[] =
        "[train_input]\n"
        "batch_size = 64\n"
        "shuffle = true\n"
        "dims = [784, 10]\n"
        "[model]\n"
        "name = \"softmax\"\n"
        "lr = 0.5\n"
        "layers = [{type = \"dense\", units = 10}, {type = \"softmax\"}]\n"
        "[model.init]\n"
        "seed = -3\n";
    static const char yaml[] =
        "train_input:\n"
        "  batch_size: 64\n"
        "  shuffle: true\n"
        "  dims: [784, 10]\n"
        "model:\n"
        "  name: softmax\n"
        "  lr: 0.5\n"
        "  layers:\n"
        "    - {type: dense, units: 10}\n"
        "    - type: softmax\n"
        "  init: {seed: -3}\n";
    toml_value *t = toml_parse(toml, strlen(toml), "job.toml", err, sizeof(err));
    ck_assert_msg(t != NULL, "%s", err);
    toml_value *y = parse(yaml);
    text a = {.len = 0}, b = {.len = 0};
    render(&a, t);
    render(&b, y);
    ck_assert_str_eq(a.buf, b.buf);
    toml_free(t);
    toml_free(y);
}
END_TEST

/* ---- scalars ----------------------------------------------------------- */

START_TEST(test_booleans)
{
    ck_tree("a: [true, True, TRUE, yes, Yes, YES, on, On, ON]\n"
            "b: [false, False, FALSE, no, No, NO, off, Off, OFF]\n"
            /* not booleans: other spellings, YAML 1.2's y and n, quoted */
            "c: [tRUE, yES, oN, y, n, Y, N, \"true\", 'no', !!str yes]\n"
            "d: [!!bool yes, !!bool \"off\"]\n",
            "{a: [true, true, true, true, true, true, true, true, true], "
            "b: [false, false, false, false, false, false, false, false, false], "
            "c: [\"tRUE\", \"yES\", \"oN\", \"y\", \"n\", \"Y\", \"N\", \"true\", \"no\", \"yes\"], "
            "d: [true, false]}");
}
END_TEST

START_TEST(test_integers)
{
    ck_tree("dec: [0, 7, -42, +12, 1_000_000, -0]\n"
            "hex: [0x1F, 0xdead_BEEF, -0x10]\n"
            "oct: [017, 0o17, -0o7, 0_7]\n"
            "bin: [0b1010, -0b1]\n"
            "base60: [1:30, -1:00:01, 190:20:30]\n"
            "limits: [9223372036854775807, -9223372036854775808, 0x7FFFFFFFFFFFFFFF]\n"
            /* strings: 8 is no octal digit, no digits after 0x, sexagesimal 60 */
            "not: [08, 0x, 0x_, 1:60, 0:30, 1_2a, '12', \"-3\"]\n"
            "tagged: [!!int \"12\", !!int 0x10, !!str 12, ! 12]\n",
            "{dec: [0, 7, -42, 12, 1000000, 0], "
            "hex: [31, 3735928559, -16], "
            "oct: [15, 15, -7, 7], "
            "bin: [10, -1], "
            "base60: [90, -3601, 685230], "
            "limits: [9223372036854775807, -9223372036854775808, 9223372036854775807], "
            "not: [\"08\", \"0x\", \"0x_\", \"1:60\", \"0:30\", \"1_2a\", \"12\", \"-3\"], "
            "tagged: [12, 16, \"12\", \"12\"]}");
}
END_TEST

START_TEST(test_floats)
{
    ck_tree("f: [1.5, -0.5, 5.0e-4, 1.0E+3, .5, 1., 1_000.25, 6.02e+23, 1:30.5]\n"
            /* not PyYAML's, read as floats all the same (yaml.c) */
            "lenient: [1e-4, 1E5, 1.0e5, -.5, +.5, 2e+2]\n"
            "not: [1e, e5, 1.2.3, ., -., ._5, 1.5e+, '1.5', .nan1]\n"
            "tagged: [!!float 3, !!float \"1.5\", !!str 1.5]\n",
            "{f: [1.5, -0.5, 0.0005, 1000.0, 0.5, 1.0, 1000.25, 6.02e+23, 90.5], "
            "lenient: [0.0001, 100000.0, 100000.0, -0.5, 0.5, 200.0], "
            "not: [\"1e\", \"e5\", \"1.2.3\", \".\", \"-.\", \"._5\", \"1.5e+\", \"1.5\", \".nan1\"], "
            "tagged: [3.0, 1.5, \"1.5\"]}");

    toml_value *r = parse("inf: [.inf, .Inf, .INF, +.inf, -.inf, -.Inf, -.INF]\n"
                          "nan: [.nan, .NaN, .NAN]\n"
                          "not: [.iNf, -.nan, .Nan, inf, nan]\n");
    const toml_value *inf = toml_table_get(r, "inf"), *nan = toml_table_get(r, "nan");
    for (size_t i = 0; i < toml_array_len(inf); i++) {
        double x = toml_float(toml_array_at(inf, i));
        ck_assert(isinf(x) && (x > 0) == (i < 4));
    }
    for (size_t i = 0; i < toml_array_len(nan); i++)
        ck_assert(isnan(toml_float(toml_array_at(nan, i))));
    const toml_value *not = toml_table_get(r, "not");
    for (size_t i = 0; i < toml_array_len(not); i++)
        ck_assert_int_eq(toml_type_of(toml_array_at(not, i)), TOML_STRING);
    toml_free(r);
}
END_TEST

START_TEST(test_strings)
{
    toml_value *r = parse("plain: hello world\n"
                          "single: 'it''s'\n"
                          "double: \"tab\\there \\u00e9 \\\"q\\\"\"\n"
                          "nul: \"x\\0y\"\n"
                          "literal: |\n"
                          "  line one\n"
                          "  line two\n"
                          "folded: >-\n"
                          "  folded\n"
                          "  text\n"
                          "multi: a plain\n"
                          "  scalar on two lines\n"
                          "empty: ''\n"
                          "tilde: '~'\n"
                          "merge: '<<'\n"
                          "url: http://example.com/a#b\n"
                          "unicode: h\xC3\xA9llo\n");
    ck_assert_str_eq(toml_string(toml_table_get(r, "plain")), "hello world");
    ck_assert_str_eq(toml_string(toml_table_get(r, "single")), "it's");
    ck_assert_str_eq(toml_string(toml_table_get(r, "double")), "tab\there \xC3\xA9 \"q\"");
    ck_assert_uint_eq(toml_string_len(toml_table_get(r, "nul")), 3);
    ck_assert(memcmp(toml_string(toml_table_get(r, "nul")), "x\0y", 4) == 0);
    ck_assert_str_eq(toml_string(toml_table_get(r, "literal")), "line one\nline two\n");
    ck_assert_str_eq(toml_string(toml_table_get(r, "folded")), "folded text");
    ck_assert_str_eq(toml_string(toml_table_get(r, "multi")), "a plain scalar on two lines");
    ck_assert_str_eq(toml_string(toml_table_get(r, "empty")), "");
    ck_assert_str_eq(toml_string(toml_table_get(r, "tilde")), "~");
    ck_assert_str_eq(toml_string(toml_table_get(r, "merge")), "<<");
    ck_assert_str_eq(toml_string(toml_table_get(r, "url")), "http://example.com/a#b");
    ck_assert_str_eq(toml_string(toml_table_get(r, "unicode")), "h\xC3\xA9llo");
    ck_assert_int_eq(toml_table_len(r), 12);
    toml_free(r);
}
END_TEST

/* Keys are their text as written, whatever the text would mean as a value. */
START_TEST(test_keys)
{
    ck_tree("1: a\n"
            "true: b\n"
            "1.5: c\n"
            "'quoted key': d\n"
            "\"x\": e\n"
            "? explicit\n"
            ": f\n"
            "!!str 0x10: g\n"
            "\"\": h\n",
            "{1: \"a\", true: \"b\", 1.5: \"c\", quoted key: \"d\", x: \"e\", explicit: \"f\", "
            "0x10: \"g\", : \"h\"}");
}
END_TEST

START_TEST(test_nulls)
{
    /* Every null leaves its key out; the mapping stays. */
    ck_tree("a: ~\n"
            "b: null\n"
            "c: Null\n"
            "d: NULL\n"
            "e:\n"
            "f: !!null ''\n"
            "g: {x: , y: ~}\n"
            "h:\n"
            "  i:\n"
            "j: [\"~\", 'null', !!str , !!str null]\n"
            "k: nULL\n",
            "{g: {}, h: {}, j: [\"~\", \"null\", \"\", \"null\"], k: \"nULL\"}");
    /* A null written in a mapping keeps a merged value out as well. */
    ck_tree("base: &b {lr: 0.1, steps: 10}\n"
            "run: {<<: *b, lr: ~}\n",
            "{base: {lr: 0.1, steps: 10}, run: {steps: 10}}");
    /* An alias of a null is a null. */
    ck_tree("a: &n\n"
            "b: *n\n"
            "c: 1\n",
            "{c: 1}");
    /* A root with nothing but nulls. */
    ck_tree("a:\nb:\n", "{}");
}
END_TEST

START_TEST(test_flow_and_comments)
{
    ck_tree("# a comment\n"
            "a: {x: 1, y: [1, 2, {z: [[]]}], w: {}}  # after a value\n"
            "b: [ 'one' , \"two\" ,three ]\n"
            "c: [\n"
            "  1,   # inside a flow sequence\n"
            "  2,\n"
            "]\n"
            "d:\n"
            "- 1\n"
            "- - 2\n"
            "  - 3\n"
            "-   k: v\n"
            "    l: w\n"
            "e: {a: b, c: [d, e]}   # flow mapping\n"
            "# the end\n",
            "{a: {x: 1, y: [1, 2, {z: [[]]}], w: {}}, b: [\"one\", \"two\", \"three\"], c: [1, 2], "
            "d: [1, [2, 3], {k: \"v\", l: \"w\"}], e: {a: \"b\", c: [\"d\", \"e\"]}}");
}
END_TEST

/* ---- anchors, aliases and merges ---------------------------------------- */

START_TEST(test_aliases)
{
    toml_value *r = parse("scalar: &s 42\n"
                          "seq: &q [1, two]\n"
                          "map: &m {a: 1, b: [x]}\n"
                          "uses: [*s, *q, *m]\n"
                          "again: *m\n"
                          "&k named: 1\n"
                          "other: {*k : 2}\n");
    text t = {.len = 0};
    render(&t, r);
    ck_assert_str_eq(t.buf, "{scalar: 42, seq: [1, \"two\"], map: {a: 1, b: [\"x\"]}, "
                            "uses: [42, [1, \"two\"], {a: 1, b: [\"x\"]}], again: {a: 1, b: [\"x\"]}, "
                            "named: 1, other: {named: 2}}");
    toml_free(r);
}
END_TEST

START_TEST(test_alias_copies)
{
    toml_value *r = parse("map: &m {a: 1}\n"
                          "again: *m\n"
                          "&k named: 1\n"
                          "copy: *k\n");
    const toml_value *m = toml_table_get(r, "map"), *again = toml_table_get(r, "again");
    ck_assert_ptr_ne(m, again);
    ck_assert_ptr_ne(toml_table_get(m, "a"), toml_table_get(again, "a"));
    /* a copy says where its value was written */
    ck_pos(toml_pos_of(again), 1, 6);
    ck_pos(toml_table_key_pos(again, 0), 1, 10);
    ck_pos(toml_table_key_pos(r, 1), 2, 1);
    /* an anchored key's alias is the key's scalar, typed */
    ck_assert_str_eq(toml_string(toml_table_get(r, "copy")), "named");
    toml_free(r);
}
END_TEST

START_TEST(test_merge_precedence)
{
    /* Written keys win, wherever the << is. */
    ck_tree("base: &b {a: 1, b: 2, c: 3}\n"
            "first: {<<: *b, b: 20}\n"
            "last: {b: 20, <<: *b}\n"
            "block:\n"
            "  c: 30\n"
            "  <<: *b\n"
            "  a: 10\n",
            "{base: {a: 1, b: 2, c: 3}, first: {b: 20, a: 1, c: 3}, last: {b: 20, a: 1, c: 3}, "
            "block: {c: 30, a: 10, b: 2}}");
    /* The earlier of merged mappings wins. */
    ck_tree("x: &x {k: x, only_x: 1}\n"
            "y: &y {k: y, only_y: 2}\n"
            "xy: {<<: [*x, *y]}\n"
            "yx: {<<: [*y, *x], k: own}\n",
            "{x: {k: \"x\", only_x: 1}, y: {k: \"y\", only_y: 2}, "
            "xy: {k: \"x\", only_x: 1, only_y: 2}, yx: {k: \"own\", only_y: 2, only_x: 1}}");
    /* Merged mappings may merge themselves; mappings written in place merge
     * too, and their anchors stay usable. */
    ck_tree("a: &a {p: 1}\n"
            "b: &b {<<: *a, q: 2}\n"
            "c: {<<: *b, r: 3}\n"
            "d:\n"
            "  <<: [{s: &s 4}, *a]\n"
            "e: *s\n"
            "f: {<<: {}}\n",
            "{a: {p: 1}, b: {q: 2, p: 1}, c: {r: 3, q: 2, p: 1}, d: {s: 4, p: 1}, e: 4, f: {}}");
    /* A merged sub-mapping is copied whole, not merged key by key. */
    ck_tree("t: &t {opt: {lr: 1, m: 2}}\n"
            "u: {<<: *t, opt: {lr: 3}}\n",
            "{t: {opt: {lr: 1, m: 2}}, u: {opt: {lr: 3}}}");
    /* The root may merge. */
    ck_tree("defaults: &d {x: 1}\n<<: *d\n", "{defaults: {x: 1}, x: 1}");
}
END_TEST

START_TEST(test_bom_crlf_and_name)
{
    toml_value *r = parse("\xEF\xBB\xBF" "a: 1\r\nb:\r\n  c: x\r\n");
    ck_pos(toml_table_key_pos(r, 0), 1, 1);
    const toml_value *b = toml_table_get(r, "b");
    ck_pos(toml_table_key_pos(b, 0), 3, 3);
    ck_assert_str_eq(toml_string(toml_table_get(b, "c")), "x");
    toml_free(r);

    /* Not NUL-terminated: only len bytes are read. */
    r = yaml_parse("a: 1\nb: 2", 4, "params.yaml", err, sizeof(err));
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(toml_table_len(r), 1);
    ck_assert_int_eq(toml_int(toml_table_get(r, "a")), 1);
    toml_free(r);

    ck_assert_ptr_null(yaml_parse("- 1\n", 4, NULL, err, sizeof(err)));
    ck_assert_str_eq(err, "<input>:1:1: a job file's top level is a mapping of sections "
                          "(train_input:, model:, ...), found a sequence");
    /* A short error buffer is still terminated. */
    char small[12];
    ck_assert_ptr_null(yaml_parse("a: [", 4, "params.yaml", small, sizeof(small)));
    ck_assert_str_eq(small, "params.yaml");
    ck_assert_ptr_null(yaml_parse(NULL, 0, "params.yaml", NULL, 0));
}
END_TEST

START_TEST(test_parse_file)
{
    ck_assert_ptr_null(yaml_parse_file("/nonexistent/params.yaml", err, sizeof(err)));
    ck_assert_str_eq(err, "/nonexistent/params.yaml: cannot open: No such file or directory");

    char path[] = "/tmp/test_yaml_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    fputs(params_yaml, f);
    fclose(f);
    toml_value *r = yaml_parse_file(path, err, sizeof(err));
    ck_assert_msg(r != NULL, "%s", err);
    ck_assert_str_eq(toml_source_name(r), path);
    ck_assert_int_eq(toml_table_len(r), 5);
    toml_free(r);

    f = fopen(path, "w");
    fputs("runconfig:\n  max_steps: 100\n  max_steps: 1\n", f);
    fclose(f);
    ck_assert_ptr_null(yaml_parse_file(path, err, sizeof(err)));
    char want[128];
    snprintf(want, sizeof(want), "%s:3:3: duplicate key \"max_steps\" (first at line 2)", path);
    ck_assert_str_eq(err, want);
    remove(path);
}
END_TEST

/* ---- errors ------------------------------------------------------------ */

typedef struct {
    const char *text;
    const char *want;
} bad_input;

static const bad_input bad_inputs[] = {
    /* the top level */
    {"- a\n- b\n",
     "params.yaml:1:1: a job file's top level is a mapping of sections (train_input:, model:, ...), "
     "found a sequence"},
    {"# comment\n\n[1, 2]\n",
     "params.yaml:3:1: a job file's top level is a mapping of sections (train_input:, model:, ...), "
     "found a sequence"},
    {"just text\n",
     "params.yaml:1:1: a job file's top level is a mapping of sections (train_input:, model:, ...), "
     "found a scalar"},
    {"",
     "params.yaml:1:1: a job file's top level is a mapping of sections (train_input:, model:, ...), "
     "found an empty document"},
    {"# only a comment\n",
     "params.yaml:1:1: a job file's top level is a mapping of sections (train_input:, model:, ...), "
     "found an empty document"},
    {"---\n",
     "params.yaml:2:1: a job file's top level is a mapping of sections (train_input:, model:, ...), "
     "found an empty document"},
    /* duplicate keys */
    {"a: 1\nb: 2\na: 3\n", "params.yaml:3:1: duplicate key \"a\" (first at line 1)"},
    {"m:\n  x: 1\n  y: 2\n  x: {z: 1}\n", "params.yaml:4:3: duplicate key \"x\" (first at line 2)"},
    {"m: {x: 1, x: 2}\n", "params.yaml:1:11: duplicate key \"x\" (first at line 1)"},
    {"a:\nb: 1\na: 2\n", "params.yaml:3:1: duplicate key \"a\" (first at line 1)"},
    {"'a': 1\n\"a\": 2\n", "params.yaml:2:1: duplicate key \"a\" (first at line 1)"},
    {"b: &b {x: 1}\nm:\n  <<: *b\n  y: 1\n  <<: *b\n",
     "params.yaml:5:3: duplicate key \"<<\" (first at line 3)"},
    /* tabs */
    {"model:\n\tname: fc\n", "params.yaml:2:1: a tab indents this line: YAML indents with spaces only"},
    {"model:\n  name: fc\n  \tdepth: 2\n",
     "params.yaml:3:3: a tab indents this line: YAML indents with spaces only"},
    {"model:\n  name: fc\n \t depth: 2\n",
     "params.yaml:3:2: a tab indents this line: YAML indents with spaces only"},
    {"a: text\n\tmore\n", "params.yaml:2:1: a tab indents this line: YAML indents with spaces only"},
    {"a: |\n  x\n\ty\n", "params.yaml:3:1: a tab indents this line: YAML indents with spaces only"},
    {"a:\n  - 1\n\t- 2\n", "params.yaml:3:1: a tab indents this line: YAML indents with spaces only"},
    {"a:\n- 1\n-\t2\n", "params.yaml:3:2: a tab where YAML wants a space"},
    /* keys */
    {"[a, b]: 1\n", "params.yaml:1:1: a key must be a scalar, found a sequence"},
    {"? {a: 1}\n: 2\n", "params.yaml:1:3: a key must be a scalar, found a mapping"},
    {"m: &m {a: 1}\n*m : 2\n",
     "params.yaml:2:1: a key must be a scalar, found an alias of a mapping (*m)"},
    {"a: 1\n~: 2\n", "params.yaml:2:1: key \"~\" is null: quote it to make it a string"},
    {"a: 1\n? \n: 2\n", "params.yaml:2:2: empty key: a key needs a name"},
    {"a: 1\n!!null x: 2\n", "params.yaml:2:1: key \"x\" is null: quote it to make it a string"},
    /* a second document */
    {"a: 1\n---\nb: 2\n", "params.yaml:2:1: a second document: a job file is one YAML document"},
    {"a: 1\n...\n---\na: 1\n", "params.yaml:3:1: a second document: a job file is one YAML document"},
    /* tags */
    {"a: !!python/object/apply:os.system [\"rm -rf /\"]\n",
     "params.yaml:1:4: tag !!python/object/apply:os.system is not allowed in a job file "
     "(only !!str, !!int, !!float, !!bool, !!null, !!seq and !!map)"},
    {"a: !!python/name:builtins.print ''\n",
     "params.yaml:1:4: tag !!python/name:builtins.print is not allowed in a job file "
     "(only !!str, !!int, !!float, !!bool, !!null, !!seq and !!map)"},
    {"a: !Custom {x: 1}\n",
     "params.yaml:1:4: tag !Custom is not allowed in a job file "
     "(only !!str, !!int, !!float, !!bool, !!null, !!seq and !!map)"},
    {"a: !!binary aGVsbG8=\n",
     "params.yaml:1:4: tag !!binary is not allowed in a job file "
     "(only !!str, !!int, !!float, !!bool, !!null, !!seq and !!map)"},
    {"%TAG !e! tag:example.com,2000:\n---\na: !e!thing 1\n",
     "params.yaml:3:4: tag tag:example.com,2000:thing is not allowed in a job file "
     "(only !!str, !!int, !!float, !!bool, !!null, !!seq and !!map)"},
    {"a: !!map [1]\n", "params.yaml:1:4: tag !!map does not fit a sequence"},
    {"a: !!seq x\n", "params.yaml:1:4: tag !!seq does not fit a scalar"},
    {"a: !!str {b: 1}\n", "params.yaml:1:4: tag !!str does not fit a mapping"},
    {"a: !!int 1.5\n", "params.yaml:1:4: \"1.5\" is not a !!int"},
    {"a: !!float x\n", "params.yaml:1:4: \"x\" is not a !!float"},
    {"a: !!bool 1\n", "params.yaml:1:4: \"1\" is not a !!bool"},
    {"a: !!null 0\n", "params.yaml:1:4: \"0\" is not a !!null"},
    /* anchors and aliases */
    {"a: 1\nb: *nowhere\n", "params.yaml:2:4: undefined alias *nowhere (no anchor &nowhere before it)"},
    {"b: *later\nc: &later 1\n", "params.yaml:1:4: undefined alias *later (no anchor &later before it)"},
    {"a: &self [1, *self]\n", "params.yaml:1:14: alias *self is inside the sequence it names (a cycle)"},
    {"a: &self\n  b: *self\n", "params.yaml:2:6: alias *self is inside the mapping it names (a cycle)"},
    {"a: &x 1\nb: &x 2\n", "params.yaml:2:4: duplicate anchor &x (first at line 1)"},
    /* merges */
    {"a: &a [1]\nb:\n  <<: *a\n",
     "params.yaml:3:7: << merges a mapping or a sequence of mappings, found an alias of a sequence (*a)"},
    {"a: &a 1\nb: {<<: *a}\n",
     "params.yaml:2:9: << merges a mapping or a sequence of mappings, found an alias of a scalar (*a)"},
    {"a: &a\nb: {<<: *a}\n",
     "params.yaml:2:9: << merges a mapping or a sequence of mappings, found an alias of null (*a)"},
    {"b: {<<: 1}\n", "params.yaml:1:9: << merges a mapping or a sequence of mappings, found a scalar"},
    {"b:\n  <<:\n", "params.yaml:2:6: << merges a mapping or a sequence of mappings, found a scalar"},
    {"a: &a {x: 1}\nb: {<<: [*a, 2]}\n",
     "params.yaml:2:14: << merges a mapping or a sequence of mappings, found a scalar"},
    {"a: &a {x: 1}\nb: {<<: [*a, [2]]}\n",
     "params.yaml:2:14: << merges a mapping or a sequence of mappings, found a sequence in its sequence"},
    {"a: &a {x: 1}\nb: &l [*a]\nc: {<<: *l}\n",
     "params.yaml:3:9: << merges a mapping or a sequence of mappings, found an alias of a sequence (*l)"},
    {"a: &a {x: 1}\nb: {<<: &l [*a]}\n",
     "params.yaml:2:9: an anchor on the sequence after << is not supported"},
    /* nulls in sequences */
    {"a: [1, ~]\n", "params.yaml:1:8: null item in a sequence (empty, ~ or null: quote it for a string)"},
    {"a:\n  - 1\n  -\n  - 3\n",
     "params.yaml:3:4: null item in a sequence (empty, ~ or null: quote it for a string)"},
    {"n: &n null\na: [*n]\n", "params.yaml:2:5: null item in a sequence (*n is null)"},
    /* numbers out of range, dates */
    {"a: 9223372036854775808\n", "params.yaml:1:4: integer 9223372036854775808 is out of range (64-bit signed)"},
    {"a: -9223372036854775809\n", "params.yaml:1:4: integer -9223372036854775809 is out of range (64-bit signed)"},
    {"a: 0x1_0000_0000_0000_0000\n", "params.yaml:1:4: integer 0x1_0000_0000_0000_0000 is out of range (64-bit signed)"},
    {"a: 0b11111111111111111111111111111111111111111111111111111111111111111\n",
     "params.yaml:1:4: integer 0b11111111111111111111111111111111111111111111111111111111111111111 "
     "is out of range (64-bit signed)"},
    {"a: 2562047788015215:30:08\n", "params.yaml:1:4: integer 2562047788015215:30:08 is out of range (64-bit signed)"},
    {"a: 1e309\n", "params.yaml:1:4: float 1e309 is out of range"},
    {"a: -1.5e400\n", "params.yaml:1:4: float -1.5e400 is out of range"},
    {"a: 2024-01-31\n", "params.yaml:1:4: dates and times are not supported: quote \"2024-01-31\" to make it a string"},
    {"a: 2001-12-14t21:59:43.10-05:00\n",
     "params.yaml:1:4: dates and times are not supported: quote \"2001-12-14t21:59:43.10-05:00\" to make it a string"},
    {"a: 2001-12-14 21:59:43.10 Z\n",
     "params.yaml:1:4: dates and times are not supported: quote \"2001-12-14 21:59:43.10 Z\" to make it a string"},
    /* libyaml's own */
    {"a: b: c\n", "params.yaml:1:5: mapping values are not allowed in this context"},
    {"a: [1, 2\nb: 3\n", "params.yaml:2:2: did not find expected ',' or ']' (while parsing a flow sequence)"},
    {"a:\n  b: 1\n c: 2\n", "params.yaml:3:2: did not find expected key (while parsing a block mapping)"},
    {"a: \"unterminated\n", "params.yaml:2:1: found unexpected end of stream (while scanning a quoted scalar)"},
    {"a: *\n", "params.yaml:1:5: did not find expected alphabetic or numeric character (while scanning an alias)"},
    {"a: @b\n", "params.yaml:1:4: found character that cannot start any token (while scanning for the next token)"},
    /* not UTF-8 */
    {"a: \xFF\n", "params.yaml:1:4: invalid UTF-8: invalid leading UTF-8 octet (byte 0xFF)"},
    {"a: ok\nb: \xC3\x28\n", "params.yaml:2:5: invalid UTF-8: invalid trailing UTF-8 octet (byte 0x28)"},
    {"a: \xC3\xA9\xED\xA0\x80\n", "params.yaml:1:5: invalid Unicode character (U+D800)"},
    {"a: \x01\n", "params.yaml:1:4: control characters are not allowed (U+0001)"},
};

START_TEST(test_errors)
{
    const bad_input *b = &bad_inputs[_i];
    toml_value *r = yaml_parse(b->text, strlen(b->text), "params.yaml", err, sizeof(err));
    ck_assert_msg(r == NULL, "parsed, but must fail with: %s", b->want);
    ck_assert_msg(strcmp(err, b->want) == 0, "input %d:\n  got:  %s\n  want: %s", _i, err, b->want);
}
END_TEST

START_TEST(test_error_nul_byte)
{
    ck_assert_ptr_null(yaml_parse("a: 1\nb: \0\n", 10, "params.yaml", err, sizeof(err)));
    ck_assert_str_eq(err, "params.yaml:2:4: control characters are not allowed (U+0000)");
    /* UTF-16 is not UTF-8, BOM or not */
    ck_assert_ptr_null(yaml_parse("\xFF\xFE" "a\0:\0", 6, "params.yaml", err, sizeof(err)));
    ck_assert_str_eq(err, "params.yaml:1:1: invalid UTF-8: invalid leading UTF-8 octet (byte 0xFF)");
}
END_TEST

/* ---- limits ------------------------------------------------------------- */

/* n nested [ ... ] around inner, as "key: [[...inner...]]". */
static char *nested(const char *key, int n, const char *inner, const char *after)
{
    size_t len = strlen(key) + 2 * (size_t)n + strlen(inner) + strlen(after) + 8;
    char *s = malloc(len), *q = s;
    ck_assert_ptr_nonnull(s);
    q += sprintf(q, "%s: ", key);
    for (int i = 0; i < n; i++)
        *q++ = '[';
    q += sprintf(q, "%s", inner);
    for (int i = 0; i < n; i++)
        *q++ = ']';
    sprintf(q, "\n%s", after);
    return s;
}

START_TEST(test_depth)
{
    /* the root is level 0: a key's sequence is 1, and 256 levels are fine */
    char *s = nested("a", TOML_MAX_DEPTH, "1", "");
    toml_value *r = parse(s);
    toml_free(r);
    free(s);
    s = nested("a", TOML_MAX_DEPTH + 1, "1", "");
    ck_parse_error(s, "params.yaml:1:260: nesting deeper than 256 levels");
    free(s);
    /* mappings too */
    char deep[4096] = "a: ", *q = deep + 3;
    for (int i = 0; i < TOML_MAX_DEPTH + 1; i++)
        q += sprintf(q, "{b: ");
    sprintf(q, "1%*s\n", TOML_MAX_DEPTH + 1, "");
    for (char *c = q + 1; *c == ' '; c++)
        *c = '}';
    ck_parse_error(deep, "params.yaml:1:1028: nesting deeper than 256 levels");
    /* an alias copied where its levels would go past the limit: 200 levels
     * under a 57th fit, under a 61st they do not */
    q = deep;
    q += sprintf(q, "a: &deep ");
    for (int i = 0; i < 200; i++)
        *q++ = '[';
    for (int i = 0; i < 200; i++)
        *q++ = ']';
    q += sprintf(q, "\nb: ");
    char *b = q;
    for (int i = 0; i < 56; i++)
        *q++ = '[';
    q += sprintf(q, "*deep");
    for (int i = 0; i < 56; i++)
        *q++ = ']';
    sprintf(q, "\n");
    r = parse(deep);
    toml_free(r);
    q = b;
    for (int i = 0; i < 60; i++)
        *q++ = '[';
    q += sprintf(q, "*deep");
    for (int i = 0; i < 60; i++)
        *q++ = ']';
    sprintf(q, "\n");
    ck_parse_error(deep, "params.yaml:2:64: nesting deeper than 256 levels");
}
END_TEST

/* The "billion laughs": nine levels of nine aliases of the level below are
 * 9^9 values; refused once the copies pass YAML_MAX_VALUES, in well under
 * a second. */
START_TEST(test_billion_laughs)
{
    static char doc[8192];
    char *q = doc;
    q += sprintf(q, "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for (char c = 'b'; c <= 'i'; c++) {
        q += sprintf(q, "%c: &%c [", c, c);
        for (int i = 0; i < 9; i++)
            q += sprintf(q, "%s*%c", i ? ", " : "", c - 1);
        q += sprintf(q, "]\n");
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_parse_error(doc, "params.yaml:7:8: the document expands to more than 1000000 values "
                        "(aliases of aliases?)");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    ck_assert_msg(secs < 10, "took %.1f s", secs); /* generous: sanitizers, a loaded machine */

    /* Merges count as well: 901,920 values are fine, a merge of 100,101
     * more is not. */
    q = doc;
    q += sprintf(q, "a: &a {");
    for (int i = 0; i < 100; i++)
        q += sprintf(q, "%sk%d: [1, 2, 3, 4, 5, 6, 7, 8, 9]", i ? ", " : "", i);
    q += sprintf(q, "}\nb: &b {k: [");
    for (int i = 0; i < 100; i++)
        q += sprintf(q, "%s*a", i ? ", " : "");
    q += sprintf(q, "]}\nc: [*b, *b, *b, *b, *b, *b, *b, *b]\n");
    toml_value *r = parse(doc);
    toml_free(r);
    sprintf(q, "d: {<<: *b}\n");
    ck_parse_error(doc, "params.yaml:4:5: the document expands to more than 1000000 values "
                        "(aliases of aliases?)");

    /* Keys a merge passes over count too: merging the same 1,000 keys 1,001
     * times makes 1,000 values, yet looks at a million. */
    static char merges[16384];
    q = merges;
    q += sprintf(q, "a: &a {");
    for (int i = 0; i < 1000; i++)
        q += sprintf(q, "%sk%d: %d", i ? ", " : "", i, i);
    q += sprintf(q, "}\nb: {<<: [");
    for (int i = 0; i < 1001; i++)
        q += sprintf(q, "%s*a", i ? ", " : "");
    sprintf(q, "]}\n");
    ck_parse_error(merges, "params.yaml:2:5: the document expands to more than 1000000 values "
                           "(aliases of aliases?)");
}
END_TEST

static Suite *yaml_suite(void)
{
    Suite *s = suite_create("yaml");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, test_params_yaml);
    tcase_add_test(tc, test_same_tree_as_toml);
    tcase_add_test(tc, test_booleans);
    tcase_add_test(tc, test_integers);
    tcase_add_test(tc, test_floats);
    tcase_add_test(tc, test_strings);
    tcase_add_test(tc, test_keys);
    tcase_add_test(tc, test_nulls);
    tcase_add_test(tc, test_flow_and_comments);
    tcase_add_test(tc, test_aliases);
    tcase_add_test(tc, test_alias_copies);
    tcase_add_test(tc, test_merge_precedence);
    tcase_add_test(tc, test_bom_crlf_and_name);
    tcase_add_test(tc, test_parse_file);
    suite_add_tcase(s, tc);
    tc = tcase_create("errors");
    tcase_add_loop_test(tc, test_errors, 0, (int)(sizeof(bad_inputs) / sizeof(*bad_inputs)));
    tcase_add_test(tc, test_error_nul_byte);
    suite_add_tcase(s, tc);
    tc = tcase_create("limits");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_depth);
    tcase_add_test(tc, test_billion_laughs);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(yaml_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
