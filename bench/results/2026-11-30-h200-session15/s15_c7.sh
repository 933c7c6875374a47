# Session 15, call 7: three dS^T buffers with the lag (d 128 non-causal) = T (tree) against HEAD (26128ed) = H;
# H's fp16 backward table. carry [".deps", ".smoke"].
. bench/device_prelude.sh
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep T; el built T
cp templates/bwd_sm90.cuh /tmp/bwd.keep; cp generator/spec.c /tmp/spec.keep
git show HEAD:templates/bwd_sm90.cuh > templates/bwd_sm90.cuh; git show HEAD:generator/spec.c > generator/spec.c
ninja $T >>$L/build.log 2>&1 && keep H && el built H; cp /tmp/bwd.keep templates/bwd_sm90.cuh; cp /tmp/spec.keep generator/spec.c; ninja $T >>$L/build.log 2>&1
export FLASHGEN_CACHE_DIR=/tmp/fgT
timeout 60 build/tests/test_gpu_fwd -j8 --filter 'bwd/shapes_sm90a*' > $L/T_tests.log 2>&1; el "T sm90a tests rc=$?"; tail -1 $L/T_tests.log; grep -a 'FAIL:\|CRASH' $L/T_tests.log | head -3 | cut -c1-250
timeout 60 compute-sanitizer --tool racecheck build/tests/test_gpu_fwd -j1 --filter 'bwd/shapes_sm90a' > $L/racecheck.log 2>&1; el "racecheck rc=$?"; grep -a 'RACECHECK SUMMARY' $L/racecheck.log | tail -1
timeout 60 compute-sanitizer --tool synccheck build/tests/test_gpu_fwd -j1 --filter 'bwd/shapes_sm90a' > $L/synccheck.log 2>&1; el "synccheck rc=$?"; grep -a 'ERROR SUMMARY' $L/synccheck.log | tail -1; pk
for r in 1 2; do for x in H T; do
  FLASHGEN_LIB=/tmp/b$x/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 60 python3 bench/compare.py --bwd --dtypes bf16 --head-dims 128 --causal 0 --out $L/b_$r$x > $L/b_$r$x.log 2>&1; el "bwd $r $x rc=$?"
done; pk; done
python3 bench/ab.py $L/b_1H $L/b_1T $L/b_2H $L/b_2T | tail -9
FLASHGEN_LIB=/tmp/bH/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fgH timeout 90 python3 bench/compare.py --bwd --dtypes fp16 --out $L/H_fp16 > $L/H_fp16.log 2>&1; el "H fp16 rc=$?"; pk
