# Session 17, call 5 (carry .deps): at 512 queries (head_dim 128, no mask) do the 80-query blocks win now that
# the pre kernel zeroes and the post kernel loads only rows below seqlen_q? H = tree (64-query blocks at 512);
# X = tree + patches/bwd80_at_512.patch (80-query blocks there). 1024 as the control (80 in both).
. bench/device_prelude.sh
R=bench/results/2026-11-30-h200-session17
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep H; el built H
git apply $R/patches/bwd80_at_512.patch && ninja $T >>$L/build.log 2>&1 && keep X && el built X; git apply -R $R/patches/bwd80_at_512.patch
for r in 1 2 3; do for x in H X; do
  FLASHGEN_LIB=/tmp/b$x/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 60 python3 bench/compare.py --bwd --head-dims 128 --causal 0 --seqlens 512,1024 --out $L/x_$r$x > $L/x_$r$x.log 2>&1; el "A/B $r $x rc=$?"
done; pk; done
python3 bench/ab.py $L/x_1H $L/x_1X $L/x_2H $L/x_2X | tail -8
python3 bench/ab.py $L/x_2H $L/x_2X $L/x_3H $L/x_3X | tail -3
for x in H X; do FLASHGEN_LIB=/tmp/b$x/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 40 python3 bench/results/2026-11-29-h200-session10/profile/kprof.py 128 0 512 > $L/kprof_$x.log 2>&1; el "kprof $x rc=$?"; grep -a "flashgen\|cudnn " $L/kprof_$x.log | head -2; done; pk
