#!/bin/sh
# bench/resources.sh: registers, spills and shared memory of the variants the benchmark protocol runs,
# and what the SASS of each holds (its tensor-core instructions, no local-memory LDL/STL), as a Markdown
# table.
#   sh bench/resources.sh [ARCH] [DTYPES] [KIND]  (default sm_90, "bf16 fp16", fwd; needs build/flashgen;
#                                                   no GPU)
#   sh bench/resources.sh --from DIR/compare.json   the variants flashgen ran in that compare.py run (the
#                                                   tuned winners, not the tile policy's defaults), one row
#                                                   each, with the configs that ran it
# ARCH sm_90 is the mma.sync family on Hopper, whose HMMA and LDSM the SASS columns count; sm_90a is the
# wgmma family, whose table counts HGMMA (16-bit) and QGMMA (FP8), the TMA loads (UTMALDG) and stores
# (UTMASTG) and the register reallocations (USETMAXREG) instead. The register count ptxas reports for
# sm_90a is the launch cap (65536 / threads), not the consumers' 240 or 160 after setmaxnreg.
# For FP8 on the mma.sync family (DTYPES="e4m3 e5m2") the QMMA column counts native FP8 MMAs and
# F2FP-unpack the fp8 -> f16 conversions a target without FP8 mma.sync (sm_90) runs before each HMMA.
# KIND bwd: the backward (mma.sync family, head dims 64, 96, 128, both masks, both modes), counting HMMA,
# LDSM, the bulk reduce-adds of dQ (UBLKRED, sm_90+) and the fp32 atomics (RED, ATOM) instead; the
# register and spill figures are the main kernel's, the worst of the module's three.
# The SASS columns need cuobjdump (the CUDA toolkit's, or the one in Triton's wheel: set CUOBJDUMP).
set -eu
# Where a driver is installed, NVRTC may answer a repeated compile from the CUDA compute cache without
# running ptxas, and the report this table reads would be missing.
export CUDA_CACHE_DISABLE=1
from=
if [ "${1:-}" = --from ]; then
  from=${2:?--from needs a compare.json}
  set -- "$(python3 -c 'import json,sys; r=[x for x in json.load(open(sys.argv[1]))["results"] if x["implementation"]=="flashgen" and x.get("variant")]; print(r[0]["variant"].split("arch=")[1].split(",")[0] if r else "sm_90")' "$from")" "" \
         "$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"]; print("bwd" if r and r[0].get("pass")=="bwd" else "fwd")' "$from")"
fi
arch=${1:-sm_90}
dtypes=${2:-bf16 fp16}
kind=${3:-fwd}
objdump=${CUOBJDUMP:-$(command -v cuobjdump || true)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# count PATTERN: how many SASS lines of the current cubin match the extended regex (- without cuobjdump)
count() {
  if [ -n "$objdump" ]; then grep -cE "$1" "$tmp/k.sass" || true; else echo -; fi
}

if [ "$kind" = bwd ]; then
  echo "| variant | registers | spill bytes | shared memory | HMMA | LDSM | UBLKRED | RED/ATOM | LDL/STL |"
  echo "|---|---|---|---|---|---|---|---|---|"
elif [ "$arch" = sm_90a ]; then
  echo "| variant | registers (launch cap) | spill bytes | shared memory | HGMMA | QGMMA | HMMA | UTMALDG | UTMASTG | USETMAXREG | LDL/STL |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
else
  echo "| variant | registers | spill bytes | shared memory | HMMA | QMMA | F2FP unpack | LDSM | LDL/STL |"
  echo "|---|---|---|---|---|---|---|---|---|"
fi
# The specs to report: from the compare.json (with the configs that ran each), or the policy's defaults.
if [ -n "$from" ]; then
  python3 - "$from" > "$tmp/specs" <<'PY'
import json, sys
runs = {}
for x in json.load(open(sys.argv[1]))["results"]:
    if x["implementation"] == "flashgen" and x.get("variant"):
        runs.setdefault(x["variant"], []).append("%s d%d %s %d" % (x["dtype"], x["head_dim"], "causal" if x["causal"] else "none", x["seqlen"]))
for spec in sorted(runs):
    print(spec + "\t" + ", ".join(runs[spec]))
PY
else
  if [ "$kind" = bwd ]; then dims="64 96 128"; modes="0 1"; else dims="64 128 256"; modes="0"; fi
  for dtype in $dtypes; do
    for d in $dims; do
      for causal in 0 1; do
        for det in $modes; do
          spec="kind=$kind,arch=$arch,dtype=$dtype,head_dim=$d,causal=$causal"
          [ "$kind" = bwd ] && spec="$spec,deterministic=$det"
          printf '%s\t\n' "$spec"
        done
      done
    done
  done > "$tmp/specs"
fi
while IFS="$(printf '\t')" read -r spec used; do
  line=$(build/flashgen compile "$spec" -o "$tmp/k.cubin" 2>/dev/null | tail -n 1)
  name=$(echo "$line" | cut -d' ' -f1)
  regs=$(echo "$line" | sed -n 's/.* \([0-9]*\) registers.*/\1/p')
  spill=$(echo "$line" | sed -n 's/.* \([0-9]*\) bytes spill stores.*/\1/p')
  smem=$(echo "$line" | sed -n 's/.* \([0-9]*\) bytes shared memory.*/\1/p')
  [ -n "$objdump" ] && "$objdump" -sass "$tmp/k.cubin" > "$tmp/k.sass"
  ldl=$(count '\b(LDL|STL)\b')
  [ -n "$used" ] && name="$name ($used)"
  if [ "$kind" = bwd ]; then
    echo "| $name | $regs | $spill | $smem | $(count HMMA) | $(count LDSM) | $(count UBLKRED) |" \
         "$(count '\b(RED|ATOM)\.') | $ldl |"
  elif [ "$arch" = sm_90a ]; then
    echo "| $name | $regs | $spill | $smem | $(count HGMMA) | $(count QGMMA) | $(count HMMA) |" \
         "$(count UTMALDG) | $(count UTMASTG) | $(count USETMAXREG) | $ldl |"
  else
    echo "| $name | $regs | $spill | $smem | $(count HMMA) | $(count QMMA) | $(count 'F2FP.*UNPACK') |" \
         "$(count LDSM) | $ldl |"
  fi
done < "$tmp/specs"
