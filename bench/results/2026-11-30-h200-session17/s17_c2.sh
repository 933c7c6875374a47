# Session 17, call 2 (carry .deps): the tree N2 (80-query dQ^T blocks; pre kernel zeroing only rows below
# seqlen_q; dQ^T post kernel pairing lanes for 4-byte stores) tested, and A/B against O = 9757dbd (the tree -
# patches/s17_c2_tree_vs_9757dbd.patch) on the bf16 backward table (d 64/128, both masks, 512-16k).
. bench/device_prelude.sh
R=bench/results/2026-11-30-h200-session17
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep N2; el built N2
git apply -R $R/patches/s17_c2_tree_vs_9757dbd.patch && ninja $T >>$L/build.log 2>&1 && keep O && el built O; git apply $R/patches/s17_c2_tree_vs_9757dbd.patch
sha256sum /tmp/b?/libflashgen.so | cut -c1-16
export FLASHGEN_CACHE_DIR=/tmp/fgN2
timeout 150 /tmp/bN2/test_gpu_fwd -j8 --filter 'bwd/*' > $L/bwd_tests.log 2>&1; el "bwd tests rc=$?"; tail -1 $L/bwd_tests.log; grep -a 'FAIL:\|CRASH\|Skip\|rror' $L/bwd_tests.log | head -8 | cut -c1-300; pk
for r in 1 2; do for x in O N2; do
  FLASHGEN_LIB=/tmp/b$x/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 90 python3 bench/compare.py --bwd --dtypes bf16 --head-dims 64,128 --out $L/t_$r$x > $L/t_$r$x.log 2>&1; el "A/B $r $x rc=$?"
done; pk; done
python3 bench/ab.py $L/t_1O $L/t_1N2 $L/t_2O $L/t_2N2 | tail -4
FLASHGEN_LIB=/tmp/bN2/libflashgen.so timeout 40 python3 bench/results/2026-11-29-h200-session10/profile/kprof.py 128 0 512 2048 > $L/kprof_N2.log 2>&1; el "kprof N2 rc=$?"; grep -a "flashgen" $L/kprof_N2.log | head -4; pk
FLASHGEN_LIB=/tmp/bN2/libflashgen.so timeout 60 python3 bench/compare.py --bwd --dtypes fp16 --head-dims 64,128 --out $L/f16_N2 > $L/f16_N2.log 2>&1; el "fp16 table rc=$?"; pk
timeout 120 compute-sanitizer --tool memcheck /tmp/bN2/test_gpu_fwd -j1 --filter 'bwd/shapes_sm90a' > $L/memcheck.log 2>&1; el "memcheck rc=$?"; grep -a 'ERROR SUMMARY' $L/memcheck.log | tail -1; tail -1 $L/memcheck.log; pk
