/* error.h: how flashgen's internal modules report failure.
 * Every fallible internal function takes an fg_error* and returns an fg_status; on failure it fills the
 * error with one sentence naming the input and the rule it broke (fg_fail). The public API copies the
 * sentence into the context, so fg_last_error() can return it. A NULL fg_error* is allowed: the status
 * is still returned, the sentence dropped. */
#ifndef FG_ERROR_H
#define FG_ERROR_H

#include "flashgen.h"

typedef struct fg_error {
    fg_status status; /* FG_OK until something fails */
    char msg[1024];   /* the sentence, NUL-terminated */
} fg_error;

#if defined(__GNUC__)
#define FG_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define FG_PRINTF(a, b)
#endif

/* Records status and the printf-formatted sentence in err (if not NULL); returns status. */
fg_status fg_fail(fg_error *err, fg_status status, const char *fmt, ...) FG_PRINTF(3, 4);

/* Clears err to FG_OK and an empty message. */
void fg_error_clear(fg_error *err);

#endif
