# Session 22, call 4 (carry .deps): FP8's flushes staggered between consumer warpgroups
# (patches/fp8_flush_stagger.patch, G) against the tree without it (A): fwd/fp8* on G; bench/fp8.py e4m3 at
# d 64/128/256, 2k/8k/16k, both masks, A G G A (policy tiles).
. bench/device_prelude.sh
P=bench/results/2026-11-30-h200-session22/patches/fp8_flush_stagger.patch
git apply -R $P || exit 1
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep A; el built A
git apply $P && ninja $T >>$L/build.log 2>&1 && keep G && el built G
FLASHGEN_CACHE_DIR=/tmp/fgG timeout 100 /tmp/bG/test_gpu_fwd -j12 --filter 'fwd/fp8*' > $L/fp8_tests_G.log 2>&1; el "G fp8 tests rc=$?"; tail -1 $L/fp8_tests_G.log; pk
mkdir -p /tmp/nodbA /tmp/nodbG
for x in 1A 1G 2G 2A; do y=${x#?}
  FLASHGEN_LIB=/tmp/b$y/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/nodb$y timeout 150 python3 bench/fp8.py --skip-accuracy --head-dims 64,128,256 --seqlens 2048,8192,16384 --out $L/f_$x > $L/f_$x.log 2>&1; el "f $x rc=$?"; pk
done
python3 - <<'PY'
import json, math
col = 'flashgen_e4m3'
r = {x: {(d['head_dim'], d['seqlen'], d['causal']): d[col] for d in json.load(open('/tmp/l/f_%s/fp8.json' % x))['speed']} for x in ('1A', '1G', '2A', '2G')}
for dd in (64, 128, 256):
    rat = []
    for k in sorted(r['1A']):
        if k[0] != dd: continue
        q = [r['%dG' % i][k] / r['%dA' % i][k] for i in (1, 2)]; rat += q
        print(col, k, ['%.3f' % v for v in q], 'A %.0f G %.0f' % (r['1A'][k], r['1G'][k]))
    print(col, dd, 'G/A geomean %.4f over %d' % (math.exp(sum(map(math.log, rat)) / len(rat)), len(rat)))
PY
