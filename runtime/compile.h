/* compile.h: compiling emitted source to a cubin with NVRTC (no GPU needed), and the compile options
 * that also key the disk cache. */
#ifndef FG_COMPILE_H
#define FG_COMPILE_H

#include <stddef.h>
#include <stdint.h>
#include "generator/spec.h"

#define FG_NVRTC_MAX_OPTS 16

typedef struct fg_compile_result {
    uint8_t *cubin;      /* malloc'd cubin, or PTX text with FG_COMPILE_AS_PTX (caller frees with compile_result_free) */
    size_t cubin_size;   /* bytes (PTX: its terminating NUL included) */
    char *log;           /* NVRTC log including the ptxas -v resource report (malloc'd, may be "") */
    char *ptx;           /* PTX text when requested (FG_COMPILE_KEEP_PTX), else NULL */
    double seconds;      /* wall time of nvrtcCompileProgram + getting the cubin (or PTX) */
    int registers;       /* from the ptxas report: registers per thread (-1 if not found) */
    int spill_stores;    /* bytes of spill stores (-1 if not found) */
    int spill_loads;     /* bytes of spill loads (-1 if not found) */
    int stack_frame;     /* bytes of stack frame (-1 if not found) */
    int smem_static;     /* bytes of static shared memory (-1 if not found) */
} fg_compile_result;

/* compile_source's flags. */
#define FG_COMPILE_KEEP_PTX 1 /* also return the PTX (out->ptx) */
#define FG_COMPILE_AS_PTX 2   /* return compute_XX PTX (NUL included) in place of the cubin, for the driver to
                                 compile when it is loaded: how a context emulating an older arch
                                 (FLASHGEN_EMULATE_ARCH) runs that arch's code on a newer GPU. No ptxas runs, so
                                 the resource fields stay -1. */

/* The NVRTC options for spec (flags: FG_COMPILE_AS_PTX changes them), in order (pointers to static
 * strings or into buf), and their count. */
int compile_options(const fg_spec *spec, int flags, const char **opts, char buf[64]);

/* The disk-cache key of spec's compiled code: everything that determines the cubin (the emitted
 * source, NVRTC's version, the options, the target arch, flashgen's version), hashed by cache_key. */
void compile_cache_key(const fg_spec *spec, int flags, const char *src, size_t len, uint8_t key[32]);

/* "13.0": the NVRTC library's version. */
const char *compile_nvrtc_version(void);

/* Compiles src for spec's arch (flags: FG_COMPILE_*). FG_ERR_COMPILE carries the NVRTC log. Whatever the
 * status, free *out with compile_result_free: a failed compile keeps NVRTC's log there (for dumps). */
fg_status compile_source(const fg_spec *spec, const char *src, size_t len, int flags,
                         fg_compile_result *out, fg_error *err);

/* Convenience: emit + compile (free *out whatever the status, as after compile_source). */
fg_status compile_spec(const fg_spec *spec, int keep_ptx, fg_compile_result *out, fg_error *err);

void compile_result_free(fg_compile_result *r);

#endif
