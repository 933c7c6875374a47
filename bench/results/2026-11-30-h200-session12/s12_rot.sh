# Session 12, call 7: the non-deterministic mma.sync backward with rotated query streams (non-causal).
set -u
sh .deps/offline-deps.sh --relocate .deps >/dev/null
export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
L=/tmp/l; rm -rf $L; mkdir -p $L; DBN=tune-NVIDIA-H200-sm90-132sm.lua
pk() { tar czf $OUT/l.tgz -C /tmp l; }
export FLASHGEN_CACHE_DIR=/tmp/fgN; rm -rf $FLASHGEN_CACHE_DIR; mkdir -p $FLASHGEN_CACHE_DIR; cp .smoke/tuned_s8.lua $FLASHGEN_CACHE_DIR/$DBN
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || exit 1; el built
for r in 1 2; do
  FLASHGEN_BWD_ROT0=1 timeout 100 python3 bench/compare.py --bwd --dtypes bf16 --head-dims 256 --causal 0 --out $L/r${r}O > $L/r${r}O.log 2>&1; el "d256 $r O rc=$?"
  timeout 100 python3 bench/compare.py --bwd --dtypes bf16 --head-dims 256 --causal 0 --out $L/r${r}N > $L/r${r}N.log 2>&1; el "d256 $r N rc=$?"
done; pk
python3 bench/ab.py $L/r1O $L/r1N $L/r2O $L/r2N > $L/ab_r.txt 2>&1; tail -1 $L/ab_r.txt
FLASHGEN_WGMMA_BWD=0 FLASHGEN_BWD_ROT0=1 timeout 100 python3 bench/compare.py --bwd --dtypes bf16 --head-dims 64,128 --causal 0 --out $L/mO > $L/mO.log 2>&1; el "mma O rc=$?"
FLASHGEN_WGMMA_BWD=0 timeout 100 python3 bench/compare.py --bwd --dtypes bf16 --head-dims 64,128 --causal 0 --out $L/mN > $L/mN.log 2>&1; el "mma N rc=$?"
python3 bench/ab.py $L/mO $L/mN > $L/ab_m.txt 2>&1; tail -1 $L/ab_m.txt; pk
timeout 200 build/tests/test_gpu_fwd -j8 --filter 'bwd/*' > $L/bwd_tests.log 2>&1; el "bwd rc=$?"; tail -1 $L/bwd_tests.log; grep -a 'FAIL\|CRASH' $L/bwd_tests.log | head; pk
