/* systemd notifications through libsystemd's sd_notify; compiled to no-ops
 * without it, so the appliance builds where libsystemd is absent. */
#include "sdnotify.h"

#include <stdbool.h>
#include <stdint.h>

#include "log.h"

#ifdef APPLIANCE_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>

static uv_timer_t sdnotify__timer; /* sends WATCHDOG=1; one per process */
static bool sdnotify__timer_on;   /* the timer is initialised and not closed */
static bool sdnotify__ready_sent; /* READY=1 went out once */

static void sdnotify__kick(uv_timer_t *t)
{
    sd_notify(0, "WATCHDOG=1");
}

void sdnotify_ready(void)
{
    if (sdnotify__ready_sent)
        return;
    sdnotify__ready_sent = true;
    if (sd_notify(0, "READY=1") > 0)
        log_debug("told systemd we are ready");
}

void sdnotify_stopping(void)
{
    sd_notify(0, "STOPPING=1");
    if (sdnotify__timer_on) {
        sdnotify__timer_on = false;
        uv_timer_stop(&sdnotify__timer);
        uv_close((uv_handle_t *)&sdnotify__timer, NULL);
    }
}

int sdnotify_watchdog_start(uv_loop_t *loop)
{
    uint64_t usec = 0;
    if (sdnotify__timer_on || sd_watchdog_enabled(0, &usec) <= 0 || usec == 0)
        return 0;
    uint64_t ms = usec / 2000;
    if (ms == 0)
        ms = 1;
    int rc = uv_timer_init(loop, &sdnotify__timer);
    if (rc < 0)
        return rc;
    sdnotify__timer_on = true;
    rc = uv_timer_start(&sdnotify__timer, sdnotify__kick, 0, ms);
    if (rc < 0)
        return rc;
    uv_unref((uv_handle_t *)&sdnotify__timer);
    log_debug("systemd watchdog: WATCHDOG=1 every %llu ms", (unsigned long long)ms);
    return 0;
}

#else /* !APPLIANCE_HAVE_SYSTEMD */

void sdnotify_ready(void)
{
}

void sdnotify_stopping(void)
{
}

int sdnotify_watchdog_start(uv_loop_t *loop)
{
    return 0;
}

#endif
