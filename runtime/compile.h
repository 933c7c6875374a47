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
    int option_refused;  /* 1: NVRTC refused an option (NVRTC_ERROR_INVALID_OPTION), as one older than 13 refuses
                            FG_COMPILE_QUICK's; the status is then FG_ERR_COMPILE */
    int after_quick;     /* 1: a quick compile (FG_COMPILE_QUICK) had started in this process before this compile
                            ended, so its code may differ from a fresh process's (compile_after_quick) */
} fg_compile_result;

/* compile_source's flags. */
#define FG_COMPILE_KEEP_PTX 1 /* also return the PTX (out->ptx) */
#define FG_COMPILE_AS_PTX 2   /* return compute_XX PTX (NUL included) in place of the cubin, for the driver to
                                 compile when it is loaded: how a context emulating an older arch
                                 (FLASHGEN_EMULATE_ARCH) runs that arch's code on a newer GPU. No ptxas runs, so
                                 the resource fields stay -1. */
#define FG_COMPILE_QUICK 4    /* --Ofast-compile=max (NVRTC 13): compiled for speed of compilation (a third to
                                 two thirds of the time; the code may spill and run slower). The JIT's first tier
                                 (tiers.h): its options key no entry the runtime stores, since only full compiles
                                 are kept. */
#define FG_COMPILE_AFTER_QUICK 8 /* for compile_cache_key only: the code was compiled after a quick compile in the
                                 same process (fg_compile_result.after_quick), which keys an entry of its own */

/* The NVRTC options for spec (flags: FG_COMPILE_AS_PTX and FG_COMPILE_QUICK change them), in order (pointers to static
 * strings or into buf), and their count. */
int compile_options(const fg_spec *spec, int flags, const char **opts, char buf[64]);

/* The disk-cache key of spec's compiled code: everything that determines the cubin (the emitted
 * source, NVRTC's version, the options, the target arch, flashgen's version), hashed by cache_key. With
 * FG_COMPILE_AFTER_QUICK the options carry a marker that no NVRTC option spells, so code compiled after a quick
 * compile keys an entry apart from a fresh process's. */
void compile_cache_key(const fg_spec *spec, int flags, const char *src, size_t len, uint8_t key[32]);
/* The key a compile's result r (of src with flags) is stored under: compile_cache_key's, with
 * FG_COMPILE_AFTER_QUICK when r->after_quick. */
void compile_result_key(const fg_spec *spec, int flags, const char *src, size_t len, const fg_compile_result *r,
                        uint8_t key[32]);
/* 1 once a quick compile (FG_COMPILE_QUICK) has started in this process. NVRTC 13.0 keeps state from
 * --Ofast-compile=max in its optimizer for the rest of the process: every later compile, whatever its options,
 * emits other code (more registers, a few bytes of spills where a fresh process spills none) than the same
 * compile in a fresh process. Such code is correct, but it is not the fresh compile's, so it is kept apart. */
int compile_after_quick(void);

/* "13.0": the NVRTC library's version. */
const char *compile_nvrtc_version(void);

/* Compiles src for spec's arch (flags: FG_COMPILE_*). FG_ERR_COMPILE carries the NVRTC log. Whatever the
 * status, free *out with compile_result_free: a failed compile keeps NVRTC's log there (for dumps). */
fg_status compile_source(const fg_spec *spec, const char *src, size_t len, int flags,
                         fg_compile_result *out, fg_error *err);

/* Convenience: emit + compile (flags: FG_COMPILE_*; free *out whatever the status, as after compile_source). */
fg_status compile_spec(const fg_spec *spec, int flags, fg_compile_result *out, fg_error *err);

void compile_result_free(fg_compile_result *r);

#endif
