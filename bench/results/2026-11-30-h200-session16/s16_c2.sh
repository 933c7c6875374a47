# Session 16, call 2. T = tree (post + pre kernels rewritten, FP8 d 64 192 x 128); P = T with the old pre
# kernel; Z = T + FP8 d 128 192 x 64 (three consumers, O's level in shared memory).
. bench/device_prelude.sh
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep T; el built T
git apply -R .smoke/pre_new.patch && ninja $T >>$L/build.log 2>&1 && keep P && el built P; git apply .smoke/pre_new.patch
git apply .smoke/fp8_d128_192x64.patch && ninja $T >>$L/build.log 2>&1 && keep Z && el built Z; git apply -R .smoke/fp8_d128_192x64.patch; ninja $T >>$L/build.log 2>&1
sha256sum build/libflashgen.so /tmp/b?/libflashgen.so | cut -c1-16
export FLASHGEN_CACHE_DIR=/tmp/fgT
timeout 120 build/tests/test_gpu_fwd -j8 --filter 'bwd/*' > $L/bwd_tests.log 2>&1; el "bwd tests rc=$?"; tail -1 $L/bwd_tests.log; grep -a 'FAIL:\|CRASH\|FAIL\]' $L/bwd_tests.log | head -5 | cut -c1-250
FLASHGEN_CACHE_DIR=/tmp/fgZ timeout 60 /tmp/bZ/test_gpu_fwd -j8 --filter 'fwd/fp8*' > $L/Z_fp8.log 2>&1; el "Z fp8 tests rc=$?"; tail -1 $L/Z_fp8.log; grep -a 'FAIL\]' $L/Z_fp8.log | head -3; pk
for r in 1 2; do for x in P T; do
  FLASHGEN_LIB=/tmp/b$x/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 60 python3 bench/compare.py --bwd --dtypes bf16 --head-dims 128,64 --causal 0 --seqlens 512,1024,2048 --out $L/q_$r$x > $L/q_$r$x.log 2>&1; el "pre A/B $r $x rc=$?"
done; pk; done
python3 bench/ab.py $L/q_1P $L/q_1T $L/q_2P $L/q_2T | tail -3
for r in 1 2; do for x in T Z; do
  FLASHGEN_LIB=/tmp/b$x/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 50 python3 bench/fp8.py --skip-accuracy --head-dims 128 --seqlens 2048,4096,8192,16384 --out $L/z_$r$x > $L/z_$r$x.log 2>&1; el "fp8 d128 $r $x rc=$?"
done; pk; done
python3 bench/ab.py $L/z_1T $L/z_1Z $L/z_2T $L/z_2Z | tail -3
FLASHGEN_LIB=/tmp/bT/libflashgen.so timeout 40 python3 .smoke/kprof.py 128 0 512 2048 > $L/kprof_T.log 2>&1; el "kprof rc=$?"; grep -a "flashgen" $L/kprof_T.log; pk
timeout 100 python3 bench/fp8.py --skip-accuracy --out $L/fp8_full > $L/fp8_full.log 2>&1; el "fp8 full rc=$?"; pk
timeout 220 python3 bench/compare.py --bwd --head-dims 64,128 --out $L/bwd_all > $L/bwd_all.log 2>&1; el "bwd all rc=$?"; grep -a geomean $L/bwd_all.log | head; pk
