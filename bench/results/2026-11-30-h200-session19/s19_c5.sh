# Session 19, call 5 (carry .deps): the final tree. Every GPU test (test_gpu_fwd: fwd, bwd with the early
# launches, runtime, driver; test_cli's GPU tests; the Python binding); the SASS at the offsets call 3's
# racecheck of fwd/many_tiles* named (the dynamic schedule's tile-index ring, a known false positive?); the
# FP8 table (bench/fp8.py defaults) and the fp16 backward table (bf16's is call 2's E runs).
. bench/device_prelude.sh
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep T; el built
export FLASHGEN_CACHE_DIR=/tmp/fgT
timeout 240 build/tests/test_gpu_fwd -j8 > $L/gpu_tests.log 2>&1; el "test_gpu_fwd rc=$?"; tail -1 $L/gpu_tests.log; grep -a 'FAIL:\|CRASH' $L/gpu_tests.log | head -8 | cut -c1-250; pk
timeout 90 build/tests/test_cli --filter '*gpu*' -j2 > $L/cli_gpu.log 2>&1; el "cli gpu rc=$?"; tail -1 $L/cli_gpu.log; pk
timeout 90 python3 python/tests/test_binding.py > $L/binding.log 2>&1; el "binding rc=$?"; tail -2 $L/binding.log; pk
for s in "arch=sm_90a,block_m=192,block_n=128,causal=0,dtype=bf16,head_dim=64,stages=2,warps=16 500 86e0" \
         "arch=sm_90a,block_m=128,block_n=128,causal=1,dtype=fp16,head_dim=96,stages=2,warps=12 500 8050 8580 a730"; do
  set -- $s; spec=$1; shift
  build/flashgen compile "$spec" -o $L/k.cubin > /dev/null 2>&1 && cuobjdump -sass $L/k.cubin > $L/k.sass
  for off in "$@"; do o=$(printf '%04x' 0x$off); echo "== $spec +0x$off"; grep -a -B3 -A1 "/\*$o\*/" $L/k.sass | cut -c1-110; done
done > $L/sass_offsets.txt 2>&1; el "sass"; cat $L/sass_offsets.txt | head -60; pk
timeout 100 python3 bench/fp8.py --out $L/fp8_full > $L/fp8_full.log 2>&1; el "fp8 full rc=$?"; pk
timeout 120 python3 bench/compare.py --bwd --dtypes fp16 --head-dims 64,128 --out $L/bwd_fp16 > $L/bwd_fp16.log 2>&1; el "bwd fp16 rc=$?"; pk
