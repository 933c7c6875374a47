# Session 19, call 1 (carry .deps): part of the exponentials on the FMA pipe (fwd_sm90.cuh FG_EXP2_POLY).
# T = the tree (no polynomial: FG_EXP2_POLY 0), B = every 8th n8 column group's 2^x by fg_exp2_poly,
# C = every 4th. The whole test_gpu_fwd on T (the final host code of session 18 never ran on a GPU), fwd/*
# on B, the FP8 and NaN tests on C; then A/B/C: FP8 e4m3 d 64/128 and bf16 d 64/128 (T B C, then C B T).
. bench/device_prelude.sh
H=templates/fwd_sm90.cuh
poly() { sed -i "s/^#define FG_EXP2_POLY [0-9]*/#define FG_EXP2_POLY $1/" $H; }
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep T; el built T
poly 8; ninja $T >>$L/build.log 2>&1 && keep B && el built B
poly 4; ninja $T >>$L/build.log 2>&1 && keep C && el built C; poly 0; ninja $T >>$L/build.log 2>&1
FLASHGEN_CACHE_DIR=/tmp/fgT timeout 200 /tmp/bT/test_gpu_fwd -j8 > $L/gpu_T.log 2>&1; el "T test_gpu_fwd rc=$?"; tail -1 $L/gpu_T.log; grep -a 'FAIL:\|CRASH\|\[SKIP\]' $L/gpu_T.log | head -8 | cut -c1-250; pk
FLASHGEN_CACHE_DIR=/tmp/fgB timeout 120 /tmp/bB/test_gpu_fwd -j8 --filter 'fwd/*' > $L/gpu_B.log 2>&1; el "B fwd rc=$?"; tail -1 $L/gpu_B.log; grep -a 'FAIL:\|CRASH' $L/gpu_B.log | head -8 | cut -c1-250; pk
for f in 'fp8*' 'nan*'; do FLASHGEN_CACHE_DIR=/tmp/fgC timeout 60 /tmp/bC/test_gpu_fwd -j8 --filter "fwd/$f" > $L/gpu_C_${f%\*}.log 2>&1; el "C $f rc=$?"; tail -1 $L/gpu_C_${f%\*}.log; grep -a 'FAIL:\|CRASH' $L/gpu_C_${f%\*}.log | head -8 | cut -c1-250; done; pk
for x in 1T 1B 1C 2C 2B 2T; do
  FLASHGEN_LIB=/tmp/b${x#?}/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg${x#?} timeout 60 python3 bench/fp8.py --skip-accuracy --head-dims 64,128 --seqlens 4096,16384 --out $L/fp8_$x > $L/fp8_$x.log 2>&1; el "fp8 $x rc=$?"; pk
  FLASHGEN_LIB=/tmp/b${x#?}/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg${x#?} timeout 60 python3 bench/compare.py --dtypes bf16 --head-dims 64,128 --seqlens 2048,8192 --out $L/f_$x > $L/f_$x.log 2>&1; el "bf16 $x rc=$?"; pk
done
for y in B C; do python3 bench/ab.py $L/fp8_1T $L/fp8_1$y $L/fp8_2T $L/fp8_2$y | tail -4; python3 bench/ab.py $L/f_1T $L/f_1$y $L/f_2T $L/f_2$y | tail -4; done
