# Session 17, call 3 (carry .deps): the tree N3 (call 2's, with the pre kernel zeroing whole accumulator groups
# below seqlen_q, the post kernel loading no unit past it, and 64-query blocks where 80 would pad over 4% more
# rows) tested, and A/B against O = 9757dbd (the tree - patches/s17_c3_tree_vs_9757dbd.patch) on the bf16
# backward table, this time N3 first in each pair (call 2 ran O first).
. bench/device_prelude.sh
R=bench/results/2026-11-30-h200-session17
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep N3; el built N3
git apply -R $R/patches/s17_c3_tree_vs_9757dbd.patch && ninja $T >>$L/build.log 2>&1 && keep O && el built O; git apply $R/patches/s17_c3_tree_vs_9757dbd.patch
sha256sum /tmp/b?/libflashgen.so | cut -c1-16
export FLASHGEN_CACHE_DIR=/tmp/fgN3
timeout 150 /tmp/bN3/test_gpu_fwd -j8 --filter 'bwd/*' > $L/bwd_tests.log 2>&1; el "bwd tests rc=$?"; tail -1 $L/bwd_tests.log; grep -a 'FAIL:\|CRASH\|Skip\|rror' $L/bwd_tests.log | head -8 | cut -c1-300; pk
for r in 1 2; do for x in N3 O; do
  FLASHGEN_LIB=/tmp/b$x/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 90 python3 bench/compare.py --bwd --dtypes bf16 --head-dims 64,128 --out $L/t_$r$x > $L/t_$r$x.log 2>&1; el "A/B $r $x rc=$?"
done; pk; done
python3 bench/ab.py $L/t_1O $L/t_1N3 $L/t_2O $L/t_2N3 | tail -4
FLASHGEN_LIB=/tmp/bN3/libflashgen.so timeout 40 python3 bench/results/2026-11-29-h200-session10/profile/kprof.py 128 0 512 2048 > $L/kprof_N3.log 2>&1; el "kprof N3 rc=$?"; grep -a "flashgen" $L/kprof_N3.log | head -4; pk
FLASHGEN_LIB=/tmp/bN3/libflashgen.so timeout 60 python3 python/tests/test_binding.py > $L/binding.log 2>&1; el "binding rc=$?"; tail -2 $L/binding.log; pk
timeout 120 compute-sanitizer --tool memcheck /tmp/bN3/test_gpu_fwd -j1 --filter 'bwd/shapes_sm90a' > $L/memcheck.log 2>&1; el "memcheck rc=$?"; grep -a 'ERROR SUMMARY' $L/memcheck.log | tail -1; tail -1 $L/memcheck.log; pk
