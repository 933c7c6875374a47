/* error.c: filling fg_error (see error.h). */
#include <stdarg.h>
#include <stdio.h>
#include "core/error.h"

fg_status fg_fail(fg_error *err, fg_status status, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = status;
    }
    return status;
}

void fg_error_clear(fg_error *err) {
    if (err) {
        err->status = FG_OK;
        err->msg[0] = '\0';
    }
}
