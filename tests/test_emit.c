/* test_emit.c: the emitter (generator/emit.c): deterministic, self-contained, readable source. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include "emit.h"

static fg_spec spec_for(int head_dim, int causal, fg_dtype dt) {
    fg_spec s = {.kind = FG_KIND_FWD, .arch = 90, .arch_accel = 1, .dtype = dt, .head_dim = head_dim,
                 .block_m = 128, .block_n = 64, .warps = 8, .stages = 2, .causal = causal};
    return s;
}

Test(emit, same_spec_same_bytes) {
    for (int d = 8; d <= 256; d += 8) {
        fg_spec s = spec_for(d, d % 16 == 0, d % 24 == 0 ? FG_DTYPE_F16 : FG_DTYPE_BF16);
        char *a, *b;
        size_t na, nb;
        fg_error e;
        cr_assert_eq(emit_source(&s, &a, &na, &e), FG_OK, "%s", e.msg);
        cr_assert_eq(emit_source(&s, &b, &nb, &e), FG_OK, "%s", e.msg);
        cr_assert_eq(na, nb);
        cr_assert_eq(memcmp(a, b, na), 0, "head_dim %d: two emissions differ", d);
        cr_assert_eq(strlen(a), na);
        free(a);
        free(b);
    }
}

Test(emit, self_contained_and_readable) {
    fg_spec s = spec_for(128, 1, FG_DTYPE_BF16);
    char *src;
    size_t n;
    fg_error e;
    cr_assert_eq(emit_source(&s, &src, &n, &e), FG_OK, "%s", e.msg);
    cr_assert_null(strstr(src, "#include"), "generated source must not include headers");
    char name[FG_SPEC_NAME_MAX];
    spec_format(&s, name, sizeof name);
    cr_assert(strstr(src, name), "the variant's name must appear in the source");
    const char *must[] = {"#define FG_HEAD_DIM 128", "#define FG_CAUSAL 1", "#define FG_DTYPE_BF16 1",
                          "templates/fwd_sm80.cuh", "templates/common/softmax.cuh", "fg_online_softmax",
                          "extern \"C\" __global__", FG_KERNEL_NAME, "bottom-right"};
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++)
        cr_assert(strstr(src, must[i]), "source lacks '%s'", must[i]);
    free(src);
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
}

Test(emit, invalid_spec_is_refused_with_the_rule) {
    fg_spec s = spec_for(100, 0, FG_DTYPE_BF16);
    char *src = (char *)1;
    fg_error e;
    cr_assert_eq(emit_source(&s, &src, NULL, &e), FG_ERR_UNSUPPORTED);
    cr_assert_null(src);
    cr_assert(strstr(e.msg, "head_dim 100"), "%s", e.msg);
}
