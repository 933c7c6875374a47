/* emit.c: spec -> one self-contained CUDA source.
 * The source is: a banner naming the variant, a prelude of #defines for the spec, then the template
 * pieces in dependency order, each introduced by a comment naming its file. Nothing depends on the
 * time, the machine or the environment, so the same spec always gives the same bytes. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "emit.h"
#include "emit_templates.h"

/* The pieces of the forward family, in the order they must appear. */
static const char *const fwd_pieces[] = {
    "common/fg_params.h", "common/types.cuh", "common/mma_sm80.cuh",
    "common/cp_async.cuh", "common/softmax.cuh", "fwd_sm80.cuh",
};

static const char *template_text(const char *name) {
    for (int i = 0; i < fg_template_count; i++)
        if (strcmp(fg_templates[i].name, name) == 0) return fg_templates[i].text;
    return NULL;
}

/* A growable string; `failed` latches the first allocation failure so callers check once. */
typedef struct sbuf {
    char *data;
    size_t len, cap;
    int failed;
} sbuf;

static void sb_append(sbuf *b, const char *s, size_t n) {
    if (b->failed) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 16384;
        while (cap < b->len + n + 1) cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) { b->failed = 1; return; }
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void sb_printf(sbuf *b, const char *fmt, ...) FG_PRINTF(2, 3);
static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) { b->failed = 1; return; }
    sb_append(b, tmp, (size_t)n);
}

fg_status emit_source(const fg_spec *spec, char **src, size_t *len, fg_error *err) {
    *src = NULL;
    if (len) *len = 0;
    fg_status st = spec_validate(spec, err);
    if (st != FG_OK) return st;
    char name[FG_SPEC_NAME_MAX];
    if (spec_format(spec, name, sizeof name) < 0)
        return fg_fail(err, FG_ERR_INTERNAL, "spec name does not fit %d bytes", FG_SPEC_NAME_MAX);

    sbuf b = {0};
    sb_printf(&b, "// flashgen %s: generated kernel, do not edit.\n// variant: %s\n", FG_VERSION_STRING, name);
    sb_printf(&b, "// regenerate with: flashgen gen '%s'\n\n", name);
    sb_printf(&b, "#define FG_HEAD_DIM %d\n", spec->head_dim);
    sb_printf(&b, "#define FG_HEAD_DIM_PADDED %d\n", spec_head_dim_padded(spec));
    sb_printf(&b, "#define FG_BLOCK_M %d\n", spec->block_m);
    sb_printf(&b, "#define FG_BLOCK_N %d\n", spec->block_n);
    sb_printf(&b, "#define FG_WARPS %d\n", spec->warps);
    sb_printf(&b, "#define FG_STAGES %d\n", spec->stages);
    sb_printf(&b, "#define FG_CAUSAL %d\n", spec->causal ? 1 : 0);
    const int fp8 = spec->dtype == FG_DTYPE_E4M3 || spec->dtype == FG_DTYPE_E5M2;
    sb_printf(&b, "#define FG_DTYPE_BF16 %d\n", spec_out_dtype(spec) == FG_DTYPE_BF16 ? 1 : 0); /* O's type */
    sb_printf(&b, "#define FG_FP8 %d\n", fp8);
    sb_printf(&b, "#define FG_FP8_E5M2 %d\n", spec->dtype == FG_DTYPE_E5M2 ? 1 : 0);
    sb_printf(&b, "#define FG_ESIZE %d\n", fp8 ? 1 : 2);
    sb_printf(&b, "#define FG_ARCH %d\n", spec->arch);
    for (size_t i = 0; i < sizeof fwd_pieces / sizeof fwd_pieces[0]; i++) {
        const char *text = template_text(fwd_pieces[i]);
        if (!text) {
            free(b.data);
            return fg_fail(err, FG_ERR_INTERNAL, "template %s is not compiled into this library", fwd_pieces[i]);
        }
        sb_printf(&b, "\n// ---- templates/%s ----\n", fwd_pieces[i]);
        sb_append(&b, text, strlen(text));
    }
    if (b.failed) {
        free(b.data);
        return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory emitting %s", name);
    }
    *src = b.data;
    if (len) *len = b.len;
    return FG_OK;
}
