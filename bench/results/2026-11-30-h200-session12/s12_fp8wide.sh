# Session 12, call 5: sm_90a FP8 tiles wider than one V^T swizzle row (block_n 192, 224 at d 128).
set -u
sh .deps/offline-deps.sh --relocate .deps >/dev/null
export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
L=/tmp/l; rm -rf $L; mkdir -p $L; DBN=tune-NVIDIA-H200-sm90-132sm.lua
pk() { tar czf $OUT/l.tgz -C /tmp l; }
cp generator/tile_policy.c /tmp/tp.orig
for n in 128 192 224; do
  sed "s/12, 2, FG_FAMILY_WGMMA, FG_KIND_FWD}, \/\* FP8D128 \*\//12, 2, FG_FAMILY_WGMMA, FG_KIND_FWD},/; s/{90, 90, 65, 128, -1, FG_DTYPE_E\([45]\)M\([32]\), 128, 128,/{90, 90, 65, 128, -1, FG_DTYPE_E\1M\2, 128, $n,/" /tmp/tp.orig > generator/tile_policy.c
  grep -c "128, $n, 12, 2" generator/tile_policy.c
  rm -rf build; sh configure >/dev/null && ninja >$L/build$n.log 2>&1 || { tail $L/build$n.log; exit 1; }
  cp build/libflashgen.so /tmp/libW$n.so; rm -rf /tmp/fgW$n; mkdir -p /tmp/fgW$n; cp .smoke/tuned_s8.lua /tmp/fgW$n/$DBN
done
cp /tmp/tp.orig generator/tile_policy.c; rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || exit 1; el built
export FLASHGEN_CACHE_DIR=/tmp/fgW128
timeout 200 build/tests/test_gpu_fwd -j8 --filter 'fwd/fp8*' > $L/fp8_tests.log 2>&1; el "fp8 tests rc=$?"; tail -1 $L/fp8_tests.log; grep -a 'FAIL\|CRASH\|SKIP' $L/fp8_tests.log | head; pk
for r in 1 2; do for n in 128 192 224; do
  FLASHGEN_LIB=/tmp/libW$n.so FLASHGEN_CACHE_DIR=/tmp/fgW$n timeout 120 python3 bench/fp8.py --skip-accuracy --head-dims 128 --seqlens 2048,4096,8192,16384 --out $L/w_$r$n > $L/w_$r$n.log 2>&1; el "fp8 $r W$n rc=$?"
done; pk; done
timeout 120 compute-sanitizer --tool memcheck build/tests/test_gpu_fwd -j1 --filter 'fwd/fp8_wide_tiles' > $L/memcheck.log 2>&1; el "memcheck rc=$?"; grep -a 'ERROR SUMMARY' $L/memcheck.log | tail -1; pk
for n in 192 224; do FLASHGEN_LIB=/tmp/libW$n.so FLASHGEN_CACHE_DIR=/tmp/fgW$n timeout 100 python3 bench/fp8.py --skip-speed --out $L/acc$n > $L/acc$n.log 2>&1; el "acc W$n rc=$?"; done; pk
