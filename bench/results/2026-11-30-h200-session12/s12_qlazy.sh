# Session 12, call 6: the sm_90a forward's O store waited for lazily (two Q buffers).
set -u
sh .deps/offline-deps.sh --relocate .deps >/dev/null
export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
L=/tmp/l; rm -rf $L; mkdir -p $L; DBN=tune-NVIDIA-H200-sm90-132sm.lua
pk() { tar czf $OUT/l.tgz -C /tmp l; }
for x in N O; do rm -rf /tmp/fg$x; mkdir -p /tmp/fg$x; cp .smoke/tuned_s8.lua /tmp/fg$x/$DBN; done
export FLASHGEN_CACHE_DIR=/tmp/fgN
git apply -R .smoke/qlazy.patch && rm -rf build && sh configure >/dev/null && ninja >$L/buildO.log 2>&1 && cp build/libflashgen.so /tmp/libO.so || { echo old build failed; tail $L/buildO.log; exit 1; }
git apply .smoke/qlazy.patch && rm -rf build && sh configure >/dev/null && ninja >$L/build.log 2>&1 || exit 1
cp build/libflashgen.so /tmp/libN.so; el built
for r in 1 2; do for x in O N; do
  FLASHGEN_LIB=/tmp/lib$x.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 120 python3 bench/compare.py --dtypes bf16 --head-dims 64,128 --out $L/q$r$x > $L/q$r$x.log 2>&1; el "fwd $r $x rc=$?"
done; pk; done
python3 bench/ab.py $L/q1O $L/q1N $L/q2O $L/q2N > $L/ab_q.txt 2>&1; tail -1 $L/ab_q.txt
timeout 200 build/tests/test_gpu_fwd -j8 --filter 'fwd/*' > $L/fwd_tests.log 2>&1; el "fwd tests rc=$?"; tail -1 $L/fwd_tests.log; grep -a 'FAIL\|CRASH' $L/fwd_tests.log | head; pk
timeout 100 build/tests/test_gpu_fwd -j8 --filter 'runtime/*' > $L/runtime.log 2>&1; el "runtime rc=$?"; tail -1 $L/runtime.log
timeout 120 compute-sanitizer --tool memcheck build/tests/test_gpu_fwd -j1 --filter 'fwd/many_tiles' > $L/memcheck.log 2>&1; el "memcheck rc=$?"; grep -a 'ERROR SUMMARY' $L/memcheck.log | tail -1; pk
