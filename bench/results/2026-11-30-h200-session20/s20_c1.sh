# Session 20, call 1 (carry .deps): the lazy rescale (FlashAttention-4: O's rescale skipped until a row's
# maximum has grown by more than 2^stale in P). A = the tree (52bbb21); B = A + patches/lazy_rescale.patch
# (sm_90a forward: stale 8 where the rescale is a branch, 16-bit d > 128; 0.75 for FP8); D = B +
# patches/lazy_all16_on_top.patch (16-bit d <= 128 too, their rescale becoming a branch).
. bench/device_prelude.sh
R=bench/results/2026-11-30-h200-session20
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep A; el built A
git apply $R/patches/lazy_rescale.patch && ninja $T >>$L/build.log 2>&1 && keep B && el built B
git apply $R/patches/lazy_all16_on_top.patch && ninja $T >>$L/build.log 2>&1 && keep D && el built D
git apply -R $R/patches/lazy_all16_on_top.patch; git apply -R $R/patches/lazy_rescale.patch
for x in B; do
  FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 120 /tmp/b$x/test_gpu_fwd -j8 --filter 'fwd/*' > $L/tests_$x.log 2>&1; el "$x fwd tests rc=$?"; tail -1 $L/tests_$x.log; pk
done
for x in 1A 1B 1D 2D 2B 2A; do
  FLASHGEN_LIB=/tmp/b${x#?}/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg${x#?} timeout 100 python3 bench/compare.py --out $L/f_$x > $L/f_$x.log 2>&1; el "fwd $x rc=$?"; pk
done
python3 bench/ab.py $L/f_1A $L/f_1B $L/f_2A $L/f_2B | tail -8
python3 bench/ab.py $L/f_1A $L/f_1D $L/f_2A $L/f_2D | tail -8
