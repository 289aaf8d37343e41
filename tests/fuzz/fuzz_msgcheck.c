/* Fuzz target: the checks the handlers make on incoming messages
 * (common/msgcheck.c) and the job file check of a JobSubmit. The input is
 * a 4-byte little-endian payload length, one byte of variant (the peer's
 * role, the role a stream is expected from), then a protobuf Envelope. The
 * message is checked against a small fixed plan (a JobStart's plan against
 * itself); whatever passes is then used the way the daemons use it, so that
 * a check that lets too much through shows as a sanitizer report. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "envelope.pb-c.h"
#include "frame.h"
#include "fuzz.h"
#include "jobspec.h"
#include "model_plan.h"
#include "msgcheck.h"
#include "plan.h"
#include "toml.h"
#include "wslots.h"

/* The job of the fixed plan: 3 inputs, dense 4, relu, dense 2. */
static const char fuzz_job_toml[] =
    "[runconfig]\nmax_steps = 10\nnum_csx = 3\nnum_wgt_servers = 2\n"
    "[train_input]\ndata_processor = \"synthetic_classification\"\nbatch_size = 8\n"
    "num_classes = 2\n"
    "[eval_input]\ndata_processor = \"synthetic_classification\"\nbatch_size = 12\n"
    "num_classes = 2\nnum_samples = 20\n"
    "[model]\ninput_shape = [3]\nloss = \"softmax_cross_entropy\"\n"
    "[[model.layers]]\nname = \"fc1\"\ntype = \"dense\"\nunits = 4\n"
    "[[model.layers]]\nname = \"act\"\ntype = \"relu\"\n"
    "[[model.layers]]\nname = \"fc2\"\ntype = \"dense\"\nunits = 2\n";

static Appliance__Plan fuzz_plan;
static model *fuzz_model;

/* Builds the fixed plan by hand: 4 tensors over 2 shards, a root swarmx
 * over a leaf that serves 3 replicas, 4 workers, 2 eval batches of 4. */
static void fuzz_plan_init(void)
{
    static Appliance__PlanTensor t[4];
    static Appliance__PlanTensor *tp[4];
    static uint64_t dims[4][2] = {{4, 3}, {4, 0}, {2, 4}, {2, 0}};
    static const char *names[4] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
    static Appliance__PlanShard sh[2], *shp[2];
    static Appliance__PlanSwarmNode sw[2], *swp[2];
    static uint32_t sw_kids[1] = {1}, rep_kids[3] = {0, 1, 2};
    static Appliance__PlanReplica r[3], *rp[3];
    static Appliance__PlanWorker w[4], *wp[4];
    static uint32_t fwd[4] = {0, 1, 2, 3}, bwd[2] = {2, 3}, grads[4] = {2, 3, 0, 1};
    static Appliance__PlanInput eval_in;
    Appliance__Plan *p = &fuzz_plan;
    appliance__plan__init(p);
    p->job_id = "job-1";
    p->job_toml = (char *)fuzz_job_toml;
    p->file_name = "job.toml";
    p->mode = APPLIANCE__EXEC_MODE__MODE_WEIGHT_STREAMING;
    p->max_steps = 10;
    p->global_batch = 8;
    p->chunk_elems = 5;
    for (int i = 0; i < 4; i++) {
        appliance__plan_tensor__init(&t[i]);
        t[i].id = (uint32_t)i;
        t[i].name = (char *)names[i];
        t[i].dims = dims[i];
        t[i].n_dims = dims[i][1] ? 2 : 1;
        t[i].shard = (uint32_t)(i % 2);
        t[i].trainable = true;
        tp[i] = &t[i];
    }
    p->tensors = tp;
    p->n_tensors = 4;
    for (int i = 0; i < 2; i++) {
        appliance__plan_shard__init(&sh[i]);
        sh[i].index = (uint32_t)i;
        shp[i] = &sh[i];
        appliance__plan_swarm_node__init(&sw[i]);
        sw[i].index = (uint32_t)i;
        swp[i] = &sw[i];
    }
    p->shards = shp;
    p->n_shards = 2;
    sw[0].parent = -1;
    sw[0].children_swarmx = sw_kids;
    sw[0].n_children_swarmx = 1;
    sw[1].parent = 0;
    sw[1].children_replicas = rep_kids;
    sw[1].n_children_replicas = 3;
    p->swarm = swp;
    p->n_swarm = 2;
    for (int i = 0; i < 3; i++) {
        appliance__plan_replica__init(&r[i]);
        r[i].index = (uint32_t)i;
        r[i].batch = i < 2 ? 3 : 2;
        r[i].batch_offset = (uint32_t)(3 * i);
        r[i].swarm_parent = 1;
        rp[i] = &r[i];
    }
    p->replicas = rp;
    p->n_replicas = 3;
    for (int i = 0; i < 4; i++) {
        appliance__plan_worker__init(&w[i]);
        w[i].index = (uint32_t)i;
        w[i].replica = (uint32_t)(i % 3);
        w[i].slot = i == 3 ? 1 : 0;
        w[i].slots = i % 3 == 0 ? 2 : 1;
        wp[i] = &w[i];
    }
    p->workers = wp;
    p->n_workers = 4;
    p->fwd_stream = fwd;
    p->n_fwd_stream = 4;
    p->bwd_stream = bwd;
    p->n_bwd_stream = 2;
    p->grad_order = grads;
    p->n_grad_order = 4;
    appliance__plan_input__init(&eval_in);
    p->eval_input = &eval_in;
    p->eval_samples = 20;
    p->eval_shard = 7;
    p->eval_batch = 4;
    p->eval_batches = 2;

    char err[512];
    toml_value *doc = toml_parse(fuzz_job_toml, strlen(fuzz_job_toml), "job.toml", err, sizeof(err));
    FUZZ_ASSERT(doc != NULL);
    fuzz_model = model_compile_document(doc, err, sizeof(err));
    toml_free(doc);
    FUZZ_ASSERT(fuzz_model != NULL);
    FUZZ_ASSERT(msgcheck_plan(p, err, sizeof(err)) == 0);
    FUZZ_ASSERT(model_plan_check(p, fuzz_model, err, sizeof(err)) == 0);
}

