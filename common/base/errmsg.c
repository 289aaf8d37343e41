/* One-line error messages into a caller's buffer. */
#include "errmsg.h"

#include <stdarg.h>
#include <stdio.h>

int errmsg(int code, char *err, size_t errlen, const char *fmt, ...)
{
    if (errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}
