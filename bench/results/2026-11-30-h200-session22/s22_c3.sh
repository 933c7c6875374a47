# Session 22, call 3 (carry .deps, .whl): FP8's register level taking every step's P.V with one multiply-add
# (patches/fp8_level_fma.patch, C) against the tree without it (A): fwd/fp8* on C; bench/fp8.py e4m3 (and
# with the LSE) at d 64 (unchanged kernel, the noise floor) and 128, 2k/8k/16k, both masks, A C C A; fp8.py's
# long-key accuracy on C; then bench/probes/power_clock.py (clocks and power per workload) on C.
. bench/device_prelude.sh
P=bench/results/2026-11-30-h200-session22/patches/fp8_level_fma.patch
git apply -R $P || exit 1
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep A; el built A
git apply $P && ninja $T >>$L/build.log 2>&1 && keep C && el built C
FLASHGEN_CACHE_DIR=/tmp/fgC timeout 100 /tmp/bC/test_gpu_fwd -j12 --filter 'fwd/fp8*' > $L/fp8_tests_C.log 2>&1; el "C fp8 tests rc=$?"; tail -1 $L/fp8_tests_C.log; pk
mkdir -p /tmp/nodbA /tmp/nodbC
for x in 1A 1C 2C 2A; do y=${x#?}
  FLASHGEN_LIB=/tmp/b$y/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/nodb$y timeout 150 python3 bench/fp8.py --skip-accuracy --lse --head-dims 64,128 --seqlens 2048,8192,16384 --out $L/f_$x > $L/f_$x.log 2>&1; el "f $x rc=$?"; pk
done
python3 - <<'PY'
import json, math
for col in ('flashgen_e4m3', 'flashgen_e4m3_lse'):
    r = {x: {(d['head_dim'], d['seqlen'], d['causal']): d[col] for d in json.load(open('/tmp/l/f_%s/fp8.json' % x))['speed']} for x in ('1A', '1C', '2A', '2C')}
    for dd in (64, 128):
        rat = []
        for k in sorted(r['1A']):
            if k[0] != dd: continue
            q = [r['%dC' % i][k] / r['%dA' % i][k] for i in (1, 2)]; rat += q
            print(col, k, ['%.3f' % v for v in q], 'A %.0f C %.0f' % (r['1A'][k], r['1C'][k]))
        print(col, dd, 'C/A geomean %.4f over %d' % (math.exp(sum(map(math.log, rat)) / len(rat)), len(rat)))
PY
FLASHGEN_LIB=/tmp/bC/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/nodbC timeout 120 python3 bench/fp8.py --skip-speed --out $L/acc_C > $L/acc_C.log 2>&1; el "acc C rc=$?"; grep -A30 -i "long" $L/acc_C/fp8.md | head -30; pk
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
FLASHGEN_LIB=/tmp/bC/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/nodbC timeout 150 python3 bench/probes/power_clock.py --out $L/power_clock.json > $L/power_clock.md 2>$L/power_clock.err; el "power rc=$?"; cat $L/power_clock.md; tail -3 $L/power_clock.err; pk
