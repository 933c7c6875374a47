# Session 17, call 1 (carry .deps): the sm_90a backward's 80-query blocks with dQ^T at head_dim 128 without a
# mask. N = tree; O = tree - patches/bwd90_dqt_bm80.patch (= 9757dbd, 64-query blocks).
. bench/device_prelude.sh
R=bench/results/2026-11-30-h200-session17
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep N; el built N
git apply -R $R/patches/bwd90_dqt_bm80.patch && ninja $T >>$L/build.log 2>&1 && keep O && el built O; git apply $R/patches/bwd90_dqt_bm80.patch
sha256sum /tmp/b?/libflashgen.so | cut -c1-16
export FLASHGEN_CACHE_DIR=/tmp/fgN
timeout 150 /tmp/bN/test_gpu_fwd -j8 --filter 'bwd/*' > $L/bwd_tests.log 2>&1; el "bwd tests rc=$?"; tail -1 $L/bwd_tests.log; grep -a 'FAIL:\|CRASH\|Skip\|rror' $L/bwd_tests.log | head -8 | cut -c1-300; pk
for r in 1 2; do for x in O N; do
  FLASHGEN_LIB=/tmp/b$x/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 60 python3 bench/compare.py --bwd --dtypes bf16 --head-dims 128 --causal 0 --out $L/a_$r$x > $L/a_$r$x.log 2>&1; el "A/B $r $x rc=$?"
done; pk; done
python3 bench/ab.py $L/a_1O $L/a_1N $L/a_2O $L/a_2N | tail -4
grep -a "128" $L/a_2N.log | head -8
FLASHGEN_LIB=/tmp/bN/libflashgen.so timeout 40 python3 bench/results/2026-11-29-h200-session10/profile/kprof.py 128 0 512 2048 > $L/kprof_N.log 2>&1; el "kprof N rc=$?"; grep -a "main\|pre\|post\|convert\|dot" $L/kprof_N.log | head -8; pk
timeout 90 compute-sanitizer --tool racecheck /tmp/bN/test_gpu_fwd -j1 --filter 'bwd/shapes_sm90a' > $L/racecheck.log 2>&1; el "racecheck rc=$?"; grep -a 'RACECHECK SUMMARY' $L/racecheck.log | tail -1; pk
