# Session 20, call 3 (carry .deps): A = the tree (02f9db4: the 16-bit d 256 lazy rescale, FP8's exact
# maximum and 512-key level). Every test_gpu_fwd suite and test_cli's GPU tests on A; the FP8 table
# (bench/fp8.py defaults) and the 16-bit forward table on A. The mma.sync backward at d 256: L = A +
# patches/bwd_load_late.patch (block m + 1's cp.async copies issued between the S^T and dP^T passes
# instead of at the loop's top), LP = L + patches/bwd_p_early_on_top.patch (P^T computed and stored
# between the passes too); bwd/* on both, A/B against A (bf16, FlashAttention-2 in the same runs).
. bench/device_prelude.sh
R=bench/results/2026-11-30-h200-session20
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep A; el built A
git apply $R/patches/bwd_load_late.patch && ninja $T >>$L/build.log 2>&1 && keep L && el built L
git apply $R/patches/bwd_p_early_on_top.patch && ninja $T >>$L/build.log 2>&1 && keep LP && el built LP
git apply -R $R/patches/bwd_p_early_on_top.patch; git apply -R $R/patches/bwd_load_late.patch; ninja >>$L/build.log 2>&1
FLASHGEN_CACHE_DIR=/tmp/fgA timeout 240 /tmp/bA/test_gpu_fwd -j8 > $L/gpu_tests.log 2>&1; el "test_gpu_fwd A rc=$?"; tail -1 $L/gpu_tests.log; grep -a 'FAIL:\|CRASH' $L/gpu_tests.log | head -8 | cut -c1-250; pk
FLASHGEN_CACHE_DIR=/tmp/fgA timeout 60 build/tests/test_cli --filter '*gpu*' -j2 > $L/cli_gpu.log 2>&1; el "cli gpu rc=$?"; tail -1 $L/cli_gpu.log; pk
for x in L LP; do
  FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 90 /tmp/b$x/test_gpu_fwd -j8 --filter 'bwd/*' > $L/bwd_tests_$x.log 2>&1; el "$x bwd tests rc=$?"; tail -1 $L/bwd_tests_$x.log; pk
done
for x in 1A 1L 1LP 2LP 2L 2A; do
  FLASHGEN_LIB=/tmp/b${x#?}/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg${x#?} timeout 60 python3 bench/compare.py --bwd --dtypes bf16 --head-dims 256 --seqlens 1024,2048,4096,16384 --out $L/u_$x > $L/u_$x.log 2>&1; el "bwd d256 $x rc=$?"; pk
done
python3 bench/ab.py $L/u_1A $L/u_1L $L/u_2A $L/u_2L | tail -3
python3 bench/ab.py $L/u_1A $L/u_1LP $L/u_2A $L/u_2LP | tail -3
FLASHGEN_LIB=/tmp/bA/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fgA timeout 100 python3 bench/fp8.py --out $L/fp8_full > $L/fp8_full.log 2>&1; el "fp8 full rc=$?"; pk
FLASHGEN_LIB=/tmp/bA/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fgA timeout 100 python3 bench/compare.py --out $L/f_A > $L/f_A.log 2>&1; el "fwd A rc=$?"; tail -1 $L/f_A.log; pk
