/* The checks of incoming messages (common/msgcheck.c), each with the case
 * that once got past a handler: a count whose byte size wraps, a plan
 * without a plan, a tree parent out of range, a plan that does not match
 * the model. */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "model_plan.h"
#include "msgcheck.h"
#include "toml.h"

static char err[256];

/* Two tensors (3x4 and 4) on one shard, a root swarmx over two replicas,
 * one worker per replica; chunks of 5 elements. */
typedef struct fixture {
    Appliance__Plan p;
    Appliance__PlanTensor t[2], *tp[2];
    uint64_t dims[2][2];
    Appliance__PlanShard sh, *shp[1];
    Appliance__PlanSwarmNode sw, *swp[1];
    uint32_t kids[2];
    Appliance__PlanReplica r[2], *rp[2];
    Appliance__PlanWorker w[2], *wp[2];
    uint32_t stream[2];
    Appliance__PlanInput in;
} fixture;

static fixture fx;

static void setup(void)
{
    memset(&fx, 0, sizeof(fx));
    Appliance__Plan *p = &fx.p;
    appliance__plan__init(p);
    p->job_id = "job-1";
    p->chunk_elems = 5;
    fx.dims[0][0] = 3;
    fx.dims[0][1] = 4;
    fx.dims[1][0] = 4;
    for (int i = 0; i < 2; i++) {
        appliance__plan_tensor__init(&fx.t[i]);
        fx.t[i].id = (uint32_t)i;
        fx.t[i].name = i ? "fc.bias" : "fc.weight";
        fx.t[i].dims = fx.dims[i];
        fx.t[i].n_dims = i ? 1 : 2;
        fx.tp[i] = &fx.t[i];
        fx.stream[i] = (uint32_t)i;
        appliance__plan_replica__init(&fx.r[i]);
        fx.r[i].index = (uint32_t)i;
        fx.r[i].batch = 4;
        fx.rp[i] = &fx.r[i];
        appliance__plan_worker__init(&fx.w[i]);
        fx.w[i].replica = (uint32_t)i;
        fx.wp[i] = &fx.w[i];
        fx.kids[i] = (uint32_t)i;
    }
    p->tensors = fx.tp;
    p->n_tensors = 2;
    appliance__plan_shard__init(&fx.sh);
    fx.shp[0] = &fx.sh;
    p->shards = fx.shp;
    p->n_shards = 1;
    appliance__plan_swarm_node__init(&fx.sw);
    fx.sw.parent = -1;
    fx.sw.children_replicas = fx.kids;
    fx.sw.n_children_replicas = 2;
    fx.swp[0] = &fx.sw;
    p->swarm = fx.swp;
    p->n_swarm = 1;
    p->replicas = fx.rp;
    p->n_replicas = 2;
    p->workers = fx.wp;
    p->n_workers = 2;
    p->fwd_stream = p->grad_order = fx.stream;
    p->n_fwd_stream = p->n_grad_order = 2;
}

START_TEST(plan_valid)
{
    ck_assert_int_eq(msgcheck_plan(&fx.p, err, sizeof(err)), 0);
    ck_assert_uint_eq(msgcheck_tensor_elems(&fx.t[0]), 12);
}
END_TEST

