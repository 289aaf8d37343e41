/* Prometheus metrics of a daemon, served as text exposition at
 * http://HOST:PORT/metrics (libmicrohttpd, on its own thread). The event
 * loop renders the text once a second from every registered source, so the
 * HTTP thread never reads state the loop is changing; a scrape sees values
 * at most a second old. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct metrics_buf metrics_buf;

/* Appends text to the exposition being rendered. */
void metrics_printf(metrics_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Copies a label value into out (outlen bytes, always terminated) with
 * backslash, double quote and newline escaped as the text exposition format
 * requires; a value cut short never ends inside an escape. Returns out. */
const char *metrics_label_escape(const char *in, char *out, size_t outlen);

/* A histogram with fixed upper bounds (seconds, ascending). */
#define METRICS_BUCKETS 12
typedef struct metrics_hist {
    const char *name;                    /* e.g. appliance_step_seconds */
    const char *help;
    double bounds[METRICS_BUCKETS];      /* upper bounds; +Inf is implicit */
    uint64_t counts[METRICS_BUCKETS + 1];
    double sum;
    uint64_t count;
} metrics_hist;

/* Sets the usual bounds for latencies: 1 ms to 100 s. */
void metrics_hist_init(metrics_hist *h, const char *name, const char *help);
void metrics_hist_observe(metrics_hist *h, double v);
void metrics_hist_render(const metrics_hist *h, metrics_buf *b, const char *labels);

typedef void (*metrics_source)(void *arg, metrics_buf *b);

/* Adds a source rendered into every exposition (at most 16). */
void metrics_add_source(metrics_source fn, void *arg);

/* Serves HOST:PORT (a numeric IP; port 0 picks one). Returns the port
 * bound, or a negative code with a message in err. */
int metrics_start(uv_loop_t *loop, const char *hostport, char *err, size_t errlen);
/* Stops the server and the render timer (closes its handle). */
void metrics_stop(void);