/* A refusal comes with a message. */
static void fuzz_refused(int rc, const char *err, size_t errlen)
{
    if (rc == 0)
        return;
    FUZZ_ASSERT(rc < 0);
    FUZZ_ASSERT(memchr(err, '\0', errlen) != NULL);
    FUZZ_ASSERT(err[0] != '\0');
}

/* A plan that matches the model, streamed as memoryx streams it (each
 * tensor of the forward and then the backward schedule in chunks of
 * chunk_elems) into the weight slots of a Weight Streaming wse-node, which
 * computes a layer whenever its slot is blocked: every chunk must land in
 * order and inside its slot. */
static void fuzz_stream(const Appliance__Plan *p)
{
    wslots ws;
    if (wslots_init(&ws, fuzz_model, p->fwd_stream, p->n_fwd_stream, p->bwd_stream,
                    p->n_bwd_stream, p->bwd_kept, p->ws_part_elems, p->chunk_elems) < 0)
        return; /* the wse-node refuses the job */
    for (int pass = 0; pass < 2; pass++) {
        const uint32_t *list = pass ? p->bwd_stream : p->fwd_stream;
        size_t n = pass ? p->n_bwd_stream : p->n_fwd_stream;
        for (size_t i = 0; i < n; i++) {
            uint64_t elems = fuzz_model->tensors[list[i]].elems;
            for (uint64_t off = 0; off < elems; off += p->chunk_elems) {
                uint64_t count = elems - off < p->chunk_elems ? elems - off : p->chunk_elems;
                bool blocked;
                float *dst;
                while (!(dst = wslots_dest(&ws, list[i], pass == 1, off, count, &blocked)) && blocked) {
                    FUZZ_ASSERT(ws.consumed < ws.recv);
                    wslots_consume(&ws, ws.arr_layer[ws.consumed], ws.arr_part[ws.consumed],
                                   ws.consumed >= ws.nfwd);
                }
                FUZZ_ASSERT(dst != NULL);
                int k = dst >= ws.slot[1] && dst < ws.slot[1] + ws.slot_elems;
                FUZZ_ASSERT(dst >= ws.slot[k] && dst + count <= ws.slot[k] + ws.slot_elems);
                memset(dst, 0, count * sizeof(float));
                wslots_received(&ws, count);
            }
        }
    }
    FUZZ_ASSERT(ws.recv == ws.narrivals);
    wslots_deinit(&ws);
}

/* A plan that passed msgcheck_plan, used as memoryx, swarmx, the wse-nodes
 * and the workers use one: every index they follow must land inside. */
