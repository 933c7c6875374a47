# Session 15, call 4: the sm_90a backward, tree N = dQ one block late (d 128 non-causal) + S^T and dP^T in two
# wgmma groups at d 128 too, the K/V descriptors from one base a block (spill-free now); S = N without the lag;
# H = HEAD (40e603a's backward). carry [".deps", ".smoke"].
. bench/device_prelude.sh
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep N; el built N
cp templates/bwd_sm90.cuh /tmp/bwd.keep; sed -i 's/^constexpr bool FG_BW_DQ_LAG = .*/constexpr bool FG_BW_DQ_LAG = false;/' templates/bwd_sm90.cuh
ninja $T >>$L/build.log 2>&1 && keep S && el built S
git show HEAD:templates/bwd_sm90.cuh > templates/bwd_sm90.cuh; ninja $T >>$L/build.log 2>&1 && keep H && el built H; cp /tmp/bwd.keep templates/bwd_sm90.cuh; ninja $T >>$L/build.log 2>&1
export FLASHGEN_CACHE_DIR=/tmp/fgN
timeout 150 build/tests/test_gpu_fwd -j8 --filter 'bwd/*' > $L/bwd_tests.log 2>&1; el "N bwd tests rc=$?"; tail -1 $L/bwd_tests.log; grep -a 'FAIL:\|CRASH' $L/bwd_tests.log | head -5 | cut -c1-250; pk
FLASHGEN_CACHE_DIR=/tmp/fgS timeout 60 /tmp/bS/test_gpu_fwd -j8 --filter 'bwd/shapes_sm90a*' > $L/S_tests.log 2>&1; el "S sm90a tests rc=$?"; tail -1 $L/S_tests.log
timeout 120 compute-sanitizer --tool racecheck build/tests/test_gpu_fwd -j1 --filter 'bwd/shapes_sm90a' > $L/racecheck.log 2>&1; el "racecheck rc=$?"; grep -a 'RACECHECK SUMMARY\|ERROR SUMMARY' $L/racecheck.log | tail -2; pk
timeout 100 compute-sanitizer --tool synccheck build/tests/test_gpu_fwd -j1 --filter 'bwd/shapes_sm90a' > $L/synccheck.log 2>&1; el "synccheck rc=$?"; grep -a 'ERROR SUMMARY' $L/synccheck.log | tail -1
for r in 1 2; do for x in H N S; do
  FLASHGEN_LIB=/tmp/b$x/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 80 python3 bench/compare.py --bwd --dtypes bf16 --out $L/b_$r$x > $L/b_$r$x.log 2>&1; el "bwd $r $x rc=$?"
done; pk; done
python3 bench/ab.py $L/b_1H $L/b_1N $L/b_2H $L/b_2N | tail -30
python3 bench/ab.py $L/b_1H $L/b_1S $L/b_2H $L/b_2S | tail -3
python3 bench/ab.py $L/b_1S $L/b_1N $L/b_2S $L/b_2N | tail -3
