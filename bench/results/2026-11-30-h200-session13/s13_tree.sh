# Session 13, call 6: T = the tree + patches/fp8_tree_on_H.patch (FP8 row max and sum as trees) against
# H = the tree without it; fp8 tests on T.
set -u
sh .deps/offline-deps.sh --relocate .deps >/dev/null
export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
L=/tmp/l; rm -rf $L; mkdir -p $L; DBN=tune-NVIDIA-H200-sm90-132sm.lua; P=bench/results/2026-11-30-h200-session13/patches/fp8_tree_on_H.patch
pk() { tar czf $OUT/l.tgz -C /tmp l; }
mk() { cp build/libflashgen.so /tmp/lib$1.so; rm -rf /tmp/fg$1; mkdir -p /tmp/fg$1; zcat bench/results/2026-11-30-h200-session12/tuned_s8.lua.gz > /tmp/fg$1/$DBN; }
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; mk T; el built T
FLASHGEN_CACHE_DIR=/tmp/fgT timeout 60 build/tests/test_gpu_fwd -j8 --filter 'fwd/fp8*' > $L/fp8_testsT.log 2>&1; el "fp8 T rc=$?"; tail -1 $L/fp8_testsT.log
git apply -R $P && ninja >$L/buildH.log 2>&1 && mk H && el built H; git apply $P
for r in 1 2; do for x in H T; do
  FLASHGEN_LIB=/tmp/lib$x.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 60 python3 bench/fp8.py --skip-accuracy --head-dims 64,128 --seqlens 2048,4096,16384 --out $L/t_$r$x > $L/t_$r$x.log 2>&1; el "fp8 $r $x rc=$?"
done; pk; done
