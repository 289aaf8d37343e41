/* Connections over real loopback sockets: authentication (cluster secret,
 * user keys, insecure mode), payloads straight into their destination,
 * garbage and unauthenticated peers dropped while the server carries on,
 * the bounded write queue, and the shared-memory rings between streaming
 * daemons on one host (payloads through them, the producer held to the
 * high water by what the peer has not taken, a full ring falling back to
 * the socket in order, a side with none, a reference out of step). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conn.h"
#include "conn_link.h"
#include "shm.h"

#define PAYLOAD (300 * 1024)

typedef struct side {
    int ready;
    int closed;
    int frames;
    int drains;
    char reason[192];
    uint8_t *dest; /* payload destination */
    uint32_t got_len;
    int good;      /* payloads that held pattern(step) (shm tests) */
    uint64_t next_step; /* the step the next of them must carry */
    conn *c;       /* the connection, once ready (until closed) */
    int pause_at;  /* pauses its connection on this frame (0: never) */
    size_t charge; /* conn_charge_read'ed for each frame (0: none) */
} side;

static uv_loop_t loop;
static uv_tcp_t server;
static auth_secret secret_a, secret_b, alice_key;
static conn_config server_cfg, client_cfg, bad_cfg;
static side srv_side[4];
static int n_accepted;
static char server_addr[64];

static void on_ready(conn *c)
{
    ((side *)c->data)->ready++;
    ((side *)c->data)->c = c;
}

static const auth_secret *user_key(void *arg, const char *user)
{
    return strcmp(user, "alice") == 0 ? &alice_key : NULL;
}

/* The bytes of the shared-memory tests' payload of step k. */
static uint8_t pattern(uint64_t k, uint32_t i)
{
    return (uint8_t)(i * 167u + k * 13u + 5u);
}

static void on_frame(conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len)
{
    side *s = c->data;
    s->frames++;
    s->got_len = len;
    if (s->frames == s->pause_at)
        conn_pause(c);
    if (s->charge)
        conn_charge_read(c, s->charge);
    if (env->msg_case == APPLIANCE__ENVELOPE__MSG_WEIGHT_CHUNK && payload && len > 1000) {
        uint64_t k = env->weight_chunk->step;
        uint32_t i = 0;
        while (i < len && payload[i] == pattern(k, i))
            i++;
        s->good += i == len && k == s->next_step;
        s->next_step = k + 1;
    }
}

static void *payload_dest(conn *c, const Appliance__Envelope *env, uint32_t len, int *err)
{
    side *s = c->data;
    return s->dest;
}

static void on_drain(conn *c) { ((side *)c->data)->drains++; }

static void on_close(conn *c, int err, const char *reason)
{
    side *s = c->data;
    s->closed++;
    snprintf(s->reason, sizeof(s->reason), "%s", reason);
}

static const conn_ops ops = {.on_ready = on_ready,
                             .on_frame = on_frame,
                             .payload_dest = payload_dest,
                             .on_drain = on_drain,
                             .on_close = on_close};

