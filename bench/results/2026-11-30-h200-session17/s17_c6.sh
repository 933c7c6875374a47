# Session 17, call 6 (carry .deps): the whole GPU test set on the final tree (every test_gpu_fwd suite:
# fwd, bwd, runtime, driver; test_cli's GPU tests; the Python binding's tests).
. bench/device_prelude.sh
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; el built
export FLASHGEN_CACHE_DIR=/tmp/fgF; rm -rf $FLASHGEN_CACHE_DIR
timeout 360 build/tests/test_gpu_fwd -j8 > $L/gpu_tests.log 2>&1; el "test_gpu_fwd rc=$?"; tail -1 $L/gpu_tests.log; grep -a 'FAIL:\|CRASH\|\[SKIP\]' $L/gpu_tests.log | head -8 | cut -c1-250; pk
timeout 90 build/tests/test_cli --filter '*gpu*' -j2 > $L/cli_gpu.log 2>&1; el "cli gpu rc=$?"; tail -1 $L/cli_gpu.log; pk
timeout 90 python3 python/tests/test_binding.py > $L/binding.log 2>&1; el "binding rc=$?"; tail -2 $L/binding.log; pk
