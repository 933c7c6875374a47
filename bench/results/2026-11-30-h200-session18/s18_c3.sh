# Session 18, call 3 (carry .deps): N = tree (every 16-bit tile: Q back after the tile's last S, O from the
# registers in 16-byte units; the Q release after the loop, not in its last step); A = N -
# patches/fwd90_q_early_v5.patch (= c671961's kernels). Forward A/B on the whole table, both dtypes (A N, then
# N A), then the whole GPU test set on N (test_gpu_fwd, test_cli's GPU tests, the binding's tests).
. bench/device_prelude.sh
R=bench/results/2026-11-30-h200-session18
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep N; el built N
git apply -R $R/patches/fwd90_q_early_v5.patch && ninja $T >>$L/build.log 2>&1 && keep A && el built A; git apply $R/patches/fwd90_q_early_v5.patch; ninja >>$L/build.log 2>&1; el rebuilt N
sha256sum /tmp/b?/libflashgen.so build/libflashgen.so | cut -c1-16
for x in 1A 1N 2N 2A; do
  FLASHGEN_LIB=/tmp/b${x#?}/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg${x#?} timeout 120 python3 bench/compare.py --out $L/f_$x > $L/f_$x.log 2>&1; el "fwd $x rc=$?"; pk
done
python3 bench/ab.py $L/f_1A $L/f_1N $L/f_2A $L/f_2N | tail -4
export FLASHGEN_CACHE_DIR=/tmp/fgF; rm -rf $FLASHGEN_CACHE_DIR
timeout 240 build/tests/test_gpu_fwd -j8 > $L/gpu_tests.log 2>&1; el "test_gpu_fwd rc=$?"; tail -1 $L/gpu_tests.log; grep -a 'FAIL:\|CRASH\|\[SKIP\]' $L/gpu_tests.log | head -8 | cut -c1-250; pk
timeout 60 build/tests/test_cli --filter '*gpu*' -j2 > $L/cli_gpu.log 2>&1; el "cli gpu rc=$?"; tail -1 $L/cli_gpu.log; pk
timeout 60 python3 python/tests/test_binding.py > $L/binding.log 2>&1; el "binding rc=$?"; tail -2 $L/binding.log; pk
