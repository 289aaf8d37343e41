/* The plan's inputs: what the workers read for training and, when the job
 * has [eval_input], for evaluation. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "footprint.h"
#include "fit.h"
#include "hosts.h"
#include "msgcheck.h"
#include "planner.h"
#include "sample.h"
#include "units.h"

static const char *job_text = "[runconfig]\n"
                              "seed = 9\n"
                              "[train_input]\n"
                              "data_processor = \"mnist\"\n"
                              "data_dir = \"data/mnist\"\n"
                              "batch_size = 8\n"
                              "random_flip_vertical = true\n"
                              "[model]\n"
                              "input_shape = [1, 28, 28]\n"
                              "loss = \"softmax_cross_entropy\"\n"
                              "[[model.layers]]\n"
                              "name = \"flatten\"\n"
                              "type = \"flatten\"\n"
                              "[[model.layers]]\n"
                              "name = \"fc\"\n"
                              "type = \"dense\"\n"
                              "units = 10\n";

/* The plan of spec on pm's members, which must succeed. */
static Appliance__Plan *plan_on(const jobspec *spec, const planner_members *pm)
{
    uint8_t *buf;
    size_t len;
    char err[2048];
    ck_assert_msg(planner_build(spec, "job-1", pm, 1u << 18, &buf, &len, err, sizeof(err)) == 0,
                  "%s", err);
    Appliance__Plan *p = appliance__plan__unpack(NULL, len, buf);
    free(buf);
    ck_assert_ptr_nonnull(p);
    return p;
}

static Appliance__Plan *plan_of(const jobspec *spec)
{
    member wse = {.id = 1, .role = APPLIANCE__ROLE__ROLE_WSE_NODE, .addr = "127.0.0.1:1",
                  .wafer_memory = 1ull << 30};
    member mx = {.id = 2, .role = APPLIANCE__ROLE__ROLE_MEMORYX, .addr = "127.0.0.1:2"};
    member sx = {.id = 3, .role = APPLIANCE__ROLE__ROLE_SWARMX, .addr = "127.0.0.1:3"};
    member wk = {.id = 4, .role = APPLIANCE__ROLE__ROLE_WORKER, .addr = "127.0.0.1:4"};
    member *r[] = {&wse}, *s[] = {&mx}, *w[] = {&sx}, *k[] = {&wk};
    planner_members pm = {r, 1, s, 1, w, 1, k, 1};
    uint8_t *buf;
    size_t len;
    char err[512];
    ck_assert_msg(planner_build(spec, "job-1", &pm, 1024, &buf, &len, err,
                                sizeof(err)) == 0, "%s", err);
    Appliance__Plan *p = appliance__plan__unpack(NULL, len, buf);
    free(buf);
    ck_assert_ptr_nonnull(p);
    return p;
}

START_TEST(inputs)
{
    char err[512];
    jobspec *spec = jobspec_parse(job_text, strlen(job_text), "job.toml", "/src", err, sizeof(err));
    ck_assert_msg(spec != NULL, "%s", err);
    Appliance__Plan *p = plan_of(spec);
    const Appliance__PlanInput *in = p->train_input;
    ck_assert_ptr_nonnull(in);
    ck_assert_str_eq(in->data_processor, "mnist");
    ck_assert_str_eq(in->data_dir, "/src/data/mnist");
    ck_assert_str_eq(in->split, "train");
    ck_assert_uint_eq(in->seed, 9);
    ck_assert(!in->random_flip_horizontal);
    ck_assert(in->random_flip_vertical);
    ck_assert_uint_eq(in->n_sample_shape, 3);
    ck_assert_uint_eq(in->sample_shape[1], 28);
    ck_assert(in->input_unorm8 && in->labels_uint8); /* MNIST's bytes travel as they are */
    ck_assert_ptr_null(p->eval_input); /* no [eval_input] */
    appliance__plan__free_unpacked(p, NULL);

    /* With [eval_input]: the eval set is opened to size the evaluation. */
    spec->eval.present = true;
    strcpy(spec->eval.data_processor, "synthetic_classification");
    spec->eval.num_samples = 1001;
    spec->eval.batch_size = 300;
    spec->eval.shuffle = false;
    spec->eval.shuffle_seed = 77;
    spec->eval_frequency = 50;
    /* as jobspec_parse would have it: Gaussian features travel as float32 */
    spec->model->input_unorm8 = false;
    p = plan_of(spec);
    ck_assert(!p->train_input->input_unorm8 && !p->eval_input->input_unorm8);
    ck_assert(p->eval_input->labels_uint8);
    in = p->eval_input;
    ck_assert_ptr_nonnull(in);
    ck_assert_str_eq(in->split, "eval");
    ck_assert(!in->shuffle);
    ck_assert_uint_eq(in->seed, 77);
    ck_assert(!in->random_flip_vertical);
    ck_assert_uint_eq(in->n_sample_shape, 3);
    ck_assert_str_eq(p->train_input->split, "train");
    ck_assert_uint_eq(p->eval_frequency, 50);
    ck_assert_uint_eq(p->eval_samples, 1001);
    ck_assert_uint_eq(p->eval_shard, 1001);   /* one replica */
    ck_assert_uint_eq(p->eval_batch, 8);      /* no larger than the training share */
    ck_assert_uint_eq(p->eval_batches, 126);  /* ceil(1001 / 8) */
    appliance__plan__free_unpacked(p, NULL);

    /* An eval set that cannot be opened is refused at submission. */
    strcpy(spec->eval.data_processor, "mnist");
    strcpy(spec->eval.data_dir, "/nonexistent/mnist");
    member wse = {.id = 1, .role = APPLIANCE__ROLE__ROLE_WSE_NODE, .addr = "127.0.0.1:1",
                  .wafer_memory = 1ull << 30};
    member *r[] = {&wse};
    planner_members pm = {r, 1, r, 1, r, 1, r, 1};
    uint8_t *buf = NULL;
    size_t len;
    ck_assert_int_lt(planner_build(spec, "job-2", &pm, 1024, &buf, &len, err, sizeof(err)), 0);
    ck_assert_msg(strstr(err, "job.toml: [eval_input]: /nonexistent/mnist/t10k-images-idx3-ubyte") == err,
                  "%s", err);
    jobspec_free(spec);
}
END_TEST

/* A job's last layers: flatten, then a dense layer of 4 units. */
#define FLATTEN_FC4                                                                                \
    "[[model.layers]]\n"                                                                           \
    "name = \"flatten\"\n"                                                                         \
    "type = \"flatten\"\n"                                                                         \
    "[[model.layers]]\n"                                                                           \
    "name = \"fc\"\n"                                                                              \
    "type = \"dense\"\n"                                                                           \
    "units = 4\n"

/* A Weight Streaming job's head: 8 samples of 3 x 256 x 256, 4 classes. */
#define WS_8X3X256X256                                                                             \
    "[runconfig]\n"                                                                                \
    "mode = \"weight_streaming\"\n"                                                                \
    "[train_input]\n"                                                                              \
    "data_processor = \"synthetic_classification\"\n"                                              \
    "batch_size = 8\n"                                                                             \
    "num_classes = 4\n"                                                                            \
    "[model]\n"                                                                                    \
    "input_shape = [3, 256, 256]\n"                                                                \
    "loss = \"softmax_cross_entropy\"\n"

/* The given wse-nodes, and one memoryx, swarmx and worker. */
typedef struct cluster {
    member mx, sx, wk;
    member *s[1], *w[1], *k[1];
    planner_members pm;
} cluster;

static void cluster_init(cluster *c, member **wse, size_t n)
{
    c->mx = (member){.id = 2, .role = APPLIANCE__ROLE__ROLE_MEMORYX, .addr = "127.0.0.1:2"};
    c->sx = (member){.id = 3, .role = APPLIANCE__ROLE__ROLE_SWARMX, .addr = "127.0.0.1:3"};
    c->wk = (member){.id = 4, .role = APPLIANCE__ROLE__ROLE_WORKER, .addr = "127.0.0.1:4"};
    c->s[0] = &c->mx;
    c->w[0] = &c->sx;
    c->k[0] = &c->wk;
    c->pm = (planner_members){wse, n, c->s, 1, c->w, 1, c->k, 1};
}

/* A replica's memory is planned for the threads its wse-node registered:
 * the convolution workspace grows with them (it was once planned with the
 * coordinator's own single thread). 8 filters: im2col's workspace, which
 * grows with the threads (oneDNN's layouts, for 16 outputs and more, do
 * not). */
