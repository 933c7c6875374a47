# Session 21, call 5 (carry .deps): the final tree. The whole GPU suite native and as sm_80
# (FLASHGEN_EMULATE_ARCH=80), test_cli's GPU tests, and compute-sanitizer (memcheck, racecheck, synccheck)
# on the mma.sync backward at d 256 with its new TMA loads, both masks (call 4 ran them on C, one asm apart).
. bench/device_prelude.sh
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; el built
FLASHGEN_CACHE_DIR=/tmp/fgA timeout 200 build/tests/test_gpu_fwd -j8 > $L/tests.log 2>&1; el "native tests rc=$?"; tail -1 $L/tests.log; pk
for tool in memcheck racecheck synccheck; do for c in "" --causal; do
  FLASHGEN_CACHE_DIR=/tmp/fgA timeout 60 compute-sanitizer --tool $tool build/flashgen run --bwd --head-dim 256 --batch 1 --heads 2 --seqlen-q 200 --seqlen-k 333 --iters 1 $c > $L/san_${tool}${c}.log 2>&1; el "$tool $c rc=$?"; grep -a 'SUMMARY\|PASS\|FAIL\|tma=1' $L/san_${tool}${c}.log | tail -3 | cut -c1-160; pk
done; done
FLASHGEN_CACHE_DIR=/tmp/fgA timeout 90 build/tests/test_cli -j4 > $L/cli.log 2>&1; el "cli rc=$?"; tail -1 $L/cli.log; pk
FLASHGEN_EMULATE_ARCH=80 FLASHGEN_CACHE_DIR=/tmp/fg80 timeout 200 build/tests/test_gpu_fwd -j12 > $L/tests_sm80.log 2>&1; el "sm_80 tests rc=$?"; tail -1 $L/tests_sm80.log; pk
