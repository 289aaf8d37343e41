/* Prometheus exposition over libmicrohttpd. */
#include "metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <microhttpd.h>

#include "conn.h"

struct metrics_buf {
    char *p;
    size_t len, cap;
};

static struct {
    struct MHD_Daemon *d;
    uv_timer_t timer;
    pthread_mutex_t mu;
    char *text;            /* the last exposition, under mu */
    size_t len;
    metrics_source src[16];
    void *arg[16];
    int nsrc;
    bool running;
} metrics__s = {.mu = PTHREAD_MUTEX_INITIALIZER};

void metrics_printf(metrics_buf *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 8192;
        while (cap < b->len + (size_t)n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return;
        b->p = p;
        b->cap = cap;
    }
}

void metrics_hist_init(metrics_hist *h, const char *name, const char *help)
{
    static const double bounds[METRICS_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                   0.1,   0.25,   0.5,   1,    10,    100};
    memset(h, 0, sizeof(*h));
    h->name = name;
    h->help = help;
    memcpy(h->bounds, bounds, sizeof(bounds));
}

void metrics_hist_observe(metrics_hist *h, double v)
{
    int i = 0;
    while (i < METRICS_BUCKETS && v > h->bounds[i])
        i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

void metrics_hist_render(const metrics_hist *h, metrics_buf *b, const char *labels)
{
    const char *sep = labels && labels[0] ? "," : "";
    labels = labels ? labels : "";
    metrics_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", h->name, h->help, h->name);
    uint64_t cum = 0;
    for (int i = 0; i < METRICS_BUCKETS; i++) {
        cum += h->counts[i];
        metrics_printf(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", h->name, labels, sep, h->bounds[i],
                       (unsigned long long)cum);
    }
    metrics_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", h->name, labels, sep,
                   (unsigned long long)h->count);
    metrics_printf(b, "%s_sum{%s} %.9g\n%s_count{%s} %llu\n", h->name, labels, h->sum, h->name,
                   labels, (unsigned long long)h->count);
}

void metrics_add_source(metrics_source fn, void *arg)
{
    if (metrics__s.nsrc < 16) {
        metrics__s.src[metrics__s.nsrc] = fn;
        metrics__s.arg[metrics__s.nsrc++] = arg;
    }
}

/* Renders every source (on the loop) and publishes the text. */
static void metrics__render(uv_timer_t *t)
{
    metrics_buf b = {0};
    for (int i = 0; i < metrics__s.nsrc; i++)
        metrics__s.src[i](metrics__s.arg[i], &b);
    pthread_mutex_lock(&metrics__s.mu);
    free(metrics__s.text);
    metrics__s.text = b.p;
    metrics__s.len = b.len;
    pthread_mutex_unlock(&metrics__s.mu);
}

static enum MHD_Result metrics__answer(void *cls, struct MHD_Connection *c, const char *url,
                                       const char *method, const char *version,
                                       const char *upload, size_t *upload_size, void **ctx)
{
    struct MHD_Response *r;
    unsigned status = MHD_HTTP_OK;
    if (strcmp(method, "GET") != 0) {
        static const char msg[] = "only GET\n";
        r = MHD_create_response_from_buffer(sizeof(msg) - 1, (void *)msg, MHD_RESPMEM_PERSISTENT);
        status = MHD_HTTP_METHOD_NOT_ALLOWED;
    } else if (strcmp(url, "/metrics") != 0) {
        static const char msg[] = "not found: the metrics are at /metrics\n";
        r = MHD_create_response_from_buffer(sizeof(msg) - 1, (void *)msg, MHD_RESPMEM_PERSISTENT);
        status = MHD_HTTP_NOT_FOUND;
    } else {
        pthread_mutex_lock(&metrics__s.mu);
        r = MHD_create_response_from_buffer(metrics__s.len, metrics__s.text ? metrics__s.text : "",
                                            MHD_RESPMEM_MUST_COPY);
        pthread_mutex_unlock(&metrics__s.mu);
        MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4");
    }
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

int metrics_start(uv_loop_t *loop, const char *hostport, char *err, size_t errlen)
{
    char host[64];
    int port;
    struct sockaddr_in sa = {0};
    if (conn_addr_parse(hostport, host, sizeof(host), &port) < 0 ||
        uv_ip4_addr(host, port, &sa) < 0) {
        snprintf(err, errlen, "bad metrics address \"%s\": expected IPv4:PORT", hostport);
        return -EINVAL;
    }
    metrics__s.d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, (uint16_t)port, NULL, NULL,
                                    metrics__answer, NULL, MHD_OPTION_SOCK_ADDR, &sa,
                                    MHD_OPTION_CONNECTION_LIMIT, 16u, MHD_OPTION_CONNECTION_TIMEOUT,
                                    10u, MHD_OPTION_END);
    if (!metrics__s.d) {
        snprintf(err, errlen, "cannot serve metrics on %s: %s", hostport, strerror(errno));
        return -EADDRINUSE;
    }
    uv_timer_init(loop, &metrics__s.timer);
    uv_timer_start(&metrics__s.timer, metrics__render, 0, 1000);
    metrics__s.running = true;
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(metrics__s.d, MHD_DAEMON_INFO_BIND_PORT);
    return info && info->port ? info->port : port;
}

void metrics_stop(void)
{
    if (!metrics__s.running)
        return;
    metrics__s.running = false;
    MHD_stop_daemon(metrics__s.d);
    uv_timer_stop(&metrics__s.timer);
    uv_close((uv_handle_t *)&metrics__s.timer, NULL);
    pthread_mutex_lock(&metrics__s.mu);
    free(metrics__s.text);
    metrics__s.text = NULL;
    pthread_mutex_unlock(&metrics__s.mu);
}

const char *metrics_label_escape(const char *in, char *out, size_t outlen)
{
    size_t k = 0;
    for (; *in && outlen > 0; in++) {
        const char *esc = *in == '\\' ? "\\\\" : *in == '"' ? "\\\"" : *in == '\n' ? "\\n" : NULL;
        size_t need = esc ? 2 : 1;
        if (k + need >= outlen)
            break;
        if (esc) {
            out[k++] = esc[0];
            out[k++] = esc[1];
        } else {
            out[k++] = *in;
        }
    }
    if (outlen > 0)
        out[k] = 0;
    return out;
}