START_TEST(memory_for_the_members_threads)
{
    static const char *conv_job = "[train_input]\n"
                                  "data_processor = \"synthetic_classification\"\n"
                                  "batch_size = 4\n"
                                  "num_classes = 4\n"
                                  "[model]\n"
                                  "input_shape = [3, 64, 64]\n"
                                  "loss = \"softmax_cross_entropy\"\n"
                                  "[[model.layers]]\n"
                                  "name = \"conv\"\n"
                                  "type = \"conv2d\"\n"
                                  "filters = 8\n"
                                  "kernel_size = 3\n"
                                  "padding = 1\n"
                                  FLATTEN_FC4;
    char err[512];
    jobspec *spec = jobspec_parse(conv_job, strlen(conv_job), "job.toml", "/src", err, sizeof(err));
    ck_assert_msg(spec != NULL, "%s", err);
    member w1 = {.id = 1, .role = APPLIANCE__ROLE__ROLE_WSE_NODE, .addr = "127.0.0.1:1",
                 .wafer_memory = 1ull << 30, .threads = 1};
    member w4 = {.id = 5, .role = APPLIANCE__ROLE__ROLE_WSE_NODE, .addr = "127.0.0.1:5",
                 .wafer_memory = 1ull << 30, .threads = 4};
    member *r[] = {&w1, &w4};
    cluster cl;
    cluster_init(&cl, r, 2);
    planner_members pm = cl.pm;
    uint8_t *buf;
    size_t len;
    ck_assert_msg(planner_build(spec, "job-1", &pm, 1024, &buf, &len, err, sizeof(err)) == 0,
                  "%s", err);
    Appliance__Plan *p = appliance__plan__unpack(NULL, len, buf);
    free(buf);
    ck_assert_ptr_nonnull(p);
    /* the model as the plan runs it: every output (or every costly one)
     * kept where the wafers hold them */
    spec->model->keep_outputs = p->keep_outputs;
    spec->model->lighten = !p->keep_costly;
    uint64_t one = planner_replica_bytes(spec->model, 2, 1, p->mode, 0);
    uint64_t four = planner_replica_bytes(spec->model, 2, 4, p->mode, 0);
    ck_assert_uint_gt(four, one);
    ck_assert_uint_eq(p->replicas[0]->memory_needed, one);
    ck_assert_uint_eq(p->replicas[1]->memory_needed, four);
    ck_assert_uint_eq(planner_replica_bytes(spec->model, 2, 0, p->mode, 0), one); /* 0: one thread */
    appliance__plan__free_unpacked(p, NULL);
    jobspec_free(spec);
}
END_TEST

/* Where a replica fits its wafer only with one batch in flight from its
 * worker rather than two, the plan says one (Plan.feed_credits 1) and
 * plans the replica's memory with one batch; with room for two, the
 * default (0); with room for neither, the job is refused. */
START_TEST(one_batch_in_flight_where_two_do_not_fit)
{
    static const char *job = WS_8X3X256X256
                             "[[model.layers]]\n"
                             "name = \"pool\"\n"
                             "type = \"max_pool2d\"\n"
                             "kernel_size = 8\n"
                             FLATTEN_FC4;
    char err[2048];
    jobspec *spec = jobspec_parse(job, strlen(job), "job.toml", "/src", err, sizeof(err));
    ck_assert_msg(spec != NULL, "%s", err);
    member w1 = {.id = 1, .role = APPLIANCE__ROLE__ROLE_WSE_NODE, .addr = "127.0.0.1:1",
                 .wafer_memory = 1ull << 30, .threads = 1};
    member *r[] = {&w1};
    cluster cl;
    cluster_init(&cl, r, 1);
    planner_members pm = cl.pm;
    Appliance__Plan *p = plan_on(spec, &pm);
    ck_assert_uint_eq(p->feed_credits, 0);
    uint64_t two = p->replicas[0]->memory_needed;
    /* the step timeout: 600 s, or 2 times a long step's work at 10 GFLOP/s
     * a thread; as given where given */
    ck_assert_int_eq(spec->step_timeout_seconds, JOBSPEC_AUTO);
    ck_assert_uint_eq(planner_step_timeout_ms(spec, p, 2), 600000);
    uint64_t flops = spec->model->flops;
    spec->model->flops = 1000000000000ull; /* 1e12 a sample, 8 samples, 3 passes, 2 threads */
    ck_assert_uint_eq(planner_step_timeout_ms(spec, p, 2), 2400000);
    ck_assert_uint_eq(planner_step_timeout_ms(spec, p, 0), 4800000); /* 0: one thread */
    spec->step_timeout_seconds = 0;
    ck_assert_uint_eq(planner_step_timeout_ms(spec, p, 2), 0);
    spec->step_timeout_seconds = 5;
    ck_assert_uint_eq(planner_step_timeout_ms(spec, p, 2), 5000);
    spec->model->flops = flops;
    appliance__plan__free_unpacked(p, NULL);
    model wm = *spec->model;
    wm.feed_one = true;
    uint64_t one = planner_replica_bytes(&wm, 8, 1, APPLIANCE__EXEC_MODE__MODE_WEIGHT_STREAMING, 0);
    uint64_t batch = sample_batch_bytes(8, 3 * 256 * 256, 1, false, true);
    ck_assert_uint_eq(two - one, batch); /* 8 samples of 768 KiB and their labels */
    w1.wafer_memory = one;
    p = plan_on(spec, &pm);
    ck_assert_uint_eq(p->feed_credits, 1);
    ck_assert_uint_eq(p->replicas[0]->memory_needed, one);
    ck_assert_uint_eq(p->feed_credits, 1);
    appliance__plan__free_unpacked(p, NULL);
    w1.wafer_memory = one - 1;
    uint8_t *buf = NULL;
    size_t len;
    ck_assert_int_eq(planner_build(spec, "job-1", &pm, 1u << 18, &buf, &len, err, sizeof(err)),
                     -E2BIG);
    jobspec_free(spec);
}
END_TEST

/* A job that does not fit says what would help: fewer samples per replica
 * while one fits, else a larger wafer or an image that fits; never a batch
 * below 1. */
START_TEST(refusals_say_what_helps)
{
    static const char *job = WS_8X3X256X256
                             "[[model.layers]]\nname = \"conv\"\ntype = \"conv2d\"\nfilters = 16\n"
                             "kernel_size = 3\npadding = 1\n"
                             "[[model.layers]]\nname = \"pool\"\ntype = \"max_pool2d\"\nkernel_size = 2\n"
                             "[[model.layers]]\nname = \"flatten\"\ntype = \"flatten\"\n"
                             "[[model.layers]]\nname = \"fc\"\ntype = \"dense\"\nunits = 4\n";
    char err[1024];
    jobspec *spec = jobspec_parse(job, strlen(job), "job.toml", "/src", err, sizeof(err));
    ck_assert_msg(spec != NULL, "%s", err);
    uint64_t one = planner_replica_bytes(spec->model, 1, 1, APPLIANCE__EXEC_MODE__MODE_WEIGHT_STREAMING, 0);
    uint64_t three = planner_replica_bytes(spec->model, 3, 1, APPLIANCE__EXEC_MODE__MODE_WEIGHT_STREAMING, 0);
    uint64_t four = planner_replica_bytes(spec->model, 4, 1, APPLIANCE__EXEC_MODE__MODE_WEIGHT_STREAMING, 0);
    member wse = {.id = 1, .role = APPLIANCE__ROLE__ROLE_WSE_NODE, .addr = "127.0.0.1:1", .threads = 1};
    member mx = {.id = 2, .role = APPLIANCE__ROLE__ROLE_MEMORYX, .addr = "127.0.0.1:2"};
    member sx = {.id = 3, .role = APPLIANCE__ROLE__ROLE_SWARMX, .addr = "127.0.0.1:3"};
    member wk = {.id = 4, .role = APPLIANCE__ROLE__ROLE_WORKER, .addr = "127.0.0.1:4"};
    member *r[] = {&wse}, *s[] = {&mx}, *w[] = {&sx}, *k[] = {&wk};
    planner_members pm = {r, 1, s, 1, w, 1, k, 1};
    uint8_t *buf = NULL;
    size_t len;
    /* three of the eight samples fit whole layers; with the dense layer's
     * weight streamed in parts a few more do, as the message says */
    wse.wafer_memory = (three + four) / 2;
    ck_assert_int_eq(planner_build(spec, "job-1", &pm, 1024, &buf, &len, err, sizeof(err)), -E2BIG);
    int fit = fit_largest_batch(spec->model, 1, APPLIANCE__EXEC_MODE__MODE_WEIGHT_STREAMING, 0,
                                wse.wafer_memory, 8);
    ck_assert_int_ge(fit, 3);
    ck_assert_int_lt(fit, 8);
    char want[160];
    snprintf(want, sizeof(want), "%d sample(s) per replica fit: lower train_input.batch_size to %d "
             "or raise runconfig.num_csx to %d", fit, fit, (8 + fit - 1) / fit);
    ck_assert_msg(strstr(err, "for 8 samples of 3x256x256") && strstr(err, want), "%s", err);
    /* not one fits, even with no weight slots at all: a larger wafer, or a
     * smaller image (one that fits) */
    wse.wafer_memory = one - footprint_wslots_bytes(spec->model, 0, 1024) - 1;
    ck_assert_int_eq(planner_build(spec, "job-1", &pm, 1024, &buf, &len, err, sizeof(err)), -E2BIG);
    ck_assert_msg(strstr(err, "not even one sample of 3x256x256 fits a wafer") &&
                  strstr(err, "use wse-nodes with more wafer memory (--wafer-memory), or images of at "
                         "most 3x") && !strstr(err, "batch_size"), "%s", err);
    /* bfloat16 activations are offered only when they would make one sample
     * fit: here the one convolution's output is read in float32 anyway */
    model half = *spec->model;
    half.act_bf16 = true;
    ck_assert_uint_ge(planner_replica_bytes(&half, 1, 1, APPLIANCE__EXEC_MODE__MODE_WEIGHT_STREAMING, 0), one);
    ck_assert_msg(!strstr(err, "bfloat16"), "%s", err);
    jobspec_free(spec);
}
END_TEST