static void fuzz_use_plan(const Appliance__Plan *p)
{
    volatile uint64_t sink = 0;
    uint64_t chunks = 0;
    const uint32_t *lists[3] = {p->fwd_stream, p->bwd_stream, p->grad_order};
    size_t lens[3] = {p->n_fwd_stream, p->n_bwd_stream, p->n_grad_order};
    for (int l = 0; l < 3; l++)
        for (size_t i = 0; i < lens[l]; i++) {
            const Appliance__PlanTensor *t = p->tensors[lists[l][i]];
            uint64_t elems = msgcheck_tensor_elems(t);
            FUZZ_ASSERT(elems <= MSGCHECK_MAX_TENSOR_ELEMS);
            /* memoryx: weights, gradients and two optimizer states. */
            FUZZ_ASSERT(elems * sizeof(float) * 4 / 4 / sizeof(float) == elems);
            chunks += (elems + p->chunk_elems - 1) / p->chunk_elems;
            FUZZ_ASSERT(p->shards[t->shard]->index == t->shard);
        }
    /* A chunk's bytes fit the 32-bit length of a frame. */
    FUZZ_ASSERT(p->chunk_elems * sizeof(float) <= UINT32_MAX);
    for (size_t i = 0; i < p->n_swarm; i++) {
        const Appliance__PlanSwarmNode *s = p->swarm[i];
        if (s->parent >= 0)
            sink += p->swarm[s->parent]->index;
        for (size_t k = 0; k < s->n_children_swarmx; k++)
            sink += p->swarm[s->children_swarmx[k]]->index;
        for (size_t k = 0; k < s->n_children_replicas; k++)
            sink += p->replicas[s->children_replicas[k]]->batch;
    }
    for (size_t i = 0; i < p->n_replicas; i++)
        sink += p->swarm[p->replicas[i]->swarm_parent]->index;
    for (size_t i = 0; i < p->n_workers; i++) {
        const Appliance__PlanWorker *w = p->workers[i];
        uint32_t slots = w->slots ? w->slots : 1;
        /* worker: the first step of this slot */
        sink += p->first_step + (w->slot + slots - p->first_step % slots) % slots;
        sink += p->replicas[w->replica]->batch;
    }
    for (uint64_t s = 0; s < 4; s++)
        sink += plan_eval_at(p, s);
    sink += chunks;
    Appliance__Plan *copy = plan_copy(p);
    FUZZ_ASSERT(copy != NULL);
    char err[512];
    FUZZ_ASSERT(msgcheck_plan(copy, err, sizeof(err)) == 0);
    int rc = model_plan_check(copy, fuzz_model, err, sizeof(err));
    fuzz_refused(rc, err, sizeof(err));
    if (rc == 0) { /* the wse-node: the model's tensors by the plan's ids */
        for (size_t i = 0; i < copy->n_tensors; i++)
            FUZZ_ASSERT(fuzz_model->tensors[i].elems == msgcheck_tensor_elems(copy->tensors[i]));
        fuzz_stream(copy);
    }
    appliance__plan__free_unpacked(copy, NULL);
    (void)sink;
}

