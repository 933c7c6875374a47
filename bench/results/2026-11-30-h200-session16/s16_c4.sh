# Session 16, call 4. W = tree (sm_90a backward: one dQ bulk add a warp, no warpgroup barrier; bar_empty from both
# warpgroups); H = W without that (warp_add.patch reversed); O = W with the old post kernel (d 256 kprof only).
. bench/device_prelude.sh
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep W; el built W
git apply -R .smoke/warp_add.patch && ninja $T >>$L/build.log 2>&1 && keep H && el built H; git apply .smoke/warp_add.patch
git apply -R .smoke/post_new.patch && ninja $T >>$L/build.log 2>&1 && keep O && el built O; git apply .smoke/post_new.patch; ninja $T >>$L/build.log 2>&1
sha256sum build/libflashgen.so /tmp/b?/libflashgen.so | cut -c1-16
export FLASHGEN_CACHE_DIR=/tmp/fgW
timeout 100 build/tests/test_gpu_fwd -j8 --filter 'bwd/*' > $L/bwd_tests.log 2>&1; el "bwd tests rc=$?"; tail -1 $L/bwd_tests.log; grep -a 'FAIL\]' $L/bwd_tests.log | head -5
timeout 60 compute-sanitizer --tool racecheck build/tests/test_gpu_fwd -j1 --filter 'bwd/shapes_sm90a' > $L/racecheck.log 2>&1; el "racecheck rc=$?"; grep -a 'RACECHECK SUMMARY' $L/racecheck.log | tail -1
timeout 60 compute-sanitizer --tool synccheck build/tests/test_gpu_fwd -j1 --filter 'bwd/shapes_sm90a' > $L/synccheck.log 2>&1; el "synccheck rc=$?"; grep -a 'ERROR SUMMARY' $L/synccheck.log | tail -1; pk
for r in 1 2; do for x in H W; do
  FLASHGEN_LIB=/tmp/b$x/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 60 python3 bench/compare.py --bwd --dtypes bf16 --head-dims 128,64 --out $L/w_$r$x > $L/w_$r$x.log 2>&1; el "warp add A/B $r $x rc=$?"
done; pk; done
python3 bench/ab.py $L/w_1H $L/w_1W $L/w_2H $L/w_2W | tail -4
for x in O W; do FLASHGEN_LIB=/tmp/b$x/libflashgen.so timeout 40 python3 .smoke/kprof.py 256 1 16384 > $L/kprof256_$x.log 2>&1; el "kprof d256 $x rc=$?"; grep -a "flashgen" $L/kprof256_$x.log; done; pk
