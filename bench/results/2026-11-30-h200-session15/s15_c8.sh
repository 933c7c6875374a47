# Session 15, call 8: the final tree (c91aa6c): the binding's tests and ncu of the d 128 backward. carry [".deps", ".smoke"].
set -u
sh .deps/offline-deps.sh --relocate .deps >/dev/null
export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
L=/tmp/l; rm -rf $L; mkdir -p $L; DBN=tune-NVIDIA-H200-sm90-132sm.lua
pk() { tar czf $OUT/l.tgz -C /tmp l; }
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; el built
export FLASHGEN_CACHE_DIR=/tmp/fgF; mkdir -p $FLASHGEN_CACHE_DIR; zcat bench/results/2026-11-30-h200-session12/tuned_s8.lua.gz > $FLASHGEN_CACHE_DIR/$DBN
timeout 70 python3 python/tests/test_binding.py > $L/binding.log 2>&1; el "binding rc=$?"; tail -3 $L/binding.log; pk
timeout 60 ncu --set full --import-source yes -k regex:fg_bwd_main --launch-skip 3 --launch-count 1 -o $L/ncu_bwd128 python3 .smoke/ncu_bwd.py 128 8192 0 > $L/ncu_bwd128.log 2>&1; el "ncu bwd rc=$?"
ncu --import $L/ncu_bwd128.ncu-rep --page source --csv --print-source sass > $L/ncu_bwd128_sass.csv 2>&1
ncu --import $L/ncu_bwd128.ncu-rep --page details > $L/ncu_bwd128.txt 2>&1; rm -f $L/ncu_bwd128.ncu-rep; pk
