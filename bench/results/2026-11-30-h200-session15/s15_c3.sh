# Session 15, call 3: the sm_90a backward's dQ one block late at head_dim 128 (tree = L) against dQ in its own
# block (H: FG_BW_DQ_LAG false, the previous kernel: same SASS at d 64). carry [".deps", ".smoke"].
. bench/device_prelude.sh
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep L; el built L
cp templates/bwd_sm90.cuh /tmp/bwd.keep; sed -i 's/^constexpr bool FG_BW_DQ_LAG = FG_HEAD_DIM == 128;/constexpr bool FG_BW_DQ_LAG = false;/' templates/bwd_sm90.cuh
grep -c "FG_BW_DQ_LAG = false" templates/bwd_sm90.cuh; ninja $T >>$L/build.log 2>&1 && keep H && el built H; cp /tmp/bwd.keep templates/bwd_sm90.cuh; ninja $T >>$L/build.log 2>&1
export FLASHGEN_CACHE_DIR=/tmp/fgL
timeout 150 build/tests/test_gpu_fwd -j8 --filter 'bwd/shapes_sm90a*' > $L/sm90a_tests.log 2>&1; el "L bwd sm90a tests rc=$?"; tail -1 $L/sm90a_tests.log; grep -a 'FAIL:\|CRASH' $L/sm90a_tests.log | head -5 | cut -c1-250; pk
for r in 1 2; do for x in H L; do
  FLASHGEN_LIB=/tmp/b$x/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 80 python3 bench/compare.py --bwd --dtypes bf16 --head-dims 128 --out $L/b_$r$x > $L/b_$r$x.log 2>&1; el "bwd $r $x rc=$?"
done; pk; done
python3 bench/ab.py $L/b_1H $L/b_1L $L/b_2H $L/b_2L | tail -14
timeout 120 compute-sanitizer --tool racecheck build/tests/test_gpu_fwd -j1 --filter 'bwd/shapes_sm90a' > $L/racecheck.log 2>&1; el "racecheck rc=$?"; grep -a 'ERROR SUMMARY\|RACECHECK SUMMARY\|hazard' $L/racecheck.log | tail -2; pk
timeout 100 compute-sanitizer --tool synccheck build/tests/test_gpu_fwd -j1 --filter 'bwd/shapes_sm90a' > $L/synccheck.log 2>&1; el "synccheck rc=$?"; grep -a 'ERROR SUMMARY' $L/synccheck.log | tail -1
timeout 150 build/tests/test_gpu_fwd -j8 --filter 'bwd/*' > $L/bwd_tests.log 2>&1; el "L bwd tests rc=$?"; tail -1 $L/bwd_tests.log; grep -a 'FAIL:\|CRASH' $L/bwd_tests.log | head -5 | cut -c1-250; pk
