-- configs/default.lua: the default kernel bundle, and an example of a flashgen config.
--
-- `flashgen bundle configs/default.lua` compiles every variant listed here, for every listed arch,
-- into one bundle. A config is Lua 5.4 run in a sandbox: plain data plus small functions, no files,
-- no os, no require. Two functions describe what to build:
--
--   variants { field = value or {list of values}, ... }
--     adds every combination (the cartesian product) of the listed values. Fields:
--       kind      "fwd"                          the kernel family (required)
--       arch      "sm_80", "sm_90", "sm_90a", ... CUDA targets (required; `--arch` replaces it). sm_90a is
--                                                the wgmma family (TMA, wgmma); every other target, sm_90
--                                                included, builds the mma.sync family
--       dtype     "fp16", "bf16", "e4m3", "e5m2" element type of Q, K, V (and O for fp16/bf16) (required)
--       head_dim  64, 128, ...                   multiples of 8 up to 256 (required; fp8: of 32)
--       causal    false, true                    bottom-right aligned causal mask (default false)
--       block_m, block_n, warps, stages          tile sizes (optional: the tile policy chooses)
--       out       "bf16", "fp16"                 O's dtype for fp8 variants (default "bf16"; ignored by
--                                                fp16/bf16 variants, which write O in their dtype)
--       varlen    false, true                    sequences of their own lengths (default false): kind "fwd"
--                                                on sm_90a, fp16/bf16 (the serving forward's prefill), and
--                                                kind "bwd" (the backward of packed sequences)
--       head_dim_v 128, ...                      V's and O's head dim where it differs from head_dim (default
--                                                head_dim's): kind "serve", "fwd" with varlen on sm_90a (both
--                                                multiples of 64), and the mma.sync "bwd" (multiples of 8)
--       kv        "e4m3", "e5m2"                 kind "serve": K and V in FP8 (an FP8 KV cache, dequantized in
--                                                the kernel) beside fp16/bf16 Q and O (default: Q's dtype)
--
--   tile_policy { arch = ..., head_dim = ..., causal = ..., dtype = ...,
--                 block_m = ..., block_n = ..., warps = ..., stages = ... }
--     overrides the built-in tile choice where its match fields apply; arch and head_dim take a single
--     value or a {lo, hi} range, causal and dtype may be left out to match both. Later rules win.
--
-- Every variant is checked after the file runs; a variant flashgen cannot build is an error that
-- names it and the rule it breaks. Listing a variant twice is harmless: duplicates are dropped.

-- The head dims of the common model families: 64 (GPT-2, many small models), 96 (Phi), 128 (Llama,
-- Mistral, Qwen), 192 and 256 (Gemma, DeepSeek-style and large-head models).
local head_dims = {64, 96, 128, 192, 256}

-- sm_80 code runs on every Ampere and newer GPU (A100, RTX 30xx/40xx, L4, ...); sm_90a is the
-- wgmma family (H100, H200: TMA, wgmma, warp specialization), whose cubin runs on sm_90 only;
-- sm_90 is the mma.sync family built for Hopper, which the runtime runs there for calls the wgmma
-- family does not take (head dims not a multiple of 32, tensors TMA cannot address, FP8).
-- 3 x 2 x 5 x 2 = 60 variants.
variants {
    kind = "fwd",
    arch = {"sm_80", "sm_90", "sm_90a"},
    dtype = {"fp16", "bf16"},
    head_dim = head_dims,
    causal = {false, true},
}

-- An override looks like this (left commented out: the built-in policy is tuned per family).
-- It would give every non-causal Hopper variant with head_dim 65..128 a 128 x 64 tile:
-- tile_policy { arch = "sm_90", head_dim = {65, 128}, causal = false,
--               block_m = 128, block_n = 64, warps = 8, stages = 2 }
-- (a rule naming sm_90a applies to the wgmma family, whose tiles are 64 query rows per consumer
-- warpgroup plus a producer warpgroup: block_m = 128 goes with warps = 12)

-- FP8: e4m3 and e5m2 inputs with O in bf16 (`out` is the output dtype of fp8 variants: "bf16", the
-- default, or "fp16"), for sm_89 (Ada: L4, L40, RTX 40xx: mma.sync with native FP8), sm_90a (H100, H200:
-- the wgmma family with QGMMA, for head dims that are multiples of 64) and sm_90 (the mma.sync family
-- there, for FP8 calls sm_90a does not take; FP8 mma.sync is emulated on Hopper, fp8 -> f16 unpacks
-- before HMMA, and head_dim 256 spills registers with every tile, generator/tile_policy.c, so a bundle,
-- which refuses spilling variants, leaves it to JIT); head_dim is a multiple of 32 for fp8:
-- 2 x 2 x 3 x 2 x 2 + 2 x 2 x 2 = 32 variants.
-- `flashgen bundle --arch` replaces these arch lists as well: an arch below sm_89 has no fp8 mma and
-- refuses them.
variants {
    kind = "fwd",
    arch = {"sm_89", "sm_90a"},
    dtype = {"e4m3", "e5m2"},
    out = "bf16",
    head_dim = {64, 128, 256},
    causal = {false, true},
}
variants {
    kind = "fwd",
    arch = "sm_90",
    dtype = {"e4m3", "e5m2"},
    out = "bf16",
    head_dim = {64, 128},
    causal = {false, true},
}

-- The backward pass (kind "bwd": three kernels, templates/backward_mma.cuh), mma.sync on every target (on
-- Hopper its arch is sm_90), fp16/bf16, head_dim 64. The wide tiles of head_dim 96 and 128 spill a few
-- bytes (generator/tile_policy.c), which a bundle refuses unless given --allow-spills, so here those
-- compile at first use, as does the deterministic mode (deterministic = true). On an H100/H200 the
-- backward at head_dim 64 runs the wgmma family's kernel (sm_90a; not listed here: it compiles at first use); the
-- mma.sync kernel runs there for the deterministic mode, with FLASHGEN_WGMMA_BWD=0 and for views TMA
-- cannot read; it takes its TMA-load variants (tma = true) where the tensors allow them, else the
-- cp.async ones. Each also as the backward of packed sequences (varlen = true: fg_attention_bwd_varlen).
-- 3 x 2 x 2 x 2 = 24 variants.
variants {
    kind = "bwd",
    arch = {"sm_80", "sm_90"},
    dtype = {"fp16", "bf16"},
    head_dim = 64,
    causal = {false, true},
    varlen = {false, true},
}
variants {
    kind = "bwd",
    arch = "sm_90",
    dtype = {"fp16", "bf16"},
    head_dim = 64,
    causal = {false, true},
    tma = true,
    varlen = {false, true},
}

-- The serving forward (kind "serve": packed variable-length batches, dense and paged KV caches, decode; one
-- mma.sync kernel family on every target, sm_90 on Hopper), fp16/bf16 at head_dim 64, 128 and 256. block_m
-- picks its tile: 16 and 32 are the decode tiles (calls of at most 16 or 32 rows of query tokens times query
-- heads a KV head), 64 the prefill tile; the rest comes from the tile policy. The other head dims compile at
-- first use. 2 x 2 x 3 x 2 x 3 = 72 variants.
variants {
    kind = "serve",
    arch = {"sm_80", "sm_90"},
    dtype = {"fp16", "bf16"},
    head_dim = {64, 128, 256},
    causal = {false, true},
    block_m = {16, 32, 64},
}
-- FP8 KV caches (e4m3 K and V beside fp16/bf16 queries, dequantized in the kernel) on the 16-row decode tile (one
-- token of up to 16 query heads a KV head), where an FP8 cache halves the bytes a step reads. The other tiles and
-- e5m2 compile at first use. 2 x 2 x 3 = 12 variants.
variants {
    kind = "serve",
    arch = {"sm_80", "sm_90"},
    dtype = {"fp16", "bf16"},
    head_dim = {64, 128, 256},
    block_m = 16,
    kv = "e4m3",
}
-- Absorbed MLA (DeepSeek: Q and K 576 wide, V their first 512 columns, one KV head, v_in_k) and head_dim 512, on the
-- serving kernel's wide tiles (V above 256 columns: Hopper's shared memory): decode tiles of 16 and 32 rows and the
-- prefill tile (block_m left to the tile policy; at head_dim 512 it is the 32-row decode tile). 6 + 4 = 10 variants.
variants { kind = "serve", arch = "sm_90", dtype = "bf16", head_dim = 576, head_dim_v = 512, v_in_k = true,
           causal = {false, true}, block_m = {16, 32} }
variants { kind = "serve", arch = "sm_90", dtype = "bf16", head_dim = 576, head_dim_v = 512, v_in_k = true,
           causal = {false, true} }
variants { kind = "serve", arch = "sm_90", dtype = "bf16", head_dim = 512, causal = {false, true}, block_m = {16, 32} }
-- The serving forward's prefill on Hopper (fg_attention_fwd_varlen with sequences of 64 queries or more): the
-- sm_90a forward's variable-length variants (varlen = true), at the serving head dims. 2 x 3 x 2 = 12 variants.
variants {
    kind = "fwd",
    arch = "sm_90a",
    dtype = {"fp16", "bf16"},
    head_dim = {64, 128, 256},
    causal = {false, true},
    varlen = true,
}
-- The model variants of today's models, on the serving kernel and the sm_90a prefill: gpt-oss (head_dim 64, a
-- causal window with sinks), Mistral-style windows (128), Gemma 2 (256, softcap, with and without a window),
-- ALiBi (BLOOM/MPT, 128). The other combinations compile at first use. 4 + 2 + 4 + 2 + 4 = 16 variants, and
-- four backward ones below.
variants {
    kind = "serve",
    arch = {"sm_80", "sm_90"},
    dtype = "bf16",
    head_dim = 64,
    causal = true,
    block_m = {16, 64},
    window = true,
    sinks = true,
}
variants { kind = "serve", arch = "sm_90", dtype = "bf16", head_dim = 128, causal = true, block_m = {16, 64}, window = true }
variants {
    kind = "serve",
    arch = "sm_90",
    dtype = "bf16",
    head_dim = 256,
    causal = true,
    block_m = {16, 64},
    window = {false, true},
    softcap = true,
}
variants { kind = "serve", arch = "sm_80", dtype = "fp16", head_dim = 128, causal = true, block_m = {16, 64}, alibi = true }
variants {
    kind = "fwd",
    arch = "sm_90a",
    dtype = "bf16",
    head_dim = {64, 128},
    causal = true,
    varlen = true,
    window = true,
    sinks = {false, true},
}
-- The backward of packed sequences with gpt-oss's variants (the mma.sync kernel, loading by TMA or not as
-- dispatch chooses; sinks' gradient): 4 variants.
variants {
    kind = "bwd",
    arch = "sm_90",
    dtype = "bf16",
    head_dim = 64,
    causal = true,
    tma = {false, true},
    varlen = true,
    window = true,
    sinks = {false, true},
}
-- The backward of packed sequences at DeepSeek's head dims (Q and K of 192, V and O of 128: head_dim_v), on the
-- mma.sync kernel (sm_80; sm_90 loading by TMA or not): 2 x 2 + 2 = 6 variants.
variants {
    kind = "bwd",
    arch = {"sm_80", "sm_90"},
    dtype = "bf16",
    head_dim = 192,
    head_dim_v = 128,
    causal = {false, true},
    varlen = true,
}
variants {
    kind = "bwd",
    arch = "sm_90",
    dtype = "bf16",
    head_dim = 192,
    head_dim_v = 128,
    causal = {false, true},
    tma = true,
    varlen = true,
}
-- The merge of attention states (kind "merge", only an arch): split-KV's combine and fg_merge_states.
variants {
    kind = "merge",
    arch = {"sm_80", "sm_90"},
}
