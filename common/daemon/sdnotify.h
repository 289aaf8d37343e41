/* Readiness, stopping and watchdog notifications to systemd (Type=notify
 * units). Every call does nothing when systemd did not start the daemon, or
 * when the build has no libsystemd (APPLIANCE_HAVE_SYSTEMD undefined). */
#pragma once

#include <uv.h>

/* READY=1: the daemon serves (the coordinator listens; any other daemon has
 * been acknowledged by the coordinator). Only the first call sends. */
void sdnotify_ready(void);

/* STOPPING=1, and stops the watchdog timer (closing its handle so the loop
 * can end). */
void sdnotify_stopping(void);

/* When the unit has WatchdogSec=, starts a timer on loop that sends
 * WATCHDOG=1 at half the interval systemd asks for; the timer is unreferenced
 * and does not keep the loop alive. Returns 0 (also when there is no
 * watchdog) or a negative libuv code. */
int sdnotify_watchdog_start(uv_loop_t *loop);
