# Session 15, call 5 (final): the tree (FP8 shared-memory level every 256 keys; the sm_90a backward's dQ one
# block late with the S^T/dP^T split at d 128 non-causal, other variants' SASS unchanged): backward tests,
# racecheck/synccheck, FP8 tests, the backward tables (bf16, fp16), ncu of the new d 128 backward. carry [".deps", ".smoke"].
set -u
sh .deps/offline-deps.sh --relocate .deps >/dev/null
export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
L=/tmp/l; rm -rf $L; mkdir -p $L; DBN=tune-NVIDIA-H200-sm90-132sm.lua
pk() { tar czf $OUT/l.tgz -C /tmp l; }
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; el built
export FLASHGEN_CACHE_DIR=/tmp/fgF; mkdir -p $FLASHGEN_CACHE_DIR; zcat bench/results/2026-11-30-h200-session12/tuned_s8.lua.gz > $FLASHGEN_CACHE_DIR/$DBN
timeout 150 build/tests/test_gpu_fwd -j8 --filter 'bwd/*' > $L/bwd_tests.log 2>&1; el "bwd tests rc=$?"; tail -1 $L/bwd_tests.log; grep -a 'FAIL:\|CRASH' $L/bwd_tests.log | head -5 | cut -c1-250; pk
timeout 120 compute-sanitizer --tool racecheck build/tests/test_gpu_fwd -j1 --filter 'bwd/shapes_sm90a' > $L/racecheck.log 2>&1; el "racecheck rc=$?"; grep -a 'RACECHECK SUMMARY' $L/racecheck.log | tail -1
timeout 100 compute-sanitizer --tool synccheck build/tests/test_gpu_fwd -j1 --filter 'bwd/shapes_sm90a' > $L/synccheck.log 2>&1; el "synccheck rc=$?"; grep -a 'ERROR SUMMARY' $L/synccheck.log | tail -1
timeout 100 compute-sanitizer --tool memcheck build/tests/test_gpu_fwd -j1 --filter 'bwd/shapes_sm90a' > $L/memcheck.log 2>&1; el "memcheck rc=$?"; grep -a 'ERROR SUMMARY' $L/memcheck.log | tail -1
timeout 100 build/tests/test_gpu_fwd -j8 --filter 'fwd/fp8*' > $L/fp8_tests.log 2>&1; el "fp8 tests rc=$?"; tail -1 $L/fp8_tests.log; pk
timeout 150 python3 bench/compare.py --bwd --out $L/bwd_all > $L/bwd_all.log 2>&1; el "bwd table rc=$?"; grep -a "^|" $L/bwd_all.log | tail -30; pk
timeout 100 ncu --set full --import-source yes -k regex:fg_bwd_main --launch-skip 3 --launch-count 1 -o $L/ncu_bwd128 python3 .smoke/ncu_bwd.py 128 8192 0 > $L/ncu_bwd128.log 2>&1; el "ncu bwd rc=$?"
ncu --import $L/ncu_bwd128.ncu-rep --page source --csv --print-source sass > $L/ncu_bwd128_sass.csv 2>&1
ncu --import $L/ncu_bwd128.ncu-rep --page details > $L/ncu_bwd128.txt 2>&1; rm -f $L/ncu_bwd128.ncu-rep; pk
