/* The event loop's lag (looplag.h). */
#include "looplag.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"

static void looplag__tick(uv_timer_t *t)
{
    looplag *l = t->data;
    uint64_t now = uv_hrtime();
    double lag = now > l->due ? (double)(now - l->due) * 1e-9 : 0.0;
    looplag_observe(l, lag);
    /* the next tick is due an interval from now: one long block is one lag,
     * not a run of them */
    l->due = now + l->interval_ns;
}

void looplag_start(looplag *l, uv_loop_t *loop, unsigned interval_ms, unsigned warn_ms)
{
    memset(l, 0, sizeof(*l));
    metrics_hist_init(&l->hist, "appliance_loop_lag_seconds",
                      "How late the event loop ran a timer: time it was kept from its work.");
    l->interval_ns = (uint64_t)interval_ms * 1000000u;
    l->warn_sec = warn_ms * 1e-3;
    uv_timer_init(loop, &l->timer);
    l->timer.data = l;
    uv_unref((uv_handle_t *)&l->timer);
    l->due = uv_hrtime() + l->interval_ns;
    uv_timer_start(&l->timer, looplag__tick, interval_ms, interval_ms);
}

void looplag_stop(looplag *l)
{
    uv_timer_stop(&l->timer);
    uv_close((uv_handle_t *)&l->timer, NULL);
}

void looplag_observe(looplag *l, double lag_sec)
{
    metrics_hist_observe(&l->hist, lag_sec);
    if (lag_sec > l->max_sec)
        l->max_sec = lag_sec;
    l->recent[l->next] = (float)lag_sec;
    l->next = (l->next + 1) % LOOPLAG_RECENT;
    if (l->nrecent < LOOPLAG_RECENT)
        l->nrecent++;
    if (lag_sec > l->warn_sec) {
        l->over++;
        log_warn("the event loop was kept from its work for %.3f s (more than %.3f s)", lag_sec,
                 l->warn_sec);
    }
}

static int looplag__cmp(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

double looplag_quantile(const looplag *l, double q)
{
    if (!l->nrecent)
        return 0.0;
    float *v = malloc(l->nrecent * sizeof(float));
    if (!v)
        return l->max_sec;
    memcpy(v, l->recent, l->nrecent * sizeof(float));
    qsort(v, l->nrecent, sizeof(float), looplag__cmp);
    size_t i = (size_t)(q * (l->nrecent - 1) + 0.5);
    double r = v[i];
    free(v);
    return r;
}

void looplag_render(const looplag *l, metrics_buf *b)
{
    metrics_hist_render(&l->hist, b, NULL);
    metrics_printf(b, "# HELP appliance_loop_lag_max_seconds The longest the event loop was kept from its work.\n"
                      "# TYPE appliance_loop_lag_max_seconds gauge\n"
                      "appliance_loop_lag_max_seconds %.6f\n", l->max_sec);
    metrics_printf(b, "# HELP appliance_loop_lag_p99_seconds The 99th percentile of the event loop's last %d lags.\n"
                      "# TYPE appliance_loop_lag_p99_seconds gauge\n"
                      "appliance_loop_lag_p99_seconds %.6f\n", LOOPLAG_RECENT, looplag_quantile(l, 0.99));
    metrics_printf(b, "# HELP appliance_loop_lag_over_total Lags longer than the bound (%.3f s), each logged.\n"
                      "# TYPE appliance_loop_lag_over_total counter\n"
                      "appliance_loop_lag_over_total %llu\n", l->warn_sec, (unsigned long long)l->over);
}
