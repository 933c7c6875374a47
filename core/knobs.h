/* knobs.h: flashgen's environment variables (FLASHGEN_*), in one table: name, default and meaning.
 * Every library and tool reads them through knob_value, so the table is the whole list; `flashgen info`
 * prints it and docs/cli.md documents it. Knobs marked `measuring` exist to compare one implementation
 * choice against another (or to test one); users need none of them. */
#ifndef FG_KNOBS_H
#define FG_KNOBS_H

typedef enum fg_knob_id {
    FG_KNOB_CACHE_DIR,        /* the disk cache's directory */
    FG_KNOB_CACHE_MAX_MB,     /* the disk cache's bound in MiB, least recently used entries evicted past it */
    FG_KNOB_DUMP,             /* a directory for every JIT compile's source, PTX and log */
    FG_KNOB_LINEINFO,         /* 1: JIT compiles keep source lines */
    FG_KNOB_JIT_TIERS,        /* 0: a JIT compile is one full compile, no quick first tier */
    FG_KNOB_EMULATE_ARCH,     /* run an older target's kernels on this GPU (a test aid) */
    FG_KNOB_WGMMA,            /* 0: the mma.sync family on Hopper */
    FG_KNOB_WGMMA_FP8,        /* 0: FP8 calls take the mma.sync family on Hopper */
    FG_KNOB_WGMMA_BWD,        /* 0: the backward takes the mma.sync kernel on Hopper */
    FG_KNOB_BWD_TMA,          /* the mma.sync backward's TMA loads */
    FG_KNOB_PDL,              /* 0: no programmatic dependent launch in the backward */
    FG_KNOB_SM90_GRID,        /* the wgmma forward's grid schedule */
    FG_KNOB_CAUSAL_GROUP,     /* how many (head, batch) pairs a causal schedule interleaves */
    FG_KNOB_DET_ROTATE,       /* 0: the deterministic backward adds dQ in ascending order */
    FG_KNOB_FP8_FAST_ACCUM,   /* no longer read; a warning says so */
    FG_KNOB_TUNE_SHARE_DEVICE,/* 1: `flashgen tune --devices` may name one device twice (a test hook) */
    FG_KNOB_CHECK_INPUTS,     /* 1: serving calls check their device-resident lengths and tables first */
    FG_KNOB_NUM_SPLITS,       /* serving calls' split count when the call leaves it to flashgen */
    FG_KNOB_SERVE_TMA,        /* 1: the serving kernel loads K and V by TMA where it can */
    FG_KNOB_PREFILL_SM90A,    /* 1: serving prefill calls on Hopper run the sm_90a forward's varlen variants */
    FG_KNOB_COUNT
} fg_knob_id;

typedef struct fg_knob {
    const char *name;          /* "FLASHGEN_..." */
    const char *default_value; /* what unset means, in words or as the value */
    const char *meaning;       /* one sentence */
    int measuring;             /* 1: for measuring or testing flashgen itself, not for users */
} fg_knob;

/* The table entry of a knob (never NULL for an id below FG_KNOB_COUNT). */
const fg_knob *knob_info(fg_knob_id id);

/* The knob's value from the environment, or NULL when it is unset or empty. */
const char *knob_value(fg_knob_id id);

/* 1 when the knob is set to exactly "0" (the switches that turn a choice off). */
int knob_is_zero(fg_knob_id id);

/* 1 when the knob is set to exactly "1". */
int knob_is_one(fg_knob_id id);

/* The switches (knobs read as 0 or 1) set to anything else: writes one sentence naming the first such knob,
 * its value and the default that then holds into buf (n bytes) and returns 1; 0 when every switch is unset,
 * 0 or 1. A context logs it as a warning (a value like "yes" or "false" would otherwise be silently read as
 * the default). */
int knob_bad_switch(char *buf, unsigned long n);

#endif
