/* fuzz_config.c: libFuzzer target for the Lua config loader (generator/config.c through the sandbox in
 * core/lua_sandbox.c), built by tests/fuzz/run.sh and seeded with the
 * shipped configs (configs/NAME.lua).
 *
 * The input is config text, as a file would hold it. Whatever it says, config_load_string must return
 * (the sandbox's instruction, time and memory limits end every run), leak nothing (LeakSanitizer checks
 * each run) and keep its contract:
 *   - a failure is FG_ERR_CONFIG, leaves the config empty, and its message starts with "fuzz.lua:LINE:"
 *     (the only message without a line is the one about the whole file: it lists no variants);
 *   - a success lists 1..65536 variants, each validated with its tiles filled, no two equal, and each
 *     one's canonical text parsing back to it.
 * A broken rule aborts with the reason on stderr, which libFuzzer records as a finding. */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "generator/config.h"
#include "generator/validate.h"

#define FUZZ_CHUNK "fuzz.lua" /* the chunk name every message must start with */
/* The one message about the whole file rather than a line of it. */
#define FUZZ_NO_VARIANTS FUZZ_CHUNK ": the config lists no variants"

/* Reports a broken rule with the message or variant involved and stops the fuzzer (a finding). */
static void fuzz_config_fail(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_config: %s\n  detail: %s\n", what, detail);
    abort();
}

/* True when msg starts with "fuzz.lua:" followed by a line number and ':'. */
static int fuzz_config_has_line(const char *msg) {
    size_t n = strlen(FUZZ_CHUNK);
    if (strncmp(msg, FUZZ_CHUNK, n) != 0 || msg[n] != ':')
        return 0;
    const char *p = msg + n + 1;
    if (!isdigit((unsigned char)*p))
        return 0;
    while (isdigit((unsigned char)*p))
        p++;
    return *p == ':';
}

/* qsort order over canonical names, for the duplicate check. */
static int fuzz_config_name_cmp(const void *a, const void *b) {
    return strcmp((const char *)a, (const char *)b);
}

/* Checks a successful load: bounds on the count, every variant valid and round-tripping through its
 * canonical text, and no two variants alike. */
static void fuzz_config_check_ok(const fg_config *cfg) {
    if (cfg->count < 1 || cfg->count > 65536 || cfg->variants == NULL)
        fuzz_config_fail("a successful load lists no variants or more than 65536", "");
    char (*names)[FG_SPEC_NAME_MAX] = malloc((size_t)cfg->count * sizeof *names);
    if (names == NULL)
        return;
    for (int i = 0; i < cfg->count; i++) {
        const fg_spec *s = &cfg->variants[i];
        fg_error err;
        fg_error_clear(&err);
        if (spec_format(s, names[i], sizeof names[i]) < 0)
            fuzz_config_fail("a loaded variant has no canonical text", "");
        if (spec_validate(s, &err) != FG_OK)
            fuzz_config_fail("a loaded variant does not validate", err.msg);
        fg_spec back;
        if (spec_parse(names[i], &back, &err) != FG_OK || !spec_equal(&back, s))
            fuzz_config_fail("a loaded variant's canonical text does not parse back to it", names[i]);
    }
    qsort(names, (size_t)cfg->count, sizeof *names, fuzz_config_name_cmp);
    for (int i = 1; i < cfg->count; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            fuzz_config_fail("a loaded config lists a variant twice", names[i]);
    free(names);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fg_config cfg;
    fg_error err;
    fg_error_clear(&err);
    fg_status st = config_load_string(FUZZ_CHUNK, (const char *)data, size, NULL, &cfg, &err);
    if (st == FG_OK) {
        fuzz_config_check_ok(&cfg);
        config_free(&cfg);
        return 0;
    }
    if (st != FG_ERR_CONFIG)
        fuzz_config_fail("a failed load is not FG_ERR_CONFIG", err.msg);
    if (cfg.count != 0 || cfg.variants != NULL || cfg.policy.rules != NULL || cfg.policy.count != 0)
        fuzz_config_fail("a failed load left something in the config", err.msg);
    if (!fuzz_config_has_line(err.msg) &&
        strncmp(err.msg, FUZZ_NO_VARIANTS, sizeof FUZZ_NO_VARIANTS - 1) != 0)
        fuzz_config_fail("an error message does not start with \"fuzz.lua:LINE:\"", err.msg);
    return 0;
}
