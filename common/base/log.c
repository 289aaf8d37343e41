/* Logging to stderr: "2026-11-21T10:00:00.123Z INFO coordinator: message". */
#include "log.h"

#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static char log__component[32] = "appliance";
static enum log_level log__min = LOG_INFO;

void log_init(const char *component, enum log_level min_level)
{
    snprintf(log__component, sizeof(log__component), "%s", component);
    log__min = min_level;
}

int log_level_parse(const char *s)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    static const char *const names[] = {"DEBUG", "INFO", "WARN", "ERROR"};
    if (level < log__min)
        return;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char line[2048];
    int n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ %s %s: ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, (int)(tv.tv_usec / 1000), names[level], log__component);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof(line))
        vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    /* One write per line so that lines of several processes do not interleave. */
    size_t len = strlen(line);
    if (len >= sizeof(line) - 1)
        len = sizeof(line) - 2;
    line[len++] = '\n';
    fwrite(line, 1, len, stderr);
    fflush(stderr);
}
