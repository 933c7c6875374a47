/* knobs.c: the table of FLASHGEN_* environment variables (see knobs.h). */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include "core/knobs.h"

static const fg_knob knobs[FG_KNOB_COUNT] = {
    [FG_KNOB_CACHE_DIR] = {"FLASHGEN_CACHE_DIR", "$XDG_CACHE_HOME/flashgen, else ~/.cache/flashgen",
                           "the disk cache of compiled kernels; it must be owned by you and not writable by "
                           "group or others", 0},
    [FG_KNOB_CACHE_MAX_MB] = {"FLASHGEN_CACHE_MAX_MB", "4096",
                              "the disk cache's bound in MiB (0: none); a compile past it evicts the least recently "
                              "used entries; `flashgen cache prune` applies it at once", 0},
    [FG_KNOB_DUMP] = {"FLASHGEN_DUMP", "unset",
                      "a directory: every JIT compile writes its source, PTX and NVRTC log there", 0},
    [FG_KNOB_LINEINFO] = {"FLASHGEN_LINEINFO", "0",
                          "1: JIT compiles keep source lines (for compute-sanitizer and Nsight; larger cubins)", 0},
    [FG_KNOB_JIT_TIERS] = {"FLASHGEN_JIT_TIERS", "0",
                           "1: a variant's first JIT compile is a quick one (NVRTC --Ofast-compile=max), run at once "
                           "while the optimized build compiles in the background and replaces it; 0: one full "
                           "compile, the call waiting for it", 0},
    [FG_KNOB_EMULATE_ARCH] = {"FLASHGEN_EMULATE_ARCH", "the device's own",
                              "a compute capability x 10 (e.g. 80): run that older target's kernels on this GPU, "
                              "compiled from their PTX, to test its code paths (timings are not that GPU's)", 1},
    [FG_KNOB_WGMMA] = {"FLASHGEN_WGMMA", "1",
                       "0: on an H100/H200 every call runs the mma.sync family instead of the wgmma family", 1},
    [FG_KNOB_WGMMA_FP8] = {"FLASHGEN_WGMMA_FP8", "1",
                           "0: FP8 calls on an H100/H200 run the mma.sync family instead of the wgmma family", 1},
    [FG_KNOB_WGMMA_BWD] = {"FLASHGEN_WGMMA_BWD", "1",
                           "0: backward calls on an H100/H200 run the mma.sync kernel instead of the wgmma one", 1},
    [FG_KNOB_BWD_TMA] = {"FLASHGEN_BWD_TMA", "1 on sm_90, 0 on newer archs",
                         "0: the mma.sync backward loads K, V, Q, dO by cp.async instead of TMA; 1: TMA loads on "
                         "archs newer than sm_90 too", 1},
    [FG_KNOB_PDL] = {"FLASHGEN_PDL", "1",
                     "0: the backward's kernels are launched one after another instead of early "
                     "(programmatic dependent launch)", 1},
    [FG_KNOB_SM90_GRID] = {"FLASHGEN_SM90_GRID", "auto",
                           "the wgmma forward's grid: auto or dynamic (one CTA an SM, tiles from a per-stream "
                           "counter), tiles (one CTA per tile) or persistent (tiles in a fixed stride)", 1},
    [FG_KNOB_CAUSAL_GROUP] = {"FLASHGEN_CAUSAL_GROUP", "auto",
                              "auto or N: causal calls start the longest query blocks of at most N (head, batch) "
                              "pairs together; 1 is head by head", 1},
    [FG_KNOB_DET_ROTATE] = {"FLASHGEN_DET_ROTATE", "1",
                            "0: the deterministic backward without a mask adds dQ in ascending key-block order "
                            "instead of rotated streams (set 0 under MPS SM limits)", 0},
    [FG_KNOB_FP8_FAST_ACCUM] = {"FLASHGEN_FP8_FAST_ACCUM", "unset",
                                "no longer read: FP8 accumulation is always the accurate one; setting it logs a "
                                "warning", 1},
    [FG_KNOB_TUNE_SHARE_DEVICE] = {"FLASHGEN_TUNE_SHARE_DEVICE", "0",
                                   "1: `flashgen tune --devices` may list one device twice (a test hook for "
                                   "one-GPU machines)", 1},
    [FG_KNOB_CHECK_INPUTS] = {"FLASHGEN_CHECK_INPUTS", "0",
                              "1: fg_attention_fwd_varlen reads cu_seqlens, seqused_k and block_table back "
                              "(synchronizing its stream) and refuses bad entries with a sentence naming the first", 0},
    [FG_KNOB_NUM_SPLITS] = {"FLASHGEN_NUM_SPLITS", "auto",
                            "auto or N (1-256): the key splits of serving calls whose num_splits is 0, in place of "
                            "the tuning database and the rule", 1},
    [FG_KNOB_SERVE_TMA] = {"FLASHGEN_SERVE_TMA", "0",
                           "1: serving calls whose keys are packed or in a dense cache load K and V by TMA (sm_90 "
                           "and newer, head_dim 64, 128, 192, 256); off by default until measured", 1},
    [FG_KNOB_PREFILL_SM90A] = {"FLASHGEN_PREFILL_SM90A", "1",
                               "1: serving calls on an H100/H200 whose longest sequence has 64 queries or more (keys "
                               "not paged) run the sm_90a forward's varlen variants; 0: the serving "
                               "kernel", 1},
};

const fg_knob *knob_info(fg_knob_id id) { return (unsigned)id < FG_KNOB_COUNT ? &knobs[id] : NULL; }

const char *knob_value(fg_knob_id id) {
    if ((unsigned)id >= FG_KNOB_COUNT) return NULL;
    const char *v = getenv(knobs[id].name);
    return v && *v ? v : NULL;
}

int knob_is_zero(fg_knob_id id) {
    const char *v = knob_value(id);
    return v && strcmp(v, "0") == 0;
}

int knob_is_one(fg_knob_id id) {
    const char *v = knob_value(id);
    return v && strcmp(v, "1") == 0;
}

int knob_bad_switch(char *buf, unsigned long n) {
    static const fg_knob_id switches[] = {FG_KNOB_LINEINFO,   FG_KNOB_JIT_TIERS,    FG_KNOB_WGMMA,
                                          FG_KNOB_WGMMA_FP8,  FG_KNOB_WGMMA_BWD,    FG_KNOB_BWD_TMA,
                                          FG_KNOB_PDL,        FG_KNOB_DET_ROTATE,   FG_KNOB_CHECK_INPUTS,
                                          FG_KNOB_TUNE_SHARE_DEVICE, FG_KNOB_SERVE_TMA, FG_KNOB_PREFILL_SM90A};
    for (unsigned i = 0; i < sizeof switches / sizeof switches[0]; i++) {
        const char *v = knob_value(switches[i]);
        if (!v || strcmp(v, "0") == 0 || strcmp(v, "1") == 0) continue;
        snprintf(buf, n, "%s=%s is not 0 or 1: it is ignored, and its default (%s) holds", knobs[switches[i]].name, v,
                 knobs[switches[i]].default_value);
        return 1;
    }
    return 0;
}
