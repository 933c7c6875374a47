# Session 15, call 6: dQ's bulk add a block after its staging (before the next S^T/dP^T), G = everywhere
# (tree), A = only with the lag (d 128 non-causal), H = HEAD (1b1d552). carry [".deps", ".smoke"].
. bench/device_prelude.sh
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep G; el built G
cp templates/bwd_sm90.cuh /tmp/bwd.keep; sed -i 's/^constexpr bool FG_BW_ADD_LATE = true;/constexpr bool FG_BW_ADD_LATE = FG_BW_DQ_LAG;/' templates/bwd_sm90.cuh
grep -c "FG_BW_ADD_LATE = FG_BW_DQ_LAG" templates/bwd_sm90.cuh; ninja $T >>$L/build.log 2>&1 && keep A && el built A
git show HEAD:templates/bwd_sm90.cuh > templates/bwd_sm90.cuh; ninja $T >>$L/build.log 2>&1 && keep H && el built H; cp /tmp/bwd.keep templates/bwd_sm90.cuh; ninja $T >>$L/build.log 2>&1
export FLASHGEN_CACHE_DIR=/tmp/fgG
timeout 150 build/tests/test_gpu_fwd -j8 --filter 'bwd/*' > $L/bwd_tests.log 2>&1; el "G bwd tests rc=$?"; tail -1 $L/bwd_tests.log; grep -a 'FAIL:\|CRASH' $L/bwd_tests.log | head -5 | cut -c1-250; pk
FLASHGEN_CACHE_DIR=/tmp/fgA timeout 60 /tmp/bA/test_gpu_fwd -j8 --filter 'bwd/shapes_sm90a*' > $L/A_tests.log 2>&1; el "A sm90a tests rc=$?"; tail -1 $L/A_tests.log
timeout 120 compute-sanitizer --tool racecheck build/tests/test_gpu_fwd -j1 --filter 'bwd/shapes_sm90a' > $L/racecheck.log 2>&1; el "racecheck rc=$?"; grep -a 'RACECHECK SUMMARY' $L/racecheck.log | tail -1; pk
timeout 100 compute-sanitizer --tool synccheck build/tests/test_gpu_fwd -j1 --filter 'bwd/shapes_sm90a' > $L/synccheck.log 2>&1; el "synccheck rc=$?"; grep -a 'ERROR SUMMARY' $L/synccheck.log | tail -1
for r in 1 2; do for x in H A G; do
  FLASHGEN_LIB=/tmp/b$x/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 80 python3 bench/compare.py --bwd --dtypes bf16 --out $L/b_$r$x > $L/b_$r$x.log 2>&1; el "bwd $r $x rc=$?"
done; pk; done
python3 bench/ab.py $L/b_1H $L/b_1G $L/b_2H $L/b_2G | tail -28
python3 bench/ab.py $L/b_1H $L/b_1A $L/b_2H $L/b_2A | tail -3
