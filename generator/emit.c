/* emit.c: spec -> the CUDA program NVRTC compiles.
 * The main source is a prelude: a banner naming the variant, the #defines for the spec, the wgmma wrappers
 * generated for the tile (sm_90a families), then one `#include` of the family's kernel file. The templates
 * (templates/, embedded by embed.c) are NVRTC's headers, by their names under templates/; each #includes
 * what it uses, so each opens and compiles on its own against a prelude (nvcc -I templates).
 * emit_flatten expands the includes into one source for people (`flashgen gen`, FLASHGEN_DUMP).
 * Nothing depends on the time, the machine or the environment, so the same spec always gives the same
 * bytes. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "generator/emit.h"
#include "generator/mod.h"
#include "generator/emit_templates.h"
#include "core/sha256.h"
#include "core/alloc.h"

/* The kernel file of each family: the prelude's one #include (each template #includes what it uses). */
static const char *family_file(const fg_spec *spec) {
    if (spec->kind == FG_KIND_MERGE) return "merge.cuh";
    if (spec->kind == FG_KIND_SERVE) return "forward_serving.cuh";
    if (spec_is_wgmma_bwd(spec)) return "backward_wgmma.cuh";
    if (spec->kind == FG_KIND_BWD) return "backward_mma.cuh";
    return spec_is_wgmma(spec) ? "forward_wgmma.cuh" : "forward_mma.cuh";
}

int emit_header_count(void) { return fg_template_count; }
const char *emit_header_name(int i) { return fg_templates[i].name; }
const char *emit_header_text(int i) { return fg_templates[i].text; }

