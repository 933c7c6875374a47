# Session 13, call 3: the tree H (FP8 sm_90a: V^T keys reordered by the producer's idle warps, row sums by the
# P.V wgmma at d 64/128 with fp32 sums kept only for the LSE, O rescaled only where a maximum grew; tests
# fwd/fp8_lse_or_not) against A = HEAD (.smoke/fp8_H.patch reversed); every GPU test on H; the FP8 table.
set -u
sh .deps/offline-deps.sh --relocate .deps >/dev/null
export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
L=/tmp/l; rm -rf $L; mkdir -p $L; DBN=tune-NVIDIA-H200-sm90-132sm.lua
pk() { tar czf $OUT/l.tgz -C /tmp l; }
mk() { cp build/libflashgen.so /tmp/lib$1.so; rm -rf /tmp/fg$1; mkdir -p /tmp/fg$1; cp .smoke/tuned_s8.lua /tmp/fg$1/$DBN; }
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; mk H; el built H
export FLASHGEN_CACHE_DIR=/tmp/fgH
timeout 120 build/tests/test_gpu_fwd -j8 --filter 'fwd/*' > $L/fwd_tests.log 2>&1; el "fwd rc=$?"; tail -1 $L/fwd_tests.log; grep -a 'FAIL\|CRASH' $L/fwd_tests.log | head -5; pk
git apply -R .smoke/fp8_H.patch && ninja >$L/buildA.log 2>&1 && mk A && el built A
git apply .smoke/fp8_H.patch && ninja >$L/buildH2.log 2>&1 && cmp build/libflashgen.so /tmp/libH.so && el tree-is-H
for r in 1 2; do for x in A H; do
  FLASHGEN_LIB=/tmp/lib$x.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 100 python3 bench/fp8.py --skip-accuracy --head-dims 64,128,256 --seqlens 2048,4096,16384 --out $L/f_$r$x > $L/f_$r$x.log 2>&1; el "fp8 $r $x rc=$?"
done; pk; done
timeout 90 compute-sanitizer --tool memcheck build/tests/test_gpu_fwd -j1 --filter 'fwd/fp8_lse_or_not' > $L/memcheck.log 2>&1; el "memcheck rc=$?"; grep -a 'ERROR SUMMARY' $L/memcheck.log | tail -1; pk
timeout 70 build/tests/test_gpu_fwd -j8 --filter 'bwd/*' > $L/bwd_tests.log 2>&1; el "bwd rc=$?"; tail -1 $L/bwd_tests.log; grep -a 'FAIL\|CRASH' $L/bwd_tests.log | head -5; pk
timeout 20 build/tests/test_gpu_fwd -j8 --filter 'runtime/*' > $L/runtime.log 2>&1; el "runtime rc=$?"; tail -1 $L/runtime.log
timeout 30 build/tests/test_cli --filter 'cli/run_small_problem_on_gpu' > $L/cli_run.log 2>&1; el "cli run rc=$?"; tail -1 $L/cli_run.log; pk
timeout 45 python3 python/tests/test_binding.py > $L/binding.log 2>&1; el "binding rc=$?"; tail -2 $L/binding.log; pk
timeout 170 python3 bench/fp8.py --out $L/fp8_full > $L/fp8_full.log 2>&1; el "fp8 full rc=$?"; pk
