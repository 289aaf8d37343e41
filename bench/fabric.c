/* The weight fabric alone: memoryx -> swarmx -> wse-node broadcast of one
 * tensor and the reduce of as many bytes back, with the project's frames and
 * authenticated connections over libuv TCP, one process per host.
 *
 *   fabric root  --listen H:P --leaves N ...   (the memoryx: sends, times)
 *   fabric relay --listen H:P --up H:P --leaves N ...   (the swarmx)
 *   fabric leaf  --up H:P --index I ...        (a wse-node)
 *   common: --secret-file F --bytes B --chunk C --iters K
 *
 * One iteration: the root streams B bytes as WeightChunk frames; the relay
 * forwards each chunk to every leaf as soon as it is in (cut-through at chunk
 * granularity, reading from the root paused while a leaf's queue is full);
 * every leaf acknowledges the whole tensor with a Credit, the relay passes
 * one Credit up when all have: that ends the broadcast. The root then sends a
 * Credit down to start the reduce; each leaf streams B bytes of GradChunk
 * (leaf i sends the value i + 1), the relay sums each chunk once every leaf's
 * copy is in and sends the sum up; the reduce ends when the root has all B
 * bytes, which it checks against the expected sum. The root prints
 * "iter K broadcast_s T reduce_s T" per iteration. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "conn.h"
#include "conn_link.h"
#include "msg.h"

enum fab_role { FAB_ROOT, FAB_RELAY, FAB_LEAF };

typedef struct fabric {
    enum fab_role role;
    uv_loop_t *loop;
    uv_tcp_t server;            /* root and relay: where the level below dials */
    conn_link link;             /* relay and leaf: the dial to the level above */
    auth_secret secret;
    conn_config cfg;
    conn_ops ops;
    conn *up;                   /* relay and leaf: the level above, once ready */
    conn *kids[64];             /* root: the relay; relay: the leaves, by arrival */
    size_t nkids;               /* connected and authenticated */
    size_t want_kids;           /* root: 1; relay: --leaves */
    size_t leaves;              /* --leaves: fixes the expected sum at the root */
    uint64_t bytes;             /* tensor size, a multiple of chunk */
    uint32_t chunk;             /* bytes per frame */
    size_t nchunks;
    float *buf;                 /* the weights: sent, forwarded or received */
    float *gbuf;                /* the gradient: received, summed or sent */
    float *stage;               /* relay: one chunk per leaf */
    uint32_t *arrived;          /* relay: per chunk, leaves whose copy is summed */
    int iters;                  /* root: iterations to run */
    int iter;                   /* root: the current iteration, from 1 */
    bool started;               /* root: the relay reported every leaf connected */
    size_t sent;                /* chunks sent in the current phase */
    uint64_t got;               /* bytes received in the current phase */
    size_t acks;                /* relay: leaves that have the whole tensor */
    bool pumping;               /* a phase whose sends wait for on_drain */
    uint64_t t0;                /* root: start of the phase, ns */
    double bcast_s;             /* root: the current iteration's broadcast */
    int leaf_index;             /* leaf: --index, from 0 */
} fabric;

static fabric F;

static void fab__fail(const char *what)
{
    fprintf(stderr, "fabric: %s\n", what);
    exit(1);
}

static void fab__send_credit(conn *c)
{
    Appliance__Credit cr = APPLIANCE__CREDIT__INIT;
    cr.n = 1;
    ENVELOPE(env, credit, CREDIT, &cr);
    if (conn_send_msg(c, &env) < 0)
        fab__fail("cannot send a credit");
}

static void fab__sent(void *arg, int status)
{
    (void)arg;
    if (status < 0)
        fab__fail("a write failed");
}

/* Sends chunks [sent, limit) of src on c as weight (down) or gradient (up)
 * frames while the queue has room. Returns true when all are out. */
