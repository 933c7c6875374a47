-- configs/tune_serve.lua: a tuning space for the serving forward's decode (`flashgen tune configs/tune_serve.lua`):
-- the split count over keys, the decode tile's stages and whether K and V load by TMA, per (batch x heads,
-- keys) bucket, for one query token (and four: speculative decoding), GQA 32/8 at head_dim 128, bf16. The runtime takes the measured
-- winner of a call's bucket (query length, key length and batch x heads as buckets, the same query length)
-- in place of its split rule; calls that give num_splits or split_size keep them.
space {
    kind = "serve",
    dtype = "bf16",
    head_dim = 128,
    gqa = 4,
    seqlen_q = {1, 4},
    seqlen_k = {2048, 4096, 16384, 65536, 131072},
    batch_heads = {32, 256, 1024, 2048},       -- batch 1, 8, 32, 64 at 32 query heads
    block_m = 16, block_n = 64, warps = 4,
    stages = {3, 4},
    splits = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32},
    tma = {false, true},                        -- K and V by cp.async, or by TMA (sm_90 and newer)
}
