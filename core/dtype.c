/* dtype.c: the element types' names and sizes, which every layer uses (spec names, call checks, the CLI). */
#include <string.h>
#include "core/dtype.h"

static const char *const dtype_names[] = {"fp16", "bf16", "fp32", "e4m3", "e5m2", "i32"};

const char *dtype_name(fg_dtype dtype) {
    if ((unsigned)dtype < sizeof dtype_names / sizeof dtype_names[0]) return dtype_names[dtype];
    return "unknown";
}

int dtype_size(fg_dtype dtype) {
    switch (dtype) {
    case FG_DTYPE_F16: case FG_DTYPE_BF16: return 2;
    case FG_DTYPE_F32: case FG_DTYPE_I32: return 4;
    case FG_DTYPE_E4M3: case FG_DTYPE_E5M2: return 1;
    }
    return 0;
}

int dtype_is_fp8(fg_dtype dtype) { return dtype == FG_DTYPE_E4M3 || dtype == FG_DTYPE_E5M2; }

fg_status dtype_parse(const char *text, fg_dtype *out, fg_error *err) {
    for (int i = 0; i < (int)(sizeof dtype_names / sizeof dtype_names[0]); i++)
        if (i != FG_DTYPE_F32 && i != FG_DTYPE_I32 && strcmp(text, dtype_names[i]) == 0) {
            *out = (fg_dtype)i;
            return FG_OK;
        }
    return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                   "dtype '%s' is not one of fp16, bf16, e4m3, e5m2", text);
}
