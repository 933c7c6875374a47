# Session 20, call 5 (carry .deps): the final tree (317c1b2's kernels). compute-sanitizer on the mma.sync
# backward at d 256 with its loads moved between the passes (racecheck, synccheck, memcheck; `flashgen run
# --bwd` checks every gradient too); the 16-bit forward table again; the d 256 backward table, both dtypes.
. bench/device_prelude.sh
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; el built
db F; export FLASHGEN_CACHE_DIR=/tmp/fgF
for tool in racecheck synccheck memcheck; do for c in "" --causal; do
  timeout 60 compute-sanitizer --tool $tool build/flashgen run --bwd --head-dim 256 --batch 1 --heads 2 --seqlen-q 200 --seqlen-k 333 --iters 1 $c > $L/san_${tool}${c}.log 2>&1; el "$tool $c rc=$?"; grep -a 'SUMMARY\|PASS\|FAIL' $L/san_${tool}${c}.log | tail -2; pk
done; done
timeout 100 python3 bench/compare.py --out $L/f_F > $L/f_F.log 2>&1; el "fwd F rc=$?"; tail -1 $L/f_F.log; pk
timeout 100 python3 bench/compare.py --bwd --head-dims 256 --out $L/b_F > $L/b_F.log 2>&1; el "bwd d256 rc=$?"; tail -1 $L/b_F.log; pk
