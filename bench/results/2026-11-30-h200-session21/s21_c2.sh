# Session 21, call 2 (carry .deps and .whl, the cudnn frontend 1.14.1 wheel): the tree with the backward
# loader patch (call 1's B); the whole GPU suite as sm_80 (FLASHGEN_EMULATE_ARCH=80: every kernel compiled
# to compute_80 PTX, which the driver compiles for the H200), the FP8 tests as sm_89 (Ada's FP8 mma.sync
# kernel), then bench/fp8.py with cuDNN's own e4m3 forward as a peer.
. bench/device_prelude.sh
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep A; el built
FLASHGEN_EMULATE_ARCH=80 FLASHGEN_CACHE_DIR=/tmp/fg80 timeout 250 build/tests/test_gpu_fwd -j12 > $L/tests_sm80.log 2>&1; el "sm_80 tests rc=$?"; tail -1 $L/tests_sm80.log; grep -c "skipped\|Skipping\|SKIP" $L/tests_sm80.log; pk
FLASHGEN_EMULATE_ARCH=89 FLASHGEN_CACHE_DIR=/tmp/fg89 timeout 100 build/tests/test_gpu_fwd -j12 --filter 'fwd/fp8*' > $L/tests_sm89_fp8.log 2>&1; el "sm_89 fp8 tests rc=$?"; tail -1 $L/tests_sm89_fp8.log; pk
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $L/pip.log 2>&1 && export PYTHONPATH=/tmp/site; el "pip rc=$?"
FLASHGEN_CACHE_DIR=/tmp/fgA PYTHONUNBUFFERED=1 timeout 200 python3 bench/fp8.py --out $L/fp8 > $L/fp8.log 2>&1; el "fp8.py rc=$?"; grep -i "cudnn" $L/fp8.log | head -5; pk
sed -n '/long key/,$p' $L/fp8/fp8.md | head -60
