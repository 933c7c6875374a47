# Session 12, call 2: the deterministic order (causal descending, rotated non-causal, deferred hand-on).
set -u
sh .deps/offline-deps.sh --relocate .deps >/dev/null
export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
L=/tmp/l; rm -rf $L; mkdir -p $L; DBN=tune-NVIDIA-H200-sm90-132sm.lua
pk() { tar czf $OUT/l.tgz -C /tmp l; }
for x in N O; do rm -rf /tmp/fg$x; mkdir -p /tmp/fg$x; cp .smoke/tuned_s8.lua /tmp/fg$x/$DBN; done
export FLASHGEN_CACHE_DIR=/tmp/fgN
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
cp build/libflashgen.so /tmp/libN.so
git apply -R .smoke/det.patch && rm -rf build && sh configure >/dev/null && ninja >$L/buildO.log 2>&1 && cp build/libflashgen.so /tmp/libO.so || { echo old build failed; tail $L/buildO.log; }
git apply .smoke/det.patch && rm -rf build && sh configure >/dev/null && ninja >$L/build2.log 2>&1 || exit 1
cmp build/libflashgen.so /tmp/libN.so && echo same-new-lib; el built
timeout 150 build/tests/test_gpu_fwd -j8 --filter 'bwd/deterministic*' > $L/det_tests.log 2>&1; el "det tests rc=$?"; tail -1 $L/det_tests.log; grep -a 'FAIL\|CRASH\|Timeout' $L/det_tests.log | head
timeout 200 build/tests/test_gpu_fwd -j8 --filter 'bwd/*' > $L/bwd_tests.log 2>&1; el "bwd rc=$?"; tail -1 $L/bwd_tests.log; grep -a 'FAIL\|CRASH' $L/bwd_tests.log | head; pk
for r in 1 2; do for x in O N; do
  FLASHGEN_LIB=/tmp/lib$x.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 100 python3 bench/compare.py --bwd --deterministic --dtypes bf16 --out $L/det$r$x > $L/det$r$x.log 2>&1; el "det $r $x rc=$?"
done; done; pk
python3 bench/ab.py $L/det1O $L/det1N $L/det2O $L/det2N > $L/ab_det.txt 2>&1; tail -3 $L/ab_det.txt
for x in O N; do FLASHGEN_WGMMA_BWD=0 FLASHGEN_LIB=/tmp/lib$x.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 100 python3 bench/compare.py --bwd --dtypes bf16 --out $L/nd$x > $L/nd$x.log 2>&1; el "nondet $x rc=$?"; done
python3 bench/ab.py $L/ndO $L/ndN > $L/ab_nd.txt 2>&1; tail -2 $L/ab_nd.txt; pk
