# Session 14, call 4: FP8 two-level accumulation (F = tree: O and the row sums into fp32 every step, d 64/128)
# against b3384c8 (L: only the row sums folded). carry [".deps", ".smoke"].
. bench/device_prelude.sh
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep F; el built F
git apply -R .smoke/flushk.patch && ninja $T >>$L/build.log 2>&1 && keep L && el built L; git apply .smoke/flushk.patch
ninja >>$L/build.log 2>&1; cmp build/libflashgen.so /tmp/bF/libflashgen.so && el tree-is-F
FLASHGEN_CACHE_DIR=/tmp/fgL timeout 120 /tmp/bL/test_gpu_fwd -j8 --filter 'fwd/fp8_long_keys' > $L/L_long.log 2>&1; el "L long_keys rc=$?"; tail -1 $L/L_long.log
export FLASHGEN_CACHE_DIR=/tmp/fgF
timeout 170 build/tests/test_gpu_fwd -j8 --filter 'fwd/*' > $L/fwd_tests.log 2>&1; el "F fwd rc=$?"; tail -1 $L/fwd_tests.log; grep -a 'FAIL\|CRASH' $L/fwd_tests.log | head -5; pk
timeout 90 compute-sanitizer --tool memcheck build/tests/test_gpu_fwd -j1 --filter 'fwd/fp8_lse_or_not' > $L/memcheck.log 2>&1; el "memcheck rc=$?"; grep -a 'ERROR SUMMARY' $L/memcheck.log | tail -1
for dd in 64 128; do timeout 60 build/flashgen run --dtype e4m3 --batch 1 --heads 2 --seqlen-q 256 --seqlen-k 32768 --head-dim $dd --iters 3 2>&1 | grep -a "check:" | cut -c1-160; done | tee $L/runs.txt; pk
for r in 1 2; do for x in L F; do
  FLASHGEN_LIB=/tmp/b$x/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 90 python3 bench/fp8.py --skip-accuracy --head-dims 64,128 --seqlens 2048,4096,8192,16384 --out $L/e_$r$x > $L/e_$r$x.log 2>&1; el "fp8 $r $x rc=$?"
done; pk; done
timeout 150 python3 bench/fp8.py --out $L/fp8_full > $L/fp8_full.log 2>&1; el "fp8 full rc=$?"; pk
