#!/bin/sh
# bench/resources.sh: registers, spills and shared memory of the variants the benchmark protocol runs,
# and what the SASS of each holds (its tensor-core instructions, no local-memory LDL/STL), as a Markdown
# table.
#   sh bench/resources.sh [ARCH] [DTYPES] [KIND]  (default sm_90, "bf16 fp16", fwd; needs build/flashgen;
#                                                   no GPU)
#   sh bench/resources.sh --from DIR/compare.json   the variants flashgen ran in that compare.py run (the
#                                                   tuned winners, not the tile policy's defaults), one row
#                                                   each with the configs that ran it, a table per family;
#                                                   fails when the file records no variant (backward
#                                                   runs before fg_explain_bwd existed do not)
# ARCH sm_90 is the mma.sync family on Hopper, whose HMMA and LDSM the SASS columns count; sm_90a is the
# wgmma family, whose table counts HGMMA (16-bit) and QGMMA (FP8), the TMA loads (UTMALDG) and stores
# (UTMASTG) and the register reallocations (USETMAXREG) instead. The register count ptxas reports for
# sm_90a is the launch cap (65536 / threads), not the consumers' 240 or 160 after setmaxnreg.
# For FP8 on the mma.sync family (DTYPES="e4m3 e5m2") the QMMA column counts native FP8 MMAs and
# F2FP-unpack the fp8 -> f16 conversions a target without FP8 mma.sync (sm_90) runs before each HMMA.
# KIND bwd: the backward (mma.sync family, head dims 64, 96, 128, both masks, both modes), counting HMMA,
# LDSM, the bulk reduce-adds of dQ (UBLKRED, sm_90+) and the fp32 atomics (RED, ATOM) instead; the
# register and spill figures are the main kernel's, the worst of the module's three. With ARCH sm_90a
# the backward's table counts HGMMA and UBLKRED (head_dim 64 and 128, deterministic 0: the others are
# refused, which stderr says).
# The SASS columns need cuobjdump (the CUDA toolkit's, or the one in Triton's wheel: set CUOBJDUMP).
set -eu
# Where a driver is installed, NVRTC may answer a repeated compile from the CUDA compute cache without
# running ptxas, and the report this table reads would be missing.
export CUDA_CACHE_DISABLE=1
from=
[ "${1:-}" = --from ] && from=${2:?--from needs a compare.json}
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

# The SASS columns of a family's table, "title<TAB>regex" a line: the sm_90a backward, the mma.sync
# backward, the sm_90a forward, the mma.sync forward (every table ends with LDL/STL, local memory).
sass_columns() {
  case "$1" in
  bwd,sm_90a) printf 'HGMMA\tHGMMA\nUBLKRED\tUBLKRED\n' ;;
  bwd,*) printf 'HMMA\tHMMA\nLDSM\tLDSM\nUBLKRED\tUBLKRED\nRED/ATOM\t\\b(RED|ATOM)\\.\n' ;;
  fwd,sm_90a) printf 'HGMMA\tHGMMA\nQGMMA\tQGMMA\nHMMA\tHMMA\nUTMALDG\tUTMALDG\nUTMASTG\tUTMASTG\nUSETMAXREG\tUSETMAXREG\n' ;;
  *) printf 'HMMA\tHMMA\nQMMA\tQMMA\nF2FP unpack\tF2FP.*UNPACK\nLDSM\tLDSM\n' ;;
  esac
  printf 'LDL/STL\t\\b(LDL|STL)\\b\n'
}
header() {
  regs=registers
  [ "$1" = fwd,sm_90a ] && regs="registers (launch cap)"
  titles=$(sass_columns "$1" | cut -f1 | tr '\n' '|' | sed 's/|/ | /g')
  echo "| variant | $regs | spill bytes | shared memory | ${titles% }"
  echo "|---|---|---|---|$(sass_columns "$1" | sed 's/.*/---|/' | tr -d '\n')"
}

# The specs to report, one a line: "kind,arch<TAB>spec<TAB>configs that ran it" (sorted, so each family's
# rows come together under one header): from the compare.json, or the policy's defaults.
if [ -n "$from" ]; then
  python3 - "$from" > "$tmp/specs" <<'PY'
import json, re, sys
runs = {}
for x in json.load(open(sys.argv[1]))["results"]:
    if x["implementation"] == "flashgen" and x.get("variant"):
        runs.setdefault(x["variant"], []).append("%s d%d %s %d" % (x["dtype"], x["head_dim"], "causal" if x["causal"] else "none", x["seqlen"]))
if not runs:
    sys.exit("bench/resources.sh: %s records no flashgen variant (a compare.py run before variants were "
             "recorded, or one whose flashgen calls all failed)" % sys.argv[1])
def family(spec):
    f = dict(kv.split("=", 1) for kv in spec.split(","))
    return "%s,%s" % (f.get("kind", "fwd"), f.get("arch", "sm_90"))
for spec in sorted(runs, key=lambda v: (family(v), v)):
    print(family(spec) + "\t" + spec + "\t" + ", ".join(runs[spec]))
PY
else
  if [ "$kind" = bwd ]; then dims="64 96 128"; modes="0 1"; else dims="64 128 256"; modes="0"; fi
  for dtype in $dtypes; do
    for d in $dims; do
      for causal in 0 1; do
        for det in $modes; do
          spec="kind=$kind,arch=$arch,dtype=$dtype,head_dim=$d,causal=$causal"
          [ "$kind" = bwd ] && spec="$spec,deterministic=$det"
          printf '%s,%s\t%s\t\n' "$kind" "$arch" "$spec"
        done
      done
    done
  done > "$tmp/specs"
fi
shown=
while IFS="$(printf '\t')" read -r fam spec used; do
  if ! build/flashgen compile "$spec" -o "$tmp/k.cubin" > "$tmp/out" 2>&1; then
    echo "(not compiled: $spec: $(tail -n 1 "$tmp/out"))" >&2 # a spec validation refuses, say
    continue
  fi
  [ "$fam" = "$shown" ] || { [ -z "$shown" ] || echo; header "$fam"; shown=$fam; }
  line=$(tail -n 1 "$tmp/out")
  name=$(echo "$line" | cut -d' ' -f1)
  regs=$(echo "$line" | sed -n 's/.* \([0-9]*\) registers.*/\1/p')
  spill=$(echo "$line" | sed -n 's/.* \([0-9]*\) bytes spill stores.*/\1/p')
  smem=$(echo "$line" | sed -n 's/.* \([0-9]*\) bytes shared memory.*/\1/p')
  [ -n "$objdump" ] && "$objdump" -sass "$tmp/k.cubin" > "$tmp/k.sass"
  [ -n "$used" ] && name="$name ($used)"
  counts=$(sass_columns "$fam" | cut -f2 | while IFS= read -r re; do printf '%s | ' "$(count "$re")"; done)
  echo "| $name | $regs | $spill | $smem | ${counts% }"
done < "$tmp/specs"
