# Session 13, call 4: (a) FP8 with the LSE returned (bench/fp8.py --lse); (b) FP8 tiles on the new kernel:
# W = policy d 128 128 x 224 (FlashAttention-3's) against the tree's 128 x 128 (d 64 192 x 160 spills);
# (c) the deterministic backward's rotated streams against ascending (FLASHGEN_DET_ROTATE=0), non-causal;
# (d) racecheck of the deterministic backward test.
set -u
sh .deps/offline-deps.sh --relocate .deps >/dev/null
export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
L=/tmp/l; rm -rf $L; mkdir -p $L; DBN=tune-NVIDIA-H200-sm90-132sm.lua
pk() { tar czf $OUT/l.tgz -C /tmp l; }
mk() { cp build/libflashgen.so /tmp/lib$1.so; rm -rf /tmp/fg$1; mkdir -p /tmp/fg$1; cp .smoke/tuned_s8.lua /tmp/fg$1/$DBN; }
cp generator/tile_policy.c /tmp/tp.orig
sed 's/^    {90, 90, 65, 256, -1, FG_DTYPE_E\([45]\)M\([23]\), 128, 128, 12, 2, FG_FAMILY_WGMMA, FG_KIND_FWD},/&\n    {90, 90, 65, 128, -1, FG_DTYPE_E\1M\2, 128, 224, 12, 2, FG_FAMILY_WGMMA, FG_KIND_FWD},/' /tmp/tp.orig > generator/tile_policy.c
grep -c "128, 224, 12" generator/tile_policy.c
rm -rf build; sh configure >/dev/null && ninja >$L/buildW.log 2>&1 || { tail $L/buildW.log; exit 1; }; mk W
build/flashgen explain --dtype e4m3 --head-dim 128 --seqlen-q 4096 --seqlen-k 4096 2>&1 | head -3 > $L/explainW.txt
cp /tmp/tp.orig generator/tile_policy.c; ninja >$L/build.log 2>&1 || exit 1; mk T; el built
FLASHGEN_LIB=/tmp/libT.so FLASHGEN_CACHE_DIR=/tmp/fgT timeout 100 python3 bench/fp8.py --skip-accuracy --lse --head-dims 64,128 --seqlens 4096,16384 --out $L/lse > $L/lse.log 2>&1; el "lse rc=$?"; pk
for r in 1 2; do for x in T W; do
  FLASHGEN_LIB=/tmp/lib$x.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 100 python3 bench/fp8.py --skip-accuracy --head-dims 64,128 --seqlens 2048,4096,8192,16384 --out $L/w_$r$x > $L/w_$r$x.log 2>&1; el "tiles $r $x rc=$?"
done; pk; done
export FLASHGEN_CACHE_DIR=/tmp/fgT
for r in 1 2; do
  FLASHGEN_DET_ROTATE=0 timeout 80 python3 bench/compare.py --bwd --deterministic --dtypes bf16 --causal 0 --seqlens 512,2048,8192 --out $L/d${r}O > $L/d${r}O.log 2>&1; el "det $r ascending rc=$?"
  timeout 80 python3 bench/compare.py --bwd --deterministic --dtypes bf16 --causal 0 --seqlens 512,2048,8192 --out $L/d${r}R > $L/d${r}R.log 2>&1; el "det $r rotated rc=$?"
done; pk
python3 bench/ab.py $L/d1O $L/d1R $L/d2O $L/d2R > $L/ab_rot.txt 2>&1; tail -3 $L/ab_rot.txt
timeout 100 compute-sanitizer --tool racecheck build/tests/test_gpu_fwd -j1 --filter 'bwd/deterministic_is_bitwise_repeatable' > $L/racecheck.log 2>&1; el "racecheck rc=$?"; grep -a 'RACECHECK SUMMARY\|ERROR SUMMARY' $L/racecheck.log | tail -2; tail -1 $L/racecheck.log; pk
