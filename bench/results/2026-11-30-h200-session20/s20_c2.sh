# Session 20, call 2 (carry .deps): FP8. A = the tree (35d8f90: the lazy rescale, FP8 allowance 2^0.75);
# Z = A + patches/fp8_exact_max.patch (FP8 with the exact maximum, as before); P8, P16 = A with O's fp32
# level in shared memory (d 256) flushed every 512 / 1024 keys instead of 256 (patches/fp8_level_*.patch).
. bench/device_prelude.sh
R=bench/results/2026-11-30-h200-session20
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep A; el built A
for v in "Z fp8_exact_max" "P8 fp8_level_512" "P16 fp8_level_1024"; do set -- $v
  git apply $R/patches/$2.patch && ninja $T >>$L/build.log 2>&1 && keep $1 && el built $1; git apply -R $R/patches/$2.patch
done
for x in P8 P16; do
  FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 90 /tmp/b$x/test_gpu_fwd -j8 --filter 'fwd/fp8*' > $L/tests_$x.log 2>&1; el "$x fp8 tests rc=$?"; tail -1 $L/tests_$x.log; pk
done
for x in A P8 P16; do
  FLASHGEN_LIB=/tmp/b$x/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 90 python3 bench/fp8.py --skip-speed --out $L/acc_$x > $L/acc_$x.log 2>&1; el "acc $x rc=$?"; grep -A9 "^| 256 | 0" $L/acc_$x.log | grep "e4m3"; pk
done
for x in 1A 1Z 1P8 1P16 2P16 2P8 2Z 2A; do
  FLASHGEN_LIB=/tmp/b${x#?}/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg${x#?} timeout 60 python3 bench/fp8.py --skip-accuracy --head-dims 64,128,256 --seqlens 1024,4096,16384 --out $L/s_$x > $L/s_$x.log 2>&1; el "speed $x rc=$?"; pk
done
python3 bench/ab.py $L/s_1A $L/s_1Z $L/s_2A $L/s_2Z | tail -6
python3 bench/ab.py $L/s_1A $L/s_1P8 $L/s_2A $L/s_2P8 | tail -6
python3 bench/ab.py $L/s_1A $L/s_1P16 $L/s_2A $L/s_2P16 | tail -6
