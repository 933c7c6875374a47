#!/bin/sh
# bench/tile_sweep.sh: times tile choices of the forward kernel on the protocol's shapes (the figures in
# results/*tile-sweep* and the "tile experiments" sections). Generate the sources where flashgen is built,
# then run on the GPU host (nvcc needed there):
#   sh bench/tile_sweep.sh gen SPEC...      writes bench/sweep/v1.cuh ... and bench/sweep/list
#   sh bench/tile_sweep.sh run              builds each with nvcc and prints TFLOP/s at 2k, 4k and 16k
# SPECs are full specs (tiles included) or partial ones (tiles from the policy). The validator applies:
# to try a tile it refuses, relax generator/validate.c in a scratch tree first.
set -eu
dir=bench/sweep
case "${1:-}" in
gen)
  shift; mkdir -p $dir; : > $dir/list; i=0
  for s in "$@"; do
    i=$((i + 1))
    build/flashgen gen "$s" > $dir/v$i.cuh
    name=$(sed -n 's|^// variant: ||p' $dir/v$i.cuh)
    d=$(echo "$name" | sed 's/.*head_dim=\([0-9]*\).*/\1/')
    echo "v$i $d $name" >> $dir/list
  done ;;
run)
  while read v d name; do nvcc -arch=sm_90a -O2 -DKFILE="\"$PWD/$dir/$v.cuh\"" -o $dir/$v bench/tile_harness.cu -lcuda & done < $dir/list
  wait
  while read v d name; do
    h=$((2048 / d))
    echo "$name: 2k $($dir/$v 8 2048 2048 $h $h nocheck | sed 's/.*ms //')  4k $($dir/$v 4 4096 4096 $h $h nocheck | sed 's/.*ms //')  16k $($dir/$v 1 16384 16384 $h $h nocheck | sed 's/.*ms //')"
  done < $dir/list ;;
*) sed -n '2,9p' "$0"; exit 2 ;;
esac
