/* One-line error messages for functions that return a negative code and
 * say why in a caller's buffer. */
#pragma once

#include <stddef.h>

/* Writes the message into err (errlen bytes, always NUL-terminated when
 * errlen > 0) and returns code. */
int errmsg(int code, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
