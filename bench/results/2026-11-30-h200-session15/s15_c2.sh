# Session 15, call 2: the shared-memory level flushed every 256 keys (tree: d 256 128 x 64 every 4 blocks = P4)
# against every 2 blocks (P2, call 1's kernel); FP8 tests, the full FP8 table and the binding's tests on P4;
# ncu of the sm_90a backward d 128 with per-instruction stall samples. carry [".deps", ".smoke"].
. bench/device_prelude.sh
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep P4; el built P4
cp generator/spec.c /tmp/spec.keep; sed -i 's|return spec->block_n <= 128 ? 256 / spec->block_n : 1;|return 2;|' generator/spec.c
ninja $T >>$L/build.log 2>&1 && keep P2 && el built P2; cp /tmp/spec.keep generator/spec.c; ninja $T >>$L/build.log 2>&1
export FLASHGEN_CACHE_DIR=/tmp/fgP4
timeout 100 build/tests/test_gpu_fwd -j8 --filter 'fwd/fp8*' > $L/fp8_tests.log 2>&1; el "P4 fp8 tests rc=$?"; tail -1 $L/fp8_tests.log; grep -a 'FAIL:\|CRASH' $L/fp8_tests.log | head -5 | cut -c1-250; pk
for r in 1 2; do for x in P2 P4; do
  FLASHGEN_LIB=/tmp/b$x/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg$x timeout 80 python3 bench/fp8.py --skip-accuracy --head-dims 256 --seqlens 2048,4096,8192,16384 --out $L/d_$r$x > $L/d_$r$x.log 2>&1; el "d256 $r $x rc=$?"
done; pk; done
python3 bench/ab.py $L/d_1P2 $L/d_1P4 $L/d_2P2 $L/d_2P4 | tail -3
grep -a "| 256" $L/d_1P4.log
timeout 100 ncu --set full --import-source yes -k regex:fg_bwd_main --launch-skip 3 --launch-count 1 -o $L/ncu_bwd128 python3 .smoke/ncu_bwd.py 128 8192 0 > $L/ncu_bwd128.log 2>&1; el "ncu bwd rc=$?"
ncu --import $L/ncu_bwd128.ncu-rep --page source --csv --print-source sass > $L/ncu_bwd128_sass.csv 2>&1
ncu --import $L/ncu_bwd128.ncu-rep --page raw --csv > $L/ncu_bwd128_raw.csv 2>&1; rm -f $L/ncu_bwd128.ncu-rep; pk
timeout 120 python3 python/tests/test_binding.py > $L/binding.log 2>&1; el "binding rc=$?"; tail -3 $L/binding.log; pk
timeout 200 python3 bench/fp8.py --out $L/fp8_full > $L/fp8_full.log 2>&1; el "fp8 full rc=$?"; grep -a "^| " $L/fp8_full.log | tail -40; pk
