# Session 17, call 7 (carry .deps): ncu of the short-sequence gaps on the final tree, flashgen against cuDNN:
# the forward at head_dim 128 without a mask at 512 (0.86x cuDNN) and 2k (0.99x), and the backward's main
# kernel at 512 (0.99x). Launch, occupancy, throughput and warp-state sections.
. bench/device_prelude.sh
R=bench/results/2026-11-30-h200-session17
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep F; el built
export FLASHGEN_CACHE_DIR=/tmp/fgF
python3 $R/ncu_short.py 128 512 0 bwd > /dev/null 2>&1 # compile and cache first
S="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis"
K="regex:fg_attention_fwd|fg_bwd_main|cudnn_generated_fort_native_sdpa_sm90_flash_(fprop|bprop)"
timeout 150 ncu --clock-control none --kernel-name "$K" $S python3 $R/ncu_short.py 128 512 0 bwd > $L/ncu_d128_512.txt 2>&1; el "ncu 512 rc=$?"; pk
timeout 120 ncu --clock-control none --kernel-name "regex:fg_attention_fwd|cudnn_generated_fort_native_sdpa_sm90_flash_fprop" $S python3 $R/ncu_short.py 128 2048 0 > $L/ncu_d128_2k_fwd.txt 2>&1; el "ncu 2k rc=$?"; pk
grep -a -E "^  [a-z_]|Duration|Grid Size|Block Size|Registers Per|Dynamic Shared|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Warp Cycles Per Issued|No Eligible|Issued Warp" $L/ncu_d128_512.txt | head -80