static bool fab__pump(conn *c, bool down, const float *src, size_t limit)
{
    uint64_t elems = F.chunk / sizeof(float);
    while (F.sent < limit) {
        if (!conn_can_send(c, F.chunk))
            return false;
        uint64_t off = F.sent * elems;
        int rc;
        if (down) {
            Appliance__WeightChunk wc = APPLIANCE__WEIGHT_CHUNK__INIT;
            wc.step = (uint64_t)F.iter;
            wc.offset = off;
            wc.count = elems;
            wc.total = F.bytes / sizeof(float);
            wc.seq = F.sent;
            ENVELOPE(env, weight_chunk, WEIGHT_CHUNK, &wc);
            rc = conn_send(c, &env, src + off, F.chunk, fab__sent, NULL);
        } else {
            Appliance__GradChunk g = APPLIANCE__GRAD_CHUNK__INIT;
            g.offset = off;
            g.count = elems;
            g.total = F.bytes / sizeof(float);
            ENVELOPE(env, grad_chunk, GRAD_CHUNK, &g);
            rc = conn_send(c, &env, src + off, F.chunk, fab__sent, NULL);
        }
        if (rc < 0)
            fab__fail("cannot queue a chunk");
        F.sent++;
    }
    return true;
}

/* ---- root: the memoryx ---- */

static void fab__root_start(void)
{
    F.iter++;
    F.sent = 0;
    F.got = 0;
    F.t0 = uv_hrtime();
    F.pumping = !fab__pump(F.kids[0], true, F.buf, F.nchunks);
}

static void fab__root_frame(conn *c, Appliance__Envelope *env, uint32_t len)
{
    if (env->msg_case == APPLIANCE__ENVELOPE__MSG_CREDIT) {
        if (!F.started) { /* every leaf is connected */
            F.started = true;
            fab__root_start();
            return;
        }
        F.bcast_s = (double)(uv_hrtime() - F.t0) / 1e9; /* every leaf has it */
        F.got = 0;
        F.t0 = uv_hrtime();
        fab__send_credit(c);
        return;
    }
    if (env->msg_case != APPLIANCE__ENVELOPE__MSG_GRAD_CHUNK)
        return;
    F.got += len;
    if (F.got < F.bytes)
        return;
    double reduce_s = (double)(uv_hrtime() - F.t0) / 1e9;
    float want = (float)(F.leaves * (F.leaves + 1) / 2);
    for (uint64_t i = 0; i < F.bytes / sizeof(float); i += 4093)
        if (F.gbuf[i] != want)
            fab__fail("the reduced tensor holds a wrong sum");
    printf("iter %d broadcast_s %.6f reduce_s %.6f\n", F.iter, F.bcast_s, reduce_s);
    fflush(stdout);
    if (F.iter >= F.iters) {
        uv_stop(F.loop);
        return;
    }
    memset(F.gbuf, 0, F.bytes);
    fab__root_start();
}

/* ---- relay: the swarmx ---- */

static bool fab__kids_have_room(void)
{
    bool room = true;
    for (size_t k = 0; k < F.nkids; k++)
        if (!conn_can_send(F.kids[k], F.chunk))
            room = false; /* each full one owes an on_drain */
    return room;
}

/* Sends the summed chunks that are complete, in order. */
static void fab__relay_up(void)
{
    size_t ready = F.sent;
    while (ready < F.nchunks && F.arrived[ready] == F.nkids)
        ready++;
    fab__pump(F.up, false, F.gbuf, ready);
}

static void fab__relay_frame(conn *c, Appliance__Envelope *env, uint32_t len)
{
    if (c == F.up && env->msg_case == APPLIANCE__ENVELOPE__MSG_WEIGHT_CHUNK) {
        uint64_t off = env->weight_chunk->offset;
        for (size_t k = 0; k < F.nkids; k++) {
            ENVELOPE(fwd, weight_chunk, WEIGHT_CHUNK, env->weight_chunk);
            if (conn_send(F.kids[k], &fwd, F.buf + off, len, fab__sent, NULL) < 0)
                fab__fail("cannot forward a chunk");
        }
        if (!fab__kids_have_room())
            conn_pause(F.up);
        return;
    }
    if (c == F.up && env->msg_case == APPLIANCE__ENVELOPE__MSG_CREDIT) { /* reduce */
        memset(F.arrived, 0, F.nchunks * sizeof(*F.arrived));
        F.sent = 0;
        for (size_t k = 0; k < F.nkids; k++)
            fab__send_credit(F.kids[k]);
        return;
    }
    if (c != F.up && env->msg_case == APPLIANCE__ENVELOPE__MSG_CREDIT) {
        if (++F.acks == F.nkids) {
            F.acks = 0;
            fab__send_credit(F.up);
        }
        return;
    }
    if (c != F.up && env->msg_case == APPLIANCE__ENVELOPE__MSG_GRAD_CHUNK) {
        /* Summed in arrival order: the cost on the wire is that of the
         * daemon's fixed child order. */
        size_t k = (size_t)(uintptr_t)c->user - 1;
        uint64_t off = env->grad_chunk->offset, n = len / sizeof(float);
        size_t ci = off / (F.chunk / sizeof(float));
        float *dst = F.gbuf + off, *src = F.stage + k * (F.chunk / sizeof(float));
        if (F.arrived[ci] == 0)
            memcpy(dst, src, len);
        else
            for (uint64_t i = 0; i < n; i++)
                dst[i] += src[i];
        if (++F.arrived[ci] == F.nkids)
            fab__relay_up();
    }
}

