/* A daemon's outgoing link (conn.h's connections, dialled again and
 * again): dials, and dials again with exponential backoff (100 ms doubling
 * to 5 s, with jitter) whenever the connection fails or closes, until
 * conn_link_stop. */
#pragma once

#include <stdbool.h>
#include <uv.h>

#include "conn.h"

struct conn_link {
    uv_loop_t *loop;
    uv_timer_t retry;           /* backoff timer */
    char host[256];
    int port;
    const conn_config *cfg;
    const conn_ops *ops;        /* the ops of every connection it makes */
    void *data;                 /* data of every connection it makes */
    conn *c;                    /* the current connection, NULL between tries */
    unsigned attempt;           /* failed tries since the last success */
    bool stopping;              /* conn_link_stop was called */
    void (*on_stopped)(conn_link *l); /* runs once everything is closed */
};

/* Starts dialling target "HOST:PORT". Returns 0 or -EINVAL for a bad address. */
int conn_link_start(conn_link *l, uv_loop_t *loop, const char *target, const conn_config *cfg,
               const conn_ops *ops, void *data);
/* The connection, when it is authenticated; NULL otherwise. */
conn *conn_link_conn(conn_link *l);
/* Stops dialling and closes the connection; on_stopped (may be NULL) follows. */
void conn_link_stop(conn_link *l, void (*on_stopped)(conn_link *l));
