# Session 20, call 6 (carry .deps): the mma.sync backward above head_dim 128 without a mask, its loaders'
# places kept rather than recomputed (FG_LOADER_RECOMPUTE 0; patches/bwd_recompute_causal_only.patch): with
# the loads between the passes ptxas then spills nothing at d 256 (16 bytes before). A = the tree (317c1b2),
# B = A + the patch: bwd/* on B, A/B bf16 d 256 without a mask (A B B A).
. bench/device_prelude.sh
R=bench/results/2026-11-30-h200-session20
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep A; el built A
git apply $R/patches/bwd_recompute_causal_only.patch && ninja $T >>$L/build.log 2>&1 && keep B && el built B; git apply -R $R/patches/bwd_recompute_causal_only.patch
FLASHGEN_CACHE_DIR=/tmp/fgB timeout 70 /tmp/bB/test_gpu_fwd -j8 --filter 'bwd/*' > $L/bwd_tests_B.log 2>&1; el "B bwd tests rc=$?"; tail -1 $L/bwd_tests_B.log; pk
for x in 1A 1B 2B 2A; do y=${x#?}
  FLASHGEN_LIB=/tmp/b$y/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$y timeout 30 python3 bench/compare.py --bwd --dtypes bf16 --head-dims 256 --causal 0 --out $L/r_$x > $L/r_$x.log 2>&1; el "r $x rc=$?"; pk
done
python3 bench/ab.py $L/r_1A $L/r_1B $L/r_2A $L/r_2B | tail -9