static void on_connection(uv_stream_t *srv, int status)
{
    ck_assert_int_eq(status, 0);
    ck_assert_int_lt(n_accepted, 4);
    conn_accept(srv, &server_cfg, &ops, &srv_side[n_accepted++]);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static void setup(void)
{
    char err[256];
    char pa[] = "/tmp/conn-secret-a-XXXXXX", pb[] = "/tmp/conn-secret-b-XXXXXX";
    close(mkstemp(pa));
    close(mkstemp(pb));
    write_file(pa, "correct horse battery staple\n");
    write_file(pb, "another secret\n");
    ck_assert_int_eq(auth_secret_load(&secret_a, pa, err, sizeof(err)), 0);
    ck_assert_int_eq(auth_secret_load(&secret_b, pb, err, sizeof(err)), 0);
    ck_assert_int_eq(auth_secret_set(&alice_key, "alice's own key, 32 bytes long", 31), 0);
    unlink(pa);
    unlink(pb);
    conn_config_default(&server_cfg, &secret_a, APPLIANCE__ROLE__ROLE_COORDINATOR, "server");
    conn_config_default(&client_cfg, &secret_a, APPLIANCE__ROLE__ROLE_WSE_NODE, "client");
    conn_config_default(&bad_cfg, &secret_b, APPLIANCE__ROLE__ROLE_WSE_NODE, "intruder");
    client_cfg.high_water = 64 * 1024;
    uv_loop_init(&loop);
    memset(srv_side, 0, sizeof(srv_side));
    n_accepted = 0;
    ck_assert_int_eq(conn_listen(&loop, &server, "127.0.0.1:0", on_connection, err, sizeof(err)), 0);
    conn_sockname(&server, server_addr, sizeof(server_addr));
}

static void teardown(void)
{
    uv_close((uv_handle_t *)&server, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
}

/* Runs the loop until cond holds or 5 s pass. */
#define RUN_UNTIL(cond)                                                                        \
    do {                                                                                       \
        for (int i_ = 0; i_ < 5000 && !(cond); i_++) {                                         \
            uv_run(&loop, UV_RUN_NOWAIT);                                                      \
            usleep(1000);                                                                      \
        }                                                                                      \
        ck_assert_msg((cond), "timed out waiting for " #cond);                                 \
    } while (0)

static conn *dial(const conn_config *cfg, side *s)
{
    char host[64];
    int port;
    ck_assert_int_eq(conn_addr_parse(server_addr, host, sizeof(host), &port), 0);
    return conn_connect(&loop, host, port, cfg, &ops, s);
}

/* A weight chunk of step `step` and len bytes: *env, pointing at *w. */
static void chunk_env(Appliance__Envelope *env, Appliance__WeightChunk *w, uint32_t len,
                      uint64_t step)
{
    appliance__weight_chunk__init(w);
    w->step = step;
    w->count = len / 4;
    appliance__envelope__init(env);
    env->msg_case = APPLIANCE__ENVELOPE__MSG_WEIGHT_CHUNK;
    env->weight_chunk = w;
}

static void send_chunk(conn *c, const uint8_t *payload, uint32_t len, uint64_t step)
{
    Appliance__WeightChunk w;
    Appliance__Envelope env;
    chunk_env(&env, &w, len, step);
    ck_assert_int_eq(conn_send(c, &env, payload, len, NULL, NULL), 0);
}

START_TEST(authenticated_payload)
{
    side cli = {0};
    conn *c = dial(&client_cfg, &cli);
    uint8_t *dest = calloc(1, PAYLOAD);
    srv_side[0].dest = dest;
    RUN_UNTIL(cli.ready == 1 && srv_side[0].ready == 1);
    uint8_t *src = malloc(PAYLOAD);
    for (int i = 0; i < PAYLOAD; i++)
        src[i] = (uint8_t)(i * 31 + 1);
    send_chunk(c, src, PAYLOAD, 1);
    RUN_UNTIL(srv_side[0].frames == 1);
    ck_assert_uint_eq(srv_side[0].got_len, PAYLOAD);
    ck_assert_int_eq(memcmp(dest, src, PAYLOAD), 0);
    conn_close(c, 0, "done");
    RUN_UNTIL(cli.closed == 1 && srv_side[0].closed == 1);
    ck_assert_str_eq(srv_side[0].reason, "peer closed the connection");
    free(src);
    free(dest);
}
END_TEST

/* A dial closed while its address is still being resolved: the connection
 * stays alive until the resolver's callback has run, then closes once. */
START_TEST(closed_while_resolving)
{
    side cli[8] = {{0}};
    char host[64];
    int port;
    ck_assert_int_eq(conn_addr_parse(server_addr, host, sizeof(host), &port), 0);
    for (int i = 0; i < 8; i++) {
        /* A name, not an address: the resolver has work to do. */
        conn *c = conn_connect(&loop, "localhost", port, &client_cfg, &ops, &cli[i]);
        ck_assert(c->resolving);
        conn_close(c, -ECANCELED, "closed at once");
    }
    RUN_UNTIL(cli[0].closed && cli[1].closed && cli[2].closed && cli[3].closed &&
              cli[4].closed && cli[5].closed && cli[6].closed && cli[7].closed);
    for (int i = 0; i < 8; i++) {
        ck_assert_int_eq(cli[i].ready, 0);
        ck_assert_int_eq(cli[i].closed, 1);
        ck_assert_str_eq(cli[i].reason, "closed at once");
    }
}
END_TEST

START_TEST(wrong_secret_refused)
{
    side cli = {0};
    dial(&bad_cfg, &cli);
    RUN_UNTIL(cli.closed == 1 && srv_side[0].closed == 1);
    ck_assert_int_eq(cli.ready, 0);
    ck_assert_int_eq(srv_side[0].ready, 0);
    ck_assert_str_eq(srv_side[0].reason, "authentication failed: wrong cluster secret");
    ck_assert_msg(strstr(cli.reason, "authentication failed") != NULL, "client: %s", cli.reason);
    /* The server goes on serving a good client. */
    side good = {0};
    conn *c = dial(&client_cfg, &good);
    RUN_UNTIL(good.ready == 1 && srv_side[1].ready == 1);
    conn_close(c, 0, "done");
    RUN_UNTIL(srv_side[1].closed == 1);
}
END_TEST

typedef struct raw {
    uv_tcp_t tcp;
    uv_connect_t req;
    uv_write_t wreq;
    int connected;
    uv_buf_t buf;
} raw;

static void raw_connected(uv_connect_t *req, int status)
{
    raw *r = container_of(req, raw, req);
    ck_assert_int_eq(status, 0);
    r->connected = 1;
}

static void raw_alloc(uv_handle_t *h, size_t s, uv_buf_t *b)
{
    static char sink[4096];
    *b = uv_buf_init(sink, sizeof(sink));
}

static void raw_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {}

START_TEST(unauthenticated_message_refused)
{
    /* A raw peer that skips Hello and registers straight away. */
    raw r = {0};
    uv_tcp_init(&loop, &r.tcp);
    struct sockaddr_in sa;
    char host[64];
    int port;
    conn_addr_parse(server_addr, host, sizeof(host), &port);
    uv_ip4_addr(host, port, &sa);
    uv_tcp_connect(&r.req, &r.tcp, (struct sockaddr *)&sa, raw_connected);
    RUN_UNTIL(r.connected);
    uv_read_start((uv_stream_t *)&r.tcp, raw_alloc, raw_read);
    Appliance__Register reg = APPLIANCE__REGISTER__INIT;
    Appliance__Envelope env = APPLIANCE__ENVELOPE__INIT;
    env.msg_case = APPLIANCE__ENVELOPE__MSG_REGISTER;
    env.register_ = &reg;
    size_t len;
    uint8_t *head = frame_encode(&env, 0, &len);
    r.buf = uv_buf_init((char *)head, (unsigned)len);
    uv_write(&r.wreq, (uv_stream_t *)&r.tcp, &r.buf, 1, NULL);
    RUN_UNTIL(srv_side[0].closed == 1);
    ck_assert_str_eq(srv_side[0].reason, "register before authentication");
    ck_assert_int_eq(srv_side[0].frames, 0);
    free(head);
    uv_close((uv_handle_t *)&r.tcp, NULL);
    uv_run(&loop, UV_RUN_NOWAIT); /* r lives on this stack: finish closing here */
}
END_TEST

/* Frames behind the one that fails a connection, in the same read, are
 * neither handled nor allowed to change why it closed. */
START_TEST(nothing_after_a_refusal)
{
    raw r = {0};
    uv_tcp_init(&loop, &r.tcp);
    struct sockaddr_in sa;
    char host[64];
    int port;
    conn_addr_parse(server_addr, host, sizeof(host), &port);
    uv_ip4_addr(host, port, &sa);
    uv_tcp_connect(&r.req, &r.tcp, (struct sockaddr *)&sa, raw_connected);
    RUN_UNTIL(r.connected);
    uv_read_start((uv_stream_t *)&r.tcp, raw_alloc, raw_read);
    Appliance__JobListQuery q = APPLIANCE__JOB_LIST_QUERY__INIT;
    Appliance__Envelope env = APPLIANCE__ENVELOPE__INIT;
    env.msg_case = APPLIANCE__ENVELOPE__MSG_JOB_LIST_QUERY;
    env.job_list_query = &q;
    Appliance__Error e = APPLIANCE__ERROR__INIT;
    e.message = "a later frame";
    Appliance__Envelope env2 = APPLIANCE__ENVELOPE__INIT;
    env2.msg_case = APPLIANCE__ENVELOPE__MSG_ERROR;
    env2.error = &e;
    size_t l1, l2;
    uint8_t *f1 = frame_encode(&env, 0, &l1), *f2 = frame_encode(&env2, 0, &l2);
    uint8_t *both = malloc(l1 + l2);
    memcpy(both, f1, l1);
    memcpy(both + l1, f2, l2);
    r.buf = uv_buf_init((char *)both, (unsigned)(l1 + l2));
    uv_write(&r.wreq, (uv_stream_t *)&r.tcp, &r.buf, 1, NULL);
    RUN_UNTIL(srv_side[0].closed == 1);
    ck_assert_str_eq(srv_side[0].reason, "job_list_query before authentication");
    ck_assert_int_eq(srv_side[0].frames, 0);
    free(f1);
    free(f2);
    free(both);
    uv_close((uv_handle_t *)&r.tcp, NULL);
    uv_run(&loop, UV_RUN_NOWAIT);
}
END_TEST

static void garbage_written(uv_write_t *req, int status) {}

START_TEST(garbage_closes_only_that_connection)
{
    side a = {0}, b = {0};
    conn *ca = dial(&client_cfg, &a);
    RUN_UNTIL(a.ready == 1 && srv_side[0].ready == 1);
    conn *cb = dial(&client_cfg, &b);
    RUN_UNTIL(b.ready == 1 && srv_side[1].ready == 1);
    static char junk[64] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    uv_buf_t buf = uv_buf_init(junk, sizeof(junk));
    uv_write_t wreq;
    uv_write(&wreq, (uv_stream_t *)&ca->tcp, &buf, 1, garbage_written);
    RUN_UNTIL(srv_side[0].closed == 1 && a.closed == 1);
    ck_assert_msg(strstr(srv_side[0].reason, "bad magic") != NULL, "%s", srv_side[0].reason);
    ck_assert_msg(strstr(a.reason, "bad magic") != NULL, "client saw: %s", a.reason);
    /* The other connection still carries frames. */
    uint8_t small[16] = {1, 2, 3};
    send_chunk(cb, small, sizeof(small), 2);
    RUN_UNTIL(srv_side[1].frames == 1);
    ck_assert_int_eq(srv_side[1].closed, 0);
    conn_close(cb, 0, "done");
    RUN_UNTIL(srv_side[1].closed == 1);
}
END_TEST

START_TEST(bounded_write_queue)
{
    side cli = {0};
    conn *c = dial(&client_cfg, &cli);
    RUN_UNTIL(cli.ready == 1 && srv_side[0].ready == 1);
    static uint8_t big[48 * 1024];
    int sent = 0;
    /* Without running the loop nothing drains: the producer is told to stop
     * once the high water mark (64 KiB) is passed. */
    while (conn_can_send(c, sizeof(big)) && sent < 100) {
        send_chunk(c, big, sizeof(big), (uint64_t)sent);
        sent++;
    }
    ck_assert_int_lt(sent, 3);
    ck_assert_uint_le(c->queued, 2 * sizeof(big) + 256);
    RUN_UNTIL(cli.drains == 1);
    RUN_UNTIL(srv_side[0].frames == sent);
    /* The hard cap refuses outright. */
    conn_config tiny = client_cfg;
    tiny.queue_max = 1000;
    c->cfg = &tiny;
    Appliance__Credit cr = APPLIANCE__CREDIT__INIT;
    Appliance__Envelope env = APPLIANCE__ENVELOPE__INIT;
    env.msg_case = APPLIANCE__ENVELOPE__MSG_CREDIT;
    env.credit = &cr;
    ck_assert_int_eq(conn_send(c, &env, big, 2000, NULL, NULL), -ENOBUFS);
    ck_assert(c->closing); /* a peer that does not read is dropped, not fed less */
    RUN_UNTIL(srv_side[0].closed == 1 && cli.closed == 1);
    ck_assert_msg(strstr(cli.reason, "peer does not read") && strstr(cli.reason, "max_queued_bytes"),
                  "%s", cli.reason);
}
END_TEST

/* The shared-memory tests' sides: a memoryx server and a wse-node client
 * on loopback, each offering a 256 KiB ring (ring 0: none). */
static void shm_configs(size_t server_ring, size_t client_ring)
{
    server_cfg.role = APPLIANCE__ROLE__ROLE_MEMORYX;
    server_cfg.shm_ring = server_ring;
    client_cfg.shm_ring = client_ring;
    client_cfg.high_water = 200 * 1024;
}

/* A client of shm_configs' server, ready and with both rings in use. */
static conn *shm_dial(side *cli)
{
    conn *c = dial(&client_cfg, cli);
    RUN_UNTIL(cli->ready == 1 && srv_side[0].ready == 1);
    RUN_UNTIL(c->shm.tx_on && srv_side[0].c->shm.tx_on);
    return c;
}

/* Closes the client and waits until both ends are closed. */
static void close_both(conn *c, side *cli)
{
    conn_close(c, 0, "done");
    RUN_UNTIL(cli->closed == 1 && srv_side[0].closed == 1);
}

static uint8_t *shm_payload(uint64_t k, uint32_t len)
{
    uint8_t *p = malloc(len);
    for (uint32_t i = 0; i < len; i++)
        p[i] = pattern(k, i);
    return p;
}

/* Sends payloads 0..n-1 of len bytes, kept in p until free_payloads. */
static void send_payloads(conn *c, uint8_t **p, int n, uint32_t len)
{
    for (int k = 0; k < n; k++) {
        p[k] = shm_payload((uint64_t)k, len);
        send_chunk(c, p[k], len, (uint64_t)k);
    }
}

static void free_payloads(uint8_t **p, int n)
{
    for (int k = 0; k < n; k++)
        free(p[k]);
}

/* Payloads of 100 KiB and odd bytes go round a 256 KiB ring many times:
 * all through it, each intact and in order, the producer held to the high
 * water by what the server has not taken yet and let go by its drain
 * notices. */
START_TEST(shm_payloads_through_the_ring)
{
    shm_configs(256 * 1024, 256 * 1024);
    side cli = {0};
    conn *c = shm_dial(&cli);
    const uint32_t len = 100 * 1024 + 7;
    const int n = 30;
    uint8_t *p[30];
    int sent = 0, held = 0;
    while (sent < n) {
        if (!conn_can_send(c, len)) {
            held++;
            int d = cli.drains;
            RUN_UNTIL(cli.drains > d);
            continue;
        }
        p[sent] = shm_payload((uint64_t)sent, len);
        send_chunk(c, p[sent], len, (uint64_t)sent);
        sent++;
    }
    RUN_UNTIL(srv_side[0].frames == n);
    ck_assert_int_eq(srv_side[0].good, n);
    ck_assert_uint_eq(c->shm_out, (uint64_t)n * len);
    ck_assert_uint_eq(srv_side[0].c->shm_in, (uint64_t)n * len);
    ck_assert_int_gt(held, 0);
    ck_assert_uint_lt(c->queued, 1024); /* the socket carried only headers */
    /* the other way too: the server's ring */
    uint8_t *back = shm_payload(0, len);
    send_chunk(srv_side[0].c, back, len, 0);
    RUN_UNTIL(cli.frames == 1);
    ck_assert_int_eq(cli.good, 1);
    ck_assert_uint_eq(srv_side[0].c->shm_out, len);
    close_both(c, &cli);
    for (int i = 0; i < n; i++)
        free(p[i]);
    free(back);
}
END_TEST

/* Puts payload k (len bytes) into the shared ring once, running the loop
 * until the readers have left the room, and sends where it lies to both
 * server-side connections. */
static void send_shared(shm_ring *ring, uint64_t k, uint32_t len)
{
    uint8_t *p = shm_payload(k, len);
    uint64_t off, end;
    bool put = false;
    for (int i = 0; i < 5000 && !(put = shm_ring_put(ring, p, len, &off, &end)); i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
    ck_assert_msg(put, "no room in the shared ring for payload %llu", (unsigned long long)k);
    free(p);
    Appliance__WeightChunk w;
    Appliance__Envelope env;
    chunk_env(&env, &w, len, k);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(conn_send_shared(srv_side[i].c, &env, ring, off, end, len), 0);
}

/* One sender, two readers of its host: payloads put once into a shared
 * ring reach both intact and in order, among frames through each
 * connection's own ring; the ring goes round several times (the room is
 * what the slower reader leaves); a second shared ring (the sender's next
 * job) replaces the first. */
START_TEST(shm_shared_ring_to_two_peers)
{
    shm_configs(256 * 1024, 256 * 1024);
    side a = {0}, b = {0};
    conn *ca = dial(&client_cfg, &a), *cb = dial(&client_cfg, &b);
    RUN_UNTIL(a.ready == 1 && b.ready == 1 && srv_side[0].ready == 1 && srv_side[1].ready == 1);
    RUN_UNTIL(srv_side[0].c->shm.tx_on && srv_side[1].c->shm.tx_on);
    char why[160];
    shm_ring *ring = shm_ring_create_shared(256 * 1024, why, sizeof(why));
    ck_assert_msg(ring, "%s", why);
    Appliance__Envelope env = APPLIANCE__ENVELOPE__INIT;
    ck_assert_int_eq(conn_send_shared(srv_side[0].c, &env, ring, 0, 100, 100), -EINVAL);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(conn_offer_shared(srv_side[i].c, ring), 0);
    ck_assert_int_eq(conn_offer_shared(srv_side[1].c, ring), -ENOTSUP); /* offered already */
    RUN_UNTIL(conn_shared_ready(srv_side[0].c, ring) && conn_shared_ready(srv_side[1].c, ring));
    const uint32_t len = 100 * 1024 + 3;
    for (uint64_t k = 0; k < 10; k++)
        send_shared(ring, k, len);
    /* and one through each connection's own ring */
    uint8_t *own = shm_payload(10, len);
    for (int i = 0; i < 2; i++)
        send_chunk(srv_side[i].c, own, len, 10);
    RUN_UNTIL(a.frames == 11 && b.frames == 11);
    ck_assert_int_eq(a.good, 11);
    ck_assert_int_eq(b.good, 11);
    for (int i = 0; i < 2; i++)
        ck_assert_uint_eq(srv_side[i].c->shm_out, 11 * (uint64_t)len);
    ck_assert_uint_eq(ca->shm_in + cb->shm_in, 22 * (uint64_t)len);
    /* the next job's ring */
    shm_ring *next = shm_ring_create_shared(256 * 1024, why, sizeof(why));
    ck_assert_msg(next, "%s", why);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(conn_offer_shared(srv_side[i].c, next), 0);
    ck_assert(!conn_shared_ready(srv_side[0].c, ring));
    RUN_UNTIL(conn_shared_ready(srv_side[0].c, next) && conn_shared_ready(srv_side[1].c, next));
    send_shared(next, 11, len);
    RUN_UNTIL(a.frames == 12 && b.frames == 12);
    ck_assert_int_eq(a.good + b.good, 24);
    shm_ring_free(ring);
    shm_ring_free(next); /* the connections hold theirs until they close */
    conn_close(ca, 0, "done");
    conn_close(cb, 0, "done");
    RUN_UNTIL(a.closed == 1 && b.closed == 1 && srv_side[0].closed == 1 && srv_side[1].closed == 1);
    free(own);
}
END_TEST

/* A reader that stops: the ring fills, later payloads take the socket,
 * and all arrive in order once it reads again. */
START_TEST(shm_full_ring_takes_the_socket)
{
    shm_configs(256 * 1024, 256 * 1024);
    side cli = {0};
    conn *c = shm_dial(&cli);
    conn_pause(srv_side[0].c);
    const uint32_t len = 100 * 1024;
    uint8_t *p[5];
    send_payloads(c, p, 5, len);
    ck_assert_uint_eq(c->shm_out, 2 * (uint64_t)len);
    conn_resume(srv_side[0].c);
    RUN_UNTIL(srv_side[0].frames == 5);
    ck_assert_int_eq(srv_side[0].good, 5);
    close_both(c, &cli);
    free_payloads(p, 5);
}
END_TEST

/* A producer waiting for room in its ring while its own side has stopped
 * reading what the peer sends (the peer's drain notices among it): it
 * still goes on once the peer has taken what it waited for. */
START_TEST(shm_drain_while_not_reading)
{
    shm_configs(256 * 1024, 256 * 1024);
    side cli = {0};
    conn *c = shm_dial(&cli);
    conn_pause(c);
    const uint32_t len = 100 * 1024;
    uint8_t *p[6];
    int sent = 0;
    while (sent < 6) {
        if (!conn_can_send(c, len)) {
            int d = cli.drains;
            RUN_UNTIL(cli.drains > d);
            continue;
        }
        p[sent] = shm_payload((uint64_t)sent, len);
        send_chunk(c, p[sent], len, (uint64_t)sent);
        sent++;
    }
    RUN_UNTIL(srv_side[0].frames == 6);
    ck_assert_int_eq(srv_side[0].good, 6);
    ck_assert_uint_eq(c->shm_out, 6 * (uint64_t)len);
    conn_resume(c);
    close_both(c, &cli);
    for (int k = 0; k < 6; k++)
        free(p[k]);
}
END_TEST

/* n turns of the loop, a millisecond apart. */
static void run_turns(int n)
{
    for (int i = 0; i < n; i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
}

/* The frames the server was given in the turn of the loop that ended last,
 * and the most in any one turn. */
static int turn_frames_seen, turn_frames_max;
static void count_turn(uv_check_t *h)
{
    int f = srv_side[0].frames - turn_frames_seen;
    turn_frames_seen = srv_side[0].frames;
    if (f > turn_frames_max)
        turn_frames_max = f;
}

/* Twenty 1 MiB payloads in the ring whose frames reach the reader in one
 * read: a turn of the loop copies out CONN_TURN_COPY of them and the rest
 * wait for later turns; a pause among them holds the rest (the socket
 * unread) until the resume; all arrive, intact and in order. */
START_TEST(shm_copies_bounded_per_turn)
{
    shm_configs(256 * 1024, 24u << 20);
    client_cfg.high_water = 32u << 20;
    side cli = {0};
    conn *c = shm_dial(&cli);
    uv_check_t check;
    uv_check_init(&loop, &check);
    uv_check_start(&check, count_turn);
    conn_pause(srv_side[0].c);
    const uint32_t len = 1u << 20;
    const int n = 20;
    uint8_t *p[20];
    send_payloads(c, p, n, len);
    ck_assert_uint_eq(c->shm_out, (uint64_t)n * len); /* all of them in the ring */
    run_turns(50); /* the frames' headers reach the server's socket */
    ck_assert_int_eq(srv_side[0].frames, 0);
    srv_side[0].pause_at = 10;
    turn_frames_seen = turn_frames_max = 0;
    conn_resume(srv_side[0].c);
    RUN_UNTIL(srv_side[0].frames == 10);
    run_turns(30);
    ck_assert_int_eq(srv_side[0].frames, 10); /* paused: the rest waits */
    ck_assert(srv_side[0].c->rest_len > 0 && !srv_side[0].c->reading);
    conn_resume(srv_side[0].c);
    RUN_UNTIL(srv_side[0].frames == n);
    ck_assert_int_eq(srv_side[0].good, n);
    ck_assert_int_eq(turn_frames_max, (int)(CONN_TURN_COPY / len));
    ck_assert(srv_side[0].c->rest_len == 0 && srv_side[0].c->reading);
    uv_close((uv_handle_t *)&check, NULL);
    close_both(c, &cli);
    free_payloads(p, n);
}
END_TEST

/* Sends n payloads of len bytes (kept in p) on s as fast as conn_can_send
 * lets it, charging each `charge` bytes (conn_charge_send), a turn of the
 * loop between the waits; *drains counts peer's drain notices when it is
 * not NULL (each wait must end with one). Returns the most sent in one
 * turn, and the turns in *turns. */
static int send_by_turns(conn *s, uint8_t **p, int n, uint32_t len, size_t charge, int *drains,
                         int *turns)
{
    int sent = 0, most = 0;
    *turns = 0;
    while (sent < n) {
        int in_turn = 0;
        while (sent < n && conn_can_send(s, len)) {
            p[sent] = shm_payload((uint64_t)sent, len);
            send_chunk(s, p[sent], len, (uint64_t)sent);
            if (charge)
                conn_charge_send(s, charge);
            sent++;
            in_turn++;
        }
        if (in_turn > most)
            most = in_turn;
        (*turns)++;
        if (sent < n) {
            ck_assert(s->blocked);
            int d = drains ? *drains : 0;
            uv_run(&loop, UV_RUN_NOWAIT); /* the next turn lets it go on */
            if (drains)
                ck_assert_int_eq(*drains, d + 1);
        }
    }
    return most;
}

/* A producer that asks before each 1 MiB payload, with a high water and a
 * ring that would take all of them: a turn of the loop puts
 * CONN_TURN_COPY of them into the ring, the next payload waits for the
 * drain notice of a later turn, and all arrive, intact and in order. */
START_TEST(shm_puts_bounded_per_turn)
{
    shm_configs(32u << 20, 256 * 1024);
    server_cfg.high_water = 64u << 20;
    side cli = {0};
    conn *c = shm_dial(&cli);
    conn *s = srv_side[0].c;
    const uint32_t len = 1u << 20;
    const int n = 12;
    uint8_t *p[12];
    int turns;
    int most = send_by_turns(s, p, n, len, 0, &srv_side[0].drains, &turns);
    ck_assert_int_eq(most, (int)(CONN_TURN_COPY / len));
    ck_assert_int_eq(turns, (n + most - 1) / most);
    ck_assert_uint_eq(s->shm_out, (uint64_t)n * len);
    RUN_UNTIL(cli.frames == n);
    ck_assert_int_eq(cli.good, n);
    close_both(c, &cli);
    free_payloads(p, n);
}
END_TEST

/* Work charged to a connection (a sparse payload packed on the loop)
 * counts against a turn's share as shared-memory puts do: a producer
 * that charges 1 MiB a payload sends CONN_TURN_COPY of them a turn, over
 * the socket too, and all arrive intact and in order. */
START_TEST(charged_sends_bounded_per_turn)
{
    side cli = {0};
    conn *c = dial(&client_cfg, &cli);
    RUN_UNTIL(cli.ready == 1 && srv_side[0].ready == 1);
    const uint32_t len = 2000;
    const int n = 10;
    uint8_t *p[10];
    int turns;
    int most = send_by_turns(c, p, n, len, 1u << 20, NULL, &turns);
    ck_assert_int_eq(most, (int)(CONN_TURN_COPY >> 20));
    ck_assert_int_eq(turns, (n + most - 1) / most);
    RUN_UNTIL(srv_side[0].frames == n);
    ck_assert_int_eq(srv_side[0].good, n);
    close_both(c, &cli);
    free_payloads(p, n);
}
END_TEST

/* A reader that charges 1 MiB for each frame it is given (a packed chunk
 * expanded): a turn of the loop delivers CONN_TURN_COPY of that, the
 * frames after wait for later turns (read in one go from the socket), and
 * all arrive intact and in order. */
START_TEST(charged_reads_bounded_per_turn)
{
    side cli = {0};
    conn *c = dial(&client_cfg, &cli);
    RUN_UNTIL(cli.ready == 1 && srv_side[0].ready == 1);
    uv_check_t check;
    uv_check_init(&loop, &check);
    uv_check_start(&check, count_turn);
    srv_side[0].charge = 1u << 20;
    const uint32_t len = 2000;
    const int n = 12;
    uint8_t *p[12];
    conn_pause(srv_side[0].c);
    send_payloads(c, p, n, len);
    run_turns(50); /* all of them in the server's socket */
    ck_assert_int_eq(srv_side[0].frames, 0);
    turn_frames_seen = turn_frames_max = 0;
    conn_resume(srv_side[0].c);
    RUN_UNTIL(srv_side[0].frames == n);
    ck_assert_int_eq(srv_side[0].good, n);
    ck_assert_int_eq(turn_frames_max, (int)(CONN_TURN_COPY >> 20));
    uv_close((uv_handle_t *)&check, NULL);
    close_both(c, &cli);
    free_payloads(p, n);
}
END_TEST

/* A side that shares no memory declines the offer: payloads go over the
 * socket, intact. */
START_TEST(shm_declined)
{
    shm_configs(0, 256 * 1024);
    side cli = {0};
    conn *c = dial(&client_cfg, &cli);
    RUN_UNTIL(cli.ready == 1 && srv_side[0].ready == 1);
    RUN_UNTIL(c->shm.answered);
    ck_assert(!c->shm.tx_on && !c->shm.tx && !srv_side[0].c->shm.tx);
    const uint32_t len = 100 * 1024;
    uint8_t *p = shm_payload(0, len);
    send_chunk(c, p, len, 0);
    RUN_UNTIL(srv_side[0].frames == 1);
    ck_assert_int_eq(srv_side[0].good, 1);
    ck_assert_uint_eq(c->shm_out, 0);
    close_both(c, &cli);
    free(p);
}
END_TEST

/* A sender out of step with its ring (bytes in it no frame names): the
 * reader refuses the next payload and closes, saying why; the sender
 * hears it. */
START_TEST(shm_reference_out_of_step)
{
    shm_configs(256 * 1024, 256 * 1024);
    side cli = {0};
    conn *c = shm_dial(&cli);
    const uint32_t len = 100 * 1024;
    uint8_t *p = shm_payload(0, len);
    uint64_t off, end;
    ck_assert(shm_ring_put(c->shm.tx, p, 4096, &off, &end));
    send_chunk(c, p, len, 0);
    RUN_UNTIL(srv_side[0].closed == 1 && cli.closed == 1);
    ck_assert_msg(strstr(srv_side[0].reason, "shared memory") &&
                      strstr(srv_side[0].reason, "not the next payload"),
                  "%s", srv_side[0].reason);
    ck_assert_msg(strstr(cli.reason, "not the next payload"), "%s", cli.reason);
    ck_assert_int_eq(srv_side[0].frames, 0);
    free(p);
}
END_TEST

/* A header the peer would refuse is not sent at all; the connection stays. */
START_TEST(oversized_header_not_sent)
{
    side cli = {0};
    conn_config small = client_cfg;
    small.limits.max_header = 1024;
    conn *c = dial(&small, &cli);
    RUN_UNTIL(cli.ready == 1 && srv_side[0].ready == 1);
    static char text[4096];
    memset(text, 'x', sizeof(text) - 1);
    Appliance__Error e = APPLIANCE__ERROR__INIT;
    e.message = text;
    Appliance__Envelope env = APPLIANCE__ENVELOPE__INIT;
    env.msg_case = APPLIANCE__ENVELOPE__MSG_ERROR;
    env.error = &e;
    ck_assert_int_eq(conn_send_msg(c, &env), -EMSGSIZE);
    ck_assert(!c->closing);
    uint8_t small_payload[8] = {0};
    send_chunk(c, small_payload, sizeof(small_payload), 1);
    RUN_UNTIL(srv_side[0].frames == 1);
    conn_close(c, 0, "done");
    RUN_UNTIL(srv_side[0].closed == 1 && cli.closed == 1);
}
END_TEST

/* Two insecure ends talk without proofs; an insecure end and one with a
 * secret refuse each other, each saying why and naming the other. */
START_TEST(insecure_mode)
{
    conn_config ins_client, ins_server;
    conn_config_default(&ins_client, NULL, APPLIANCE__ROLE__ROLE_WSE_NODE, "open-client");
    ck_assert(ins_client.insecure);
    side cli = {0};
    conn *c = dial(&ins_client, &cli); /* the server has the secret */
    RUN_UNTIL(cli.closed == 1 && srv_side[0].closed == 1);
    ck_assert_int_eq(srv_side[0].ready + cli.ready, 0);
    ck_assert_str_eq(srv_side[0].reason, "refused \"open-client\": it runs --insecure (no cluster "
                                         "secret), and authentication is required here");
    ck_assert_msg(strstr(cli.reason, "refused \"server\": it authenticates with a secret, and "
                                     "authentication is off here (--insecure)"), "%s", cli.reason);
    /* Both insecure: ready at once, and frames pass. */
    conn_config_default(&ins_server, NULL, APPLIANCE__ROLE__ROLE_COORDINATOR, "open-server");
    server_cfg = ins_server;
    side cli2 = {0};
    c = dial(&ins_client, &cli2);
    RUN_UNTIL(cli2.ready == 1 && srv_side[1].ready == 1);
    uint8_t payload[16] = {7};
    uint8_t dest[16];
    srv_side[1].dest = dest;
    send_chunk(c, payload, sizeof(payload), 1);
    RUN_UNTIL(srv_side[1].frames == 1);
    ck_assert_int_eq(dest[0], 7);
    conn_close(c, 0, "done");
    RUN_UNTIL(srv_side[1].closed == 1);
    /* A client with a secret against the insecure server. */
    side cli3 = {0};
    dial(&client_cfg, &cli3);
    RUN_UNTIL(cli3.closed == 1 && srv_side[2].closed == 1);
    ck_assert_msg(strstr(srv_side[2].reason, "refused \"client\": it authenticates with a secret"),
                  "%s", srv_side[2].reason);
}
END_TEST

/* A client proves a user's key instead of the cluster secret; the server
 * knows who it is. A wrong key and an unknown user fail alike. */
START_TEST(user_keys)
{
    server_cfg.user_key = user_key;
    conn_config as_alice = client_cfg;
    as_alice.secret = &alice_key;
    as_alice.user = "alice";
    side cli = {0};
    conn *c = dial(&as_alice, &cli);
    RUN_UNTIL(cli.ready == 1 && srv_side[0].ready == 1);
    ck_assert_str_eq(c->auth_user, "alice");
    ck_assert_str_eq(srv_side[0].c->auth_user, "alice");
    conn_close(c, 0, "done");
    RUN_UNTIL(srv_side[0].closed == 1);
    /* The cluster secret still works, as an operator (no user). */
    side op = {0};
    c = dial(&client_cfg, &op);
    RUN_UNTIL(op.ready == 1 && srv_side[1].ready == 1);
    ck_assert_str_eq(srv_side[1].c->auth_user, "");
    conn_close(c, 0, "done");
    RUN_UNTIL(srv_side[1].closed == 1);
    /* alice with the cluster secret as her key; then a user nobody knows. */
    conn_config wrong = as_alice;
    wrong.secret = &secret_a;
    side w = {0};
    dial(&wrong, &w);
    RUN_UNTIL(w.closed == 1 && srv_side[2].closed == 1);
    ck_assert_str_eq(srv_side[2].reason, "authentication failed: wrong key for user \"alice\", or no such user");
    ck_assert_msg(strstr(w.reason, "wrong key for user \"alice\""), "%s", w.reason);
    conn_config nobody = as_alice;
    nobody.user = "mallory";
    side u = {0};
    dial(&nobody, &u);
    RUN_UNTIL(u.closed == 1 && srv_side[3].closed == 1);
    ck_assert_int_eq(srv_side[3].ready + u.ready, 0);
    ck_assert_str_eq(srv_side[3].reason, "authentication failed: wrong key for user \"mallory\", or no such user");
}
END_TEST

/* What a peer calls itself reaches logs only as one printable line. */
START_TEST(peer_names_printable)
{
    conn_config forger;
    conn_config_default(&forger, NULL, APPLIANCE__ROLE__ROLE_WSE_NODE,
                        "x\n2026-01-01T00:00:00Z INFO coordinator: \"forged\"");
    side cli = {0};
    dial(&forger, &cli);
    RUN_UNTIL(srv_side[0].closed == 1);
    ck_assert_str_eq(srv_side[0].reason,
                     "refused \"x?2026-01-01T00:00:00Z INFO coordinator: ?forged?\": it runs --insecure "
                     "(no cluster secret), and authentication is required here");
}
END_TEST

/* A daemon without users refuses a client that names one. */
START_TEST(user_keys_refused_without_users)
{
    conn_config as_alice = client_cfg;
    as_alice.secret = &alice_key;
    as_alice.user = "alice";
    side cli = {0};
    dial(&as_alice, &cli);
    RUN_UNTIL(cli.closed == 1 && srv_side[0].closed == 1);
    ck_assert_int_eq(srv_side[0].ready, 0);
    ck_assert_str_eq(srv_side[0].reason,
                     "user \"alice\" refused: this daemon takes no user keys, only the cluster secret");
}
END_TEST

static int stopped_links;
static void link_stopped(conn_link *l) { stopped_links++; }

START_TEST(link_reconnects_with_backoff)
{
    /* A port with nobody listening yet: the link keeps trying. */
    char host[64];
    int port;
    ck_assert_int_eq(conn_addr_parse(server_addr, host, sizeof(host), &port), 0);
    uv_close((uv_handle_t *)&server, NULL);
    uv_run(&loop, UV_RUN_NOWAIT);
    side cli = {0};
    conn_link l;
    char target[80];
    snprintf(target, sizeof(target), "127.0.0.1:%d", port);
    ck_assert_int_eq(conn_link_start(&l, &loop, target, &client_cfg, &ops, &cli), 0);
    RUN_UNTIL(l.attempt >= 3); /* 100 + 200 ms of backoff, give or take jitter */
    ck_assert_int_eq(cli.ready, 0);
    ck_assert_ptr_null(conn_link_conn(&l));
    /* The server comes up: the next try succeeds. */
    char err[256];
    ck_assert_int_eq(conn_listen(&loop, &server, target, on_connection, err, sizeof(err)), 0);
    RUN_UNTIL(cli.ready == 1 && srv_side[0].ready == 1);
    ck_assert_ptr_nonnull(conn_link_conn(&l));
    /* The server drops us: the link dials again by itself. */
    conn_close(conn_link_conn(&l), 0, "test");
    RUN_UNTIL(cli.ready == 2 && srv_side[1].ready == 1);
    conn_link_stop(&l, link_stopped);
    RUN_UNTIL(srv_side[1].closed == 1 && stopped_links == 1); /* l lives on this stack */
}
END_TEST

START_TEST(addresses)
{
    char host[64];
    int port;
    ck_assert_int_eq(conn_addr_parse("127.0.0.1:8080", host, sizeof(host), &port), 0);
    ck_assert_str_eq(host, "127.0.0.1");
    ck_assert_int_eq(port, 8080);
    ck_assert_int_eq(conn_addr_parse("[::1]:9", host, sizeof(host), &port), 0);
    ck_assert_str_eq(host, "::1");
    ck_assert_int_eq(conn_addr_parse("memoryx:7000", host, sizeof(host), &port), 0);
    ck_assert_str_eq(host, "memoryx");
    ck_assert_int_eq(conn_addr_parse("nohost", host, sizeof(host), &port), -EINVAL);
    ck_assert_int_eq(conn_addr_parse("h:70000", host, sizeof(host), &port), -EINVAL);
    ck_assert_int_eq(conn_addr_parse(":80", host, sizeof(host), &port), -EINVAL);
    ck_assert_int_eq(conn_addr_parse("h:8x", host, sizeof(host), &port), -EINVAL);
}
END_TEST

START_TEST(secret_files)
{
    char err[256];
    auth_secret s;
    ck_assert_int_lt(auth_secret_load(&s, "/nonexistent/secret", err, sizeof(err)), 0);
    ck_assert_str_eq(err, "/nonexistent/secret: cannot open secret file: No such file or directory");
    char p[] = "/tmp/conn-empty-XXXXXX";
    close(mkstemp(p));
    write_file(p, "\n");
    ck_assert_int_eq(auth_secret_load(&s, p, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "secret file is empty") != NULL, "%s", err);
    unlink(p);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("conn");
    TCase *t = tcase_create("loopback");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, authenticated_payload);
    tcase_add_test(t, closed_while_resolving);
    tcase_add_test(t, wrong_secret_refused);
    tcase_add_test(t, unauthenticated_message_refused);
    tcase_add_test(t, garbage_closes_only_that_connection);
    tcase_add_test(t, bounded_write_queue);
    tcase_add_test(t, oversized_header_not_sent);
    tcase_add_test(t, insecure_mode);
    tcase_add_test(t, user_keys);
    tcase_add_test(t, user_keys_refused_without_users);
    tcase_add_test(t, peer_names_printable);
    tcase_add_test(t, nothing_after_a_refusal);
    tcase_add_test(t, link_reconnects_with_backoff);
    tcase_add_test(t, shm_payloads_through_the_ring);
    tcase_add_test(t, shm_full_ring_takes_the_socket);
    tcase_add_test(t, shm_shared_ring_to_two_peers);
    tcase_add_test(t, shm_drain_while_not_reading);
    tcase_add_test(t, shm_puts_bounded_per_turn);
    tcase_add_test(t, shm_copies_bounded_per_turn);
    tcase_add_test(t, shm_declined);
    tcase_add_test(t, charged_sends_bounded_per_turn);
    tcase_add_test(t, charged_reads_bounded_per_turn);
    tcase_add_test(t, shm_reference_out_of_step);
    suite_add_tcase(s, t);
    TCase *p = tcase_create("parsing");
    tcase_add_test(p, addresses);
    tcase_add_test(p, secret_files);
    suite_add_tcase(s, p);
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