/* ---- leaf: a wse-node ---- */

static void fab__leaf_frame(conn *c, Appliance__Envelope *env, uint32_t len)
{
    if (env->msg_case == APPLIANCE__ENVELOPE__MSG_WEIGHT_CHUNK) {
        F.got += len;
        if (F.got == F.bytes) {
            F.got = 0;
            fab__send_credit(c);
        }
    } else if (env->msg_case == APPLIANCE__ENVELOPE__MSG_CREDIT) {
        F.sent = 0;
        F.pumping = !fab__pump(c, false, F.gbuf, F.nchunks);
    }
}

/* ---- connections ---- */

static void *fab__payload_dest(conn *c, const Appliance__Envelope *env, uint32_t len, int *err)
{
    uint64_t off, count;
    if (env->msg_case == APPLIANCE__ENVELOPE__MSG_WEIGHT_CHUNK) {
        off = env->weight_chunk->offset;
        count = env->weight_chunk->count;
    } else if (env->msg_case == APPLIANCE__ENVELOPE__MSG_GRAD_CHUNK) {
        off = env->grad_chunk->offset;
        count = env->grad_chunk->count;
    } else {
        *err = -EPROTO;
        return NULL;
    }
    uint64_t total = F.bytes / sizeof(float);
    if (len != F.chunk || count * sizeof(float) != len || off > total - count ||
        off % (F.chunk / sizeof(float))) {
        *err = -EINVAL;
        return NULL;
    }
    if (env->msg_case == APPLIANCE__ENVELOPE__MSG_WEIGHT_CHUNK)
        return F.buf + off;
    if (F.role == FAB_RELAY)
        return F.stage + ((size_t)(uintptr_t)c->user - 1) * (F.chunk / sizeof(float));
    return F.gbuf + off;
}

static void fab__on_ready(conn *c)
{
    if (c->link == &F.link) {
        F.up = c;
        if (F.role == FAB_LEAF || F.nkids < F.want_kids)
            return;
    } else {
        if (F.nkids == F.want_kids)
            fab__fail("one connection too many");
        F.kids[F.nkids++] = c;
        c->user = (void *)(uintptr_t)F.nkids;
        if (F.nkids < F.want_kids)
            return;
    }
    /* Every leaf and the link up are there: tell the root. */
    if (F.role == FAB_RELAY && F.up)
        fab__send_credit(F.up);
}

static void fab__on_frame(conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len)
{
    (void)payload;
    if (F.role == FAB_ROOT)
        fab__root_frame(c, env, len);
    else if (F.role == FAB_RELAY)
        fab__relay_frame(c, env, len);
    else
        fab__leaf_frame(c, env, len);
}

static void fab__on_drain(conn *c)
{
    if (F.role == FAB_ROOT && F.pumping)
        F.pumping = !fab__pump(c, true, F.buf, F.nchunks);
    else if (F.role == FAB_LEAF && F.pumping)
        F.pumping = !fab__pump(c, false, F.gbuf, F.nchunks);
    else if (F.role == FAB_RELAY && c == F.up)
        fab__relay_up();
    else if (F.role == FAB_RELAY && fab__kids_have_room())
        conn_resume(F.up);
}

static void fab__on_close(conn *c, int err, const char *reason)
{
    (void)err;
    if (F.role == FAB_ROOT && F.iter < F.iters)
        fprintf(stderr, "fabric: %s closed: %s\n", c->peer_name, reason), exit(1);
    if (c->link == &F.link && F.up) /* the run is over */
        exit(0);
}

