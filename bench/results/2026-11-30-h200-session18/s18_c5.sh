# Session 18, call 5 (carry .deps): P = tree (the producer loads Q right after the first K block wherever
# there are two Q buffers, 16-bit and FP8: before, Q waited behind the first two blocks' K and V, i.e. for the
# previous tile's last P V); H = P - patches/fwd90_q_first.patch (= ca3ba37). A/B d 64/128 both dtypes (H P,
# then P H), FP8 A/B (e4m3, d 64/128/256 at 4k and 16k), P's forward tests.
. bench/device_prelude.sh
R=bench/results/2026-11-30-h200-session18
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep P; el built P
git apply -R $R/patches/fwd90_q_first.patch && ninja $T >>$L/build.log 2>&1 && keep H && el built H; git apply $R/patches/fwd90_q_first.patch
sha256sum /tmp/b?/libflashgen.so | cut -c1-16
for x in 1H 1P 2P 2H; do
  FLASHGEN_LIB=/tmp/b${x#?}/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg${x#?} timeout 100 python3 bench/compare.py --head-dims 64,128 --out $L/f_$x > $L/f_$x.log 2>&1; el "fwd $x rc=$?"; pk
done
python3 bench/ab.py $L/f_1H $L/f_1P $L/f_2H $L/f_2P | tail -3
FLASHGEN_CACHE_DIR=/tmp/fgP timeout 100 /tmp/bP/test_gpu_fwd -j8 --filter 'fwd/*' > $L/fwd_P.log 2>&1; el "P fwd tests rc=$?"; tail -1 $L/fwd_P.log; grep -a 'FAIL:\|CRASH\|rror' $L/fwd_P.log | head -6 | cut -c1-300; pk
for x in 1H 1P 2P 2H; do
  FLASHGEN_LIB=/tmp/b${x#?}/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg${x#?} timeout 60 python3 bench/fp8.py --skip-accuracy --seqlens 4096,16384 --out $L/fp8_$x > $L/fp8_$x.log 2>&1; el "fp8 $x rc=$?"; pk
done
python3 bench/ab.py $L/fp8_1H $L/fp8_1P $L/fp8_2H $L/fp8_2P | tail -4
