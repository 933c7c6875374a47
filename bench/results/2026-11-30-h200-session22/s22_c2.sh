# Session 22, call 2 (carry .deps): P V's wait after the softmax (patches/softmax_before_pv_wait.patch, B)
# against the tree without it (A). The whole GPU suite on B; bench/fp8.py (flashgen e4m3 and bf16, with
# cuDNN and FA2 bf16) at d 64/128/256, 2k/8k/16k, both masks, A B B A, policy tiles (no tuning database).
. bench/device_prelude.sh
P=bench/results/2026-11-30-h200-session22/patches/softmax_before_pv_wait.patch
git apply -R $P || exit 1
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep A; el built A
git apply $P && ninja $T >>$L/build.log 2>&1 && keep B && el built B
FLASHGEN_CACHE_DIR=/tmp/fgB timeout 220 /tmp/bB/test_gpu_fwd -j12 > $L/tests_B.log 2>&1; el "B tests rc=$?"; tail -2 $L/tests_B.log; pk
mkdir -p /tmp/nodbA /tmp/nodbB
for x in 1A 1B 2B 2A; do y=${x#?}
  FLASHGEN_LIB=/tmp/b$y/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/nodb$y timeout 150 python3 bench/fp8.py --skip-accuracy --head-dims 64,128,256 --seqlens 2048,8192,16384 --out $L/f_$x > $L/f_$x.log 2>&1; el "f $x rc=$?"; pk
done
python3 - <<'PY'
import json, math
for col in ('flashgen_e4m3', 'flashgen_bf16'):
    r = {x: {(d['head_dim'], d['seqlen'], d['causal']): d[col] for d in json.load(open('/tmp/l/f_%s/fp8.json' % x))['speed']} for x in ('1A', '1B', '2A', '2B')}
    rat = []
    for k in sorted(r['1A']):
        q = [r['%dB' % i][k] / r['%dA' % i][k] for i in (1, 2)]; rat += q
        print(col, k, ['%.3f' % v for v in q], 'A %.0f B %.0f' % (r['1A'][k], r['1B'][k]))
    print(col, 'B/A geomean %.4f over %d' % (math.exp(sum(map(math.log, rat)) / len(rat)), len(rat)))
PY