/* A chunk that passed lands in a buffer of exactly the tensor's size. */
static void fuzz_use_chunk(const Appliance__Plan *p, uint32_t tensor_id, uint64_t offset,
                           uint64_t count, uint32_t len)
{
    uint64_t n = msgcheck_tensor_elems(p->tensors[tensor_id]);
    float *t = malloc(n ? n * sizeof(float) : 1);
    FUZZ_ASSERT(t != NULL);
    FUZZ_ASSERT(len == count * sizeof(float));
    memset(t + offset, 0x3f, len);
    free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool ready;
    if (!ready) {
        fuzz_plan_init();
        ready = true;
    }
    if (size < 5)
        return 0;
    uint32_t len = (uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 |
                   (uint32_t)data[3] << 24;
    uint8_t variant = data[4];
    Appliance__Envelope *env = frame_envelope_unpack(data + 5, size - 5);
    if (!env)
        return 0;
    const Appliance__Plan *p = &fuzz_plan;
    char err[256];
    memset(err, 0x55, sizeof(err)); /* a message must be written, not left over */
    int rc = 0;
    switch (env->msg_case) {
    case APPLIANCE__ENVELOPE__MSG_HELLO:
        rc = msgcheck_hello(env->hello, err, sizeof(err));
        if (rc == 0) {
            uint8_t nonce[32];
            memcpy(nonce, env->hello->nonce.data, sizeof(nonce));
        }
        break;
    case APPLIANCE__ENVELOPE__MSG_REGISTER: {
        Appliance__Role peer = (Appliance__Role)(variant % 7);
        rc = msgcheck_register(env->register_, peer, err, sizeof(err));
        if (rc == 0) { /* the coordinator's member table */
            char name[64], addr[128];
            FUZZ_ASSERT(strlen(env->register_->name) < sizeof(name));
            FUZZ_ASSERT(strlen(env->register_->advertised_addr) < sizeof(addr));
            snprintf(name, sizeof(name), "%s", env->register_->name);
            snprintf(addr, sizeof(addr), "%s", env->register_->advertised_addr);
        }
        break;
    }
    case APPLIANCE__ENVELOPE__MSG_JOB_START:
        rc = msgcheck_plan(env->job_start->plan, err, sizeof(err));
        if (rc == 0) {
            char id[MSGCHECK_JOB_ID_MAX];
            FUZZ_ASSERT(strlen(env->job_start->plan->job_id) < sizeof(id));
            fuzz_use_plan(env->job_start->plan);
        }
        break;
    case APPLIANCE__ENVELOPE__MSG_WEIGHT_CHUNK: {
        const Appliance__WeightChunk *w = env->weight_chunk;
        rc = msgcheck_weight_chunk(w, p, len, err, sizeof(err));
        if (rc == 0)
            fuzz_use_chunk(p, w->tensor_id, w->offset, w->count, len);
        break;
    }
    case APPLIANCE__ENVELOPE__MSG_GRAD_CHUNK: {
        const Appliance__GradChunk *g = env->grad_chunk;
        rc = msgcheck_grad_chunk(g, p, len, err, sizeof(err));
        if (rc == 0)
            fuzz_use_chunk(p, g->tensor_id, g->offset, g->count, len);
        break;
    }
    case APPLIANCE__ENVELOPE__MSG_BATCH: {
        const Appliance__Batch *b = env->batch;
        rc = msgcheck_batch(b, p, len, err, sizeof(err));
        if (rc == 0 && len <= (1u << 20)) {
            /* the wse-node: inputs, then the labels behind them */
            uint8_t *buf = malloc(len ? len : 1);
            FUZZ_ASSERT(buf != NULL);
            size_t labels_at = (size_t)b->n * b->sample_elems * sizeof(float);
            FUZZ_ASSERT(labels_at <= len);
            memset(buf + labels_at, 0, (size_t)b->n * b->label_elems * sizeof(int32_t));
            free(buf);
        }
        break;
    }
    case APPLIANCE__ENVELOPE__MSG_CREDIT: {
        const Appliance__Credit *c = env->credit;
        rc = msgcheck_credit(c, p, err, sizeof(err));
        if (rc == 0 && c->eval_batch > 0) /* the worker: the samples of that eval batch */
            FUZZ_ASSERT(c->eval_batch - 1 < p->eval_batches);
        if (rc == 0 && c->eval_batch == 0)
            FUZZ_ASSERT(c->n <= MSGCHECK_MAX_CREDITS);
        break;
    }
    case APPLIANCE__ENVELOPE__MSG_STREAM_HELLO: {
        static const Appliance__Role wants[3] = {APPLIANCE__ROLE__ROLE_UNKNOWN, APPLIANCE__ROLE__ROLE_SWARMX,
                                                 APPLIANCE__ROLE__ROLE_WSE_NODE};
        const Appliance__StreamHello *h = env->stream_hello;
        rc = msgcheck_stream_hello(h, wants[variant % 3], variant & 4 ? p : NULL, err, sizeof(err));
        if (rc == 0 && (variant & 4)) {
            if (h->role == APPLIANCE__ROLE__ROLE_SWARMX)
                FUZZ_ASSERT(p->swarm[h->index]->index == h->index);
            else
                FUZZ_ASSERT(p->replicas[h->index]->index == h->index);
        }
        break;
    }
    case APPLIANCE__ENVELOPE__MSG_EVAL_REPORT: {
        const Appliance__EvalReport *r = env->eval_report;
        rc = msgcheck_eval_report(r, p, err, sizeof(err));
        if (rc == 0) { /* the coordinator's sums per class */
            uint64_t inter[256] = {0}, uni[256] = {0};
            for (size_t i = 0; i < r->n_intersection; i++) {
                inter[i] += r->intersection[i];
                uni[i] += r->union_[i];
            }
        }
        break;
    }
    case APPLIANCE__ENVELOPE__MSG_JOB_SUBMIT: {
        /* The coordinator checks a job file before anything else. */
        const Appliance__JobSubmit *s = env->job_submit;
        jobspec *spec = jobspec_parse(s->toml, strlen(s->toml), "job.toml", s->base_dir, err,
                                      sizeof(err));
        rc = spec ? 0 : -EINVAL;
        jobspec_free(spec);
        break;
    }
    default:
        break;
    }
    fuzz_refused(rc, err, sizeof(err));
    appliance__envelope__free_unpacked(env, NULL);
    return 0;
}
