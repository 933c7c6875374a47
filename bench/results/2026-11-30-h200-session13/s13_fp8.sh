# Session 13, call 1: sm_90a FP8 forward. A = HEAD, B = V^T keys reordered in shared memory (P packed
# without shuffles; .smoke/fp8_vperm.patch), C = B + row sums by the P.V wgmma at d 64/128 (the tree;
# .smoke/fp8_C.patch), D = C + O rescaled only where a maximum grew at d 128 (.smoke/fp8_D.patch).
set -u
sh .deps/offline-deps.sh --relocate .deps >/dev/null
export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
L=/tmp/l; rm -rf $L; mkdir -p $L; DBN=tune-NVIDIA-H200-sm90-132sm.lua
pk() { tar czf $OUT/l.tgz -C /tmp l; }
mk() { cp build/libflashgen.so /tmp/lib$1.so; rm -rf /tmp/fg$1; mkdir -p /tmp/fg$1; cp .smoke/tuned_s8.lua /tmp/fg$1/$DBN; }
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; mk C; el built C
export FLASHGEN_CACHE_DIR=/tmp/fgC
timeout 150 build/tests/test_gpu_fwd -j8 --filter 'fwd/fp8*' > $L/fp8_tests.log 2>&1; el "fp8 tests rc=$?"; tail -1 $L/fp8_tests.log; grep -a 'FAIL\|CRASH' $L/fp8_tests.log | head; pk
git apply -R .smoke/fp8_C.patch && ninja >$L/buildA.log 2>&1 && mk A && el built A
git apply .smoke/fp8_vperm.patch && ninja >$L/buildB.log 2>&1 && mk B && el built B
git apply -R .smoke/fp8_vperm.patch && git apply .smoke/fp8_D.patch && ninja >$L/buildD.log 2>&1 && mk D && el built D
git apply -R .smoke/fp8_D.patch && git apply .smoke/fp8_C.patch && ninja >$L/buildC2.log 2>&1 && cmp build/libflashgen.so /tmp/libC.so && el tree-is-C
for r in 1 2; do for x in A B C D; do
  FLASHGEN_LIB=/tmp/lib$x.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 100 python3 bench/fp8.py --skip-accuracy --head-dims 128 --seqlens 4096,16384 --out $L/f_$r$x > $L/f_$r$x.log 2>&1; el "d128 $r $x rc=$?"
done; pk; done
for r in 1 2; do for x in A C; do
  FLASHGEN_LIB=/tmp/lib$x.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 100 python3 bench/fp8.py --skip-accuracy --head-dims 64,256 --seqlens 4096,16384 --out $L/g_$r$x > $L/g_$r$x.log 2>&1; el "d64/256 $r $x rc=$?"
done; pk; done
timeout 100 compute-sanitizer --tool memcheck build/tests/test_gpu_fwd -j1 --filter 'fwd/fp8_wide_tiles' > $L/memcheck.log 2>&1; el "memcheck rc=$?"; grep -a 'ERROR SUMMARY' $L/memcheck.log | tail -1; pk
FLASHGEN_LIB=/tmp/libC.so timeout 80 python3 bench/fp8.py --skip-speed --out $L/accC > $L/accC.log 2>&1; el "acc C rc=$?"; pk
