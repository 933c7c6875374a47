# Session 19, call 6 (carry .deps): stream-K over the sm_90a forward's last round (fwd_sm90.cuh FG_SPLIT,
# dispatch.c split_plan). One build: E = as built (the auto model), S = FLASHGEN_SPLIT=0 (whole tiles).
# Every forward GPU test (fwd/*: fwd/split_tail forces slot counts; the model splits many other non-causal
# cases) and runtime/*; synccheck on fwd/split_tail; then the non-causal forward table, S E, then E S; and a
# call with fewer tiles than SMs (flashgen run, checked against the CPU reference), S and E.
. bench/device_prelude.sh
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep E; el built
export FLASHGEN_CACHE_DIR=/tmp/fgE
timeout 150 build/tests/test_gpu_fwd -j8 --filter 'fwd/*' > $L/fwd_tests.log 2>&1; el "fwd tests rc=$?"; tail -1 $L/fwd_tests.log; grep -a 'FAIL:\|CRASH\|rror' $L/fwd_tests.log | head -12 | cut -c1-300; pk
timeout 60 build/tests/test_gpu_fwd -j8 --filter 'runtime/*' > $L/rt_tests.log 2>&1; el "runtime tests rc=$?"; tail -1 $L/rt_tests.log; pk
timeout 90 compute-sanitizer --tool synccheck build/tests/test_gpu_fwd -j1 --filter 'fwd/split_tail' > $L/synccheck_split.log 2>&1; el "synccheck rc=$?"; grep -a 'ERROR SUMMARY' $L/synccheck_split.log | tail -1; grep -a Synthesis $L/synccheck_split.log | tail -1; pk
for x in 1S 1E 2E 2S; do
  [ ${x#?} = S ] && export FLASHGEN_SPLIT=0 || unset FLASHGEN_SPLIT
  FLASHGEN_LIB=/tmp/bE/libflashgen.so timeout 70 python3 bench/compare.py --causal 0 --out $L/f_$x > $L/f_$x.log 2>&1; el "fwd $x rc=$?"; pk
done
unset FLASHGEN_SPLIT
python3 bench/ab.py $L/f_1S $L/f_1E $L/f_2S $L/f_2E | tail -12
for x in S E; do
  [ $x = S ] && export FLASHGEN_SPLIT=0 || unset FLASHGEN_SPLIT
  timeout 60 build/flashgen run --batch 1 --heads 8 --seqlen-q 512 --seqlen-k 4096 --head-dim 128 --iters 50 > $L/run_small_$x.log 2>&1; el "run small $x rc=$?"; tail -3 $L/run_small_$x.log
done; pk
