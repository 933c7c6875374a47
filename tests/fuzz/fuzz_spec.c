/* fuzz_spec.c: libFuzzer target for the spec's text form (generator/spec.c), built by tests/fuzz/run.sh.
 *
 * Whatever the input, spec_parse must return without crashing, and a failure must come with a sentence.
 * When it succeeds, the canonical text is a fixed point: spec_format(parsed) fits FG_SPEC_NAME_MAX,
 * parses back to an equal spec, and formatting that again gives the same bytes (the text names the
 * variant in caches and bundles, so two texts for one spec, or one text for two specs, would be a bug).
 * The parsed spec also goes through what a CLI spec goes through next (tile filling, validation, the
 * derived sizes), so arithmetic on hostile field values runs under UBSan. A broken invariant aborts,
 * which is how a libFuzzer target reports a finding. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "generator/spec.h"
#include "generator/tile_policy.h"
#include "generator/validate.h"

/* Reports a broken invariant with the input that broke it and stops the fuzzer (a finding). */
static void fuzz_spec_fail(const char *what, const char *input, const char *detail) {
    fprintf(stderr, "fuzz_spec: %s\n  input: '%s'\n  detail: %s\n", what, input, detail);
    abort();
}

/* Tile filling, validation and the derived sizes on a parsed spec: none may crash or overflow, and a
 * refusal must carry a sentence. */
static void fuzz_spec_downstream(const fg_spec *parsed, const char *input) {
    fg_tile_policy policy;
    fg_error err;
    fg_error_clear(&err);
    if (tile_policy_init_default(&policy, &err) != FG_OK)
        fuzz_spec_fail("the default tile policy could not be built", input, err.msg);
    fg_spec s = *parsed;
    fg_error_clear(&err);
    fg_status st = spec_fill_tiles(&s, &policy, &err);
    if (st != FG_OK && err.msg[0] == '\0')
        fuzz_spec_fail("spec_fill_tiles failed without a message", input, "");
    fg_error_clear(&err);
    st = spec_validate(&s, &err);
    if (st != FG_OK && err.msg[0] == '\0')
        fuzz_spec_fail("spec_validate refused without a message", input, "");
    if (st == FG_OK) {
        /* Only valid specs reach the emitter and the launcher, which use these. */
        volatile size_t smem = spec_smem_bytes(&s);
        volatile int threads = spec_threads(&s);
        volatile int padded = spec_head_dim_padded(&s);
        (void)smem;
        (void)threads;
        (void)padded;
    }
    tile_policy_free(&policy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* spec_parse reads a C string: the input up to its first NUL is what a caller could pass. */
    char *text = malloc(size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';

    fg_spec a;
    fg_error err;
    fg_error_clear(&err);
    if (spec_parse(text, &a, &err) != FG_OK) {
        if (err.msg[0] == '\0')
            fuzz_spec_fail("spec_parse failed without a message", text, "");
        free(text);
        return 0;
    }

    char name[FG_SPEC_NAME_MAX], again[FG_SPEC_NAME_MAX];
    int n = spec_format(&a, name, sizeof name);
    if (n <= 0 || (size_t)n >= sizeof name || strlen(name) != (size_t)n)
        fuzz_spec_fail("spec_format could not print a parsed spec", text, "");
    fg_spec b;
    fg_error_clear(&err);
    if (spec_parse(name, &b, &err) != FG_OK)
        fuzz_spec_fail("the canonical text of a parsed spec does not parse", text, err.msg);
    if (!spec_equal(&a, &b))
        fuzz_spec_fail("format then parse gave a different spec", text, name);
    int m = spec_format(&b, again, sizeof again);
    if (m != n || strcmp(name, again) != 0)
        fuzz_spec_fail("the canonical text is not a fixed point", text, again);

    fuzz_spec_downstream(&a, text);
    free(text);
    return 0;
}
