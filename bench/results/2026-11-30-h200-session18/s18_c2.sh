# Session 18, call 2 (carry .deps): as call 1, O now leaving from the registers in 16-byte units (a quad
# transpose, fg_quad_transpose), for FP8 too. B = tree; A = B - patches/fwd90_q_early_v4.patch (= c671961's
# kernels); C = B + patches/fwd90_q_early_v4_all_on_top.patch (every 16-bit tile). Tests on B and C, A/B d 256
# (A B A B), A/C d 64/128 (A C A C), FP8 A/B (e4m3 against A's, d 64/128/256 at 4k and 16k).
. bench/device_prelude.sh
R=bench/results/2026-11-30-h200-session18
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep B; el built B
git apply -R $R/patches/fwd90_q_early_v4.patch && ninja $T >>$L/build.log 2>&1 && keep A && el built A; git apply $R/patches/fwd90_q_early_v4.patch
git apply $R/patches/fwd90_q_early_v4_all_on_top.patch && ninja $T >>$L/build.log 2>&1 && keep C && el built C; git apply -R $R/patches/fwd90_q_early_v4_all_on_top.patch
sha256sum /tmp/b?/libflashgen.so | cut -c1-16
FLASHGEN_CACHE_DIR=/tmp/fgB timeout 150 /tmp/bB/test_gpu_fwd -j8 --filter 'fwd/*' > $L/fwd_B.log 2>&1; el "B fwd tests rc=$?"; tail -1 $L/fwd_B.log; grep -a 'FAIL:\|CRASH\|rror' $L/fwd_B.log | head -6 | cut -c1-300; pk
for r in 1 2; do for x in A B; do
  FLASHGEN_LIB=/tmp/b$x/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 100 python3 bench/compare.py --head-dims 256 --out $L/d256_$r$x > $L/d256_$r$x.log 2>&1; el "d256 $r $x rc=$?"
done; pk; done
python3 bench/ab.py $L/d256_1A $L/d256_1B $L/d256_2A $L/d256_2B | tail -2
for r in 1 2; do for x in A C; do
  FLASHGEN_LIB=/tmp/b$x/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 100 python3 bench/compare.py --head-dims 64,128 --out $L/d64_128_$r$x > $L/d64_128_$r$x.log 2>&1; el "d64/128 $r $x rc=$?"
done; pk; done
python3 bench/ab.py $L/d64_128_1A $L/d64_128_1C $L/d64_128_2A $L/d64_128_2C | tail -3
for r in 1 2; do for x in A B; do
  FLASHGEN_LIB=/tmp/b$x/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 100 python3 bench/fp8.py --skip-accuracy --seqlens 4096,16384 --out $L/fp8_$r$x > $L/fp8_$r$x.log 2>&1; el "fp8 $r $x rc=$?"
done; pk; done
python3 bench/ab.py $L/fp8_1A $L/fp8_1B $L/fp8_2A $L/fp8_2B | tail -4
FLASHGEN_CACHE_DIR=/tmp/fgC timeout 100 /tmp/bC/test_gpu_fwd -j8 --filter 'fwd/*' > $L/fwd_C.log 2>&1; el "C fwd tests rc=$?"; tail -1 $L/fwd_C.log; grep -a 'FAIL:\|CRASH\|rror' $L/fwd_C.log | head -6 | cut -c1-300; pk
