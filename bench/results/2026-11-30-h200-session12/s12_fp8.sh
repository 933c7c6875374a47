# Session 12, call 3: FP8 forward, a share of the softmax's exponentials on the FMA pipe (fg_exp2_fma).
set -u
sh .deps/offline-deps.sh --relocate .deps >/dev/null
export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
L=/tmp/l; rm -rf $L; mkdir -p $L; DBN=tune-NVIDIA-H200-sm90-132sm.lua
pk() { tar czf $OUT/l.tgz -C /tmp l; }
cp templates/fwd_sm90.cuh /tmp/fwd_sm90.orig
for x in 0 4 2; do
  sed "s/constexpr int FG_EXP_EMU = FG_FP8 ? 4 : 0; \/\/ EXPEMU/constexpr int FG_EXP_EMU = FG_FP8 ? $x : 0;/" /tmp/fwd_sm90.orig > templates/fwd_sm90.cuh
  grep -c "FG_FP8 ? $x : 0" templates/fwd_sm90.cuh
  rm -rf build; sh configure >/dev/null && ninja >$L/build$x.log 2>&1 || { tail $L/build$x.log; exit 1; }
  cp build/libflashgen.so /tmp/libE$x.so; rm -rf /tmp/fgE$x; mkdir -p /tmp/fgE$x; cp .smoke/tuned_s8.lua /tmp/fgE$x/$DBN
done
cp /tmp/fwd_sm90.orig templates/fwd_sm90.cuh; cp /tmp/libE4.so build/libflashgen.so 2>/dev/null
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1; cmp build/libflashgen.so /tmp/libE4.so && echo tree-is-E4; el built
export FLASHGEN_CACHE_DIR=/tmp/fgE4
timeout 200 build/tests/test_gpu_fwd -j8 --filter 'fwd/fp8*' > $L/fp8_tests.log 2>&1; el "fp8 tests rc=$?"; tail -1 $L/fp8_tests.log; grep -a 'FAIL\|CRASH' $L/fp8_tests.log | head; pk
for r in 1 2; do for x in 0 4 2; do
  FLASHGEN_LIB=/tmp/libE$x.so FLASHGEN_CACHE_DIR=/tmp/fgE$x timeout 120 python3 bench/fp8.py --skip-accuracy --head-dims 128,256 --seqlens 4096,16384 --out $L/f8_$r$x > $L/f8_$r$x.log 2>&1; el "fp8 $r E$x rc=$?"
done; pk; done
for x in 0 4; do FLASHGEN_LIB=/tmp/libE$x.so FLASHGEN_CACHE_DIR=/tmp/fgE$x timeout 100 python3 bench/fp8.py --skip-speed --out $L/acc$x > $L/acc$x.log 2>&1; el "acc E$x rc=$?"; done; pk
