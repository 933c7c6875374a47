# Session 13, call 2: sm_90a FP8 forward. A = HEAD, E = A + O rescaled only where a maximum grew at d 128
# (.smoke/fp8_rescale_skip.patch), F = E + V^T keys reordered in shared memory (.smoke/fp8_F.patch),
# G = F + the softmax's row max and sum as trees (the tree; .smoke/fp8_G.patch), D = call 1's D (row sums by
# the P.V wgmma; .smoke/fp8_D.patch).
set -u
sh .deps/offline-deps.sh --relocate .deps >/dev/null
export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
L=/tmp/l; rm -rf $L; mkdir -p $L; DBN=tune-NVIDIA-H200-sm90-132sm.lua
pk() { tar czf $OUT/l.tgz -C /tmp l; }
mk() { cp build/libflashgen.so /tmp/lib$1.so; rm -rf /tmp/fg$1; mkdir -p /tmp/fg$1; cp .smoke/tuned_s8.lua /tmp/fg$1/$DBN; }
tst() { FLASHGEN_CACHE_DIR=/tmp/fg$1 timeout 100 build/tests/test_gpu_fwd -j8 --filter 'fwd/fp8*' > $L/fp8_tests$1.log 2>&1; el "fp8 tests $1 rc=$?"; tail -1 $L/fp8_tests$1.log; }
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; mk G; el built G
tst G; pk
git apply -R .smoke/fp8_G.patch && ninja >$L/buildA.log 2>&1 && mk A && el built A
git apply .smoke/fp8_rescale_skip.patch && ninja >$L/buildE.log 2>&1 && mk E && el built E; tst E
git apply -R .smoke/fp8_rescale_skip.patch && git apply .smoke/fp8_F.patch && ninja >$L/buildF.log 2>&1 && mk F && el built F; tst F
git apply -R .smoke/fp8_F.patch && git apply .smoke/fp8_D.patch && ninja >$L/buildD.log 2>&1 && mk D && el built D
git apply -R .smoke/fp8_D.patch && git apply .smoke/fp8_G.patch && ninja >$L/buildG2.log 2>&1 && cmp build/libflashgen.so /tmp/libG.so && el tree-is-G
pk
for r in 1 2; do for x in A E F G D; do
  FLASHGEN_LIB=/tmp/lib$x.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 100 python3 bench/fp8.py --skip-accuracy --head-dims 128 --seqlens 4096,16384 --out $L/f_$r$x > $L/f_$r$x.log 2>&1; el "d128 $r $x rc=$?"
done; pk; done
for r in 1 2; do for x in A G; do
  FLASHGEN_LIB=/tmp/lib$x.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 100 python3 bench/fp8.py --skip-accuracy --head-dims 64,256 --seqlens 4096,16384 --out $L/g_$r$x > $L/g_$r$x.log 2>&1; el "d64/256 $r $x rc=$?"
done; pk; done
