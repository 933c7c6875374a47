/* harness.c: what every flashgen program (flashgen, fgbench) prints and parses the same way: messages,
 * usage errors, whole-number options and output directories (see harness.h). */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tools/harness.h"

const char *tool_program = "flashgen";

/* Prints "PROGRAM CMD: <sentence>" on stderr. */
void say(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s %s: ", tool_program, cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Prints a usage error (a sentence plus where to read more) and returns EXIT_USAGE. */
int usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s %s: ", tool_program, cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "; see '%s %s --help'\n", tool_program, cmd);
    va_end(ap);
    return EXIT_USAGE;
}

/* Turns getopt_long's '?' (unknown option) or ':' (missing argument) into a usage error naming the
 * option as the user typed it. Returns EXIT_USAGE. */
int bad_option(const char *cmd, char **argv, int c) {
    const char *typed = optind > 0 ? argv[optind - 1] : "?";
    char shortname[3] = {'-', (char)optopt, '\0'};
    /* For a short option getopt reports the letter in optopt (it may sit inside a cluster like -jx);
     * for a long one optopt is 0 (unknown) or the option's value, and the word is argv[optind-1]. */
    int is_short = optopt > 0 && optopt < 128 && !(typed[0] == '-' && typed[1] == '-');
    const char *name = is_short ? shortname : typed;
    if (c == ':') return usage_error(cmd, "option '%s' needs a value", name);
    return usage_error(cmd, "unknown option '%s'", name);
}

/* Parses a whole decimal integer from `text` for option `opt` into *out, requiring min <= value <= max.
 * Garbage, signs below min (negatives) and overflow are usage errors naming the option: returns 0 or
 * EXIT_USAGE (already printed). */
int parse_number(const char *cmd, const char *opt, const char *text, long long min, long long max,
                 long long *out) {
    const char *p = text;
    while (*p == ' ') p++;
    if (*p == '+') p++;
    if (*p == '-' || *p < '0' || *p > '9') goto bad;
    errno = 0;
    char *end;
    long long v = strtoll(p, &end, 10);
    if (errno || *end != '\0' || v < min || v > max) goto bad;
    *out = v;
    return 0;
bad:
    return usage_error(cmd, "%s expects a whole number from %lld to %lld, got '%s'", opt, min, max, text);
}

/* Checks, before any long work, that the directory that will hold `path` exists and is writable, so a
 * typo in -o fails in a second instead of after every compile. Returns 0, or 1 after printing why. */
int check_output_dir(const char *cmd, const char *path) {
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    struct stat st;
    if (stat(dir, &st) != 0) {
        say(cmd, "cannot write '%s': directory '%s' does not exist (%s)", path, dir, strerror(errno));
        return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
        say(cmd, "cannot write '%s': '%s' is not a directory", path, dir);
        return 1;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        say(cmd, "cannot write '%s': directory '%s' is not writable (%s)", path, dir, strerror(errno));
        return 1;
    }
    return 0;
}

