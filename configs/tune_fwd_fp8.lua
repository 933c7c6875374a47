-- configs/tune_fwd_fp8.lua: the tuning space of the mma.sync forward kernel with FP8 (e4m3) inputs, for
-- GPUs with FP8 mma.sync: Ada (sm_89, native QMMA) and Hopper (sm_90, where ptxas emulates it with
-- fp8 -> f16 unpacks and HMMA: docs/performance.md). `flashgen tune
-- configs/tune_fwd_fp8.lua` records every candidate in the GPU's tuning database, next to the 16-bit
-- classes of configs/tune_fwd.lua; candidates are timed with bf16 output and key-major V. On a GPU
-- without FP8 every candidate is recorded as refused, with the rule's sentence.
-- The fields are those of configs/tune_fwd.lua. FP8 needs block_n a multiple of 32 (the P.V mma's k) and
-- head_dim a multiple of 32.

local tokens, width = 16384, 2048

for _, head_dim in ipairs({64, 128, 256}) do
    for _, seqlen in ipairs({2048, 8192}) do
        space {
            dtype = "e4m3",
            head_dim = head_dim,
            causal = {false, true},
            gqa = 1,
            seqlen_q = seqlen,
            batch_heads = (tokens // seqlen) * (width // head_dim),
            -- 3 x 3 x 2 x 2 = 36 candidates; validation refuses block_m 64 with 8 warps, 256 with 4, and
            -- accumulators that cannot fit; on sm_90 the resource check drops most 4-warp tiles (spills).
            block_m = {64, 128, 256},
            block_n = {32, 64, 128},
            warps = {4, 8},
            stages = {2, 3},
        }
    end
end