/* memoryx shards that cannot hold the weights, their gradients and the
 * optimizer's state are refused at planning, with the shard count that
 * would hold them (balanced as the plan balances), or, when one tensor is
 * more than a shard holds, a larger memoryx. */
/* A cluster of one member of each role (a wse-node with a 1 GiB wafer),
 * as planner_build takes it; each test sets the memoryx's memory and disk. */
typedef struct cluster1 {
    member wse, mx, sx, wk;
    member *r[1], *s[1], *w[1], *k[1];
    planner_members pm;
} cluster1;

static void cluster1_init(cluster1 *c)
{
    memset(c, 0, sizeof(*c));
    c->wse = (member){.id = 1, .role = APPLIANCE__ROLE__ROLE_WSE_NODE, .addr = "127.0.0.1:1",
                      .threads = 1, .wafer_memory = 1ull << 30};
    c->mx = (member){.id = 2, .role = APPLIANCE__ROLE__ROLE_MEMORYX, .addr = "127.0.0.1:2",
                     .name = "memoryx-1"};
    c->sx = (member){.id = 3, .role = APPLIANCE__ROLE__ROLE_SWARMX, .addr = "127.0.0.1:3"};
    c->wk = (member){.id = 4, .role = APPLIANCE__ROLE__ROLE_WORKER, .addr = "127.0.0.1:4"};
    c->r[0] = &c->wse;
    c->s[0] = &c->mx;
    c->w[0] = &c->sx;
    c->k[0] = &c->wk;
    c->pm = (planner_members){c->r, 1, c->s, 1, c->w, 1, c->k, 1};
}

/* The job of the memoryx tests, in `mode`. */
static const char *mx_job(const char *mode)
{
    static char text[1024];
    snprintf(text, sizeof(text), "[runconfig]\n"
                             "mode = \"%s\"\n"
                             "[train_input]\n"
                             "data_processor = \"synthetic_classification\"\n"
                             "batch_size = 8\n"
                             "num_classes = 4\n"
                             "[model]\n"
                             "input_shape = [1, 32, 32]\n"
                             "loss = \"softmax_cross_entropy\"\n"
                             "[[model.layers]]\nname = \"flatten\"\ntype = \"flatten\"\n"
                             "[[model.layers]]\nname = \"fc1\"\ntype = \"dense\"\nunits = 1024\n"
                             "[[model.layers]]\nname = \"fc2\"\ntype = \"dense\"\nunits = 1024\n"
                             "[[model.layers]]\nname = \"fc3\"\ntype = \"dense\"\nunits = 4\n"
                             "[optimizer]\nmomentum = 0.9\n", mode);
    return text;
}

START_TEST(memoryx_shards_must_hold_the_model)
{
    const char *job = mx_job("weight_streaming");
    char err[1024];
    jobspec *spec = jobspec_parse(job, strlen(job), "job.toml", "/src", err, sizeof(err));
    ck_assert_msg(spec != NULL, "%s", err);
    /* fc1 and fc2 weights are 1M floats each: 12 MiB with gradient and momentum */
    uint64_t big = footprint_shard_tensor_bytes(1024 * 1024, true, 1, true);
    ck_assert_uint_eq(big, 12u << 20);
    cluster1 c;
    cluster1_init(&c);
    uint8_t *buf = NULL;
    size_t len;
    /* a shard of 20 MiB holds one of the two big tensors: two shards would do */
    c.mx.memory = 20u << 20;
    ck_assert_int_eq(planner_build(spec, "job-1", &c.pm, 1024, &buf, &len, err, sizeof(err)), -E2BIG);
    ck_assert_msg(strstr(err, "memoryx cannot hold the model") && strstr(err, "shard 1 of 1") &&
                  strstr(err, "memoryx memoryx-1 has 20.0 MiB") &&
                  strstr(err, "runconfig.num_wgt_servers = 2 would do"), "%s", err);
    /* less than one tensor needs: only a larger memoryx helps */
    c.mx.memory = 10u << 20;
    ck_assert_int_eq(planner_build(spec, "job-1", &c.pm, 1024, &buf, &len, err, sizeof(err)), -E2BIG);
    ck_assert_msg(strstr(err, "one tensor with its gradient and optimizer state needs 12.0 MiB") &&
                  strstr(err, "give memoryx more --memory"), "%s", err);
    /* enough, and no limit: planned */
    c.mx.memory = 30u << 20;
    ck_assert_msg(planner_build(spec, "job-1", &c.pm, 1024, &buf, &len, err, sizeof(err)) == 0, "%s", err);
    free(buf);
    c.mx.memory = 0;
    ck_assert_msg(planner_build(spec, "job-1", &c.pm, 1024, &buf, &len, err, sizeof(err)) == 0, "%s", err);
    free(buf);
    jobspec_free(spec);
}
END_TEST

/* Weight Streaming streams again, for the backward pass, the weights of the
 * layers that pass a gradient on and are not still in the slots: of four
 * dense layers after a flatten of the input, fc4 and fc3 are kept from the
 * forward pass, fc2 streams again, and fc1, whose input is the model input
 * through the flatten, takes no weights to make no input gradient. */
START_TEST(backward_streams_what_it_reads)
{
    static const char *job = "[runconfig]\nmode = \"weight_streaming\"\n"
                             "[train_input]\nbatch_size = 8\nnum_classes = 4\n"
                             "[model]\ninput_shape = [1, 8, 8]\nloss = \"softmax_cross_entropy\"\n"
                             "[[model.layers]]\nname = \"flatten\"\ntype = \"flatten\"\n"
                             "[[model.layers]]\nname = \"fc1\"\ntype = \"dense\"\nunits = 32\n"
                             "[[model.layers]]\nname = \"relu1\"\ntype = \"relu\"\n"
                             "[[model.layers]]\nname = \"fc2\"\ntype = \"dense\"\nunits = 32\n"
                             "[[model.layers]]\nname = \"relu2\"\ntype = \"relu\"\n"
                             "[[model.layers]]\nname = \"fc3\"\ntype = \"dense\"\nunits = 32\n"
                             "[[model.layers]]\nname = \"fc4\"\ntype = \"dense\"\nunits = 4\n";
    char err[1024];
    jobspec *spec = jobspec_parse(job, strlen(job), "job.toml", "/src", err, sizeof(err));
    ck_assert_msg(spec != NULL, "%s", err);
    cluster1 c;
    cluster1_init(&c);
    uint8_t *buf = NULL;
    size_t len;
    ck_assert_msg(planner_build(spec, "job-1", &c.pm, 1024, &buf, &len, err, sizeof(err)) == 0, "%s", err);
    Appliance__Plan *plan = appliance__plan__unpack(NULL, len, buf);
    ck_assert_ptr_nonnull(plan);
    ck_assert_int_eq(plan->mode, APPLIANCE__EXEC_MODE__MODE_WEIGHT_STREAMING);
    ck_assert_uint_eq(plan->bwd_kept, 2);
    /* tensors: fc1 0-1, fc2 2-3, fc3 4-5, fc4 6-7 */
    ck_assert_uint_eq(plan->n_fwd_stream, 8);
    ck_assert_uint_eq(plan->n_bwd_stream, 2);
    ck_assert_uint_eq(plan->bwd_stream[0], 2);
    ck_assert_uint_eq(plan->bwd_stream[1], 3);
    ck_assert_uint_eq(plan->n_grad_order, 8);
    appliance__plan__free_unpacked(plan, NULL);
    free(buf);
    jobspec_free(spec);
}
END_TEST

/* A Pipelined job's gradients never reach memoryx: its shards hold weights
 * and optimizer state only, and in memory (its checkpoints land there; no
 * disk tier), refused at planning with what would hold it. */
