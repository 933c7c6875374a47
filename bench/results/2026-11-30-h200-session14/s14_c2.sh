# Session 14, call 2: the CLI's FP8 check fix (75872f5) on the GPU; FP8 re-tune (every 8k candidate had been
# judged wrong); tuned vs policy; ncu of the FP8 d 128 16k and d 256 4k kernels. carry [".deps", ".smoke"].
set -u
sh .deps/offline-deps.sh --relocate .deps >/dev/null
export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
L=/tmp/l; rm -rf $L; mkdir -p $L; DBN=tune-NVIDIA-H200-sm90-132sm.lua
pk() { tar czf $OUT/l.tgz -C /tmp l; }
db() { rm -rf /tmp/fg$1; mkdir -p /tmp/fg$1; zcat bench/results/2026-11-30-h200-session12/tuned_s8.lua.gz > /tmp/fg$1/$DBN; }
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; el built
db T; db U; export FLASHGEN_CACHE_DIR=/tmp/fgT
for dd in 64 128; do timeout 60 build/flashgen run --dtype e4m3 --batch 1 --heads 2 --seqlen-q 512 --seqlen-k 8192 --head-dim $dd > $L/run_fp8_d$dd.log 2>&1; el "run fp8 d$dd 8k rc=$?"; grep -a "check:" $L/run_fp8_d$dd.log; done
timeout 100 build/tests/test_gpu_fwd -j8 --filter 'fwd/fp8*' > $L/fp8_tests.log 2>&1; el "fp8 tests rc=$?"; tail -1 $L/fp8_tests.log
timeout 60 build/tests/test_gpu_fwd -j8 --filter 'runtime/*' > $L/rt_tests.log 2>&1; el "rt tests rc=$?"; tail -1 $L/rt_tests.log
FLASHGEN_CACHE_DIR=/tmp/fgU timeout 150 build/flashgen tune configs/tune_fwd_sm90a_fp8.lua -j 16 > $L/tune_fp8.log 2>&1; el "tune fp8 rc=$?"; tail -3 $L/tune_fp8.log
FLASHGEN_CACHE_DIR=/tmp/fgU build/flashgen tune --show /tmp/fgU/$DBN 2>/dev/null | grep -i e4m3 > $L/tune_fp8_table.txt; cp /tmp/fgU/$DBN $L/tuned_fp8_db.lua; gzip $L/tuned_fp8_db.lua; pk
for r in 1 2; do for x in T U; do
  FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 80 python3 bench/fp8.py --skip-accuracy --head-dims 64,128,256 --seqlens 2048,4096,8192,16384 --out $L/u_$r$x > $L/u_$r$x.log 2>&1; el "tuned $r $x rc=$?"
done; pk; done
for c in "128 16384 0" "256 4096 0"; do set -- $c
  timeout 120 ncu --set full -k regex:fg_attention_fwd --launch-skip 3 --launch-count 1 -o $L/ncu_d$1_$2 python3 .smoke/ncu_fp8.py $1 $2 $3 > $L/ncu_d$1_$2.log 2>&1; el "ncu d$1 $2 rc=$?"
  ncu --import $L/ncu_d$1_$2.ncu-rep --page details > $L/ncu_d$1_$2.txt 2>&1; ncu --import $L/ncu_d$1_$2.ncu-rep --page raw --csv > $L/ncu_d$1_$2_raw.csv 2>&1; pk
done