START_TEST(plan_missing)
{
    ck_assert_int_eq(msgcheck_plan(NULL, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "job start without a plan");
}
END_TEST

START_TEST(plan_parent_out_of_range)
{
    fx.sw.parent = 1; /* swarmx followed it into swarm[1] */
    ck_assert_int_eq(msgcheck_plan(&fx.p, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "plan: swarmx node 0 has index 0 and parent 1 of 1");
    fx.sw.parent = -2;
    ck_assert_int_eq(msgcheck_plan(&fx.p, err, sizeof(err)), -EINVAL);
}
END_TEST

/* Batches in flight to a wse-node: the default (0), 1 or 2. */
START_TEST(plan_feed_credits)
{
    for (uint32_t c = 0; c <= 2; c++) {
        fx.p.feed_credits = c;
        ck_assert_int_eq(msgcheck_plan(&fx.p, err, sizeof(err)), 0);
    }
    fx.p.feed_credits = 3;
    ck_assert_int_eq(msgcheck_plan(&fx.p, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "plan: 3 batches in flight to a wse-node (0 for 2, or 1 to 2)");
}
END_TEST

/* Rows as depth only with whole samples. */
START_TEST(plan_rows_as_depth)
{
    fx.p.rows_as_depth = true;
    ck_assert_int_eq(msgcheck_plan(&fx.p, err, sizeof(err)), 0);
    fx.p.spatial_partitions = 2;
    ck_assert_int_eq(msgcheck_plan(&fx.p, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "plan: rows as depth with 2 stripes a sample (only with whole samples)");
}
END_TEST

/* Without a tree only one replica streams, from one shard, with parent -1. */
START_TEST(plan_without_tree)
{
    fx.p.n_swarm = 0;
    ck_assert_int_eq(msgcheck_plan(&fx.p, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "plan: no swarmx node between 2 replicas and 1 shards (only one replica "
                          "streams from one shard directly)");
    fx.p.n_replicas = 1;
    ck_assert_int_eq(msgcheck_plan(&fx.p, err, sizeof(err)), -EINVAL); /* its parent is node 0 */
    ck_assert_str_eq(err, "plan: replica 0 has index 0 and swarmx parent 0 of 0");
    fx.r[0].swarm_parent = -1;
    fx.w[1].replica = 0;
    ck_assert_int_eq(msgcheck_plan(&fx.p, err, sizeof(err)), 0);
    fx.p.n_swarm = 1; /* with a tree, -1 is no parent */
    ck_assert_int_eq(msgcheck_plan(&fx.p, err, sizeof(err)), -EINVAL);
}
END_TEST

START_TEST(plan_indices)
{
    fx.stream[1] = 2;
    ck_assert_int_eq(msgcheck_plan(&fx.p, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "plan: fwd_stream[1] names tensor 2 of 2");
    fx.stream[1] = 1;
    fx.r[1].swarm_parent = 1;
    ck_assert_int_eq(msgcheck_plan(&fx.p, err, sizeof(err)), -EINVAL);
    fx.r[1].swarm_parent = 0;
    fx.w[1].replica = 2;
    ck_assert_int_eq(msgcheck_plan(&fx.p, err, sizeof(err)), -EINVAL);
    fx.w[1].replica = 1;
    fx.t[1].id = 0;
    ck_assert_int_eq(msgcheck_plan(&fx.p, err, sizeof(err)), -EINVAL);
    fx.t[1].id = 1;
    fx.p.chunk_elems = 0;
    ck_assert_int_eq(msgcheck_plan(&fx.p, err, sizeof(err)), -EINVAL);
    fx.p.chunk_elems = 5;
    ck_assert_int_eq(msgcheck_plan(&fx.p, err, sizeof(err)), 0);
}
END_TEST

START_TEST(plan_tensor_too_large)
{
    fx.dims[0][0] = 1ull << 32;
    fx.dims[0][1] = 1ull << 32; /* 2^64 elements: the product wraps to 0 */
    ck_assert_uint_eq(msgcheck_tensor_elems(&fx.t[0]), UINT64_MAX);
    ck_assert_int_eq(msgcheck_plan(&fx.p, err, sizeof(err)), -EINVAL);
}
END_TEST

START_TEST(plan_model_mismatch)
{
    static const char doc[] = "[model]\ninput_shape = [4]\nloss = \"softmax_cross_entropy\"\n"
                              "[[model.layers]]\nname = \"fc\"\ntype = \"dense\"\nunits = 3\n";
    toml_value *root = toml_parse(doc, strlen(doc), "job.toml", err, sizeof(err));
    ck_assert_ptr_nonnull(root);
    model *m = model_compile_document(root, err, sizeof(err));
    toml_free(root);
    ck_assert_ptr_nonnull(m);
    fx.dims[1][0] = 3;
    ck_assert_int_eq(model_plan_check(&fx.p, m, err, sizeof(err)), 0);
    fx.dims[1][0] = 4;
    ck_assert_int_eq(model_plan_check(&fx.p, m, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "plan: tensor 1 (fc.bias) has 4 elements, the model's fc.bias has 3");
    fx.p.n_tensors = 1;
    ck_assert_int_eq(model_plan_check(&fx.p, m, err, sizeof(err)), -EINVAL);
    model_free(m);
}
END_TEST

START_TEST(chunk_count_wraps)
{
    Appliance__GradChunk g = APPLIANCE__GRAD_CHUNK__INIT;
    g.tensor_id = 0;
    g.total = 12;
    g.count = (1ull << 62) + 1; /* count * 4 == 4 in 64 bits */
    ck_assert_int_eq(msgcheck_grad_chunk(&g, &fx.p, 4, err, sizeof(err)), -EINVAL);
    g.count = 3;
    g.offset = 9;
    ck_assert_int_eq(msgcheck_grad_chunk(&g, &fx.p, 12, err, sizeof(err)), 0);
    g.offset = 10;
    ck_assert_int_eq(msgcheck_grad_chunk(&g, &fx.p, 12, err, sizeof(err)), -EINVAL);
}
END_TEST

START_TEST(weight_chunk_length)
{
    Appliance__WeightChunk w = APPLIANCE__WEIGHT_CHUNK__INIT;
    w.tensor_id = 1;
    w.total = 4;
    w.count = 4;
    ck_assert_int_eq(msgcheck_weight_chunk(&w, &fx.p, 16, err, sizeof(err)), 0);
    /* a shorter payload than count says: the wse-node once held it and
     * copied count * 4 bytes out of it */
    ck_assert_int_eq(msgcheck_weight_chunk(&w, &fx.p, 12, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "weight chunk of tensor 1: 4 float32 elements in 12 bytes");
    /* mixed precision: two bytes an element */
    fx.p.wire_bf16 = true;
    ck_assert_int_eq(msgcheck_weight_chunk(&w, &fx.p, 8, err, sizeof(err)), 0);
    ck_assert_int_eq(msgcheck_weight_chunk(&w, &fx.p, 16, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "weight chunk of tensor 1: 4 bfloat16 elements in 16 bytes");
    fx.p.wire_bf16 = false;
    w.total = 5;
    ck_assert_int_eq(msgcheck_weight_chunk(&w, &fx.p, 16, err, sizeof(err)), -EINVAL);
    w.total = 4;
    w.tensor_id = 2;
    ck_assert_int_eq(msgcheck_weight_chunk(&w, &fx.p, 16, err, sizeof(err)), -EINVAL);
}
END_TEST

/* Packed chunks of a sparse tensor (sstream.h): the header against the
 * plan, then the index in the payload. */
START_TEST(weight_chunk_packed)
{
    Appliance__WeightChunk w = APPLIANCE__WEIGHT_CHUNK__INIT;
    w.tensor_id = 0;
    w.total = 12;
    w.count = 12;
    w.packing = APPLIANCE__PACKING__PACK_BITMASK;
    w.kept = 2;
    uint8_t pl[64] = {0x05, 0x00}; /* elements 0 and 2 (4 bytes), then their two floats */
    /* a dense tensor of the plan is never packed */
    ck_assert_int_eq(msgcheck_weight_chunk(&w, &fx.p, 12, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "weight chunk of tensor 0 packed (bitmask), but the plan streams it "
                     "dense (sparse tensors' weights and gradients alone travel packed)");
    fx.t[0].sparsity = 0.9f;
    Appliance__PlanSparsity sp = APPLIANCE__PLAN_SPARSITY__INIT;
    sp.type = "static";
    fx.p.sparsity = &sp;
    /* sparsity.compressed_streams = false: dense */
    sp.dense_streams = true;
    ck_assert_int_eq(msgcheck_weight_chunk(&w, &fx.p, 12, err, sizeof(err)), -EINVAL);
    sp.dense_streams = false;
    ck_assert_int_eq(msgcheck_weight_chunk(&w, &fx.p, 12, err, sizeof(err)), 0);
    ck_assert_int_eq(msgcheck_weight_payload(&w, &fx.p, pl, 12, err, sizeof(err)), 0);
    /* a truncated index: one byte short */
    ck_assert_int_eq(msgcheck_weight_chunk(&w, &fx.p, 11, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "weight chunk of tensor 0: bitmask packing of 2 kept of 12 elements "
                     "in 11 bytes (12 expected, under the 48 of dense)");
    /* the bitmask sets 3 bits where the chunk says 2 */
    pl[1] = 0x08;
    ck_assert_int_eq(msgcheck_weight_payload(&w, &fx.p, pl, 12, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "weight chunk of tensor 0 [0, +12): bitmask of 12 elements sets 3 "
                     "bits, the chunk says 2 kept");
    /* a bit past the chunk's end */
    pl[0] = 0x01;
    pl[1] = 0x10;
    ck_assert_int_eq(msgcheck_weight_payload(&w, &fx.p, pl, 12, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "weight chunk of tensor 0 [0, +12): bitmask of 12 elements sets bits "
                     "past its end");
    /* positions: one past the end, then not rising */
    w.packing = APPLIANCE__PACKING__PACK_POS16;
    uint16_t pos[2] = {3, 12};
    memset(pl, 0, sizeof(pl));
    memcpy(pl, pos, sizeof(pos));
    ck_assert_int_eq(msgcheck_weight_chunk(&w, &fx.p, 12, err, sizeof(err)), 0);
    ck_assert_int_eq(msgcheck_weight_payload(&w, &fx.p, pl, 12, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "weight chunk of tensor 0 [0, +12): position 12 (kept element 1) past "
                     "the chunk's 12 elements");
    pos[1] = 3;
    memcpy(pl, pos, sizeof(pos));
    ck_assert_int_eq(msgcheck_weight_payload(&w, &fx.p, pl, 12, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "weight chunk of tensor 0 [0, +12): position 3 (kept element 1) after "
                     "3: positions must rise");
    /* more kept than the chunk has, and a packing no smaller than dense */
    w.kept = 13;
    ck_assert_int_eq(msgcheck_weight_chunk(&w, &fx.p, 78, err, sizeof(err)), -EINVAL);
    w.packing = APPLIANCE__PACKING__PACK_POS32;
    w.kept = 6;
    ck_assert_int_eq(msgcheck_weight_chunk(&w, &fx.p, 48, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "weight chunk of tensor 0: 32-bit positions packing of 6 kept of 12 "
                     "elements in 48 bytes (48 expected, under the 48 of dense)");
    /* an unknown packing; a dense chunk that says some are kept */
    w.packing = (Appliance__Packing)7;
    w.kept = 1;
    ck_assert_int_eq(msgcheck_weight_chunk(&w, &fx.p, 8, err, sizeof(err)), -EINVAL);
    w.packing = APPLIANCE__PACKING__PACK_DENSE;
    ck_assert_int_eq(msgcheck_weight_chunk(&w, &fx.p, 48, err, sizeof(err)), -EINVAL);
    /* packed optimizer state (a Pipelined checkpoint's) is refused */
    w.packing = APPLIANCE__PACKING__PACK_BITMASK;
    w.kept = 2;
    w.pass = APPLIANCE__PASS__PASS_CHECKPOINT;
    ck_assert_int_eq(msgcheck_weight_chunk(&w, &fx.p, 12, err, sizeof(err)), -EINVAL);

    /* gradients: packed for static masks, never for rigl's */
    Appliance__GradChunk g = APPLIANCE__GRAD_CHUNK__INIT;
    g.tensor_id = 0;
    g.total = 12;
    g.count = 12;
    g.packing = APPLIANCE__PACKING__PACK_BITMASK;
    g.kept = 2;
    memset(pl, 0, sizeof(pl));
    pl[0] = 0x05;
    ck_assert_int_eq(msgcheck_grad_chunk(&g, &fx.p, 12, err, sizeof(err)), 0);
    ck_assert_int_eq(msgcheck_grad_payload(&g, &fx.p, pl, 12, err, sizeof(err)), 0);
    ck_assert_int_eq(msgcheck_grad_chunk(&g, &fx.p, 16, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "gradient chunk of tensor 0: bitmask packing of 2 kept of 12 elements "
                     "in 16 bytes (12 expected, under the 48 of dense)");
    pl[0] = 0x07;
    ck_assert_int_eq(msgcheck_grad_payload(&g, &fx.p, pl, 12, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "gradient chunk of tensor 0 [0, +12): bitmask of 12 elements sets 3 "
                     "bits, the chunk says 2 kept");
    ck_assert(msgcheck_grads_pack(&fx.p, 0));
    ck_assert(!msgcheck_grads_pack(&fx.p, 1));
    sp.type = "rigl";
    ck_assert(!msgcheck_grads_pack(&fx.p, 0));
    ck_assert_int_eq(msgcheck_grad_chunk(&g, &fx.p, 12, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "gradient chunk of tensor 0 packed (bitmask), but the plan streams it "
                     "dense (sparse tensors' weights and gradients alone travel packed)");
    fx.p.sparsity = NULL;
}
END_TEST

START_TEST(batch_sizes)
{
    Appliance__Batch b = APPLIANCE__BATCH__INIT;
    b.replica = 1;
    b.n = 4;
    b.sample_elems = 3;
    b.label_elems = 1;
    b.total = 64;
    ck_assert_int_eq(msgcheck_batch(&b, &fx.p, 64, err, sizeof(err)), -EINVAL); /* > a chunk */
    ck_assert_str_eq(err, "batch frame of 64 bytes at 0 of 64 (chunks of 20 bytes)");
    fx.p.chunk_elems = 1024;
    ck_assert_int_eq(msgcheck_batch(&b, &fx.p, 64, err, sizeof(err)), 0);
    /* In frames: any range of the batch's bytes, not empty, within it. */
    ck_assert_int_eq(msgcheck_batch(&b, &fx.p, 60, err, sizeof(err)), 0);
    b.offset = 60;
    ck_assert_int_eq(msgcheck_batch(&b, &fx.p, 4, err, sizeof(err)), 0);
    ck_assert_int_eq(msgcheck_batch(&b, &fx.p, 5, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "batch frame of 5 bytes at 60 of 64 (chunks of 4096 bytes)");
    ck_assert_int_eq(msgcheck_batch(&b, &fx.p, 0, err, sizeof(err)), -EINVAL);
    b.offset = UINT64_MAX;
    ck_assert_int_eq(msgcheck_batch(&b, &fx.p, 4, err, sizeof(err)), -EINVAL);
    b.offset = 0;
    b.total = 63; /* not what 4 samples take */
    ck_assert_int_eq(msgcheck_batch(&b, &fx.p, 63, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "batch of 4 samples of 3 float32 inputs and 1 int32 labels in 63 bytes");
    /* With 8-bit inputs and labels as the plan's input says: 4 * (3 + 1). */
    appliance__plan_input__init(&fx.in);
    fx.p.train_input = &fx.in;
    fx.in.input_unorm8 = fx.in.labels_uint8 = true;
    b.total = 16;
    ck_assert_int_eq(msgcheck_batch(&b, &fx.p, 16, err, sizeof(err)), 0);
    fx.p.train_input = NULL;
    b.total = 64;
    b.sample_elems = 1ull << 62; /* n * (sample + label) * 4 wraps */
    ck_assert_int_eq(msgcheck_batch(&b, &fx.p, 16, err, sizeof(err)), -EINVAL);
    b.sample_elems = 3;
    b.replica = 2;
    ck_assert_int_eq(msgcheck_batch(&b, &fx.p, 64, err, sizeof(err)), -EINVAL);
    b.replica = 0;
    b.eval_batch = 1; /* the plan has no evaluation */
    ck_assert_int_eq(msgcheck_batch(&b, &fx.p, 64, err, sizeof(err)), -EINVAL);
}
END_TEST

START_TEST(small_messages)
{
    Appliance__Hello h = APPLIANCE__HELLO__INIT;
    uint8_t nonce[32] = {0};
    h.version = 1;
    h.nonce.data = nonce;
    h.nonce.len = 31;
    ck_assert_int_eq(msgcheck_hello(&h, err, sizeof(err)), -EPROTO);
    h.nonce.len = 32;
    ck_assert_int_eq(msgcheck_hello(&h, err, sizeof(err)), 0);
    h.version = 2;
    ck_assert_int_eq(msgcheck_hello(&h, err, sizeof(err)), -EPROTONOSUPPORT);

    Appliance__Register r = APPLIANCE__REGISTER__INIT;
    r.role = APPLIANCE__ROLE__ROLE_MEMORYX;
    r.name = "memoryx-1";
    r.advertised_addr = "127.0.0.1:1";
    ck_assert_int_eq(msgcheck_register(&r, APPLIANCE__ROLE__ROLE_MEMORYX, err, sizeof(err)), 0);
    ck_assert_int_eq(msgcheck_register(&r, APPLIANCE__ROLE__ROLE_WORKER, err, sizeof(err)), -EINVAL);
    r.host_id = "6456000e-4e44-4049-9243-791b4777dcb3";
    ck_assert_int_eq(msgcheck_register(&r, APPLIANCE__ROLE__ROLE_MEMORYX, err, sizeof(err)), 0);
    char longer[65];
    memset(longer, 'h', 64);
    longer[64] = 0;
    r.host_id = longer; /* the coordinator keeps 63 bytes of a host id */
    ck_assert_int_eq(msgcheck_register(&r, APPLIANCE__ROLE__ROLE_MEMORYX, err, sizeof(err)), -EINVAL);
    r.host_id = "";
    r.host_name = longer;
    ck_assert_int_eq(msgcheck_register(&r, APPLIANCE__ROLE__ROLE_MEMORYX, err, sizeof(err)), -EINVAL);
    r.host_name = "";
    /* a wse-node's instruction set: a name of oneDNN's, a block of channels */
    r.isa = "avx512_core_bf16";
    r.conv_block = 16;
    ck_assert_int_eq(msgcheck_register(&r, APPLIANCE__ROLE__ROLE_MEMORYX, err, sizeof(err)), 0);
    r.isa = longer;
    ck_assert_int_eq(msgcheck_register(&r, APPLIANCE__ROLE__ROLE_MEMORYX, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "instruction set"), "%s", err);
    r.isa = "avx2";
    r.conv_block = 65;
    ck_assert_int_eq(msgcheck_register(&r, APPLIANCE__ROLE__ROLE_MEMORYX, err, sizeof(err)), -EINVAL);
    r.isa = "";
    r.conv_block = 0;
    r.name = "";
    ck_assert_int_eq(msgcheck_register(&r, APPLIANCE__ROLE__ROLE_MEMORYX, err, sizeof(err)), -EINVAL);

    Appliance__Credit c = APPLIANCE__CREDIT__INIT;
    c.n = MSGCHECK_MAX_CREDITS;
    ck_assert_int_eq(msgcheck_credit(&c, &fx.p, err, sizeof(err)), 0);
    c.n++;
    ck_assert_int_eq(msgcheck_credit(&c, &fx.p, err, sizeof(err)), -EINVAL);

    Appliance__StreamHello s = APPLIANCE__STREAM_HELLO__INIT;
    s.job_id = "job-1";
    s.role = APPLIANCE__ROLE__ROLE_WSE_NODE;
    s.index = 1;
    ck_assert_int_eq(msgcheck_stream_hello(&s, APPLIANCE__ROLE__ROLE_UNKNOWN, &fx.p, err, sizeof(err)), 0);
    ck_assert_int_eq(msgcheck_stream_hello(&s, APPLIANCE__ROLE__ROLE_SWARMX, NULL, err, sizeof(err)), -EPROTO);
    s.index = 2;
    ck_assert_int_eq(msgcheck_stream_hello(&s, APPLIANCE__ROLE__ROLE_WSE_NODE, &fx.p, err, sizeof(err)), -EINVAL);

    Appliance__EvalReport e = APPLIANCE__EVAL_REPORT__INIT;
    uint64_t v[2] = {1, 2};
    e.intersection = e.union_ = v;
    e.n_intersection = 2;
    e.n_union_ = 1;
    ck_assert_int_eq(msgcheck_eval_report(&e, &fx.p, err, sizeof(err)), -EINVAL);
    e.n_union_ = 2;
    ck_assert_int_eq(msgcheck_eval_report(&e, &fx.p, err, sizeof(err)), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("msgcheck");
    TCase *t = tcase_create("checks");
    tcase_add_checked_fixture(t, setup, NULL);
    tcase_add_test(t, plan_valid);
    tcase_add_test(t, plan_missing);
    tcase_add_test(t, plan_parent_out_of_range);
    tcase_add_test(t, plan_feed_credits);
    tcase_add_test(t, plan_rows_as_depth);
    tcase_add_test(t, plan_indices);
    tcase_add_test(t, plan_without_tree);
    tcase_add_test(t, plan_tensor_too_large);
    tcase_add_test(t, plan_model_mismatch);
    tcase_add_test(t, chunk_count_wraps);
    tcase_add_test(t, weight_chunk_length);
    tcase_add_test(t, weight_chunk_packed);
    tcase_add_test(t, batch_sizes);
    tcase_add_test(t, small_messages);
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