START_TEST(pipelined_memoryx_holds_no_gradients)
{
    const char *job = mx_job("pipelined");
    char err[1024];
    jobspec *spec = jobspec_parse(job, strlen(job), "job.toml", "/src", err, sizeof(err));
    ck_assert_msg(spec != NULL, "%s", err);
    ck_assert_uint_eq(footprint_shard_tensor_bytes(1024 * 1024, true, 1, false), 8u << 20);
    ck_assert_uint_eq(footprint_shard_tensor_bytes(1024 * 1024, false, 1, false), 4u << 20);
    cluster1 c;
    cluster1_init(&c);
    uint8_t *buf = NULL;
    size_t len;
    /* 20 MiB: too little for Weight Streaming's gradients, enough here */
    c.mx.memory = 20u << 20;
    ck_assert_msg(planner_build(spec, "job-1", &c.pm, 1024, &buf, &len, err, sizeof(err)) == 0, "%s", err);
    Appliance__Plan *plan = appliance__plan__unpack(NULL, len, buf);
    ck_assert_ptr_nonnull(plan);
    ck_assert_int_eq(plan->mode, APPLIANCE__EXEC_MODE__MODE_PIPELINED);
    appliance__plan__free_unpacked(plan, NULL);
    free(buf);
    /* 12 MiB of memory and a large disk tier: the disk tier does not count */
    c.mx.memory = 12u << 20;
    c.mx.disk = 1ull << 30;
    ck_assert_int_eq(planner_build(spec, "job-1", &c.pm, 1024, &buf, &len, err, sizeof(err)), -E2BIG);
    ck_assert_msg(strstr(err, "memoryx cannot hold the model: the weights and optimizer state need "
                              "16.0 MiB in all, 16.0 MiB on shard 1 of 1, memoryx memoryx-1 has "
                              "12.0 MiB of memory") &&
                  strstr(err, "no disk tier") && strstr(err, "runconfig.num_wgt_servers = 2 would do") &&
                  strstr(err, "mode = \"weight_streaming\""), "%s", err);
    /* less than one tensor and its momentum */
    c.mx.memory = 6u << 20;
    ck_assert_int_eq(planner_build(spec, "job-1", &c.pm, 1024, &buf, &len, err, sizeof(err)), -E2BIG);
    ck_assert_msg(strstr(err, "one tensor with its optimizer state needs 8.0 MiB, memoryx memoryx-1 "
                              "has 6.0 MiB of memory"), "%s", err);
    jobspec_free(spec);
}
END_TEST

/* Placement: live members of each role in id order; idle ones only for a
 * launch, any for a plan to show; a role short of members says so. */
START_TEST(placement)
{
    char err[512];
    jobspec *spec = jobspec_parse(job_text, strlen(job_text), "job.toml", "/src", err, sizeof(err));
    ck_assert_msg(spec != NULL, "%s", err);
    member v[6] = {
        {.id = 1, .role = APPLIANCE__ROLE__ROLE_WSE_NODE, .state = APPLIANCE__MEMBER_STATE__MEMBER_BUSY},
        {.id = 2, .role = APPLIANCE__ROLE__ROLE_WSE_NODE, .state = APPLIANCE__MEMBER_STATE__MEMBER_ALIVE},
        {.id = 3, .role = APPLIANCE__ROLE__ROLE_MEMORYX, .state = APPLIANCE__MEMBER_STATE__MEMBER_ALIVE},
        {.id = 4, .role = APPLIANCE__ROLE__ROLE_SWARMX, .state = APPLIANCE__MEMBER_STATE__MEMBER_ALIVE},
        {.id = 5, .role = APPLIANCE__ROLE__ROLE_WORKER, .state = APPLIANCE__MEMBER_STATE__MEMBER_LOST},
        {.id = 6, .role = APPLIANCE__ROLE__ROLE_WORKER, .state = APPLIANCE__MEMBER_STATE__MEMBER_ALIVE},
    };
    strcpy(v[0].job, "job-1");
    members ms = {.v = v, .n = 6};
    planner_place pl;
    ck_assert(planner_place_members(&ms, spec, true, PLANNER_ANY, &pl)); /* num_csx 1 */
    ck_assert_uint_eq(pl.reps[0]->id, 2);                     /* member 1 is busy */
    ck_assert_uint_eq(pl.gw, 1);                              /* member 5 is lost */
    ck_assert_uint_eq(pl.workers[0]->id, 6);
    ck_assert(planner_place_members(&ms, spec, false, PLANNER_ANY, &pl));
    ck_assert_uint_eq(pl.reps[0]->id, 1);                     /* any live one */
    spec->num_csx = 3;
    ck_assert(!planner_place_members(&ms, spec, false, PLANNER_ANY, &pl));
    ck_assert_uint_eq(pl.nr, 3);
    ck_assert_uint_eq(pl.gr, 2);
    jobspec_free(spec);
}
END_TEST

/* One replica and one shard: no swarmx in the job, the replica streams
 * from memoryx (swarm parent -1), and the plan passes the daemons' check;
 * swarmx_relay keeps the one-node tree. */
START_TEST(one_replica_streams_from_memoryx)
{
    char err[512];
    jobspec *spec = jobspec_parse(job_text, strlen(job_text), "job.toml", "/src", err, sizeof(err));
    ck_assert_msg(spec != NULL, "%s", err);
    ck_assert(planner_direct(spec));
    ck_assert_uint_eq(planner_tree_nodes(spec), 0);
    Appliance__Plan *p = plan_of(spec);
    ck_assert_uint_eq(p->n_swarm, 0);
    ck_assert_int_eq(p->replicas[0]->swarm_parent, -1);
    ck_assert_msg(msgcheck_plan(p, err, sizeof(err)) == 0, "%s", err);
    appliance__plan__free_unpacked(p, NULL);

    spec->swarmx_relay = true;
    ck_assert(!planner_direct(spec));
    ck_assert_uint_eq(planner_tree_nodes(spec), 1);
    p = plan_of(spec);
    ck_assert_uint_eq(p->n_swarm, 1);
    ck_assert_int_eq(p->swarm[0]->parent, -1);
    ck_assert_int_eq(p->replicas[0]->swarm_parent, 0);
    ck_assert_msg(msgcheck_plan(p, err, sizeof(err)) == 0, "%s", err);
    appliance__plan__free_unpacked(p, NULL);

    spec->swarmx_relay = false; /* two replicas or two shards take a tree */
    spec->num_csx = 2;
    ck_assert_uint_eq(planner_tree_nodes(spec), 1);
    spec->num_csx = 1;
    spec->num_wgt_servers = 2;
    ck_assert_uint_eq(planner_tree_nodes(spec), 1);
    jobspec_free(spec);
}
END_TEST

/* A host's memory counted once, at registration: the live members of one
 * host id declare their wafer memory (and a memoryx its --memory below the
 * host's) against the host's memory; another host, a lost member and a
 * member of no known host are not counted with it. */
START_TEST(hosts_declared_per_host)
{
    const uint64_t G = 1ull << 30;
    const Appliance__MemberState alive = APPLIANCE__MEMBER_STATE__MEMBER_ALIVE;
    member v[6] = {
        {.id = 1, .role = APPLIANCE__ROLE__ROLE_WSE_NODE, .name = "w1", .state = alive,
         .host_id = "6456000e-4e44-4049-9243-791b4777dcb3", .host_name = "node-a",
         .host_memory = 8 * G, .wafer_memory = 6 * G},
        {.id = 2, .role = APPLIANCE__ROLE__ROLE_WSE_NODE, .name = "w2", .state = alive,
         .host_id = "6456000e-4e44-4049-9243-791b4777dcb3", .host_name = "node-a",
         .host_memory = 8 * G, .wafer_memory = 6 * G},
        {.id = 3, .role = APPLIANCE__ROLE__ROLE_MEMORYX, .name = "mx", .state = alive,
         .host_id = "6456000e-4e44-4049-9243-791b4777dcb3", .host_name = "node-a",
         .host_memory = 8 * G, .memory = 8 * G}, /* no --memory: what its shards need, when planned */
        {.id = 4, .role = APPLIANCE__ROLE__ROLE_WSE_NODE, .name = "w3", .state = alive,
         .host_id = "b", .host_memory = 8 * G, .wafer_memory = 6 * G},
        {.id = 5, .role = APPLIANCE__ROLE__ROLE_MEMORYX, .name = "mx-b", .state = alive,
         .host_id = "b", .host_memory = 8 * G, .memory = 1 * G},
        {.id = 6, .role = APPLIANCE__ROLE__ROLE_WSE_NODE, .name = "w4", .state = alive,
         .wafer_memory = 100 * G}, /* a peer that names no host */
    };
    members ms = {.v = v, .n = 6};
    char out[1024], label[160];
    ck_assert_str_eq(hosts_label(&v[0], label, sizeof(label)), "node-a (6456000e)");
    ck_assert_str_eq(hosts_label(&v[3], label, sizeof(label)), "b");
    ck_assert_str_eq(hosts_label(&v[5], label, sizeof(label)), "(unknown host)");
    ck_assert_uint_eq(hosts_declared_bytes(&v[2]), 0);
    ck_assert_uint_eq(hosts_declared_bytes(&v[4]), G);
    ck_assert(hosts_declared_over(&ms, &v[1], out, sizeof(out)));
    ck_assert_str_eq(out, "host node-a (6456000e) has 8.0 GiB and its members declare 12.0 GiB: "
                          "w1 6.0 GiB of wafer memory, w2 6.0 GiB of wafer memory; jobs are planned "
                          "within the host's 8.0 GiB, but give its wse-nodes --wafer-memory (or "
                          "--wafer-share) adding up to less than it has");
    ck_assert(!hosts_declared_over(&ms, &v[3], out, sizeof(out))); /* 6 + 1 of 8 */
    ck_assert(!hosts_declared_over(&ms, &v[5], out, sizeof(out)));
    v[4].memory = 3 * G; /* 6 + 3 of 8 */
    ck_assert(hosts_declared_over(&ms, &v[4], out, sizeof(out)));
    ck_assert_msg(strstr(out, "host b has 8.0 GiB and its members declare 9.0 GiB: w3 6.0 GiB of "
                              "wafer memory, mx-b 3.0 GiB of memory (--memory);"), "%s", out);
    v[4].memory = 100 * G; /* a --memory beyond the host */
    ck_assert(hosts_declared_over(&ms, &v[3], out, sizeof(out)));
    ck_assert_msg(strstr(out, "declare 106.0 GiB: w3 6.0 GiB of wafer memory, mx-b 100.0 GiB of "
                              "memory (--memory);"), "%s", out);
    v[1].state = APPLIANCE__MEMBER_STATE__MEMBER_LOST;
    ck_assert(!hosts_declared_over(&ms, &v[0], out, sizeof(out)));
}
END_TEST

