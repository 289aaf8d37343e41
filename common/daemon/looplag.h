/* How long a daemon's event loop is kept from its work: a timer due every
 * interval measures how late it fires. A loop that runs long work (an
 * optimizer step over a large tensor, a checkpoint, a big sum) is late by
 * that long, and during it no heartbeat, flow control or status moves.
 * The lags go to /metrics (a histogram, the largest, the 99th percentile of
 * the recent ones) and each one past the bound is logged. */
#pragma once

#include <stdint.h>
#include <uv.h>

#include "metrics.h"

#define LOOPLAG_RECENT 4096 /* lags the percentile is taken over */

typedef struct looplag {
    uv_timer_t timer;
    uint64_t interval_ns;      /* how often the timer is due */
    uint64_t due;              /* when the next tick is due (uv_hrtime) */
    double warn_sec;           /* a lag past this is logged */
    metrics_hist hist;         /* appliance_loop_lag_seconds */
    double max_sec;            /* the largest lag since start */
    uint64_t over;             /* lags past warn_sec */
    float recent[LOOPLAG_RECENT]; /* the last lags, a ring */
    uint32_t nrecent;          /* how many of recent are filled */
    uint32_t next;             /* where the next lag goes */
} looplag;

/* Starts measuring loop's lag every interval_ms, logging lags past
 * warn_ms. The timer does not keep the loop alive (uv_unref). */
void looplag_start(looplag *l, uv_loop_t *loop, unsigned interval_ms, unsigned warn_ms);
/* Closes the timer. */
void looplag_stop(looplag *l);

/* Records one lag, in seconds (what the timer does each tick). */
void looplag_observe(looplag *l, double lag_sec);

/* The q-quantile (0..1) of the recent lags, seconds; 0 before any. */
double looplag_quantile(const looplag *l, double q);

/* Renders the histogram, the largest lag, the recent 99th percentile and
 * the count past the bound. */
void looplag_render(const looplag *l, metrics_buf *b);
