# Session 21, call 7 (carry .deps; run twice: the first stopped at compare.py refusing d 192 with hidden 2048,
# after the emulation test passed); the mma.sync backward at head_dim 192 with TMA loads (the default since 76a856b, untimed) against
# its cp.async loads (FLASHGEN_BWD_TMA=0), same build, both dtypes and masks, A B B A.
. bench/device_prelude.sh
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; el built

db A
for x in 1A 1B 2B 2A; do
  if [ ${x#?} = A ]; then export FLASHGEN_BWD_TMA=0; else unset FLASHGEN_BWD_TMA; fi
  FLASHGEN_CACHE_DIR=/tmp/fgA timeout 40 python3 bench/compare.py --bwd --head-dims 192 --hidden 1536 --seqlens 1024,4096,16384 --out $L/r_$x > $L/r_$x.log 2>&1; el "r $x rc=$?"; pk
done
unset FLASHGEN_BWD_TMA
python3 bench/ab.py $L/r_1A $L/r_1B $L/r_2A $L/r_2B | tail -4