/* A plan's members summed per host: the first host with too little is
 * named with each role's part, and the share its wse-nodes could have. */
START_TEST(hosts_plan_summed_per_host)
{
    const uint64_t G = 1ull << 30;
    member w1 = {.role = APPLIANCE__ROLE__ROLE_WSE_NODE, .host_id = "a", .host_memory = 8 * G};
    member w2 = w1, w3 = w1;
    member mx = {.role = APPLIANCE__ROLE__ROLE_MEMORYX, .host_id = "a", .host_memory = 8 * G};
    member sx = {.role = APPLIANCE__ROLE__ROLE_SWARMX, .host_id = "b", .host_memory = 8 * G};
    member wk = {.role = APPLIANCE__ROLE__ROLE_WORKER, .host_id = "a", .host_memory = 8 * G};
    member lone = {.role = APPLIANCE__ROLE__ROLE_WSE_NODE}; /* no host: not counted */
    hosts_use use[] = {{&w1, 5 * G}, {&w2, 5 * G}, {&mx, G}, {&sx, G / 2}, {&wk, 1 << 20},
                       {&lone, 100 * G}};
    uint64_t share;
    char err[512];
    ck_assert_int_eq(hosts_check_plan(use, 6, &share, err, sizeof(err)), 1);
    ck_assert_str_eq(err, "host a has 8.0 GiB and the job's members on it need 11.0 GiB: 2 wse-nodes "
                          "plan 5.0 GiB each, memoryx holds 1.0 GiB, 1 worker holds 1.0 MiB of "
                          "batches");
    ck_assert_uint_eq(share, (8 * G - G - (1 << 20)) / 2);
    w3.host_memory = 0;
    use[1].mb = &w3; /* a second wse-node that does not know its host's memory, on host a */
    use[1].bytes = 3 * G;
    ck_assert_int_eq(hosts_check_plan(use, 6, &share, err, sizeof(err)), 1);
    ck_assert_msg(strstr(err, "need 9.0 GiB: 2 wse-nodes plan 8.0 GiB (up to 5.0 GiB each)"), "%s", err);
    snprintf(w3.host_id, sizeof(w3.host_id), "b"); /* on host b: 5 + 1 of 8 here, 3 + 0.5 there */
    ck_assert_int_eq(hosts_check_plan(use, 6, &share, err, sizeof(err)), 0);
    ck_assert_uint_eq(share, 0);
}
END_TEST

/* Two replicas on one host: a Pipelined job that fits each wafer but not
 * the host with both is refused naming the host; a job in "auto" mode that
 * keeps every output on a wafer is planned within each replica's share of
 * the host instead, as wafers of that share would get it. memoryx, swarmx
 * and the worker run on other hosts. */
START_TEST(planner_counts_a_host_once)
{
    char err[2048];
    const uint64_t G = 1ull << 30;
    member w[2], mx, sx, wk;
    for (int i = 0; i < 2; i++)
        w[i] = (member){.id = (uint32_t)i + 1, .role = APPLIANCE__ROLE__ROLE_WSE_NODE,
                        .addr = "127.0.0.1:1", .threads = 1, .wafer_memory = G};
    mx = (member){.id = 3, .role = APPLIANCE__ROLE__ROLE_MEMORYX, .addr = "127.0.0.1:2",
                  .host_id = "m", .host_memory = 64 * G};
    sx = (member){.id = 4, .role = APPLIANCE__ROLE__ROLE_SWARMX, .addr = "127.0.0.1:3",
                  .host_id = "s", .host_memory = 64 * G};
    wk = (member){.id = 5, .role = APPLIANCE__ROLE__ROLE_WORKER, .addr = "127.0.0.1:4",
                  .host_id = "s", .host_memory = 64 * G};
    member *r[] = {&w[0], &w[1]}, *s[] = {&mx}, *x[] = {&sx}, *k[] = {&wk};
    planner_members pm = {r, 2, s, 1, x, 1, k, 1};
    uint8_t *buf = NULL;
    size_t len;
    /* three convolutions, each with a batch norm and a rectifier whose
     * outputs the wafer keeps or the backward pass makes again */
    static const char *norm_job =
        "[train_input]\ndata_processor = \"synthetic_classification\"\nbatch_size = 8\n"
        "num_classes = 4\n[model]\ninput_shape = [3, 64, 64]\nloss = \"softmax_cross_entropy\"\n"
        "[[model.layers]]\nname = \"conv1\"\ntype = \"conv2d\"\nfilters = 16\nkernel_size = 3\npadding = 1\n"
        "[[model.layers]]\nname = \"bn1\"\ntype = \"batch_norm\"\n"
        "[[model.layers]]\nname = \"relu1\"\ntype = \"relu\"\n"
        "[[model.layers]]\nname = \"conv2\"\ntype = \"conv2d\"\nfilters = 16\nkernel_size = 3\npadding = 1\n"
        "[[model.layers]]\nname = \"bn2\"\ntype = \"batch_norm\"\n"
        "[[model.layers]]\nname = \"relu2\"\ntype = \"relu\"\n"
        "[[model.layers]]\nname = \"conv3\"\ntype = \"conv2d\"\nfilters = 16\nkernel_size = 3\npadding = 1\n"
        "[[model.layers]]\nname = \"bn3\"\ntype = \"batch_norm\"\n"
        "[[model.layers]]\nname = \"relu3\"\ntype = \"relu\"\n"
        "[[model.layers]]\nname = \"flatten\"\ntype = \"flatten\"\n"
        "[[model.layers]]\nname = \"fc\"\ntype = \"dense\"\nunits = 4\n";
    for (int i = 0; i < 2; i++) {
        const char *job = i == 0 ? mx_job("pipelined") : norm_job;
        jobspec *spec = jobspec_parse(job, strlen(job), "job.toml", "/src", err, sizeof(err));
        ck_assert_msg(spec != NULL, "%s", err);
        spec->num_csx = 2;
        for (int j = 0; j < 2; j++) { /* no host known: planned within each wafer */
            w[j].host_id[0] = 0;
            w[j].host_memory = 0;
        }
        ck_assert_msg(planner_build(spec, "job-1", &pm, 1024, &buf, &len, err, sizeof(err)) == 0,
                      "%s", err);
        Appliance__Plan *p = appliance__plan__unpack(NULL, len, buf);
        free(buf);
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq(p->mode, APPLIANCE__EXEC_MODE__MODE_PIPELINED);
        ck_assert_uint_eq(p->host_share, 0);
        ck_assert(i == 0 || p->keep_outputs); /* the wafer holds them */
        uint64_t need = p->replicas[0]->memory_needed;
        appliance__plan__free_unpacked(p, NULL);
        /* one host with room for one and a half, or for almost two (the
         * outputs computed again fit, not the kept ones) */
        uint64_t host = i == 0 ? need * 3 / 2 : need * 19 / 10;
        for (int j = 0; j < 2; j++) {
            snprintf(w[j].host_id, sizeof(w[j].host_id), "a");
            w[j].host_memory = host;
        }
        int rc = planner_build(spec, "job-1", &pm, 1024, &buf, &len, err, sizeof(err));
        if (i == 0) {
            ck_assert_int_eq(rc, -E2BIG);
            ck_assert_msg(strstr(err, "job.toml: host a has ") == err &&
                          strstr(err, "2 wse-nodes plan ") && strstr(err, " each; nor does the job fit "
                                                                      "with each wse-node planned within"),
                          "%s", err);
        } else {
            ck_assert_msg(rc == 0, "%s", err);
            p = appliance__plan__unpack(NULL, len, buf);
            free(buf);
            ck_assert_ptr_nonnull(p);
            ck_assert_uint_eq(p->host_share, host / 2);
            ck_assert_uint_le(p->replicas[0]->memory_needed + p->replicas[1]->memory_needed, host);
            ck_assert_uint_eq(p->replicas[0]->wafer_memory, G); /* the wafer is still what it declared */
            /* the plan wafers of that share would get, from the model as
             * compiled (the first plan kept outputs it cannot keep now) */
            for (int j = 0; j < 2; j++) {
                w[j].host_id[0] = 0;
                w[j].wafer_memory = host / 2;
            }
            ck_assert_msg(planner_build(spec, "job-1", &pm, 1024, &buf, &len, err, sizeof(err)) == 0,
                          "%s", err);
            Appliance__Plan *q = appliance__plan__unpack(NULL, len, buf);
            free(buf);
            ck_assert_ptr_nonnull(q);
            ck_assert_int_eq(p->mode, q->mode);
            ck_assert(!p->keep_outputs && !q->keep_outputs);
            ck_assert_uint_eq(p->spatial_partitions, q->spatial_partitions);
            ck_assert_uint_eq(p->micro_batch, q->micro_batch);
            ck_assert_uint_eq(p->replicas[0]->memory_needed, q->replicas[0]->memory_needed);
            appliance__plan__free_unpacked(q, NULL);
            appliance__plan__free_unpacked(p, NULL);
        }
        jobspec_free(spec);
    }
}
END_TEST


