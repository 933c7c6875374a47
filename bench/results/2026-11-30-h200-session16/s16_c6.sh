# Session 16, call 6 (carry .deps only): is it the number of bulk reduce-adds that made call 4's per-warp dQ
# adds 0.947x? V = tree + patches/bwd90_dq_add_per_warp_barriers_kept.patch (one 4 KB add a warp, with the
# warpgroup barriers and bar_empty as in the tree); H = tree.
. bench/device_prelude.sh
R=bench/results/2026-11-30-h200-session16
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep H; el built H
git apply $R/patches/bwd90_dq_add_per_warp_barriers_kept.patch && ninja $T >>$L/build.log 2>&1 && keep V && el built V; git apply -R $R/patches/bwd90_dq_add_per_warp_barriers_kept.patch
sha256sum /tmp/b?/libflashgen.so | cut -c1-16
FLASHGEN_CACHE_DIR=/tmp/fgV timeout 60 /tmp/bV/test_gpu_fwd -j8 --filter 'bwd/shapes_sm90a' > $L/V_tests.log 2>&1; el "V tests rc=$?"; tail -1 $L/V_tests.log
for r in 1 2; do for x in H V; do
  FLASHGEN_LIB=/tmp/b$x/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 60 python3 bench/compare.py --bwd --dtypes bf16 --head-dims 128,64 --out $L/v_$r$x > $L/v_$r$x.log 2>&1; el "A/B $r $x rc=$?"
done; pk; done
python3 bench/ab.py $L/v_1H $L/v_1V $L/v_2H $L/v_2V | tail -3
