/* emit.h: turning a valid spec into the CUDA program NVRTC compiles: a main source (a prelude of
 * constants for the spec, then `#include "<family kernel file>"`) and the embedded templates as headers,
 * by name (no toolkit header, no include path). The same spec gives the same bytes, always; the cache
 * key hashes the prelude and the headers' digest. The kernel's entry point is FG_KERNEL_NAME. */
#ifndef FG_EMIT_H
#define FG_EMIT_H

#include <stddef.h>
#include "generator/spec.h"

#define FG_KERNEL_NAME "fg_attention_fwd_kernel"
/* kind=bwd modules hold three entry points (templates/backward_pre_post.cuh, templates/backward_mma.cuh). */
#define FG_BWD_PRE_NAME "fg_bwd_pre_kernel"
#define FG_BWD_MAIN_NAME "fg_bwd_main_kernel"
#define FG_BWD_POST_NAME "fg_bwd_post_kernel"
/* kind=merge modules hold the merge of attention states (templates/merge.cuh); kind=serve modules the serving
 * forward under FG_KERNEL_NAME (templates/forward_serving.cuh). */
#define FG_MERGE_NAME "fg_merge_kernel"

/* The identity of this library's kernel code: the version, '+', and the leading hex digits of a SHA-256
 * over every template (name and text), as many as fit `n` bytes with the NUL (n >= 12; bundles use 16:
 * "0.3.0+1a2b3c4d5"). Two builds whose templates differ in one byte have different identities, so a
 * bundle compiled from other templates (whose kernels may expect another launch contract) is refused
 * even when the version string is the same. */
void emit_templates_id(char *buf, size_t n);

/* Emits the main source (the prelude) for spec (validated first). *src is malloc'd and NUL-terminated;
 * caller frees. It compiles only with the headers below. */
fg_status emit_source(const fg_spec *spec, char **src, size_t *len, fg_error *err);

/* The headers a main source may include: every embedded template, by its name under templates/
 * ("common/types.cuh"), i in [0, emit_header_count()). Static strings. */
int emit_header_count(void);
const char *emit_header_name(int i);
const char *emit_header_text(int i);

/* The SHA-256 (64 hex digits and a NUL) over every header's name and text: what the cache key adds to
 * the main source, so that a change in any template gives new keys. */
void emit_headers_digest(char hex[65]);

/* src with every #include of a template expanded, once each (the templates are include-guarded, so this
 * is the program NVRTC compiles, as one file: tests compare the two). For people: `flashgen gen` and
 * FLASHGEN_DUMP print it. *flat is malloc'd; caller frees. FG_ERR_NO_MEMORY only. */
fg_status emit_flatten(const char *src, char **flat, size_t *len, fg_error *err);

#endif
