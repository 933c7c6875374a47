#!/bin/sh
# bench/resources.sh: registers, spills and shared memory of the variants the benchmark protocol runs,
# and what the SASS of each holds (HMMA and LDSM present, no local-memory LDL/STL), as a Markdown table.
#   sh bench/resources.sh [ARCH] [DTYPES]  (default sm_90, "bf16 fp16"; needs build/flashgen; no GPU)
# ARCH sm_90 is the mma.sync family on Hopper, whose HMMA and LDSM the SASS columns count; sm_90a is the
# wgmma family (16-bit only), whose table counts HGMMA, the TMA loads (UTMALDG) and stores (UTMASTG) and
# the register reallocations (USETMAXREG) instead. The register count ptxas reports for sm_90a is the
# launch cap (65536 / threads), not the consumers' 240 or 160 after setmaxnreg.
# For FP8 (DTYPES="e4m3 e5m2") the QMMA column counts native FP8 MMAs and F2FP-unpack the fp8 -> f16
# conversions a target without FP8 mma.sync (sm_90) runs before each HMMA instead.
# The SASS columns need cuobjdump (the CUDA toolkit's, or the one in Triton's wheel: set CUOBJDUMP).
set -eu
# Where a driver is installed, NVRTC may answer a repeated compile from the CUDA compute cache without
# running ptxas, and the report this table reads would be missing.
export CUDA_CACHE_DISABLE=1
arch=${1:-sm_90}
dtypes=${2:-bf16 fp16}
objdump=${CUOBJDUMP:-$(command -v cuobjdump || true)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ "$arch" = sm_90a ]; then
  echo "| variant | registers (launch cap) | spill bytes | shared memory | HGMMA | HMMA | UTMALDG | UTMASTG | USETMAXREG | LDL/STL |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
else
  echo "| variant | registers | spill bytes | shared memory | HMMA | QMMA | F2FP unpack | LDSM | LDL/STL |"
  echo "|---|---|---|---|---|---|---|---|---|"
fi
for dtype in $dtypes; do
  for d in 64 128 256; do
    for causal in 0 1; do
      line=$(build/flashgen compile "kind=fwd,arch=$arch,dtype=$dtype,head_dim=$d,causal=$causal" -o "$tmp/k.cubin")
      name=$(echo "$line" | cut -d' ' -f1)
      regs=$(echo "$line" | sed -n 's/.* \([0-9]*\) registers.*/\1/p')
      spill=$(echo "$line" | sed -n 's/.* \([0-9]*\) bytes spill stores.*/\1/p')
      smem=$(echo "$line" | sed -n 's/.* \([0-9]*\) bytes shared memory.*/\1/p')
      if [ "$arch" = sm_90a ]; then
        if [ -n "$objdump" ]; then
          "$objdump" -sass "$tmp/k.cubin" > "$tmp/k.sass"
          echo "| $name | $regs | $spill | $smem | $(grep -c 'HGMMA' "$tmp/k.sass" || true) |" \
               "$(grep -c 'HMMA' "$tmp/k.sass" || true) | $(grep -c 'UTMALDG' "$tmp/k.sass" || true) |" \
               "$(grep -c 'UTMASTG' "$tmp/k.sass" || true) | $(grep -c 'USETMAXREG' "$tmp/k.sass" || true) |" \
               "$(grep -cE '\b(LDL|STL)\b' "$tmp/k.sass" || true) |"
        else
          echo "| $name | $regs | $spill | $smem | - | - | - | - | - | - |"
        fi
        continue
      fi
      if [ -n "$objdump" ]; then
        "$objdump" -sass "$tmp/k.cubin" > "$tmp/k.sass"
        hmma=$(grep -c 'HMMA' "$tmp/k.sass" || true)
        qmma=$(grep -c 'QMMA' "$tmp/k.sass" || true)
        unpack=$(grep -c 'F2FP.*UNPACK' "$tmp/k.sass" || true)
        ldsm=$(grep -c 'LDSM' "$tmp/k.sass" || true)
        local_ops=$(grep -cE '\b(LDL|STL)\b' "$tmp/k.sass" || true)
      else
        hmma="-"; qmma="-"; unpack="-"; ldsm="-"; local_ops="-"
      fi
      echo "| $name | $regs | $spill | $smem | $hmma | $qmma | $unpack | $ldsm | $local_ops |"
    done
  done
done
