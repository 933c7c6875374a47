# Session 21, call 3 (carry .deps, .whl): the tree after call 2's two test fixes. The whole GPU suite native;
# runtime/* as sm_80 (the two that failed in call 2); the mma.sync backward at d 256 against FA2 and cuDNN,
# three runs (both dtypes and masks); bench/fp8.py speed at 4k-16k with cuDNN's e4m3 causal rows (call 2's
# check refused them: cuDNN writes O in e4m3).
. bench/device_prelude.sh
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep A; el built
FLASHGEN_CACHE_DIR=/tmp/fgA timeout 200 build/tests/test_gpu_fwd -j8 > $L/tests.log 2>&1; el "native tests rc=$?"; tail -1 $L/tests.log; pk
FLASHGEN_EMULATE_ARCH=80 FLASHGEN_CACHE_DIR=/tmp/fg80 timeout 60 build/tests/test_gpu_fwd -j8 --filter 'runtime/*' > $L/tests_sm80_runtime.log 2>&1; el "sm_80 runtime tests rc=$?"; tail -1 $L/tests_sm80_runtime.log; pk
for i in 1 2 3; do FLASHGEN_CACHE_DIR=/tmp/fgA timeout 80 python3 bench/compare.py --bwd --head-dims 256 --out $L/bwd256_$i > $L/bwd256_$i.log 2>&1; el "bwd d256 run $i rc=$?"; pk; done
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $L/pip.log 2>&1 && export PYTHONPATH=/tmp/site
FLASHGEN_CACHE_DIR=/tmp/fgA PYTHONUNBUFFERED=1 timeout 120 python3 bench/fp8.py --out $L/fp8 --skip-accuracy --seqlens 4096,8192,16384 > $L/fp8.log 2>&1; el "fp8.py rc=$?"; pk
sed -n '/Speed/,$p' $L/fp8/fp8.md | head -30
