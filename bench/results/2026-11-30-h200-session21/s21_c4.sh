# Session 21, call 4 (carry .deps): TMA loads for the mma.sync backward above head_dim 128 (the tma=1
# variants, until now d 64/128 only; no loader addressing, no loader registers). A = the tree (14e6bc3),
# B = A + patches/bwd_tma_d256.patch (validate.c allows tma=1 at d 192/256; the mbarriers follow the dQ
# staging only where there is one; bwd::shapes_mma_tma covers every multiple of 64), C = B +
# patches/bwd_tma_d256_lane.patch (the lane through an empty asm at d > 128 with TMA: ptxas 20 bytes of
# spills -> 0 at d 256 without a mask). bwd/* on B and C, speed A B C C B A at d 256, sanitizers on C.
. bench/device_prelude.sh
P=bench/results/2026-11-30-h200-session21/patches
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep A; el built A
git apply $P/bwd_tma_d256.patch && ninja $T >>$L/build.log 2>&1 && keep B && el built B
git apply $P/bwd_tma_d256_lane.patch && ninja $T >>$L/build.log 2>&1 && keep C && el built C
for x in B C; do FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 80 /tmp/b$x/test_gpu_fwd -j8 --filter 'bwd/*' > $L/bwd_tests_$x.log 2>&1; el "$x bwd tests rc=$?"; tail -1 $L/bwd_tests_$x.log; pk; done
for x in 1A 1B 1C 2C 2B 2A; do y=${x#?}
  FLASHGEN_LIB=/tmp/b$y/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$y timeout 60 python3 bench/compare.py --bwd --head-dims 256 --out $L/r_$x > $L/r_$x.log 2>&1; el "r $x rc=$?"; pk
done
python3 bench/ab.py $L/r_1A $L/r_1B $L/r_2A $L/r_2B | tail -3
python3 bench/ab.py $L/r_1A $L/r_1C $L/r_2A $L/r_2C | tail -3
for c in "" --causal; do for tool in memcheck racecheck; do
  FLASHGEN_CACHE_DIR=/tmp/fgC timeout 60 compute-sanitizer --tool $tool /tmp/bC/flashgen run --bwd --head-dim 256 --batch 1 --heads 2 --seqlen-q 200 --seqlen-k 333 --iters 1 $c > $L/san_${tool}${c}.log 2>&1; el "$tool $c rc=$?"; grep -a 'SUMMARY\|PASS\|FAIL\|tma=1' $L/san_${tool}${c}.log | tail -3; pk
done; done
