# Session 21, call 6 (carry .deps): the new runtime/emulate_arch test on the tree; then FP8 d 128 with the
# register level flushed every 4 steps (512 keys, the d 256 level's period) instead of 2:
# patches/fp8_flush4_d128.patch. fwd/fp8* on it, and A/B at d 128 2k/8k/16k, A B B A.
. bench/device_prelude.sh
P=bench/results/2026-11-30-h200-session21/patches
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep A; el built A
FLASHGEN_CACHE_DIR=/tmp/fgA timeout 40 build/tests/test_gpu_fwd --filter 'runtime/emulate*' > $L/emulate_test.log 2>&1; el "emulate test rc=$?"; tail -1 $L/emulate_test.log; pk
git apply $P/fp8_flush4_d128.patch && ninja $T >>$L/build.log 2>&1 && keep B && el built B; git apply -R $P/fp8_flush4_d128.patch
FLASHGEN_CACHE_DIR=/tmp/fgB timeout 60 /tmp/bB/test_gpu_fwd -j12 --filter 'fwd/fp8*' > $L/fp8_tests_B.log 2>&1; el "B fp8 tests rc=$?"; tail -1 $L/fp8_tests_B.log; pk
for x in 1A 1B 2B 2A; do y=${x#?}
  rm -rf /tmp/nodb$y; mkdir -p /tmp/nodb$y
  FLASHGEN_LIB=/tmp/b$y/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/nodb$y timeout 40 python3 bench/fp8.py --skip-accuracy --head-dims 128 --seqlens 2048,8192,16384 --out $L/f_$x > $L/f_$x.log 2>&1; el "f $x rc=$?"; pk
done
python3 - <<'PY'
import json, math
r = {x: {(d['seqlen'], d['causal']): d['flashgen_e4m3'] for d in json.load(open('/tmp/l/f_%s/fp8.json' % x))['speed']} for x in ('1A', '1B', '2A', '2B')}
rat = [r['%dB' % i][k] / r['%dA' % i][k] for i in (1, 2) for k in r['1A']]
for k in sorted(r['1A']): print(k, ['%.3f' % (r['%dB' % i][k] / r['%dA' % i][k]) for i in (1, 2)], '%.0f' % r['1A'][k])
print('B/A geomean %.4f over %d' % (math.exp(sum(map(math.log, rat)) / len(rat)), len(rat)))
PY
