# Session 12, last call: the final tree's GPU tests (backward, forward, runtime, CLI GPU tests, binding).
set -u
sh .deps/offline-deps.sh --relocate .deps >/dev/null
export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
L=/tmp/l; rm -rf $L; mkdir -p $L; DBN=tune-NVIDIA-H200-sm90-132sm.lua
pk() { tar czf $OUT/l.tgz -C /tmp l; }
export FLASHGEN_CACHE_DIR=/tmp/fgF; rm -rf $FLASHGEN_CACHE_DIR; mkdir -p $FLASHGEN_CACHE_DIR; cp .smoke/tuned_s8.lua $FLASHGEN_CACHE_DIR/$DBN
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }; el built
timeout 60 build/tests/test_gpu_fwd -j8 --filter 'bwd/*' > $L/bwd_tests.log 2>&1; el "bwd rc=$?"; tail -1 $L/bwd_tests.log; grep -a 'FAIL\|CRASH' $L/bwd_tests.log | head -5; pk
timeout 40 python3 bench/compare.py --bwd --deterministic --dtypes bf16 --causal 0 --seqlens 8192,16384 --out $L/det_nc > $L/det_nc.log 2>&1; el "det nc rc=$?"
FLASHGEN_WGMMA_BWD=0 timeout 40 python3 bench/compare.py --bwd --dtypes bf16 --causal 0 --seqlens 8192,16384 --out $L/nd_nc > $L/nd_nc.log 2>&1; el "nd nc rc=$?"; pk
timeout 80 build/tests/test_gpu_fwd -j8 --filter 'fwd/*' > $L/fwd_tests.log 2>&1; el "fwd rc=$?"; tail -1 $L/fwd_tests.log; grep -a 'FAIL\|CRASH' $L/fwd_tests.log | head -5; pk
timeout 20 build/tests/test_gpu_fwd -j8 --filter 'runtime/*' > $L/runtime.log 2>&1; el "runtime rc=$?"; tail -1 $L/runtime.log
timeout 20 build/tests/test_cli --filter 'cli/run_small_problem_on_gpu' > $L/cli_run.log 2>&1; el "cli run rc=$?"; tail -1 $L/cli_run.log
timeout 20 build/tests/test_cli --filter 'cli/tune_tiny_backward_sweep_on_gpu' > $L/cli_tune_bwd.log 2>&1; el "cli tune bwd rc=$?"; tail -1 $L/cli_tune_bwd.log; pk
timeout 45 python3 python/tests/test_binding.py > $L/binding.log 2>&1; el "binding rc=$?"; tail -2 $L/binding.log; pk
