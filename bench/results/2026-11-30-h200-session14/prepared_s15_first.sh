# Session 15, first call (prepared in session 14): the shared-memory fp32 level of O for FP8 above d 128
# (.smoke/fp8_smem_level.patch applied to the tree = P) against HEAD (H: d > 128 past 256 keys on mma.sync;
# HF: H with FLASHGEN_FP8_FAST_ACCUM=1, the unflushed sm_90a kernel). carry [".deps", ".smoke"].
. bench/device_prelude.sh
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep P; el built P
git apply -R .smoke/fp8_smem_level.patch && ninja $T >>$L/build.log 2>&1 && keep H && el built H; git apply .smoke/fp8_smem_level.patch
export FLASHGEN_CACHE_DIR=/tmp/fgP
timeout 200 build/tests/test_gpu_fwd -j8 --filter 'fwd/*' > $L/fwd_tests.log 2>&1; el "P fwd rc=$?"; tail -1 $L/fwd_tests.log; grep -a 'FAIL\|CRASH' $L/fwd_tests.log | head -5; pk
timeout 90 compute-sanitizer --tool memcheck build/tests/test_gpu_fwd -j1 --filter 'fwd/fp8_long_keys' > $L/memcheck.log 2>&1; el "memcheck rc=$?"; grep -a 'ERROR SUMMARY' $L/memcheck.log | tail -1
for r in 1 2; do
  FLASHGEN_LIB=/tmp/bP/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fgP timeout 80 python3 bench/fp8.py --skip-accuracy --head-dims 256 --seqlens 2048,4096,8192,16384 --out $L/d_${r}P > $L/d_${r}P.log 2>&1; el "P $r rc=$?"
  FLASHGEN_FP8_FAST_ACCUM=1 FLASHGEN_LIB=/tmp/bH/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fgH timeout 80 python3 bench/fp8.py --skip-accuracy --head-dims 256 --seqlens 2048,4096,8192,16384 --out $L/d_${r}F > $L/d_${r}F.log 2>&1; el "HF $r rc=$?"
  pk; done
grep -a "| 256" $L/d_1P.log
# Q = HEAD + .smoke/fp8_flush_after_qk.patch (the register flush moved after the next QK^T's issue) against H,
# d 64/128 (it conflicts with the shared-memory patch: built from H's sources)
git apply -R .smoke/fp8_smem_level.patch && git apply .smoke/fp8_flush_after_qk.patch && ninja $T >>$L/build.log 2>&1 && keep Q && el built Q
git apply -R .smoke/fp8_flush_after_qk.patch && git apply .smoke/fp8_smem_level.patch
FLASHGEN_CACHE_DIR=/tmp/fgQ timeout 90 /tmp/bQ/test_gpu_fwd -j8 --filter 'fwd/fp8*' > $L/Q_fp8.log 2>&1; el "Q fp8 tests rc=$?"; tail -1 $L/Q_fp8.log
for r in 1 2; do for x in H Q; do
  FLASHGEN_LIB=/tmp/b$x/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 60 python3 bench/fp8.py --skip-accuracy --head-dims 64,128 --seqlens 2048,8192,16384 --out $L/q_$r$x > $L/q_$r$x.log 2>&1; el "fp8 $r $x rc=$?"
done; pk; done
python3 bench/ab.py $L/q_1H $L/q_1Q $L/q_2H $L/q_2Q | tail -3
# bench/fp8.py's long-key accuracy table (82f034b, never run yet), on P
FLASHGEN_LIB=/tmp/bP/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fgP timeout 120 python3 bench/fp8.py --skip-speed --out $L/acc > $L/acc.log 2>&1; el "accuracy rc=$?"; tail -16 $L/acc.log; pk
# ncu of the sm_90a backward's main kernel (issue 7: d 128 at 0.88-0.98x cuDNN): stall reasons and pipes
for c in "128 8192 0" "64 8192 0"; do set -- $c
  timeout 120 ncu --set full -k regex:fg_bwd_main --launch-skip 3 --launch-count 1 -o $L/ncu_bwd_d$1 python3 .smoke/ncu_bwd.py $1 $2 $3 > $L/ncu_bwd_d$1.log 2>&1; el "ncu bwd d$1 rc=$?"
  ncu --import $L/ncu_bwd_d$1.ncu-rep --page details > $L/ncu_bwd_d$1.txt 2>&1; rm -f $L/ncu_bwd_d$1.ncu-rep; pk
done
# R = P + .smoke/fp8_mma_promote.patch with the promotion forced on sm_90 too (there FP8 mma.sync is f16
# HMMA, so this checks the code, not Ada's precision): the FP8 tests on the mma.sync family.
git apply .smoke/fp8_mma_promote.patch && cp generator/spec.c /tmp/spec.c.keep && sed -i 's/spec_dtype_is_fp8(spec->dtype) \&\& spec->arch != 90;/spec_dtype_is_fp8(spec->dtype);/' generator/spec.c && ninja $T >>$L/build.log 2>&1 && keep R && el built R
cp /tmp/spec.c.keep generator/spec.c && git apply -R .smoke/fp8_mma_promote.patch
FLASHGEN_WGMMA_FP8=0 FLASHGEN_CACHE_DIR=/tmp/fgR timeout 150 /tmp/bR/test_gpu_fwd -j8 --filter 'fwd/fp8*' > $L/R_fp8.log 2>&1; el "R fp8 (mma.sync) rc=$?"; tail -1 $L/R_fp8.log; grep -a "FAIL:" $L/R_fp8.log | head -3 | cut -c1-200; pk