void emit_templates_id(char *buf, size_t n) {
    char hex[65];
    emit_headers_digest(hex);
    int digits = (int)n - 1 - (int)strlen(FG_VERSION_STRING) - 1; /* room left after "version+" and the NUL */
    snprintf(buf, n, "%s+%.*s", FG_VERSION_STRING, digits > 0 ? digits : 0, hex);
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
        char *d = fg_realloc(b->data, cap);
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

/* One wgmma wrapper: `name`(float (&d)[n / 8][4], A, u64 desc_b, u32 scale_d) issuing
 * wgmma.mma_async m64 n{n} k{16 or 32} with fp32 accumulators d (operands %0 .. %(n/2 - 1)). A is a
 * descriptor (a_regs 0: u64 desc_a) or four registers of the A fragment (a_regs 1: const u32 (&a)[4]).
 * tnsp_b: B is MN-major (16-bit types only); -1 for the FP8 types, which take K-major operands only and
 * no transpose immediates; tnsp_a likewise for an A in shared memory. ta, tb: the PTX type names of A and
 * B (f16, bf16, e4m3, e5m2). Inline asm cannot loop, so the generator writes the operand list out. */
static void emit_wgmma_t(sbuf *b, const char *name, int n, int a_regs, int tnsp_a, int tnsp_b, const char *ta,
                         const char *tb) {
    const int k = tnsp_b < 0 ? 32 : 16;
    const int nd = n / 2;
    sb_printf(b, "__device__ __forceinline__ void %s(float (&d)[%d][4], %s, unsigned long long desc_b, unsigned scale_d) {\n",
              name, n / 8, a_regs ? "const unsigned (&a)[4]" : "unsigned long long desc_a");
    sb_printf(b, "    asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %%%d, 0;\\n\"\n", nd + (a_regs ? 5 : 2));
    sb_printf(b, "                 \"wgmma.mma_async.sync.aligned.m64n%dk%d.f32.%s.%s {\"", n, k, ta, tb);
    for (int i = 0; i < nd; i++) {
        if (i % 16 == 0) sb_printf(b, "\n                 \"");
        sb_printf(b, "%%%d%s", i, i + 1 < nd ? ", " : "");
        if (i % 16 == 15 || i + 1 == nd) sb_printf(b, "\"");
    }
    char tail[16] = "";
    if (tnsp_b >= 0) { /* [tnsp-a,] tnsp-b */
        if (a_regs) snprintf(tail, sizeof tail, ", %d", tnsp_b);
        else snprintf(tail, sizeof tail, ", %d, %d", tnsp_a, tnsp_b);
    }
    if (a_regs)
        sb_printf(b, "\n                 \"}, {%%%d, %%%d, %%%d, %%%d}, %%%d, p, 1, 1%s;\\n}\\n\"\n", nd, nd + 1,
                  nd + 2, nd + 3, nd + 4, tail);
    else
        sb_printf(b, "\n                 \"}, %%%d, %%%d, p, 1, 1%s;\\n}\\n\"\n", nd, nd + 1, tail);
    sb_printf(b, "                 :");
    for (int i = 0; i < nd; i++)
        sb_printf(b, "%s\"+f\"(d[%d][%d])", i ? (i % 8 == 0 ? ",\n                  " : ", ") : " ", i / 4, i % 4);
    if (a_regs)
        sb_printf(b, "\n                 : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(desc_b), "
                     "\"r\"(scale_d));\n}\n\n");
    else
        sb_printf(b, "\n                 : \"l\"(desc_a), \"l\"(desc_b), \"r\"(scale_d));\n}\n\n");
}

static void emit_wgmma(sbuf *b, const char *name, int n, int a_regs, int tnsp_b, const char *ta, const char *tb) {
    emit_wgmma_t(b, name, n, a_regs, 0, tnsp_b, ta, tb);
}

/* A custom mod's device functions (generator/mod_emit.c), before the kernel that calls them: the backward's with
 * score_mod's derivative (mod_grad) and the accumulation of its trainable arrays' gradients (mod_aux_grad). */
static fg_status emit_mod(sbuf *b, const fg_spec *spec, int bwd, fg_error *err) {
    const fg_mod *m = mod_lookup(spec->mod);
    if (!m)
        return fg_fail(err, FG_ERR_UNSUPPORTED, "custom mod %s is not registered in this process: create it from its "
                       "text first (fg_mod_create)", spec->mod);
    char *code = fg_malloc(3 * MOD_EMIT_MAX);
    fg_mod *g = bwd ? fg_malloc(2 * sizeof *g) : NULL;
    fg_status st = FG_OK;
    int n = -1, grad = -1, n_sites = 0;
    mod_grad_site sites[MOD_MAX_GRAD_SITES];
    fg_error gerr;
    if (!code || (bwd && !g)) st = fg_fail(err, FG_ERR_NO_MEMORY, "out of memory emitting custom mod %s", spec->mod);
    else if (bwd && m->score >= 0) {
        if (mod_grad(m, &g[1], &grad, &gerr) != FG_OK || mod_aux_grad(&g[1], g, sites, &n_sites, &gerr) != FG_OK)
            st = fg_fail(err, gerr.status, "custom mod %s: %s", spec->mod, gerr.msg);
    }
    else if (bwd) *g = *m;
    if (st == FG_OK) {
        n = mod_emit(bwd ? g : m, code, MOD_EMIT_MAX);
        if (n >= 0 && grad >= 0) {
            const int n2 = mod_emit_grad(g, grad, code + n, 3 * MOD_EMIT_MAX - (size_t)n);
            n = n2 < 0 ? -1 : n + n2;
        }
        if (n >= 0 && bwd) {
            const int n3 = mod_emit_aux_grad(g, sites, n_sites, code + n, 3 * MOD_EMIT_MAX - (size_t)n);
            n = n3 < 0 ? -1 : n + n3;
        }
        if (n < 0) st = fg_fail(err, FG_ERR_INTERNAL, "custom mod %s: its code did not fit %d bytes", spec->mod, 3 * MOD_EMIT_MAX);
    }
    if (st == FG_OK) {
        sb_printf(b, "\n#include \"common/fg_params.h\"\n#include \"common/mod_interval.h\"\n#include \"common/fast_math.cuh\"\n");
        sb_append(b, code, (size_t)n);
    }
    free(g);
    free(code);
    return st;
}

fg_status emit_source(const fg_spec *spec, char **src, size_t *len, fg_error *err) {
    *src = NULL;
    if (len) *len = 0;
    fg_status st = spec_validate(spec, err);
    if (st != FG_OK) return st;
    char name[FG_SPEC_NAME_MAX];
    fg_spec code = *spec;
    code.splits = 0; /* a launch choice: every split count shares the one kernel, and so its source */
    if (spec_format(&code, name, sizeof name) < 0)
        return fg_fail(err, FG_ERR_INTERNAL, "spec name does not fit %d bytes", FG_SPEC_NAME_MAX);

    sbuf b = {0};
    sb_printf(&b, "// flashgen %s: generated kernel, do not edit.\n// variant: %s\n", FG_VERSION_STRING, name);
    sb_printf(&b, "// regenerate with: flashgen gen '%s'%s\n\n", name,
              spec->mod[0] ? " --mod FILE (FILE: the text of the mod)" : ""); /* the name has only its id */
    if (spec->kind == FG_KIND_MERGE) { /* no tile, dtype or head dim: types.cuh's switches only */
        sb_printf(&b, "#define FG_FP8 0\n#define FG_OUT_IS_BF16 0\n#define FG_ARCH %d\n", spec->arch);
        sb_printf(&b, "\n#include \"%s\"\n", family_file(spec));
        goto done;
    }
    sb_printf(&b, "#define FG_HEAD_DIM %d\n", spec->head_dim);
    sb_printf(&b, "#define FG_HEAD_DIM_PADDED %d\n", spec_head_dim_padded(spec));
    sb_printf(&b, "#define FG_BLOCK_M %d\n", spec->block_m);
    sb_printf(&b, "#define FG_BLOCK_N %d\n", spec->block_n);
    sb_printf(&b, "#define FG_WARPS %d\n", spec->warps);
    sb_printf(&b, "#define FG_STAGES %d\n", spec->stages);
    sb_printf(&b, "#define FG_CAUSAL %d\n", spec->causal ? 1 : 0);
    const int fp8 = spec->dtype == FG_DTYPE_E4M3 || spec->dtype == FG_DTYPE_E5M2;
    sb_printf(&b, "#define FG_OUT_IS_BF16 %d\n", spec_out_dtype(spec) == FG_DTYPE_BF16 ? 1 : 0); /* O's type */
    sb_printf(&b, "#define FG_FP8 %d\n", fp8);
    sb_printf(&b, "#define FG_FP8_E5M2 %d\n", spec->dtype == FG_DTYPE_E5M2 ? 1 : 0);
    sb_printf(&b, "#define FG_ELEM_BYTES %d\n", fp8 ? 1 : 2);
    sb_printf(&b, "#define FG_ARCH %d\n", spec->arch);
    const int wgmma = spec_is_wgmma(spec), bwd = spec->kind == FG_KIND_BWD, wgmma_bwd = spec_is_wgmma_bwd(spec);
    if (bwd) {
        sb_printf(&b, "#define FG_DETERMINISTIC %d\n", spec->deterministic ? 1 : 0);
        sb_printf(&b, "#define FG_DQ_STAGED %d\n", spec_bwd_dq_staged(spec)); /* sizes its smem too */
        sb_printf(&b, "#define FG_BWD_TMA %d\n", spec->tma ? 1 : 0);     /* the mma.sync kernel's TMA loads */
        sb_printf(&b, "#define FG_WGMMA_BWD %d\n", wgmma_bwd);
        sb_printf(&b, "#define FG_BW_DQ_T %d\n", spec_bwd_sm90_dq_t(spec)); /* the dQ^T kernel (backward_wgmma.cuh) */
        sb_printf(&b, "#define FG_VARLEN %d\n", spec->varlen ? 1 : 0);      /* packed sequences (backward_common.cuh) */
        sb_printf(&b, "#define FG_HEAD_DIM_V %d\n#define FG_HEAD_DIM_V_PADDED %d\n", spec_head_dim_v(spec),
                  spec_head_dim_v_padded(spec)); /* V's, O's, dO's and dV's */
        if (wgmma_bwd) sb_printf(&b, "#define FG_SWIZZLE_BYTES 128\n#define FG_BW_DQ_N %d\n", spec_bwd_sm90_dq_n(spec));
    }
    if (spec->kind == FG_KIND_SERVE) {
        sb_printf(&b, "#define FG_SERVE_TMA %d\n", spec->tma ? 1 : 0); /* K/V by TMA */
        sb_printf(&b, "#define FG_HEAD_DIM_V %d\n#define FG_HEAD_DIM_V_PADDED %d\n", spec_head_dim_v(spec),
                  spec_head_dim_v_padded(spec)); /* V's and O's */
        sb_printf(&b, "#define FG_V_IN_K %d\n", spec->v_in_k ? 1 : 0); /* V read from K's tiles */
        /* K and V in FP8 (1 e4m3, 2 e5m2), dequantized into 16-bit tiles of Q's dtype */
        sb_printf(&b, "#define FG_KV_FP8 %d\n", spec->kv_fp8 == FG_DTYPE_E4M3 ? 1 : spec->kv_fp8 == FG_DTYPE_E5M2 ? 2 : 0);
    }
    if (spec->kind != FG_KIND_MERGE) { /* the model variants (score_mods.cuh) */
        sb_printf(&b, "#define FG_SINKS %d\n", spec->sinks ? 1 : 0);    /* attention sinks */
        sb_printf(&b, "#define FG_WINDOW %d\n", spec->window ? 1 : 0);  /* a sliding window */
        sb_printf(&b, "#define FG_SOFTCAP %d\n", spec->softcap ? 1 : 0); /* a logit softcap */
        sb_printf(&b, "#define FG_ALIBI %d\n", spec->alibi ? 1 : 0);    /* ALiBi biases */
    }
    if (spec->mod[0] && (st = emit_mod(&b, spec, bwd, err)) != FG_OK) { /* a custom mod (generator/mod.h) */
        free(b.data);
        return st;
    }
    const int mma_fwd = spec->kind == FG_KIND_FWD && !wgmma;
    const int sub_n = mma_fwd ? spec_fwd_sub_n(spec) : 0;
    if (mma_fwd) sb_printf(&b, "#define FG_SUB_N %d\n", sub_n);
    /* cp_async.cuh's loaders recompute their per-thread offsets where that removed spills (see there) and
     * nowhere else: the mma.sync forward's tiles with two m16 tiles a warp whose whole scores take the last
     * of the 176 accumulator registers (d 128 128 x 48 on 4 warps, 256 x 48 on 8), and the mma.sync
     * backward above head_dim 128 with a causal mask (without one too: keeping the places spills
     * less at d 256 on sm_90: 16 bytes -> 0, 1.008x on an H200; the tma=1 variants have no loaders). Elsewhere
     * the SASS stays as measured. */
    const int recompute = bwd ? !wgmma_bwd && spec->head_dim > 128 && spec->causal
                              : mma_fwd && sub_n == spec->block_n && spec->block_m == 32 * spec->warps &&
                                    2 * (spec_head_dim_padded(spec) / 2 + spec->block_n / 2) == FG_SPEC_ACC_REGS;
    sb_printf(&b, "#define FG_LOADER_RECOMPUTE %d\n", recompute);
    if (wgmma) { /* bytes per swizzled chunk row: 128 when head_dim fills them (64 16-bit or 128 FP8 elements) */
        sb_printf(&b, "#define FG_SWIZZLE_BYTES %d\n", (spec->head_dim * dtype_size(spec->dtype)) % 128 == 0 ? 128 : 64);
        sb_printf(&b, "#define FG_Q_STAGES %d\n#define FG_O_DIRECT %d\n", spec_q_stages(spec),
                  spec_wgmma_o_direct(spec));
        if (spec->kind == FG_KIND_FWD)
            sb_printf(&b, "#define FG_VARLEN %d\n#define FG_HEAD_DIM_V %d\n", spec->varlen ? 1 : 0, spec_head_dim_v(spec));
        if (dtype_is_fp8(spec->dtype))
            sb_printf(&b, "#define FG_FP8_VT_ROW_BYTES %d\n#define FG_PV_SUM %d\n", spec_fp8_vt_bytes(spec), spec_fp8_pv_sum(spec));
        sb_printf(&b, "#define FG_O_FLUSH %d\n#define FG_O_FLUSH_SMEM %d\n", spec_fp8_o_flush(spec),
                  spec_fp8_o_flush_smem(spec));
    }
    if (wgmma || wgmma_bwd) {
        sb_printf(&b, "\n// ---- generated: wgmma wrappers for this tile ----\n");
        if (wgmma_bwd) { /* S^T, dP^T (SS, K-major); dV, dK (A in registers, B MN-major); dQ (both MN-major,
                            or dQ^T as below) */
            const char *ty = spec->dtype == FG_DTYPE_BF16 ? "bf16" : "f16";
            emit_wgmma(&b, "fg_wgmma_st", spec->block_m, 0, 0, ty, ty);
            emit_wgmma(&b, "fg_wgmma_rs", spec->head_dim, 1, 1, ty, ty);
            if (spec_bwd_sm90_dq_t(spec)) /* dQ^T = K^T dS^T: A (K) MN-major, B (the dS tile) K-major */
                emit_wgmma_t(&b, "fg_wgmma_dq", spec->block_m, 0, 1, 0, ty, ty);
            else
                emit_wgmma_t(&b, "fg_wgmma_dq", spec_bwd_sm90_dq_n(spec), 0, 1, 1, ty, ty);
        } else if (dtype_is_fp8(spec->dtype)) { /* P is e4m3 whatever the inputs (as on the mma.sync path) */
            const char *ty = spec->dtype == FG_DTYPE_E5M2 ? "e5m2" : "e4m3";
            emit_wgmma(&b, "fg_wgmma_qk", spec->block_n, 0, -1, ty, ty);
            emit_wgmma(&b, "fg_wgmma_pv", spec->head_dim + spec_fp8_pv_sum(spec), 1, -1, "e4m3",
                       ty); /* + the row sums (FG_PV_SUM) */
        } else {
            const char *ty = spec->dtype == FG_DTYPE_BF16 ? "bf16" : "f16";
            emit_wgmma(&b, "fg_wgmma_qk", spec->block_n, 0, 0, ty, ty);
            emit_wgmma(&b, "fg_wgmma_pv", spec_head_dim_v(spec), 1, 1, ty, ty); /* O has V's head dim */
        }
    }
    sb_printf(&b, "\n#include \"%s\"\n", family_file(spec));
    if (spec_mask_map(spec)) /* the mask's block map, per call (the kernel reads it: fg_mask_verdict_rows) */
        sb_printf(&b, "#include \"mod_classify.cuh\"\n");
done:
    if (b.failed) {
        free(b.data);
        return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory emitting %s", name);
    }
    *src = b.data;
    if (len) *len = b.len;
    return FG_OK;
}

/* The template an `#include "NAME"` line names (leading blanks allowed), or -1 when the line is no such
 * include or NAME is not embedded. */
static int include_target(const char *line, size_t n) {
    size_t i = 0;
    while (i < n && (line[i] == ' ' || line[i] == '\t')) i++;
    if (n - i < 10 || strncmp(line + i, "#include", 8) != 0) return -1;
    i += 8;
    while (i < n && isspace((unsigned char)line[i])) i++;
    if (i >= n || line[i] != '"') return -1;
    const char *name = line + i + 1;
    const char *close = memchr(name, '"', n - i - 1);
    if (!close) return -1;
    for (int t = 0; t < fg_template_count; t++)
        if (strlen(fg_templates[t].name) == (size_t)(close - name) &&
            strncmp(fg_templates[t].name, name, (size_t)(close - name)) == 0)
            return t;
    return -1;
}

/* Appends text with each include of a template replaced by that template's text the first time (recursively,
 * introduced by a comment naming its file) and by a comment the next times. Every template is wrapped in an
 * include guard, so expanding it once where the preprocessor first meets it is what NVRTC compiles. */
static void flatten_into(sbuf *b, const char *text, unsigned char *done, int depth) {
    for (const char *line = text; *line;) {
        const char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        int t = depth < 32 ? include_target(line, n) : -1;
        if (t < 0) {
            sb_append(b, line, n);
            sb_append(b, "\n", 1);
        } else if (done[t]) {
            sb_printf(b, "// (templates/%s: included above)\n", fg_templates[t].name);
        } else {
            done[t] = 1;
            sb_printf(b, "// ---- templates/%s ----\n", fg_templates[t].name);
            flatten_into(b, fg_templates[t].text, done, depth + 1);
            sb_printf(b, "// ---- end of templates/%s ----\n", fg_templates[t].name);
        }
        line += n + (nl ? 1 : 0);
    }
}

fg_status emit_flatten(const char *src, char **flat, size_t *len, fg_error *err) {
    *flat = NULL;
    if (len) *len = 0;
    unsigned char *done = fg_calloc((size_t)fg_template_count + 1, 1);
    if (!done) return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory flattening a source");
    sbuf b = {0};
    flatten_into(&b, src, done, 0);
    free(done);
    if (b.failed || !b.data) {
        free(b.data);
        return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory flattening a source");
    }
    *flat = b.data;
    if (len) *len = b.len;
    return FG_OK;
}

void emit_headers_digest(char hex[65]) {
    fg_sha256 h;
    sha256_init(&h);
    for (int i = 0; i < fg_template_count; i++) {
        sha256_update(&h, fg_templates[i].name, strlen(fg_templates[i].name) + 1);
        sha256_update(&h, fg_templates[i].text, strlen(fg_templates[i].text) + 1);
    }
    uint8_t digest[32];
    sha256_final(&h, digest);
    sha256_hex(digest, hex);
}
