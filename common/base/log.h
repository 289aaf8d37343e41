/* Logging to stderr: one line per event with UTC time, level and component.
 * Library code returns errors; mains and request handlers decide what to log. */
#pragma once

#include <stdarg.h>

enum log_level { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3 };

/* Sets the component name printed on every line (copied) and the minimum level. */
void log_init(const char *component, enum log_level min_level);
/* Parses "debug", "info", "warn" or "error"; returns -1 when unknown. */
int log_level_parse(const char *s);

void log_msg(enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