/* The CNN of the simulated runs (tests/cluster/jobs/sim_cnn.toml) in Weight
 * Streaming with swarmx_fanout 8; the global batch is the argument. */
static const char sim_cnn[] =
    "[runconfig]\nmode = \"weight_streaming\"\nswarmx_fanout = 8\n"
    "[train_input]\ndata_processor = \"synthetic_classification\"\nbatch_size = %d\n"
    "num_classes = 10\n[model]\ninput_shape = [3, 64, 64]\nloss = \"softmax_cross_entropy\"\n"
    "[[model.layers]]\nname = \"conv1\"\ntype = \"conv2d\"\nfilters = 32\nkernel_size = 3\npadding = 1\n"
    "[[model.layers]]\nname = \"relu1\"\ntype = \"relu\"\n"
    "[[model.layers]]\nname = \"conv2\"\ntype = \"conv2d\"\nfilters = 64\nkernel_size = 3\npadding = 1\n"
    "[[model.layers]]\nname = \"relu2\"\ntype = \"relu\"\n"
    "[[model.layers]]\nname = \"pool2\"\ntype = \"max_pool2d\"\nkernel_size = 2\n"
    "[[model.layers]]\nname = \"conv3\"\ntype = \"conv2d\"\nfilters = 64\nkernel_size = 3\npadding = 1\n"
    "[[model.layers]]\nname = \"relu3\"\ntype = \"relu\"\n"
    "[[model.layers]]\nname = \"pool3\"\ntype = \"max_pool2d\"\nkernel_size = 2\n"
    "[[model.layers]]\nname = \"flat\"\ntype = \"flatten\"\n"
    "[[model.layers]]\nname = \"fc\"\ntype = \"dense\"\nunits = 10\n"
    "[optimizer]\nlearning_rate = 0.01\nmomentum = 0.9\n";

/* Simulated wse-nodes (--simulate-compute) are counted at what they hold:
 * the plan's weight slots, batches in flight and buffers, without the
 * executor's activations and workspace. 8 replicas of a small CNN whose
 * real plans do not fit their host fit it simulated, with the same plan;
 * a host too small even for that is named with the simulated part. */
START_TEST(simulated_wse_nodes_held_at_what_they_hold)
{
    char err[2048];
    const uint64_t G = 1ull << 30;
    enum { N = 8 };
    char cnn[4096];
    snprintf(cnn, sizeof(cnn), sim_cnn, 16 * N);
    jobspec *spec = jobspec_parse(cnn, strlen(cnn), "job.toml", "/src", err, sizeof(err));
    ck_assert_msg(spec != NULL, "%s", err);
    spec->num_csx = N;
    member w[N], mx, sx, wk;
    member *r[N], *s[] = {&mx}, *x[] = {&sx}, *k[] = {&wk};
    for (int i = 0; i < N; i++) {
        w[i] = (member){.id = (uint32_t)i + 1, .role = APPLIANCE__ROLE__ROLE_WSE_NODE,
                        .addr = "127.0.0.1:1", .threads = 1, .wafer_memory = G};
        r[i] = &w[i];
    }
    mx = (member){.id = 9, .role = APPLIANCE__ROLE__ROLE_MEMORYX, .addr = "127.0.0.1:2"};
    sx = (member){.id = 10, .role = APPLIANCE__ROLE__ROLE_SWARMX, .addr = "127.0.0.1:3"};
    wk = (member){.id = 11, .role = APPLIANCE__ROLE__ROLE_WORKER, .addr = "127.0.0.1:4"};
    planner_members pm = {r, N, s, 1, x, 1, k, 1};
    uint8_t *buf = NULL;
    size_t len;
    /* no host known: the real plan */
    Appliance__Plan *p = plan_on(spec, &pm);
    ck_assert_int_eq(p->mode, APPLIANCE__EXEC_MODE__MODE_WEIGHT_STREAMING);
    ck_assert_uint_eq(p->replicas[0]->batch, 16);
    ck_assert_uint_eq(p->micro_batch, 0);
    uint64_t need = p->replicas[0]->memory_needed;
    model wm = *spec->model; /* as planned: the outputs it keeps */
    wm.keep_outputs = p->keep_outputs;
    wm.lighten = !p->keep_costly;
    appliance__plan__free_unpacked(p, NULL);
    /* what a simulated one holds: its two batches in flight, the slots,
     * the buffers, a chunk held while a slot frees, and the frame's 64 KiB */
    footprint f;
    ck_assert_int_eq(footprint_init_micro(&f, &wm, 16, 16, 1), 0);
    uint64_t held = f.batches + f.wslots + spec->model->total_buffers * sizeof(float) + (1u << 20) +
                    (64u << 10);
    ck_assert_uint_eq(need, held + f.exec);
    ck_assert_uint_eq(planner_replica_bytes_unsimulated(&wm, 16, 0, 1,
                                                        APPLIANCE__EXEC_MODE__MODE_WEIGHT_STREAMING),
                      f.exec);
    footprint_free(&f);
    ck_assert_msg(held < need / 4 && held < (8u << 20), "simulated %llu of %llu bytes",
                  (unsigned long long)held, (unsigned long long)need);

    /* all on one host with room for the simulated replicas twice over,
     * far from the real ones' */
    uint64_t host = 2 * N * held;
    for (int i = 0; i < N; i++) {
        snprintf(w[i].host_id, sizeof(w[i].host_id), "a");
        w[i].host_memory = host;
    }
    ck_assert_int_eq(planner_build(spec, "job-1", &pm, 1024, &buf, &len, err, sizeof(err)), -E2BIG);
    ck_assert_msg(strstr(err, "job.toml: host a has ") == err && strstr(err, " 8 wse-nodes plan "),
                  "%s", err);
    for (int i = 0; i < N; i++)
        w[i].simulated = true;
    ck_assert_uint_eq(hosts_declared_bytes(&w[0]), 0); /* it fills no wafer */
    p = plan_on(spec, &pm);
    ck_assert_uint_eq(p->host_share, 0);
    ck_assert_uint_eq(p->replicas[N - 1]->memory_needed, need); /* the plan is the real one's */
    appliance__plan__free_unpacked(p, NULL);
    /* a host just too small for them: named, with what each holds */
    host = N * held - 1;
    for (int i = 0; i < N; i++)
        w[i].host_memory = host;
    ck_assert_int_eq(planner_build(spec, "job-1", &pm, 1024, &buf, &len, err, sizeof(err)), -E2BIG);
    char a[32], b[32], c[32], want[256];
    snprintf(want, sizeof(want), "host a has %s and the job's members on it need %s: 8 simulated "
             "wse-nodes plan %s each", units_format_size(host, a, sizeof(a)),
             units_format_size(N * held, b, sizeof(b)), units_format_size(held, c, sizeof(c)));
    ck_assert_msg(strstr(err, want), "%s\nwanted: %s", err, want);
    jobspec_free(spec);
}
END_TEST

/* bench/scale.sh's largest run on one host of 23 GiB: 128 replicas of its
 * CNN with their 128 workers and a swarmx tree of fan-out 8 (16 leaves, 2
 * inner nodes, a root). Planned as if they computed, the wse-nodes' 133
 * MiB each and swarmx's buffer bounds (23.2 GiB in all) do not fit the
 * host and the plan is cut to a share of it; simulated (5.1 MiB each, 7.2
 * GiB in all) they fit it whole, and a host of 7 GiB is refused naming
 * those figures. */
