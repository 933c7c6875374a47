# Session 16, call 3. T = tree (post kernel rewritten, pre kernel as before: 4ababb6's pre change reverted,
# FP8 d 64 192 x 128); O = T with the old post kernel. d 256 backward (mma.sync) A/B, full d 256 table; fwd
# 16-bit table twice.
. bench/device_prelude.sh
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep T; el built T
git apply -R .smoke/post_new.patch && ninja $T >>$L/build.log 2>&1 && keep O && el built O; git apply .smoke/post_new.patch; ninja $T >>$L/build.log 2>&1
sha256sum build/libflashgen.so /tmp/b?/libflashgen.so | cut -c1-16
export FLASHGEN_CACHE_DIR=/tmp/fgT
timeout 100 build/tests/test_gpu_fwd -j8 --filter 'bwd/*' > $L/bwd_tests.log 2>&1; el "bwd tests rc=$?"; tail -1 $L/bwd_tests.log; grep -a 'FAIL\]' $L/bwd_tests.log | head -5
for r in 1 2; do for x in O T; do
  FLASHGEN_LIB=/tmp/b$x/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 90 python3 bench/compare.py --bwd --dtypes bf16 --head-dims 256 --out $L/d256_$r$x > $L/d256_$r$x.log 2>&1; el "d256 bwd $r $x rc=$?"
done; pk; done
python3 bench/ab.py $L/d256_1O $L/d256_1T $L/d256_2O $L/d256_2T | tail -3
timeout 90 python3 bench/compare.py --bwd --dtypes fp16 --head-dims 256 --out $L/d256_fp16 > $L/d256_fp16.log 2>&1; el "d256 fp16 rc=$?"; pk
for r in 1 2; do timeout 120 python3 bench/compare.py --dtypes bf16,fp16 --out $L/fwd_$r > $L/fwd_$r.log 2>&1; el "fwd table $r rc=$?"; grep -a geomean $L/fwd_$r.log; pk; done
