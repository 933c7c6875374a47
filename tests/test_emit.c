/* test_emit.c: the emitter (generator/emit.c): a deterministic prelude that includes its family's kernel
 * file, templates that include what they use, and a flattened source that is self-contained and readable. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include "generator/emit.h"

/* A variant of the mma.sync family on Hopper (sm_90). */
static fg_spec spec_for(int head_dim, int causal, fg_dtype dt) {
    fg_spec s = {.kind = FG_KIND_FWD, .arch = 90, .arch_accel = 0, .dtype = dt, .head_dim = head_dim,
                 .block_m = 128, .block_n = 64, .warps = 8, .stages = 2, .causal = causal};
    return s;
}

/* A variant of the wgmma family (sm_90a): two consumer warpgroups and the producer. */
static fg_spec wg_spec_for(int head_dim, int causal, fg_dtype dt) {
    fg_spec s = {.kind = FG_KIND_FWD, .arch = 90, .arch_accel = 1, .dtype = dt, .head_dim = head_dim,
                 .block_m = 128, .block_n = 128, .warps = 12, .stages = 2, .causal = causal};
    return s;
}

/* The flattened source of s (emit_source, then emit_flatten); caller frees. */
static char *flat_of(const fg_spec *s) {
    char *pre = NULL, *flat = NULL;
    fg_error e;
    cr_assert_eq(emit_source(s, &pre, NULL, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(emit_flatten(pre, &flat, NULL, &e), FG_OK, "%s", e.msg);
    free(pre);
    return flat;
}

/* Emits s twice and asserts the two sources are byte-identical and NUL-free (what names the case). */
static void expect_same_bytes(const fg_spec *s, const char *what, int d) {
    char *a, *b;
    size_t na, nb;
    fg_error e;
    cr_assert_eq(emit_source(s, &a, &na, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(emit_source(s, &b, &nb, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(na, nb);
    cr_assert_eq(memcmp(a, b, na), 0, "%shead_dim %d: two emissions differ", what, d);
    cr_assert_eq(strlen(a), na);
    free(a);
    free(b);
}

Test(emit, same_spec_same_bytes) {
    for (int d = 8; d <= 256; d += 8) {
        fg_spec s = spec_for(d, d % 16 == 0, d % 24 == 0 ? FG_DTYPE_F16 : FG_DTYPE_BF16);
        expect_same_bytes(&s, "", d);
    }
    for (int d = 32; d <= 256; d += 32) {
        fg_spec s = wg_spec_for(d, d % 64 == 0, d % 96 == 0 ? FG_DTYPE_F16 : FG_DTYPE_BF16);
        s.block_n = d > 128 ? 64 : 128; /* within the consumer's registers at every head_dim */
        expect_same_bytes(&s, "sm_90a ", d);
    }
}

Test(emit, self_contained_and_readable) {
    fg_spec s = spec_for(128, 1, FG_DTYPE_BF16);
    char *src;
    size_t n;
    fg_error e;
    cr_assert_eq(emit_source(&s, &src, &n, &e), FG_OK, "%s", e.msg);
    /* the prelude: the spec's constants, then exactly one include, the family's kernel file */
    const char *inc = strstr(src, "#include");
    cr_assert_not_null(inc, "the prelude includes its kernel file");
    cr_assert_str_eq(inc, "#include \"forward_mma.cuh\"\n", "one include, last: %s", inc);
    cr_assert(strstr(src, "#define FG_OUT_IS_BF16 1"));
    cr_assert_null(strstr(src, "FG_DTYPE_BF16"), "the emitted macro must not share include/flashgen.h's name");
    free(src);
    /* the flattened source: no include left, every template once */
    src = flat_of(&s);
    cr_assert_null(strstr(src, "#include"), "the flattened source must not include headers");
    char name[FG_SPEC_NAME_MAX];
    spec_format(&s, name, sizeof name);
    cr_assert(strstr(src, name), "the variant's name must appear in the source");
    const char *must[] = {"#define FG_HEAD_DIM 128", "#define FG_CAUSAL 1", "#define FG_OUT_IS_BF16 1",
                          "templates/forward_mma.cuh", "templates/common/softmax.cuh", "fg_online_softmax",
                          "extern \"C\" __global__", FG_KERNEL_NAME, "bottom-right"};
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++)
        cr_assert(strstr(src, must[i]), "source lacks '%s'", must[i]);
    const char *once = strstr(src, "// ---- templates/common/types.cuh ----");
    cr_assert_not_null(once);
    cr_assert_null(strstr(once + 1, "// ---- templates/common/types.cuh ----"), "types.cuh expanded twice");
    free(src);
}

/* Every template is include-guarded (so expanding it once is what the preprocessor does) and includes only
 * other templates, by their names under templates/: NVRTC needs no toolkit header and no include path. */
Test(emit, templates_are_guarded_and_include_only_templates) {
    for (int i = 0; i < emit_header_count(); i++) {
        const char *name = emit_header_name(i), *text = emit_header_text(i);
        const char *ifndef = strstr(text, "\n#ifndef FG_");
        cr_assert_not_null(ifndef, "%s has no include guard", name);
        cr_assert_eq(strncmp(strchr(ifndef + 1, '\n') + 1, "#define FG_", 11), 0, "%s: #ifndef then #define", name);
        for (const char *p = strstr(text, "#include"); p; p = strstr(p + 1, "#include")) {
            if (p > text && p[-1] != '\n') continue; /* (mentioned in a comment) */
            cr_assert_eq(p[9], '"', "%s includes a system header: %.40s", name, p);
            int found = 0;
            for (int j = 0; j < emit_header_count(); j++) {
                size_t n = strlen(emit_header_name(j));
                found |= strncmp(p + 10, emit_header_name(j), n) == 0 && p[10 + n] == '"';
            }
            cr_assert(found, "%s includes a file that is not a template: %.60s", name, p);
        }
    }
}

/* arch sm_90a emits the wgmma family: TMA loads and the wgmma wrappers generated for the tile (QK^T with
 * n = block_n, PV with n = head_dim, in the spec's dtype); arch sm_90 the mma.sync family, with neither. */
Test(emit, sm_90a_emits_the_wgmma_family_and_sm_90_does_not) {
    fg_spec w = wg_spec_for(128, 0, FG_DTYPE_BF16), m = spec_for(128, 0, FG_DTYPE_BF16);
    char *sw, *sm;
    size_t nw, nm;
    fg_error e;
    sw = flat_of(&w);
    sm = flat_of(&m);
    (void)nm;
    cr_assert_null(strstr(sw, "#include"), "the flattened source must not include headers");
    char name[FG_SPEC_NAME_MAX];
    spec_format(&w, name, sizeof name);
    cr_assert(strstr(sw, name), "the variant's name must appear in the source");
    const char *must[] = {"wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", "cp.async.bulk.tensor",
                          "templates/forward_wgmma.cuh", "templates/common/wgmma.cuh", "fg_wgmma_qk", "fg_wgmma_pv",
                          "#define FG_HEAD_DIM 128", "#define FG_CAUSAL 0", "#define FG_OUT_IS_BF16 1",
                          "extern \"C\" __global__", FG_KERNEL_NAME};
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++)
        cr_assert(strstr(sw, must[i]), "the sm_90a source lacks '%s'", must[i]);
    const char *never[] = {"wgmma.mma_async", "cp.async.bulk.tensor", "templates/forward_wgmma.cuh",
                           "templates/common/wgmma.cuh", "fg_wgmma_qk"};
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        cr_assert_null(strstr(sm, never[i]), "the sm_90 source holds '%s'", never[i]);
    cr_assert(strstr(sm, "templates/forward_mma.cuh"), "sm_90 builds the mma.sync family");
    cr_assert_null(strstr(sw, "templates/forward_mma.cuh"), "sm_90a does not build the mma.sync family");
    free(sw);
    free(sm);

    /* The wrappers follow the tile and the dtype: fp16, block_n 64 for QK^T, head_dim 256 for PV. */
    w = wg_spec_for(256, 1, FG_DTYPE_F16);
    w.block_n = 64;
    cr_assert_eq(emit_source(&w, &sw, &nw, &e), FG_OK, "%s", e.msg);
    cr_assert(strstr(sw, "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16"), "QK^T wrapper for block_n 64");
    cr_assert(strstr(sw, "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16"), "PV wrapper for head_dim 256");
    cr_assert_null(strstr(sw, ".bf16.bf16"), "an fp16 variant has no bf16 wgmma");
    cr_assert_null(strstr(sw, "m64n128k16"), "no wrapper for another tile");
    free(sw);

    /* An sm_90a spec with an mma.sync tile is refused, not emitted as either family. */
    w = wg_spec_for(128, 0, FG_DTYPE_BF16);
    w.warps = 8;
    sw = (char *)1;
    cr_assert_eq(emit_source(&w, &sw, NULL, &e), FG_ERR_UNSUPPORTED);
    cr_assert_null(sw);
    cr_assert(strstr(e.msg, "sm_90a"), "%s", e.msg);
}

Test(emit, different_specs_differ) {
    fg_spec a = spec_for(128, 0, FG_DTYPE_BF16), b = spec_for(128, 1, FG_DTYPE_BF16), c = spec_for(128, 0, FG_DTYPE_F16);
    char *sa, *sb, *sc;
    size_t na, nb, nc;
    fg_error e;
    cr_assert_eq(emit_source(&a, &sa, &na, &e), FG_OK);
    cr_assert_eq(emit_source(&b, &sb, &nb, &e), FG_OK);
    cr_assert_eq(emit_source(&c, &sc, &nc, &e), FG_OK);
    cr_assert(na != nb || memcmp(sa, sb, na) != 0);
    cr_assert(na != nc || memcmp(sa, sc, na) != 0);
    free(sa);
    free(sb);
    free(sc);
    /* The same problem on sm_90a and on sm_90 gives two different sources. */
    fg_spec w = wg_spec_for(128, 0, FG_DTYPE_BF16);
    cr_assert_eq(emit_source(&w, &sa, &na, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(emit_source(&a, &sb, &nb, &e), FG_OK, "%s", e.msg);
    cr_assert(na != nb || memcmp(sa, sb, na) != 0);
    free(sa);
    free(sb);
}

Test(emit, invalid_spec_is_refused_with_the_rule) {
    fg_spec s = spec_for(100, 0, FG_DTYPE_BF16);
    char *src = (char *)1;
    fg_error e;
    cr_assert_eq(emit_source(&s, &src, NULL, &e), FG_ERR_UNSUPPORTED);
    cr_assert_null(src);
    cr_assert(strstr(e.msg, "head_dim 100"), "%s", e.msg);
}
