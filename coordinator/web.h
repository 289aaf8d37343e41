/* The coordinator's web page and its JSON API (--http ADDR): the members,
 * the queue and the jobs, a job's plots, memory plan and log, and cancel,
 * for the same users and keys as the CLI (docs/web.md). libmicrohttpd runs
 * without threads of its own: its epoll descriptor is watched by the
 * coordinator's libuv loop, which calls it, so every handler runs on the
 * loop thread beside the rest of the coordinator and takes no lock. */
#pragma once

#include <stddef.h>

#include "coordinator.h"
#include "users.h"

#define WEB_MAX_CONNECTIONS 64    /* open at once; libmicrohttpd refuses more */
#define WEB_BUSY_CONNECTIONS 48   /* past this many, requests get 503 */
#define WEB_MAX_BODY 4096         /* bytes of a request body (a login) */
#define WEB_SESSIONS_MAX 256      /* sessions kept; the oldest goes first */
#define WEB_SESSION_SEC (12 * 3600) /* a session's life */
#define WEB_LOG_LINES_MAX 1000    /* log lines of one answer */
#define WEB_POINTS_MAX 20000      /* points of one answer */

typedef struct web web;

/* Serves the page and the API on addr (IPv4:PORT, port 0 picks one) from
 * co's loop; u (may be NULL) holds the users' keys, the cluster secret is
 * co->n's. Returns the listener (owned: web_stop), or NULL with err set.
 * *port gets the port bound. */
web *web_start(coordinator *co, const users *u, const char *addr, int *port, char *err,
               size_t errlen);

/* Stops listening, closes every connection and the loop's handles; the
 * listener is freed once they are closed. NULL is fine. */
void web_stop(web *w);
