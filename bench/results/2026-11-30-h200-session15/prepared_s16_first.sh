# Session 16, first call (prepared in session 15): what session 15 committed without a GPU, then one A/B.
#  - bwd/* (4 new shapes, 71020bf), racecheck of bwd/shapes_sm90a;
#  - fwd/* (three-consumer FP8 kernels changed in 6f18edd), cli/* GPU tests (FP8 V of mean 1, 2d2867e),
#    `flashgen run` FP8 at 32k keys d 128/256 (must pass now with mean-1 V);
#  - A/B: FP8 d 64 policy 192 x 128 (Y = tree + .smoke/fp8_d64_192.patch) against 128 x 128 (tree = T);
#  - the binding's tests; the fp16 backward table on the final kernels.
# carry [".deps", ".smoke"]. About 400 s.
. bench/device_prelude.sh
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep T; el built T
git apply .smoke/fp8_d64_192.patch && ninja $T >>$L/build.log 2>&1 && keep Y && el built Y; git apply -R .smoke/fp8_d64_192.patch; ninja $T >>$L/build.log 2>&1
export FLASHGEN_CACHE_DIR=/tmp/fgT
timeout 150 build/tests/test_gpu_fwd -j8 --filter 'bwd/*' > $L/bwd_tests.log 2>&1; el "bwd tests rc=$?"; tail -1 $L/bwd_tests.log; grep -a 'FAIL:\|CRASH' $L/bwd_tests.log | head -5 | cut -c1-250; pk
timeout 90 compute-sanitizer --tool racecheck build/tests/test_gpu_fwd -j1 --filter 'bwd/shapes_sm90a' > $L/racecheck.log 2>&1; el "racecheck rc=$?"; grep -a 'RACECHECK SUMMARY' $L/racecheck.log | tail -1
timeout 150 build/tests/test_gpu_fwd -j8 --filter 'fwd/*' > $L/fwd_tests.log 2>&1; el "fwd tests rc=$?"; tail -1 $L/fwd_tests.log; grep -a 'FAIL:\|CRASH' $L/fwd_tests.log | head -5 | cut -c1-250; pk
timeout 120 build/tests/test_cli --filter '*gpu*' -j2 > $L/cli_gpu.log 2>&1; el "cli gpu tests rc=$?"; tail -1 $L/cli_gpu.log
for d in 128 256; do timeout 60 build/flashgen run --dtype e4m3 --head-dim $d --batch 1 --heads 4 --seqlen-q 256 --seqlen-k 32768 > $L/run_fp8_d$d.log 2>&1; el "run e4m3 d$d 32k rc=$?"; grep -a -i "max\|pass\|fail" $L/run_fp8_d$d.log | head -2; done; pk
FLASHGEN_CACHE_DIR=/tmp/fgY timeout 60 /tmp/bY/test_gpu_fwd -j8 --filter 'fwd/fp8*' > $L/Y_fp8.log 2>&1; el "Y fp8 tests rc=$?"; tail -1 $L/Y_fp8.log
for r in 1 2; do for x in T Y; do
  FLASHGEN_LIB=/tmp/b$x/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 60 python3 bench/fp8.py --skip-accuracy --head-dims 64 --seqlens 2048,4096,8192,16384 --out $L/y_$r$x > $L/y_$r$x.log 2>&1; el "fp8 d64 $r $x rc=$?"
done; pk; done
python3 bench/ab.py $L/y_1T $L/y_1Y $L/y_2T $L/y_2Y | tail -3
timeout 90 python3 python/tests/test_binding.py > $L/binding.log 2>&1; el "binding rc=$?"; tail -2 $L/binding.log; pk
timeout 90 python3 bench/compare.py --bwd --dtypes fp16 --out $L/bwd_fp16 > $L/bwd_fp16.log 2>&1; el "bwd fp16 rc=$?"; grep -a "geomean" $L/bwd_fp16.log; pk
