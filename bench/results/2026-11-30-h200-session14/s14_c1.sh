# Session 14, first call (prepared in session 13): validate the FP8 commits after 3ccff75 that never ran on a
# GPU (6895b2c, beff064, f43319b), then A/B the FP8 exp2-on-FMA shares (E8: an eighth, E4: a quarter) on the
# new kernel. Run with carry [".deps", ".smoke"].
set -u
sh .deps/offline-deps.sh --relocate .deps >/dev/null
export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
L=/tmp/l; rm -rf $L; mkdir -p $L; DBN=tune-NVIDIA-H200-sm90-132sm.lua
pk() { tar czf $OUT/l.tgz -C /tmp l; }
mk() { cp build/libflashgen.so /tmp/lib$1.so; rm -rf /tmp/fg$1; mkdir -p /tmp/fg$1; zcat bench/results/2026-11-30-h200-session12/tuned_s8.lua.gz > /tmp/fg$1/$DBN; }
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; mk T; el built
export FLASHGEN_CACHE_DIR=/tmp/fgT
timeout 150 build/tests/test_gpu_fwd -j8 --filter 'fwd/*' > $L/fwd_tests.log 2>&1; el "fwd rc=$?"; tail -1 $L/fwd_tests.log; grep -a 'FAIL\|CRASH' $L/fwd_tests.log | head -5; pk
timeout 200 build/tests/test_cli --filter "cli/tune_tiny*" > $L/cli_tune.log 2>&1; el "cli tune rc=$?"; tail -1 $L/cli_tune.log
timeout 120 compute-sanitizer --tool memcheck build/tests/test_gpu_fwd -j1 --filter 'fwd/fp8_lse_or_not' > $L/memcheck.log 2>&1; el "memcheck rc=$?"; grep -a 'ERROR SUMMARY' $L/memcheck.log | tail -1; pk
for e in 8 4; do git apply .smoke/exp2emu$e.patch && ninja >$L/buildE$e.log 2>&1 && mk E$e && el built E$e; git apply -R .smoke/exp2emu$e.patch; done
ninja >/dev/null 2>&1; cmp build/libflashgen.so /tmp/libT.so && el tree-is-T
for r in 1 2; do for x in T E8 E4; do
  FLASHGEN_LIB=/tmp/lib$x.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 80 python3 bench/fp8.py --skip-accuracy --head-dims 64,128 --seqlens 2048,4096,16384 --out $L/e_$r$x > $L/e_$r$x.log 2>&1; el "fp8 $r $x rc=$?"
done; pk; done
# FP8 tuning (configs/tune_fwd_sm90a_fp8.lua: 2k and 8k buckets) into a copy of the database, then the tuned
# FP8 against the policy's tiles.
rm -rf /tmp/fgU; mkdir -p /tmp/fgU; zcat bench/results/2026-11-30-h200-session12/tuned_s8.lua.gz > /tmp/fgU/$DBN
FLASHGEN_CACHE_DIR=/tmp/fgU timeout 150 build/flashgen tune configs/tune_fwd_sm90a_fp8.lua -j 16 > $L/tune_fp8.log 2>&1; el "tune fp8 rc=$?"; tail -3 $L/tune_fp8.log
FLASHGEN_CACHE_DIR=/tmp/fgU build/flashgen tune --show /tmp/fgU/$DBN 2>/dev/null | grep -i e4m3 | head -40 > $L/tune_fp8_table.txt; pk
for r in 1 2; do for x in T U; do
  FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 80 python3 bench/fp8.py --skip-accuracy --head-dims 64,128,256 --seqlens 2048,8192,16384 --out $L/u_$r$x > $L/u_$r$x.log 2>&1; el "tuned $r $x rc=$?"
done; pk; done
