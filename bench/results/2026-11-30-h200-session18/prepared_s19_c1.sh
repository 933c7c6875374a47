# Prepared in session 18 for the next session's first device call (carry .deps; not run yet). On the tree:
# 1. compute-sanitizer on the session-18 forward (memcheck, racecheck, synccheck; the device time had run out);
# 2. FP8 with one Q buffer taking Q back early (patches/prepared_fp8_q_early.patch) against the tree, e4m3;
# 3. the sm_90a bf16 forward re-tuned with the new kernels (the tuning space now has 512-8k buckets), the
#    forward table with that database against session 12's (T = tree, both databases).
. bench/device_prelude.sh
R=bench/results/2026-11-30-h200-session18
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep T; el built T
git apply $R/patches/prepared_fp8_q_early.patch && ninja $T >>$L/build.log 2>&1 && keep F && el built F; git apply -R $R/patches/prepared_fp8_q_early.patch; ninja >>$L/build.log 2>&1
export FLASHGEN_CACHE_DIR=/tmp/fgT
for tool in memcheck racecheck synccheck; do for f in head_dims 'many_tiles*'; do
  timeout 120 compute-sanitizer --tool $tool /tmp/bT/test_gpu_fwd -j1 --filter "fwd/$f" > $L/${tool}_${f%\*}.log 2>&1; el "$tool $f rc=$?"; grep -a 'ERROR SUMMARY\|RACECHECK SUMMARY' $L/${tool}_${f%\*}.log | tail -1; pk
done; done
FLASHGEN_CACHE_DIR=/tmp/fgF timeout 100 /tmp/bF/test_gpu_fwd -j8 --filter 'fwd/fp8*' > $L/fp8_F.log 2>&1; el "F fp8 tests rc=$?"; tail -1 $L/fp8_F.log; pk
for x in 1T 1F 2F 2T; do
  FLASHGEN_LIB=/tmp/b${x#?}/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg${x#?} timeout 80 python3 bench/fp8.py --skip-accuracy --head-dims 256 --seqlens 512,1024,2048,4096,16384 --out $L/fp8_$x > $L/fp8_$x.log 2>&1; el "fp8 $x rc=$?"; pk
done
python3 bench/ab.py $L/fp8_1T $L/fp8_1F $L/fp8_2T $L/fp8_2F | tail -2
# a database without session 12's sm_90a bf16 forward records (timed with the old producer order), re-tuned
db U; python3 - /tmp/fgU/$DBN <<'PY'
import re, sys
path = sys.argv[1]
lines = open(path).read().split("\n")
keep = [l for l in lines if not (l.startswith("result {") and 'kind = "fwd"' in l and 'dtype = "bf16"' in l and "arch=sm_90a" in l)]
n = sum(1 for l in keep if l.startswith("result {"))
open(path, "w").write(re.sub(r"results = \d+", "results = %d" % n, "\n".join(keep), count=1))
PY
FLASHGEN_CACHE_DIR=/tmp/fgU timeout 200 /tmp/bT/flashgen tune configs/tune_fwd_sm90a.lua --budget 180 -j 16 > $L/tune.log 2>&1; el "tune rc=$?"; tail -3 $L/tune.log; cp /tmp/fgU/$DBN $L/; pk
for x in 1T 1U 2U 2T; do
  FLASHGEN_LIB=/tmp/bT/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg${x#?} timeout 100 python3 bench/compare.py --out $L/f_$x > $L/f_$x.log 2>&1; el "fwd $x rc=$?"; pk
done
python3 bench/ab.py $L/f_1T $L/f_1U $L/f_2T $L/f_2U | tail -4
