# Session 12's first GPU call (prepared in session 11): the final tree's tests that session 11 could not run,
# then tables. NOTE (session 11): on a WARM machine the build dir survives and copied sources keep their old
# mtimes, so `ninja` may find no work and run a stale library: always `rm -rf build` (or touch sources) first.
set -u
sh .deps/offline-deps.sh --relocate .deps >/dev/null
export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
L=/tmp/l; rm -rf $L; mkdir -p $L; DBN=tune-NVIDIA-H200-sm90-132sm.lua
pk() { tar czf $OUT/l.tgz -C /tmp l; }
export FLASHGEN_CACHE_DIR=/tmp/fgN; rm -rf $FLASHGEN_CACHE_DIR; mkdir -p $FLASHGEN_CACHE_DIR; cp .smoke/tuned_s8.lua $FLASHGEN_CACHE_DIR/$DBN
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }; el built
timeout 200 build/tests/test_gpu_fwd -j8 --filter 'bwd/*' > $L/bwd_tests.log 2>&1; el "bwd rc=$?"; tail -1 $L/bwd_tests.log; grep -a 'FAIL\|CRASH' $L/bwd_tests.log | head; pk
timeout 60 build/tests/test_gpu_fwd -j8 --filter 'runtime/*' > $L/runtime.log 2>&1; el "runtime rc=$?"; tail -1 $L/runtime.log
timeout 300 build/tests/test_cli --filter 'cli/tune_tiny_backward_sweep_on_gpu' --verbose > $L/tune_bwd.log 2>&1; el "tune bwd rc=$?"; tail -3 $L/tune_bwd.log; timeout 120 build/tests/test_cli --filter 'cli/run_small_problem_on_gpu' --verbose > $L/run_bwd.log 2>&1; el "run rc=$?"; tail -2 $L/run_bwd.log; pk
timeout 120 python3 python/tests/test_binding.py > $L/binding.log 2>&1; el "binding rc=$?"; tail -2 $L/binding.log; pk
timeout 150 compute-sanitizer --tool racecheck build/tests/test_gpu_fwd -j1 --filter 'bwd/tiles' > $L/racecheck.log 2>&1; el "racecheck rc=$?"; grep -a 'RACECHECK SUMMARY' $L/racecheck.log; pk
timeout 120 python3 bench/compare.py --bwd --head-dims 256 --out $L/bwd_d256 > $L/bwd_d256.log 2>&1; el "d256 rc=$?"; pk
timeout 120 python3 bench/compare.py --bwd --deterministic --dtypes bf16 --out $L/bwd_det > $L/bwd_det.log 2>&1; el "det rc=$?"; pk
