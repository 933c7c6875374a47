# Session 22, call 1 (carry .deps): where the sm_90a FP8 forward's step goes. SASS of the d 128 (128 x 128)
# and d 256 (128 x 64) e4m3 kernels, and ncu (full set, per-instruction stall samples) of each at 8k, no mask.
# (Run with a copy of session 14's ncu_fp8.py at bench/probes/ncu_fp8.py, the same but for its first comment line; the
# copy was removed after.)
. bench/device_prelude.sh
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; el built
for d in 128 256; do
  build/flashgen compile kind=fwd,arch=sm_90a,dtype=e4m3,head_dim=$d -o /tmp/f$d.cubin > $L/compile_$d.txt 2>&1
  (cuobjdump -sass /tmp/f$d.cubin || nvdisasm /tmp/f$d.cubin) > $L/sass_$d.txt 2>&1; el "sass $d"
done
for d in 128 256; do
  python3 bench/results/2026-11-30-h200-session14/ncu_fp8.py $d 8192 0 > /dev/null 2>&1 # compile and cache first
  timeout 150 ncu --set full --import-source no -k regex:fg_attention_fwd --launch-skip 3 --launch-count 1 -o $L/ncu_$d python3 bench/results/2026-11-30-h200-session14/ncu_fp8.py $d 8192 0 > $L/ncu_$d.log 2>&1; el "ncu $d rc=$?"
  ncu --import $L/ncu_$d.ncu-rep --page source --csv --print-source sass > $L/ncu_${d}_sass.csv 2>&1
  ncu --import $L/ncu_$d.ncu-rep --page details > $L/ncu_$d.txt 2>&1; rm -f $L/ncu_$d.ncu-rep; pk
done
grep -a -E "Duration|SM Frequency|Issue Slots Busy|No Eligible|Warp Cycles Per Issued" $L/ncu_128.txt $L/ncu_256.txt
pk
