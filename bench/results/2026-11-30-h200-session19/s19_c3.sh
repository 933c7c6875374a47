# Session 19, call 3 (carry .deps): compute-sanitizer on session 18's forward (FG_Q_EARLY's Q release, the
# producer's Q-first order, O from the registers: never run under the sanitizers), and FP8 with one Q buffer
# taking Q back early (patches/fp8_q_early.patch: F) against the tree (T), e4m3 d 256.
. bench/device_prelude.sh
R=bench/results/2026-11-30-h200-session19
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep T; el built T
git apply $R/patches/fp8_q_early.patch && ninja $T >>$L/build.log 2>&1 && keep F && el built F; git apply -R $R/patches/fp8_q_early.patch; ninja >>$L/build.log 2>&1
export FLASHGEN_CACHE_DIR=/tmp/fgT
for run in "memcheck head_dims" "racecheck head_dims" "synccheck head_dims" "racecheck many_tiles*"; do
  set -- $run; tool=$1; f=$2
  timeout 80 compute-sanitizer --tool $tool /tmp/bT/test_gpu_fwd -j1 --filter "fwd/$f" > $L/${tool}_${f%\*}.log 2>&1; el "$tool $f rc=$?"; grep -a 'ERROR SUMMARY\|RACECHECK SUMMARY' $L/${tool}_${f%\*}.log | tail -1; grep -a "Synthesis" $L/${tool}_${f%\*}.log | tail -1; pk
done
FLASHGEN_CACHE_DIR=/tmp/fgF timeout 60 /tmp/bF/test_gpu_fwd -j8 --filter 'fwd/fp8*' > $L/fp8_F.log 2>&1; el "F fp8 tests rc=$?"; tail -1 $L/fp8_F.log; pk
for x in 1T 1F 2F 2T; do
  FLASHGEN_LIB=/tmp/b${x#?}/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg${x#?} timeout 50 python3 bench/fp8.py --skip-accuracy --head-dims 256 --seqlens 1024,2048,4096,16384 --out $L/fp8_$x > $L/fp8_$x.log 2>&1; el "fp8 $x rc=$?"; pk
done
python3 bench/ab.py $L/fp8_1T $L/fp8_1F $L/fp8_2T $L/fp8_2F | tail -4
