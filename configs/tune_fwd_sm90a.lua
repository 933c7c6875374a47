-- configs/tune_fwd_sm90a.lua: the tuning space of the wgmma family's forward (sm_90a: TMA, wgmma, warp
-- specialization; templates/forward_wgmma.cuh). `flashgen tune configs/tune_fwd_sm90a.lua` on an H100/H200
-- records every candidate in the GPU's tuning database; dispatch then takes the winner for calls that run
-- this family (family = "wgmma": candidates are sm_90a specs; on another GPU they are recorded as
-- refused). The fields are those of configs/tune_fwd.lua. Tiles: block_m is 64 query rows per consumer
-- warpgroup (64: 1, 128: 2, 192: 3) and warps = 4 per warpgroup plus the producer's 4, so only block_m 64
-- with warps 8, 128 with 12 and 192 with 16 are valid (64 has no pingpong partner but twice the tiles of
-- 128: a candidate for the 2k-4k problems, whose last wave of tiles is partly empty); validation refuses
-- the other pairs, the block_n that do not fit a consumer's registers (240 with two consumers, 160 with
-- three) or 227 KiB of shared memory.

local tokens, width = 16384, 2048

for _, head_dim in ipairs({64, 128, 256}) do
    -- Every length of the benchmark protocol from 512 to 8k (16k takes 8k's winner): dispatch takes the
    -- nearest bucket's, so each length is timed at its own size rather than borrowing another's winner.
    for _, seqlen in ipairs({512, 1024, 2048, 4096, 8192}) do
        space {
            family = "wgmma",
            dtype = "bf16",
            head_dim = head_dim,
            causal = {false, true},
            gqa = 1,
            seqlen_q = seqlen,
            batch_heads = (tokens // seqlen) * (width // head_dim),
            block_m = {64, 128, 192},
            block_n = {64, 80, 96, 112, 128, 144, 160, 176, 192},
            warps = {8, 12, 16},
            stages = {2},
        }
    end
end
