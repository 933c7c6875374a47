# Session 18, call 4 (carry .deps): H = tree (ca3ba37: 16-bit d 64/128 as c671961, SASS identical); X = H +
# patches/fwd90_o_direct_all_on_top.patch (every 16-bit tile's O from the registers in 16-byte units, the Q
# buffer back after that, as FP8's; no change to the producer or the loop). A/B d 64/128 both dtypes (H X,
# then X H), X's forward tests.
. bench/device_prelude.sh
R=bench/results/2026-11-30-h200-session18
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep H; el built H
git apply $R/patches/fwd90_o_direct_all_on_top.patch && ninja $T >>$L/build.log 2>&1 && keep X && el built X; git apply -R $R/patches/fwd90_o_direct_all_on_top.patch
sha256sum /tmp/b?/libflashgen.so | cut -c1-16
for x in 1H 1X 2X 2H; do
  FLASHGEN_LIB=/tmp/b${x#?}/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg${x#?} timeout 100 python3 bench/compare.py --head-dims 64,128 --out $L/f_$x > $L/f_$x.log 2>&1; el "fwd $x rc=$?"; pk
done
python3 bench/ab.py $L/f_1H $L/f_1X $L/f_2H $L/f_2X | tail -3
FLASHGEN_CACHE_DIR=/tmp/fgX timeout 100 /tmp/bX/test_gpu_fwd -j8 --filter 'fwd/*' > $L/fwd_X.log 2>&1; el "X fwd tests rc=$?"; tail -1 $L/fwd_X.log; grep -a 'FAIL:\|CRASH\|rror' $L/fwd_X.log | head -6 | cut -c1-300; pk
