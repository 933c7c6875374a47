/* emit.h: turning a valid spec into one self-contained CUDA source.
 * The source is a prelude of constants for the spec followed by the template pieces the kernel family
 * needs (templates/common, then the family file), with no #include of toolkit headers. The same spec
 * gives the same bytes, always (the cache key hashes it). The kernel's entry point is FG_KERNEL_NAME. */
#ifndef FG_EMIT_H
#define FG_EMIT_H

#include <stddef.h>
#include "spec.h"

#define FG_KERNEL_NAME "fg_attention_fwd_kernel"

/* Emits the source for spec (validated first). *src is malloc'd and NUL-terminated; caller frees. */
fg_status emit_source(const fg_spec *spec, char **src, size_t *len, fg_error *err);

#endif