START_TEST(simulated_scale_run_fits_its_host)
{
    char err[2048];
    const uint64_t G = 1ull << 30, host = 23 * G;
    enum { N = 128, X = 19 };
    char text[4096];
    snprintf(text, sizeof(text), sim_cnn, 16 * N);
    jobspec *spec = jobspec_parse(text, strlen(text), "job.toml", "/src", err, sizeof(err));
    ck_assert_msg(spec != NULL, "%s", err);
    spec->num_csx = N;
    ck_assert_uint_eq(planner_tree_nodes(spec), X);
    static member w[N], sx[X], wk[N], mx;
    static member *r[N], *x[X], *k[N];
    const member on_host = {.host_id = "6456000e-4e44-4049-9243-791b4777dcb3", .host_memory = host,
                            .addr = "127.0.0.1:1", .threads = 1};
    for (int i = 0; i < N; i++) {
        w[i] = on_host;
        w[i].id = (uint32_t)i + 1;
        w[i].role = APPLIANCE__ROLE__ROLE_WSE_NODE;
        w[i].wafer_memory = (uint64_t)(0.8 * (double)host / N); /* appliance-up's --wafer-share */
        r[i] = &w[i];
        wk[i] = on_host;
        wk[i].role = APPLIANCE__ROLE__ROLE_WORKER;
        k[i] = &wk[i];
    }
    for (int i = 0; i < X; i++) {
        sx[i] = on_host;
        sx[i].role = APPLIANCE__ROLE__ROLE_SWARMX;
        x[i] = &sx[i];
    }
    mx = on_host;
    mx.role = APPLIANCE__ROLE__ROLE_MEMORYX;
    member *s[] = {&mx};
    planner_members pm = {r, N, s, 1, x, X, k, N};
    uint8_t *buf = NULL;
    size_t len;
    Appliance__Plan *p = plan_on(spec, &pm); /* cut to each wse-node's share of the host */
    ck_assert_uint_gt(p->host_share, 0);
    ck_assert_uint_lt(p->replicas[0]->memory_needed, 133 << 20);
    appliance__plan__free_unpacked(p, NULL);
    for (int i = 0; i < N; i++)
        w[i].simulated = true;
    p = plan_on(spec, &pm);
    ck_assert_uint_eq(p->host_share, 0);
    ck_assert_uint_eq(p->micro_batch, 0);
    appliance__plan__free_unpacked(p, NULL);
    /* the same members on a host of 7 GiB: named with what they hold */
    for (int i = 0; i < N; i++)
        w[i].host_memory = wk[i].host_memory = 7 * G;
    for (int i = 0; i < X; i++)
        sx[i].host_memory = 7 * G;
    mx.host_memory = 7 * G;
    int rc = planner_build(spec, "job-1", &pm, 1u << 18, &buf, &len, err, sizeof(err));
    ck_assert_int_eq(rc, -E2BIG);
    ck_assert_msg(strstr(err, "has 7.0 GiB and the job's members on it need 7.2 GiB: 128 simulated "
                              "wse-nodes plan 5.1 MiB each, memoryx holds 2.5 MiB, 19 swarmx buffer "
                              "up to 6.3 GiB, 128 workers hold 192.0 MiB of batches"), "%s", err);
    jobspec_free(spec);
}
END_TEST

/* A job's wse-nodes are of one kind: ones that compute when the cluster
 * has enough of them (a busy one is waited for), else simulated ones;
 * a job that would need both is refused naming them; a later attempt
 * keeps its first attempt's kind. */
START_TEST(simulated_and_real_wse_nodes_never_mix)
{
    char err[1024];
    const Appliance__MemberState alive = APPLIANCE__MEMBER_STATE__MEMBER_ALIVE;
    member v[8] = {
        {.id = 1, .role = APPLIANCE__ROLE__ROLE_WSE_NODE, .name = "wse-node-1", .state = alive},
        {.id = 2, .role = APPLIANCE__ROLE__ROLE_WSE_NODE, .name = "sim-1", .state = alive,
         .simulated = true},
        {.id = 3, .role = APPLIANCE__ROLE__ROLE_WSE_NODE, .name = "wse-node-2", .state = alive},
        {.id = 4, .role = APPLIANCE__ROLE__ROLE_WSE_NODE, .name = "sim-2", .state = alive,
         .simulated = true},
        {.id = 5, .role = APPLIANCE__ROLE__ROLE_WSE_NODE, .name = "sim-3", .state = alive,
         .simulated = true},
        {.id = 6, .role = APPLIANCE__ROLE__ROLE_MEMORYX, .name = "mx", .state = alive},
        {.id = 7, .role = APPLIANCE__ROLE__ROLE_SWARMX, .name = "sx", .state = alive},
        {.id = 8, .role = APPLIANCE__ROLE__ROLE_WORKER, .name = "wk", .state = alive},
    };
    members ms = {.v = v, .n = 8};
    jobspec *spec = jobspec_parse(job_text, strlen(job_text), "job.toml", "/src", err, sizeof(err));
    ck_assert_msg(spec != NULL, "%s", err);
    planner_place pl;
    spec->num_csx = 2; /* the two that compute */
    ck_assert(planner_place_members(&ms, spec, true, PLANNER_ANY, &pl));
    ck_assert(!pl.sim);
    ck_assert_uint_eq(pl.real, 2);
    ck_assert_uint_eq(pl.simulated, 3);
    ck_assert_ptr_eq(pl.reps[0], &v[0]);
    ck_assert_ptr_eq(pl.reps[1], &v[2]);
    ck_assert(!planner_kinds_refusal(&ms, &pl, err, sizeof(err)));
    v[2].job[0] = 'j'; /* one of them busy: the job waits for it */
    v[2].state = APPLIANCE__MEMBER_STATE__MEMBER_BUSY;
    ck_assert(!planner_place_members(&ms, spec, true, PLANNER_ANY, &pl));
    ck_assert(!pl.sim);
    ck_assert_uint_eq(pl.gr, 1);
    ck_assert(planner_place_members(&ms, spec, false, PLANNER_ANY, &pl));
    spec->num_csx = 3; /* only simulated ones can: all three */
    ck_assert(planner_place_members(&ms, spec, true, PLANNER_ANY, &pl));
    ck_assert(pl.sim);
    ck_assert_ptr_eq(pl.reps[0], &v[1]);
    ck_assert_ptr_eq(pl.reps[1], &v[3]);
    ck_assert_ptr_eq(pl.reps[2], &v[4]);
    spec->num_csx = 4; /* only a mix could */
    ck_assert(!planner_place_members(&ms, spec, false, PLANNER_ANY, &pl));
    ck_assert(planner_kinds_refusal(&ms, &pl, err, sizeof(err)));
    ck_assert_str_eq(err, "the job needs 4 wse-nodes; the cluster has 2 that compute (wse-node-1, "
                          "wse-node-2) and 3 that simulate their compute (--simulate-compute) "
                          "(sim-1, sim-2, sim-3); a job runs on simulated wse-nodes only when all "
                          "of its wse-nodes are simulated: lower runconfig.num_csx, or start "
                          "wse-nodes of one kind");
    spec->num_csx = 6; /* more than both: the usual counts say it */
    ck_assert(!planner_place_members(&ms, spec, false, PLANNER_ANY, &pl));
    ck_assert(!planner_kinds_refusal(&ms, &pl, err, sizeof(err)));
    v[0].state = APPLIANCE__MEMBER_STATE__MEMBER_LOST; /* a lost one counts for neither */
    spec->num_csx = 4;
    ck_assert(!planner_place_members(&ms, spec, false, PLANNER_ANY, &pl));
    ck_assert_uint_eq(pl.real, 1);
    ck_assert(planner_kinds_refusal(&ms, &pl, err, sizeof(err)));
    ck_assert_msg(strstr(err, "has 1 that compute (wse-node-2) and 3"), "%s", err);
    /* a job whose first attempt computed recovers on ones that compute
     * only, however many simulated ones are idle; and the other way round */
    v[2].job[0] = 0;
    v[2].state = alive;
    spec->num_csx = 2;
    ck_assert(!planner_place_members(&ms, spec, true, PLANNER_REAL, &pl));
    ck_assert(!pl.sim);
    ck_assert_uint_eq(pl.gr, 1);
    ck_assert(planner_place_members(&ms, spec, true, PLANNER_ANY, &pl));
    ck_assert(pl.sim);
    v[0].state = alive;
    ck_assert(planner_place_members(&ms, spec, true, PLANNER_SIMULATED, &pl));
    ck_assert(pl.sim);
    ck_assert_ptr_eq(pl.reps[0], &v[1]);
    jobspec_free(spec);
}
END_TEST


/* The optimizer's Model Zoo schedule and the layers' named initializers
 * reach the plan: segments, bias correction, the initializer with
 * PyTorch's fans; an initializer that needs fans refused on a bias. */