static void fab__on_connection(uv_stream_t *server, int status)
{
    if (status < 0 || !conn_accept(server, &F.cfg, &F.ops, NULL))
        fab__fail("cannot accept a connection");
}

static void fab__usage(void)
{
    fprintf(stderr, "Usage: fabric root|relay|leaf --secret-file F [--listen H:P] [--up H:P] [--leaves N]\n"
                    "       [--index I] [--bytes B] [--chunk C] [--iters K]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'}, {"up", required_argument, NULL, 'u'},
        {"leaves", required_argument, NULL, 'n'}, {"index", required_argument, NULL, 'i'},
        {"bytes", required_argument, NULL, 'b'},  {"chunk", required_argument, NULL, 'c'},
        {"iters", required_argument, NULL, 'k'},  {"secret-file", required_argument, NULL, 's'},
        {NULL, 0, NULL, 0},
    };
    if (argc < 2)
        fab__usage();
    if (strcmp(argv[1], "root") == 0)
        F.role = FAB_ROOT;
    else if (strcmp(argv[1], "relay") == 0)
        F.role = FAB_RELAY;
    else if (strcmp(argv[1], "leaf") == 0)
        F.role = FAB_LEAF;
    else
        fab__usage();
    const char *listen = NULL, *up = NULL, *secret = NULL;
    F.bytes = 64ull << 20;
    F.chunk = 1u << 20;
    F.iters = 5;
    F.leaves = 1;
    int c;
    optind = 2;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'l': listen = optarg; break;
        case 'u': up = optarg; break;
        case 'n': F.leaves = strtoul(optarg, NULL, 10); break;
        case 'i': F.leaf_index = atoi(optarg); break;
        case 'b': F.bytes = strtoull(optarg, NULL, 10); break;
        case 'c': F.chunk = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'k': F.iters = atoi(optarg); break;
        case 's': secret = optarg; break;
        default: fab__usage();
        }
    }
    if (!secret || F.leaves < 1 || F.leaves > 64 || F.chunk < 4096 || F.chunk > (16u << 20) ||
        F.chunk % sizeof(float) || F.bytes == 0 || F.bytes % F.chunk || F.iters < 1 ||
        (F.role != FAB_LEAF && !listen) || (F.role != FAB_ROOT && !up))
        fab__usage();
    char err[256];
    if (auth_secret_load(&F.secret, secret, err, sizeof(err)) < 0)
        fab__fail(err);
    F.nchunks = F.bytes / F.chunk;
    F.want_kids = F.role == FAB_ROOT ? 1 : F.leaves;
    F.buf = calloc(1, F.bytes);
    F.gbuf = calloc(1, F.bytes);
    F.stage = F.role == FAB_RELAY ? malloc(F.leaves * F.chunk) : NULL;
    F.arrived = calloc(F.nchunks, sizeof(*F.arrived));
    if (!F.buf || !F.gbuf || !F.arrived || (F.role == FAB_RELAY && !F.stage))
        fab__fail("out of memory");
    for (uint64_t i = 0; i < F.bytes / sizeof(float); i++) {
        F.buf[i] = 0.5f;
        if (F.role == FAB_LEAF)
            F.gbuf[i] = (float)(F.leaf_index + 1);
    }
    static const Appliance__Role roles[] = {APPLIANCE__ROLE__ROLE_MEMORYX, APPLIANCE__ROLE__ROLE_SWARMX,
                                            APPLIANCE__ROLE__ROLE_WSE_NODE};
    conn_config_default(&F.cfg, &F.secret, roles[F.role], argv[1]);
    F.cfg.limits.max_payload = 16u << 20;
    F.ops = (conn_ops){.on_ready = fab__on_ready, .on_frame = fab__on_frame,
                       .payload_dest = fab__payload_dest, .on_drain = fab__on_drain,
                       .on_close = fab__on_close};
    F.loop = uv_default_loop();
    if (listen && conn_listen(F.loop, &F.server, listen, fab__on_connection, err, sizeof(err)) < 0)
        fab__fail(err);
    if (up && conn_link_start(&F.link, F.loop, up, &F.cfg, &F.ops, NULL) < 0)
        fab__fail("bad --up address");
    uv_run(F.loop, UV_RUN_DEFAULT);
    return 0;
}
