# Session 21, call 1 (carry .deps): the whole GPU suite on the tree (aa49b2d, 334 tests, the two new
# fwd/scale cases among them), then session 20's prepared backward patch (FG_LOADER_RECOMPUTE only when
# causal; patches/bwd_recompute_causal_only.patch of session 20): bwd/* on B, A/B d 256 without a mask,
# both dtypes, A B B A.
. bench/device_prelude.sh
P=bench/results/2026-11-30-h200-session20/patches
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep A; el built A
FLASHGEN_CACHE_DIR=/tmp/fgA timeout 200 /tmp/bA/test_gpu_fwd -j8 > $L/tests_A.log 2>&1; el "A all tests rc=$?"; tail -2 $L/tests_A.log; grep -c "FAIL\|fail" $L/tests_A.log; pk
git apply $P/bwd_recompute_causal_only.patch && ninja $T >>$L/build.log 2>&1 && keep B && el built B; git apply -R $P/bwd_recompute_causal_only.patch
FLASHGEN_CACHE_DIR=/tmp/fgB timeout 70 /tmp/bB/test_gpu_fwd -j8 --filter 'bwd/*' > $L/bwd_tests_B.log 2>&1; el "B bwd tests rc=$?"; tail -1 $L/bwd_tests_B.log; pk
for x in 1A 1B 2B 2A; do y=${x#?}
  FLASHGEN_LIB=/tmp/b$y/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$y timeout 40 python3 bench/compare.py --bwd --head-dims 256 --causal 0 --out $L/r_$x > $L/r_$x.log 2>&1; el "r $x rc=$?"; pk
done
python3 bench/ab.py $L/r_1A $L/r_1B $L/r_2A $L/r_2B | tail -12
