# Session 20, call 4 (carry .deps): the lazy rescale's allowance for 16-bit d > 128. A = the tree (8192356,
# 2^8); T2, T1 = 2^2, 2^1 (patches/stale_2.patch, stale_1.patch); E = exact (stale_0.patch). Call 3's
# whole-suite run failed one test on A (fp16 d 192 causal, max error 1.05x the bound) and an emulation on
# this machine put 2^8's error at up to 1.1x the bound where 2^1-2^2 stayed with the exact maximum's.
# The whole GPU suite on T2, the forward and determinism suites on T1; A/B at d 256 (E T1 T2 A, then
# A T2 T1 E); the full 16-bit table on T2 and on T1.
. bench/device_prelude.sh
R=bench/results/2026-11-30-h200-session20
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep A; el built A
for t in 2 1 0; do x=T$t; [ $t = 0 ] && x=E
  git apply $R/patches/stale_$t.patch && ninja $T >>$L/build.log 2>&1 && keep $x && el built $x; git apply -R $R/patches/stale_$t.patch
done
ninja >>$L/build.log 2>&1
FLASHGEN_CACHE_DIR=/tmp/fgT2 timeout 200 /tmp/bT2/test_gpu_fwd -j8 > $L/gpu_tests_T2.log 2>&1; el "test_gpu_fwd T2 rc=$?"; tail -1 $L/gpu_tests_T2.log; grep -a 'FAIL:\|CRASH' $L/gpu_tests_T2.log | head -4 | cut -c1-250; pk
FLASHGEN_CACHE_DIR=/tmp/fgT1 timeout 120 /tmp/bT1/test_gpu_fwd -j8 --filter 'fwd/*' > $L/fwd_tests_T1.log 2>&1; el "fwd T1 rc=$?"; tail -1 $L/fwd_tests_T1.log; pk
FLASHGEN_CACHE_DIR=/tmp/fgT1 timeout 60 /tmp/bT1/test_gpu_fwd -j8 --filter 'bwd/deterministic*' > $L/det_tests_T1.log 2>&1; el "det T1 rc=$?"; tail -1 $L/det_tests_T1.log; pk
for x in 1E 1T1 1T2 1A 2A 2T2 2T1 2E; do y=${x#?}
  FLASHGEN_LIB=/tmp/b$y/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$y timeout 60 python3 bench/compare.py --head-dims 256 --out $L/g_$x > $L/g_$x.log 2>&1; el "d256 $x rc=$?"; pk
done
for y in T1 T2 A; do python3 bench/ab.py $L/g_1E $L/g_1$y $L/g_2E $L/g_2$y | tail -8; done
for y in T2 T1; do
  FLASHGEN_LIB=/tmp/b$y/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$y timeout 100 python3 bench/compare.py --out $L/f_$y > $L/f_$y.log 2>&1; el "fwd $y rc=$?"; tail -1 $L/f_$y.log; pk
done
