/* Reconnecting links (conn_link.h): a connection dialled again, with
 * backoff, whenever it fails or closes. */
#include "conn_link.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void conn_link__closed(conn_link *l, conn *c);

static void conn_link__dial(uv_timer_t *t)
{
    conn_link *l = t->data;
    if (l->stopping || l->c)
        return;
    l->c = conn_connect(l->loop, l->host, l->port, l->cfg, l->ops, l->data);
    if (l->c) {
        l->c->link = l;
        l->c->link_closed = conn_link__closed;
    } else {
        uv_timer_start(&l->retry, conn_link__dial, 1000, 0);
    }
}

static void conn_link__retry_closed(uv_handle_t *h)
{
    conn_link *l = h->data;
    if (l->on_stopped)
        l->on_stopped(l);
}

/* The link's connection is gone (its on_close has run; it is freed right
 * after): the link stops, or dials again after its backoff. */
static void conn_link__closed(conn_link *l, conn *c)
{
    if (l->c == c)
        l->c = NULL;
    if (l->stopping) {
        uv_close((uv_handle_t *)&l->retry, conn_link__retry_closed);
        return;
    }
    if (c->auth == CONN_READY)
        l->attempt = 0;
    uint64_t delay = 100u << (l->attempt < 6 ? l->attempt : 6);
    if (delay > 5000)
        delay = 5000;
    delay = delay * (80 + (uint64_t)(rand() % 41)) / 100; /* +-20% jitter */
    l->attempt++;
    uv_timer_start(&l->retry, conn_link__dial, delay, 0);
}

int conn_link_start(conn_link *l, uv_loop_t *loop, const char *target, const conn_config *cfg,
               const conn_ops *ops, void *data)
{
    memset(l, 0, sizeof(*l));
    if (conn_addr_parse(target, l->host, sizeof(l->host), &l->port) < 0)
        return -EINVAL;
    l->loop = loop;
    l->cfg = cfg;
    l->ops = ops;
    l->data = data;
    uv_timer_init(loop, &l->retry);
    l->retry.data = l;
    uv_timer_start(&l->retry, conn_link__dial, 0, 0);
    return 0;
}

conn *conn_link_conn(conn_link *l)
{
    return l->c && l->c->auth == CONN_READY && !l->c->closing ? l->c : NULL;
}

void conn_link_stop(conn_link *l, void (*on_stopped)(conn_link *l))
{
    if (l->stopping)
        return;
    l->stopping = true;
    l->on_stopped = on_stopped;
    uv_timer_stop(&l->retry);
    if (l->c)
        conn_close(l->c, -ECANCELED, "conn_link stopped");
    else
        uv_close((uv_handle_t *)&l->retry, conn_link__retry_closed);
}
