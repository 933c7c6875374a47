# Session 13, call 5: the final tree's FP8/runtime tests, explain's wording, and racecheck of the
# deterministic backward (FG_TEST_DET_RUNS=2: one repeat per shape under the tool).
set -u
sh .deps/offline-deps.sh --relocate .deps >/dev/null
export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
L=/tmp/l; rm -rf $L; mkdir -p $L; DBN=tune-NVIDIA-H200-sm90-132sm.lua
pk() { tar czf $OUT/l.tgz -C /tmp l; }
export FLASHGEN_CACHE_DIR=/tmp/fgZ; rm -rf $FLASHGEN_CACHE_DIR; mkdir -p $FLASHGEN_CACHE_DIR; zcat bench/results/2026-11-30-h200-session12/tuned_s8.lua.gz > $FLASHGEN_CACHE_DIR/$DBN
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; el built
timeout 60 build/tests/test_gpu_fwd -j8 --filter 'fwd/fp8*' > $L/fp8_tests.log 2>&1; el "fp8 rc=$?"; tail -1 $L/fp8_tests.log
timeout 30 build/tests/test_gpu_fwd -j8 --filter 'runtime/*' > $L/runtime.log 2>&1; el "runtime rc=$?"; tail -1 $L/runtime.log
build/flashgen explain --dtype e4m3 --head-dim 128 --seqlen-q 4096 --seqlen-k 4096 > $L/explain_fp8.txt 2>&1; grep kernel: $L/explain_fp8.txt; pk
FG_TEST_DET_RUNS=2 timeout 200 compute-sanitizer --tool racecheck build/tests/test_gpu_fwd -j1 --filter 'bwd/deterministic_is_bitwise_repeatable' > $L/racecheck.log 2>&1; el "racecheck rc=$?"; grep -a 'RACECHECK SUMMARY\|ERROR SUMMARY' $L/racecheck.log | tail -2; grep -a "Synthesis" $L/racecheck.log; pk
