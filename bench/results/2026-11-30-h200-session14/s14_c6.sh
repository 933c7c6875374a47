# Session 14, call 6 (the last of the device time): the tree (two-level accumulation every step, FP8 d > 128
# over 256 keys on mma.sync unless FLASHGEN_FP8_FAST_ACCUM=1) against a flush every 2 steps (patches/flush2.patch).
. bench/device_prelude.sh
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep A; el built A
git apply .smoke/flush2.patch && ninja $T >>$L/build.log 2>&1 && keep B && el built B; git apply -R .smoke/flush2.patch
FLASHGEN_CACHE_DIR=/tmp/fgB timeout 60 /tmp/bB/test_gpu_fwd -j8 --filter 'fwd/fp8*' > $L/B_fp8.log 2>&1; el "B fp8 tests rc=$?"; tail -1 $L/B_fp8.log; grep -a "FAIL:" $L/B_fp8.log | head -3 | cut -c1-250
FLASHGEN_CACHE_DIR=/tmp/fgA timeout 60 /tmp/bA/test_gpu_fwd -j8 --filter 'fwd/fp8*' > $L/A_fp8.log 2>&1; el "A fp8 tests rc=$?"; tail -1 $L/A_fp8.log; pk
FLASHGEN_FP8_FAST_ACCUM=1 FLASHGEN_CACHE_DIR=/tmp/fgA timeout 60 python3 bench/fp8.py --skip-accuracy --head-dims 256 --seqlens 4096 --out $L/fast256 > $L/fast256.log 2>&1; el "fast accum d256 rc=$?"; grep -a "| 256" $L/fast256.log
for r in 1 2; do for x in A B; do
  FLASHGEN_LIB=/tmp/b$x/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 60 python3 bench/fp8.py --skip-accuracy --head-dims 64,128 --seqlens 2048,8192,16384 --out $L/e_$r$x > $L/e_$r$x.log 2>&1; el "fp8 $r $x rc=$?"
done; pk; done
