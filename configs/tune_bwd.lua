-- configs/tune_bwd.lua: the tuning space of the mma.sync backward kernel (backward_mma.cuh), for Ampere, Ada,
-- Hopper and Blackwell alike: `flashgen tune configs/tune_bwd.lua` checks and times every candidate below on the
-- GPU it runs on and records it in that GPU's tuning database; fg_attention_bwd then runs each bucket's winner
-- (outside the deterministic mode). On an H100/H200 the wgmma family's backward (sm_90a) takes head_dim 64
-- and 128 calls by default: there the records of those head dims serve only the calls that run the mma.sync kernel
-- (FLASHGEN_WGMMA_BWD=0, or tensors TMA cannot read), and `tune --show` marks their winner all the same.
--
-- space{} is as in configs/tune_fwd.lua, with kind = "bwd": fp16/bf16, the candidates' block_m (32, 64 or 128
-- query rows a step), block_n (16 keys a warp, or 8 from 4 warps), warps (2, 4 or 8) and stages (1 or 2 query
-- blocks in flight). Validation refuses what the kernel does not take (and names the rule); the device's
-- shared memory refuses the rest; spilling candidates are recorded as spilled (--allow-spills times them).
-- Each candidate is checked first on a small problem of its class (every element of dQ, dK, dV against the
-- CPU references by the gradient rule of docs/numerics.md), then timed at the size below.

-- The benchmark protocol's shapes: 16k tokens (batch = 16384 / seqlen), a model width of 2048 (heads = 2048 /
-- head_dim).
local tokens, width = 16384, 2048

for _, head_dim in ipairs({64, 128, 256}) do
    for _, seqlen in ipairs({1024, 4096}) do
        space {
            kind = "bwd",
            dtype = "bf16",
            head_dim = head_dim,
            causal = {false, true},
            seqlen_q = seqlen,
            batch_heads = (tokens // seqlen) * (width // head_dim),
            -- The tile policy's tiles and their neighbours: 8 keys a warp above head_dim 128 (block_n = 8 x
            -- warps), 16 below.
            block_m = {32, 64, 128},
            block_n = head_dim > 128 and {32, 64} or {64, 128},
            warps = {4, 8},
            stages = {1, 2},
        }
    end
end
