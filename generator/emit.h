/* emit.h: turning a valid spec into one self-contained CUDA source.
 * The source is a prelude of constants for the spec followed by the template pieces the kernel family
 * needs (templates/common, then the family file), with no #include of toolkit headers. The same spec
 * gives the same bytes, always (the cache key hashes it). The kernel's entry point is FG_KERNEL_NAME. */
#ifndef FG_EMIT_H
#define FG_EMIT_H

#include <stddef.h>
#include "generator/spec.h"

#define FG_KERNEL_NAME "fg_attention_fwd_kernel"
/* kind=bwd modules hold three entry points (templates/bwd_sm80.cuh). */
#define FG_BWD_PRE_NAME "fg_bwd_pre_kernel"
#define FG_BWD_MAIN_NAME "fg_bwd_main_kernel"
#define FG_BWD_POST_NAME "fg_bwd_post_kernel"

/* The identity of this library's kernel code: the version, '+', and the leading hex digits of a SHA-256
 * over every template (name and text), as many as fit `n` bytes with the NUL (n >= 12; bundles use 16:
 * "0.3.0+1a2b3c4d5"). Two builds whose templates differ in one byte have different identities, so a
 * bundle compiled from other templates (whose kernels may expect another launch contract) is refused
 * even when the version string is the same. */
void emit_templates_id(char *buf, size_t n);

/* Emits the source for spec (validated first). *src is malloc'd and NUL-terminated; caller frees. */
fg_status emit_source(const fg_spec *spec, char **src, size_t *len, fg_error *err);

#endif
