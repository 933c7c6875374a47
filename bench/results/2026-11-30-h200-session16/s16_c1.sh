# Session 16, call 1: the post-kernel rewrite (af0554f) tested and A/B'd, plus what session 15 committed
# without a GPU (prepared_s16_first.sh). T = tree; O = tree with the old post kernel; Y = T + fp8_d64_192.patch.
. bench/device_prelude.sh
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep T; el built T
git apply -R .smoke/post_new.patch && ninja $T >>$L/build.log 2>&1 && keep O && el built O; git apply .smoke/post_new.patch
git apply .smoke/fp8_d64_192.patch && ninja $T >>$L/build.log 2>&1 && keep Y && el built Y; git apply -R .smoke/fp8_d64_192.patch; ninja $T >>$L/build.log 2>&1
sha256sum build/libflashgen.so /tmp/bT/libflashgen.so /tmp/bO/libflashgen.so | cut -c1-16
export FLASHGEN_CACHE_DIR=/tmp/fgT
timeout 150 build/tests/test_gpu_fwd -j8 --filter 'bwd/*' > $L/bwd_tests.log 2>&1; el "bwd tests rc=$?"; tail -1 $L/bwd_tests.log; grep -a 'FAIL:\|CRASH\|Skip' $L/bwd_tests.log | head -5 | cut -c1-250; pk
for r in 1 2; do for x in O T; do
  FLASHGEN_LIB=/tmp/b$x/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 60 python3 bench/compare.py --bwd --dtypes bf16 --head-dims 128,64 --causal 0 --seqlens 512,1024,2048 --out $L/p_$r$x > $L/p_$r$x.log 2>&1; el "post A/B $r $x rc=$?"
done; pk; done
python3 bench/ab.py $L/p_1O $L/p_1T $L/p_2O $L/p_2T | tail -4
for x in O T; do FLASHGEN_LIB=/tmp/b$x/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 40 python3 .smoke/kprof.py 128 0 512 2048 > $L/kprof_$x.log 2>&1; el "kprof $x rc=$?"; grep -a "post\|convert\|dot" $L/kprof_$x.log | head -6; done; pk
timeout 60 compute-sanitizer --tool racecheck build/tests/test_gpu_fwd -j1 --filter 'bwd/shapes_sm90a' > $L/racecheck.log 2>&1; el "racecheck rc=$?"; grep -a 'RACECHECK SUMMARY' $L/racecheck.log | tail -1
timeout 120 build/tests/test_gpu_fwd -j8 --filter 'fwd/*' > $L/fwd_tests.log 2>&1; el "fwd tests rc=$?"; tail -1 $L/fwd_tests.log; grep -a 'FAIL:\|CRASH' $L/fwd_tests.log | head -5 | cut -c1-250; pk
timeout 60 build/tests/test_cli --filter '*gpu*' -j2 > $L/cli_gpu.log 2>&1; el "cli gpu tests rc=$?"; tail -1 $L/cli_gpu.log
for d in 128 256; do timeout 30 build/flashgen run --dtype e4m3 --head-dim $d --batch 1 --heads 4 --seqlen-q 256 --seqlen-k 32768 > $L/run_fp8_d$d.log 2>&1; el "run e4m3 d$d 32k rc=$?"; grep -a -i "max\|pass\|fail" $L/run_fp8_d$d.log | head -2; done; pk
FLASHGEN_CACHE_DIR=/tmp/fgY timeout 40 /tmp/bY/test_gpu_fwd -j8 --filter 'fwd/fp8*' > $L/Y_fp8.log 2>&1; el "Y fp8 tests rc=$?"; tail -1 $L/Y_fp8.log
for r in 1 2; do for x in T Y; do
  FLASHGEN_LIB=/tmp/b$x/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 40 python3 bench/fp8.py --skip-accuracy --head-dims 64 --seqlens 4096,16384 --out $L/y_$r$x > $L/y_$r$x.log 2>&1; el "fp8 d64 $r $x rc=$?"
done; pk; done
python3 bench/ab.py $L/y_1T $L/y_1Y $L/y_2T $L/y_2Y | tail -3
timeout 60 python3 python/tests/test_binding.py > $L/binding.log 2>&1; el "binding rc=$?"; tail -2 $L/binding.log; pk
