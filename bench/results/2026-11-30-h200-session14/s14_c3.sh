# Session 14, call 3: the FP8 P.V row sums folded into fp32 every step (L = tree) against the kernel before (T)
# and against no wgmma row sums at all (N): accuracy at long key ranges, tests, speed; then the FP8 tune on L.
# carry [".deps", ".smoke"].
set -u
sh .deps/offline-deps.sh --relocate .deps >/dev/null
export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
L=/tmp/l; rm -rf $L; mkdir -p $L; DBN=tune-NVIDIA-H200-sm90-132sm.lua
pk() { tar czf $OUT/l.tgz -C /tmp l; }
db() { rm -rf /tmp/fg$1; mkdir -p /tmp/fg$1; zcat bench/results/2026-11-30-h200-session12/tuned_s8.lua.gz > /tmp/fg$1/$DBN; }
keep() { mkdir -p /tmp/b$1; cp build/flashgen build/libflashgen.so build/tests/test_gpu_fwd /tmp/b$1/; db $1; }
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep L; el built L
git apply -R .smoke/pvfold.patch && ninja >>$L/build.log 2>&1 && keep T && el built T; git apply .smoke/pvfold.patch
git apply .smoke/nopvsum.patch && ninja >>$L/build.log 2>&1 && keep N && el built N; git apply -R .smoke/nopvsum.patch
ninja >>$L/build.log 2>&1; cmp build/libflashgen.so /tmp/bL/libflashgen.so && el tree-is-L
for x in T L N; do for dd in 64 128; do for sk in 2048 8192 32768; do
  FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 60 /tmp/b$x/flashgen run --dtype e4m3 --batch 1 --heads 2 --seqlen-q 256 --seqlen-k $sk --head-dim $dd --iters 3 > $L/run_${x}_d${dd}_$sk.log 2>&1
  echo "$x d$dd sk $sk rc=$? $(grep -a 'check:' $L/run_${x}_d${dd}_$sk.log | cut -c1-150)"; done; done; done | tee $L/runs.txt; el runs; pk
FLASHGEN_CACHE_DIR=/tmp/fgT timeout 100 /tmp/bT/test_gpu_fwd -j8 --filter 'fwd/fp8_lse_or_not' > $L/T_lse_tests.log 2>&1; el "T lse_or_not rc=$?"; tail -1 $L/T_lse_tests.log
export FLASHGEN_CACHE_DIR=/tmp/fgL
timeout 150 build/tests/test_gpu_fwd -j8 --filter 'fwd/*' > $L/fwd_tests.log 2>&1; el "L fwd rc=$?"; tail -1 $L/fwd_tests.log; grep -a 'FAIL\|CRASH' $L/fwd_tests.log | head -5; pk
timeout 120 compute-sanitizer --tool memcheck build/tests/test_gpu_fwd -j1 --filter 'fwd/fp8_lse_or_not' > $L/memcheck.log 2>&1; el "memcheck rc=$?"; grep -a 'ERROR SUMMARY' $L/memcheck.log | tail -1
for r in 1 2; do for x in T L; do
  FLASHGEN_LIB=/tmp/b$x/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 90 python3 bench/fp8.py --skip-accuracy --lse --head-dims 64,128 --seqlens 2048,4096,16384 --out $L/e_$r$x > $L/e_$r$x.log 2>&1; el "fp8 $r $x rc=$?"
done; pk; done
db U; FLASHGEN_CACHE_DIR=/tmp/fgU timeout 150 build/flashgen tune configs/tune_fwd_sm90a_fp8.lua -j 16 > $L/tune_fp8.log 2>&1; el "tune fp8 rc=$?"; tail -2 $L/tune_fp8.log
FLASHGEN_CACHE_DIR=/tmp/fgU build/flashgen tune --show /tmp/fgU/$DBN 2>/dev/null | grep -i e4m3 > $L/tune_fp8_table.txt; cat $L/tune_fp8_table.txt | cut -c1-160; cp /tmp/fgU/$DBN $L/tuned_fp8_db.lua; gzip $L/tuned_fp8_db.lua; pk
for r in 1 2; do for x in L U; do
  FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 80 python3 bench/fp8.py --skip-accuracy --head-dims 128 --seqlens 2048,4096,8192,16384 --out $L/u_$r$x > $L/u_$r$x.log 2>&1; el "tuned $r $x rc=$?"
done; pk; done