START_TEST(schedule_and_initializers_in_the_plan)
{
    char err[512], text[2048];
    snprintf(text, sizeof(text), "%s", job_text);
    char *mpart = strstr(text, "[model]");
    char tail[1024];
    snprintf(tail, sizeof(tail), "%s", mpart);
    snprintf(mpart, sizeof(text) - (size_t)(mpart - text),
             "[optimizer]\noptimizer_type = \"AdamW\"\ncorrect_bias = false\n"
             "[[optimizer.learning_rate]]\nscheduler = \"Linear\"\ninitial_learning_rate = 0.0\n"
             "end_learning_rate = 0.00025\ntotal_iters = 4000\n"
             "[[optimizer.learning_rate]]\nscheduler = \"CosineDecay\"\n"
             "initial_learning_rate = 0.00025\nend_learning_rate = 0.0\ntotal_iters = 10000\n%s",
             tail);
    jobspec *spec = jobspec_parse(text, strlen(text), "job.toml", "/src", err, sizeof(err));
    ck_assert_msg(spec != NULL, "%s", err);
    /* as model.c will have read weight_initializer = {name = "glorot_uniform", gain = 2.0} */
    model_layer *fc = &spec->model->layers[1];
    memset(&fc->weight_init, 0, sizeof(fc->weight_init));
    strcpy(fc->weight_init.name, "xavier_uniform");
    fc->weight_init.gain = 2.0;
    strcpy(fc->bias_init.name, "constant");
    fc->bias_init.val = 0.1;
    Appliance__Plan *p = plan_of(spec);
    const Appliance__PlanOptimizer *o = p->optimizer;
    ck_assert_str_eq(o->type, "adamw");
    ck_assert(o->no_bias_correction);
    ck_assert_uint_eq(o->n_lr_segments, 2);
    ck_assert_str_eq(o->lr_segments[0]->scheduler, "polynomial");
    ck_assert_str_eq(o->lr_segments[1]->scheduler, "cosine_decay");
    ck_assert_int_eq(o->lr_segments[1]->total_iters, 10000);
    const Appliance__PlanTensor *w = p->tensors[0], *b = p->tensors[1];
    ck_assert_str_eq(w->name, "fc.weight");
    ck_assert_ptr_nonnull(w->initializer);
    ck_assert_str_eq(w->initializer->name, "xavier_uniform");
    ck_assert_double_eq(w->initializer->gain, 2.0);
    ck_assert_uint_eq(w->fan_in, 784);
    ck_assert_uint_eq(w->fan_out, 10);
    ck_assert_str_eq(b->initializer->name, "constant");
    ck_assert_double_eq(b->initializer->val, 0.1);
    appliance__plan__free_unpacked(p, NULL);

    strcpy(fc->bias_init.name, "kaiming_normal");
    member wse = {.id = 1, .role = APPLIANCE__ROLE__ROLE_WSE_NODE, .addr = "127.0.0.1:1",
                  .wafer_memory = 1ull << 30};
    member mx = {.id = 2, .role = APPLIANCE__ROLE__ROLE_MEMORYX, .addr = "127.0.0.1:2"};
    member sx = {.id = 3, .role = APPLIANCE__ROLE__ROLE_SWARMX, .addr = "127.0.0.1:3"};
    member wk = {.id = 4, .role = APPLIANCE__ROLE__ROLE_WORKER, .addr = "127.0.0.1:4"};
    member *r[] = {&wse}, *s[] = {&mx}, *x[] = {&sx}, *k[] = {&wk};
    planner_members pm = {r, 1, s, 1, x, 1, k, 1};
    uint8_t *buf = NULL;
    size_t len;
    ck_assert_int_eq(planner_build(spec, "job-1", &pm, 1024, &buf, &len, err, sizeof(err)),
                     -EINVAL);
    ck_assert_str_eq(err, "job.toml:27:1: layer \"fc\": bias_initializer \"kaiming_normal\" "
                          "computes from fans, which a tensor has only with 2 or more dimensions "
                          "(fc.bias has 1)");
    jobspec_free(spec);
}
END_TEST

/* An image U-Net level whose image does not fit a wafer as it is but
 * fits with its rows as depth: the plan says so (Plan.rows_as_depth),
 * within the wafer; on a wafer that holds the image model, not. */
START_TEST(rows_as_depth_where_the_image_does_not_fit)
{
    static const char job[] =
        "[runconfig]\nmode = \"weight_streaming\"\n"
        "[train_input]\ndata_processor = \"synthetic_segmentation\"\nbatch_size = 1\n"
        "num_classes = 2\n"
        "[model]\ninput_shape = [1, 1024, 1024]\nloss = \"pixel_softmax_cross_entropy\"\n"
        "[[model.layers]]\nname = \"c1\"\ntype = \"conv2d\"\nfilters = 32\nkernel_size = 3\n"
        "padding = 1\n"
        "[[model.layers]]\nname = \"g1\"\ntype = \"group_norm\"\ngroups = 8\n"
        "[[model.layers]]\nname = \"r1\"\ntype = \"relu\"\n"
        "[[model.layers]]\nname = \"c2\"\ntype = \"conv2d\"\nfilters = 32\nkernel_size = 3\n"
        "padding = 1\n"
        "[[model.layers]]\nname = \"g2\"\ntype = \"group_norm\"\ngroups = 8\n"
        "[[model.layers]]\nname = \"r2\"\ntype = \"relu\"\n"
        "[[model.layers]]\nname = \"p\"\ntype = \"max_pool2d\"\nkernel_size = 2\n"
        "[[model.layers]]\nname = \"c3\"\ntype = \"conv2d\"\nfilters = 64\nkernel_size = 3\n"
        "padding = 1\n"
        "[[model.layers]]\nname = \"r3\"\ntype = \"relu\"\n"
        "[[model.layers]]\nname = \"up\"\ntype = \"conv_transpose2d\"\nfilters = 32\n"
        "kernel_size = 2\nstride = 2\n"
        "[[model.layers]]\nname = \"cat\"\ntype = \"concat\"\ninputs = [\"up\", \"r2\"]\n"
        "[[model.layers]]\nname = \"c4\"\ntype = \"conv2d\"\nfilters = 32\nkernel_size = 3\n"
        "padding = 1\n"
        "[[model.layers]]\nname = \"r4\"\ntype = \"relu\"\n"
        "[[model.layers]]\nname = \"head\"\ntype = \"conv2d\"\nfilters = 2\nkernel_size = 1\n";
    char err[2048];
    jobspec *spec = jobspec_parse(job, sizeof(job) - 1, "job.toml", "/src", err, sizeof(err));
    ck_assert_msg(spec != NULL, "%s", err);
    member w1 = {.id = 1, .role = APPLIANCE__ROLE__ROLE_WSE_NODE, .addr = "127.0.0.1:1",
                 .wafer_memory = 64ull << 30, .threads = 1};
    member *r[] = {&w1};
    cluster cl;
    cluster_init(&cl, r, 1);
    planner_members pm = cl.pm;
    Appliance__Plan *p = plan_on(spec, &pm);
    ck_assert(!p->rows_as_depth);
    uint64_t image = planner_replica_bytes(spec->model, 1, 1,
                                           APPLIANCE__EXEC_MODE__MODE_WEIGHT_STREAMING, 2);
    appliance__plan__free_unpacked(p, NULL);
    model *rows = model_recompile(jobspec_model_table(spec), spec->model,
                                  &(model_options){.rows_as_depth = true}, err, sizeof(err));
    ck_assert_msg(rows != NULL, "%s", err);
    ck_assert(rows->rows_as_depth && rows->layers[0].type == LAYER_CONV3D);
    uint64_t depth = planner_replica_bytes(rows, 1, 1, APPLIANCE__EXEC_MODE__MODE_WEIGHT_STREAMING,
                                           2);
    model_free(rows);
    printf("rows as depth: %llu MiB a replica against %llu MiB as an image\n",
           (unsigned long long)(depth >> 20), (unsigned long long)(image >> 20));
    ck_assert_uint_lt(depth, image);
    w1.wafer_memory = (depth + image) / 2;
    p = plan_on(spec, &pm);
    ck_assert(p->rows_as_depth);
    ck_assert_uint_le(p->replicas[0]->memory_needed, w1.wafer_memory);
    ck_assert_uint_eq(p->spatial_partitions, 0);
    appliance__plan__free_unpacked(p, NULL);
    jobspec_free(spec);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("planner");
    TCase *t = tcase_create("inputs");
    tcase_add_test(t, inputs);
    tcase_add_test(t, memory_for_the_members_threads);
    tcase_add_test(t, one_batch_in_flight_where_two_do_not_fit);
    tcase_add_test(t, rows_as_depth_where_the_image_does_not_fit);
    tcase_add_test(t, memoryx_shards_must_hold_the_model);
    tcase_add_test(t, pipelined_memoryx_holds_no_gradients);
    tcase_add_test(t, backward_streams_what_it_reads);
    tcase_add_test(t, placement);
    tcase_add_test(t, one_replica_streams_from_memoryx);
    tcase_add_test(t, refusals_say_what_helps);
    tcase_add_test(t, hosts_declared_per_host);
    tcase_add_test(t, hosts_plan_summed_per_host);
    tcase_add_test(t, planner_counts_a_host_once);
    tcase_add_test(t, simulated_wse_nodes_held_at_what_they_hold);
    tcase_add_test(t, simulated_and_real_wse_nodes_never_mix);
    tcase_add_test(t, simulated_scale_run_fits_its_host);
    tcase_add_test(t, schedule_and_initializers_in_the_plan);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
