# Session 12, call 4: the sm_90a forward with one Q buffer frees it after the tile's last QK (direct O stores).
set -u
sh .deps/offline-deps.sh --relocate .deps >/dev/null
export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
L=/tmp/l; rm -rf $L; mkdir -p $L; DBN=tune-NVIDIA-H200-sm90-132sm.lua
pk() { tar czf $OUT/l.tgz -C /tmp l; }
for x in N O; do rm -rf /tmp/fg$x; mkdir -p /tmp/fg$x; cp .smoke/tuned_s8.lua /tmp/fg$x/$DBN; done
export FLASHGEN_CACHE_DIR=/tmp/fgN
git apply -R .smoke/qearly.patch && rm -rf build && sh configure >/dev/null && ninja >$L/buildO.log 2>&1 && cp build/libflashgen.so /tmp/libO.so || { echo old build failed; tail $L/buildO.log; exit 1; }
git apply .smoke/qearly.patch && rm -rf build && sh configure >/dev/null && ninja >$L/build.log 2>&1 || exit 1
cp build/libflashgen.so /tmp/libN.so; el built
timeout 240 build/tests/test_gpu_fwd -j8 --filter 'fwd/*' > $L/fwd_tests.log 2>&1; el "fwd tests rc=$?"; tail -1 $L/fwd_tests.log; grep -a 'FAIL\|CRASH' $L/fwd_tests.log | head; pk
for r in 1 2; do for x in O N; do
  FLASHGEN_LIB=/tmp/lib$x.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 120 python3 bench/compare.py --dtypes bf16 --head-dims 128,256 --out $L/f$r$x > $L/f$r$x.log 2>&1; el "fwd $r $x rc=$?"
done; pk; done
python3 bench/ab.py $L/f1O $L/f1N $L/f2O $L/f2N > $L/ab_f.txt 2>&1; tail -1 $L/ab_f.txt
for x in O N; do FLASHGEN_LIB=/tmp/lib$x.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 120 python3 bench/compare.py --dtypes fp16 --head-dims 128,256 --out $L/h$x > $L/h$x.log 2>&1; el "fp16 $x rc=$?"; done
python3 bench/ab.py $L/hO $L/hN > $L/ab_h.txt 2>&1; tail -1 $L/ab_h.txt; pk
timeout 150 compute-sanitizer --tool memcheck build/tests/test_gpu_fwd -j1 --filter 'fwd/head_dims' > $L/memcheck.log 2>&1; el "memcheck rc=$?"; grep -a 'ERROR SUMMARY' $L/memcheck.log | tail -2; tail -1 $L/memcheck.log; pk
