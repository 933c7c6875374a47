# Session 22, call 7 (carry .deps, .whl): the tree after the review folds (4ec0774: test_gpu_fwd's emulation
# helper, a template test with identical SASS, the probes' quantization through fp8.py). The whole GPU suite
# native and as sm_80 (FLASHGEN_EMULATE_ARCH=80), test_cli, and both probes (power_clock.py in full,
# ncu_cudnn_fp8.py run once without ncu).
. bench/device_prelude.sh
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep A; el built
mkdir -p /tmp/fgT; FLASHGEN_CACHE_DIR=/tmp/fgT timeout 220 build/tests/test_gpu_fwd -j12 > $L/tests.log 2>&1; el "tests rc=$?"; tail -1 $L/tests.log; pk
FLASHGEN_CACHE_DIR=/tmp/fgT timeout 120 build/tests/test_cli -j4 > $L/cli.log 2>&1; el "cli rc=$?"; tail -1 $L/cli.log; pk
FLASHGEN_EMULATE_ARCH=80 FLASHGEN_CACHE_DIR=/tmp/fg80 timeout 220 build/tests/test_gpu_fwd -j12 > $L/tests_sm80.log 2>&1; el "sm_80 tests rc=$?"; tail -1 $L/tests_sm80.log; pk
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
timeout 60 python3 bench/probes/ncu_cudnn_fp8.py 128 8192 > $L/probe_cudnn.log 2>&1; el "ncu_cudnn_fp8 probe rc=$?"; tail -1 $L/probe_cudnn.log
FLASHGEN_CACHE_DIR=/tmp/fgA timeout 150 python3 bench/probes/power_clock.py --out $L/power_clock.json > $L/power_clock.md 2>$L/power_clock.err; el "power rc=$?"; cat $L/power_clock.md; tail -3 $L/power_clock.err; pk
