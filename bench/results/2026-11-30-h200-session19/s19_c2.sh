# Session 19, call 2 (carry .deps): the backward's main and post kernels launched early (programmatic
# dependent launch, FLASHGEN_PDL; dispatch.c launch_items, griddepcontrol in bwd_sm80.cuh/bwd_sm90.cuh).
# One build: E = as built (early launches), S = the same library with FLASHGEN_PDL=0 (each kernel after the
# one before has drained). Every backward GPU test with E, then A/B on the backward table: bf16 d 64/128
# (sm_90a) and d 256 (mma.sync), S E, then E S.
. bench/device_prelude.sh
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep E; el built
export FLASHGEN_CACHE_DIR=/tmp/fgE
timeout 150 /tmp/bE/test_gpu_fwd -j8 --filter 'bwd/*' > $L/bwd_tests.log 2>&1; el "bwd tests rc=$?"; tail -1 $L/bwd_tests.log; grep -a 'FAIL:\|CRASH' $L/bwd_tests.log | head -8 | cut -c1-300; pk
FLASHGEN_PDL=0 timeout 100 /tmp/bE/test_gpu_fwd -j8 --filter 'bwd/shapes*' > $L/bwd_tests_S.log 2>&1; el "S bwd/shapes rc=$?"; tail -1 $L/bwd_tests_S.log; pk
for x in 1S 1E 2E 2S; do
  [ ${x#?} = S ] && export FLASHGEN_PDL=0 || unset FLASHGEN_PDL
  FLASHGEN_LIB=/tmp/bE/libflashgen.so timeout 90 python3 bench/compare.py --bwd --dtypes bf16 --head-dims 64,128 --out $L/t_$x > $L/t_$x.log 2>&1; el "d64/128 $x rc=$?"; pk
  FLASHGEN_LIB=/tmp/bE/libflashgen.so timeout 60 python3 bench/compare.py --bwd --dtypes bf16 --head-dims 256 --seqlens 1024,4096,16384 --out $L/u_$x > $L/u_$x.log 2>&1; el "d256 $x rc=$?"; pk
done
unset FLASHGEN_PDL
python3 bench/ab.py $L/t_1S $L/t_1E $L/t_2S $L/t_2E | tail -16
python3 bench/ab.py $L/u_1S $L/u_1E $L/u_2S $L/u_2E | tail -6
