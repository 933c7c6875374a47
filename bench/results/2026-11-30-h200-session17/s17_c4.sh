# Session 17, call 4 (carry .deps): the tuning database's winner ranked by the time predicted for the call's
# lengths (padding of the last query and key blocks) and fp16 taking bf16's results where it has none.
# N4 = tree; O = tree - patches/tunedb_padding_and_16bit_bridge.patch (= 0236ccd). Forward A/B on the
# whole table (O first in a pair), the backward table once more on N4, GPU tests touching the tuner.
. bench/device_prelude.sh
R=bench/results/2026-11-30-h200-session17
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep N4; el built N4
git apply -R $R/patches/tunedb_padding_and_16bit_bridge.patch && ninja $T >>$L/build.log 2>&1 && keep O && el built O; git apply $R/patches/tunedb_padding_and_16bit_bridge.patch; ninja >>$L/build.log 2>&1; el rebuilt N4
sha256sum /tmp/b?/libflashgen.so | cut -c1-16
for r in 1 2; do for x in O N4; do
  FLASHGEN_LIB=/tmp/b$x/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 150 python3 bench/compare.py --out $L/f_$r$x > $L/f_$r$x.log 2>&1; el "fwd A/B $r $x rc=$?"
done; pk; done
python3 bench/ab.py $L/f_1O $L/f_1N4 $L/f_2O $L/f_2N4 | tail -4
FLASHGEN_LIB=/tmp/bN4/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fgN4 timeout 90 python3 bench/compare.py --bwd --head-dims 64,128 --out $L/bwd_N4 > $L/bwd_N4.log 2>&1; el "bwd table rc=$?"; pk
FLASHGEN_CACHE_DIR=/tmp/fgN4 timeout 90 build/tests/test_cli --filter '*gpu*' -j2 > $L/cli_gpu.log 2>&1; el "cli gpu tests rc=$?"; tail -1 $L/cli_gpu.log; pk
