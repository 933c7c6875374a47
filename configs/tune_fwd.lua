-- configs/tune_fwd.lua: the tuning space of the mma.sync forward kernel (FA2 family), for Ampere, Ada
-- and Hopper alike: `flashgen tune configs/tune_fwd.lua` times every candidate below on the GPU it runs
-- on and records each one in that GPU's tuning database, which dispatch then consults.
--
-- A space is Lua run in the config sandbox. It calls, any number of times:
--   space { dtype = ..., head_dim = ..., causal = ..., gqa = ...,      -- the problem class
--           seqlen_q = ..., seqlen_k = ..., batch_heads = ...,        -- the sizes to time
--           block_m = ..., block_n = ..., warps = ..., stages = ... }  -- the candidate tiles
-- Every field takes a value or a list; lists multiply out (every problem x every candidate).
-- causal defaults to false, gqa to 1 (heads_q / heads_kv), and a missing seqlen_k pairs each seqlen_q
-- with itself. Results are filed under buckets: each size rounded up to a power of two, and a call at
-- run time uses the nearest bucket that was tuned. The GPU's arch is not written here: candidates its
-- shared memory or registers cannot hold are recorded as refused, with the reason, and skipped.

-- The benchmark protocol's shapes: 16k tokens in total (batch = 16384 / seqlen) and a model width of
-- 2048 (heads = 2048 / head_dim), so every problem fills an H100/H200 or an A100 several times over.
local tokens, width = 16384, 2048

for _, head_dim in ipairs({64, 128, 256}) do
    for _, seqlen in ipairs({512, 2048, 4096, 8192}) do
        space {
            -- Results apply to the dtype they were measured with, so both 16-bit types are tuned (the
            -- two kernels differ only in conversions; their winners usually agree).
            dtype = {"bf16", "fp16"},
            head_dim = head_dim,
            causal = {false, true},
            gqa = 1,
            seqlen_q = seqlen,       -- seqlen_k follows: self-attention, as in prefill and training
            batch_heads = (tokens // seqlen) * (width // head_dim),
            -- 3 x 6 x 2 x 3 = 108 candidates around the tile policy's defaults. Validation refuses about
            -- a third (block_m 64 with 8 warps, 256 with 4, accumulators that cannot fit, and shared
            -- memory past the GPU's), and the resource check drops those that spill. One stage (one K
            -- and one V buffer, loading in turn) is FlashAttention-2's pipeline at head_dim 256, where
            -- it lets 64 x 64 tiles run two CTAs an SM.
            block_m = {64, 128, 256},
            block_n = {32, 48, 64, 80, 96, 128},
            warps = {4, 8},
            stages = {1, 2, 3},
        }
    end
end
