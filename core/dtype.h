/* dtype.h: names and sizes of the public element types (fg_dtype, include/flashgen.h). */
#ifndef FG_DTYPE_H
#define FG_DTYPE_H

#include "core/error.h"

/* "fp16", "bf16", "e4m3", "e5m2" -> fg_dtype; anything else (fp32 included: no kernel takes it as Q/K/V) is
 * FG_ERR_INVALID_ARGUMENT with a sentence naming the text. */
fg_status dtype_parse(const char *text, fg_dtype *out, fg_error *err);
/* The name of a dtype ("fp16", ..., "fp32"), or "unknown". */
const char *dtype_name(fg_dtype dtype);
/* Bytes per element (0 for an unknown value). */
int dtype_size(fg_dtype dtype);
/* 1 for the FP8 element types (e4m3, e5m2). */
int dtype_is_fp8(fg_dtype dtype);

#endif
