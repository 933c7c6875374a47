/* harness.h: the conventions the flashgen programs share (flashgen and fgbench): exit statuses, messages
 * "PROGRAM CMD: <sentence>" on stderr, usage errors that say where to read more, whole-number options,
 * and output directories checked before long work. Not a library header: only programs print. */
#ifndef FG_HARNESS_H
#define FG_HARNESS_H

#include "core/error.h"

/* The process's exit status: 0 success, 1 failure (stderr says why), 2 usage error. */
enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

/* The program's name in messages: "flashgen" unless the program's main sets another ("fgbench"). */
extern const char *tool_program;

/* Prints "PROGRAM CMD: <sentence>" on stderr. */
void say(const char *cmd, const char *fmt, ...) FG_PRINTF(2, 3);
/* Prints a usage error (the sentence plus "see 'PROGRAM CMD --help'") and returns EXIT_USAGE. */
int usage_error(const char *cmd, const char *fmt, ...) FG_PRINTF(2, 3);
/* Turns getopt_long's '?' or ':' into a usage error naming the option as typed; returns EXIT_USAGE. */
int bad_option(const char *cmd, char **argv, int c);
/* Parses a whole number from min to max for option opt into *out: 0, or EXIT_USAGE (printed). */
int parse_number(const char *cmd, const char *opt, const char *text, long long min, long long max, long long *out);
/* Checks that the directory that will hold path exists and is writable: 0, or 1 after printing why. */
int check_output_dir(const char *cmd, const char *path);

#endif
