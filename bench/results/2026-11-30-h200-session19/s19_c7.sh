# Session 19, call 7 (carry .deps): the final tree after the review's fold (launch_items names its kernel; the
# failing call's name formatted once): every test_gpu_fwd suite and test_cli's GPU tests.
. bench/device_prelude.sh
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; el built
export FLASHGEN_CACHE_DIR=/tmp/fgF; rm -rf $FLASHGEN_CACHE_DIR
timeout 240 build/tests/test_gpu_fwd -j8 > $L/gpu_tests.log 2>&1; el "test_gpu_fwd rc=$?"; tail -1 $L/gpu_tests.log; grep -a 'FAIL:\|CRASH' $L/gpu_tests.log | head -8 | cut -c1-250; pk
timeout 60 build/tests/test_cli --filter '*gpu*' -j2 > $L/cli_gpu.log 2>&1; el "cli gpu rc=$?"; tail -1 $L/cli_gpu.log; pk
