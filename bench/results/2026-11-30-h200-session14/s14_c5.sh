# Session 14, call 5: the tree with the two-level accumulation and FP8 d > 128 over 256 keys on mma.sync:
# the forward suite, runtime tests, and the FP8 table (bench/fp8.py, accuracy included). carry [".deps", ".smoke"].
set -u
sh .deps/offline-deps.sh --relocate .deps >/dev/null
export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
L=/tmp/l; rm -rf $L; mkdir -p $L; DBN=tune-NVIDIA-H200-sm90-132sm.lua
pk() { tar czf $OUT/l.tgz -C /tmp l; }
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; el built
mkdir -p /tmp/fgF; zcat bench/results/2026-11-30-h200-session12/tuned_s8.lua.gz > /tmp/fgF/$DBN; export FLASHGEN_CACHE_DIR=/tmp/fgF
timeout 200 build/tests/test_gpu_fwd -j8 --filter 'fwd/*' > $L/fwd_tests.log 2>&1; el "fwd rc=$?"; tail -1 $L/fwd_tests.log; grep -a 'FAIL\|CRASH' $L/fwd_tests.log | head -5; pk
timeout 60 build/tests/test_gpu_fwd -j8 --filter 'runtime/*' > $L/rt_tests.log 2>&1; el "rt rc=$?"; tail -1 $L/rt_tests.log
timeout 220 python3 bench/fp8.py --out $L/fp8_full > $L/fp8_full.log 2>&1; el "fp8 full rc=$?"; tail -30 $L/fp8_full.log; pk
