-- configs/tune_fwd_sm90a_fp8.lua: the tuning space of the wgmma family's FP8 (e4m3) forward variants
-- (sm_90a: QGMMA, P converted to e4m3 in registers, V^T by TMA; templates/forward_wgmma.cuh). Run `flashgen
-- tune configs/tune_fwd_sm90a_fp8.lua` on an H100/H200; dispatch then takes each bucket's winner for e4m3
-- calls on that GPU (e5m2 calls keep the tile policy's tiles). The fields are those of
-- configs/tune_fwd.lua; the problems are timed with bf16 O, V key-major. Tiles: block_m 64 (one consumer
-- warpgroup, warps 8), 128 (two, warps 12) or 192 (three, warps 16); block_n 64 or 128, and at head_dim
-- 128 also 192 and 224 (FlashAttention-3's d 128 FP8 tile, faster than 128 x 128 on long sequences and
-- slower on short ones); 2 to 4 K/V stages. Candidates that do not fit a consumer's registers or 227 KiB of
-- shared memory are recorded as refused: with the two-level accumulation (forward_wgmma.cuh FG_O_FLUSH, O's
-- second copy in fp32) that is 128 x 192/224 at d 128; three consumer warpgroups and d 256 keep O's fp32
-- level in shared memory (FG_O_FLUSH_SMEM), which at d 256 leaves room for block_n 64 only with two
-- consumer warpgroups.
local tokens, width = 16384, 2048

for _, head_dim in ipairs({64, 128, 256}) do
    for _, seqlen in ipairs({2048, 8192}) do
        space {
            family = "wgmma",
            dtype = "e4m3",
            head_dim = head_dim,
            causal = {false, true},
            gqa = 1,
            seqlen_q = seqlen,
            batch_heads = (tokens // seqlen) * (width // head_dim),
            block_m = {64, 128, 192},
            block_n = head_dim == 128 and {64, 128, 192, 224} or {64, 128},
            warps = {8, 12, 16},
            stages = {2, 3, 4},
        }
    end
end
