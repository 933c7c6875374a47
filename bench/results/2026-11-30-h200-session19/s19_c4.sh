# Session 19, call 4 (carry .deps): the sm_90a bf16 forward tuned at the buckets session 8's database lacks
# (512, 1k and 4k; configs/tune_fwd_sm90a.lua skips the 2k and 8k candidates the database holds), on the
# tree's kernels. T = session 12's copy of that database (what every table used), U = T plus the new buckets.
# Then the forward at the lengths those buckets serve, both dtypes, T U, then U T.
. bench/device_prelude.sh
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep T; el built
db U
FLASHGEN_CACHE_DIR=/tmp/fgU timeout 230 /tmp/bT/flashgen tune configs/tune_fwd_sm90a.lua --budget 210 -j 16 > $L/tune.log 2>&1; el "tune rc=$?"; tail -3 $L/tune.log; cp /tmp/fgU/$DBN $L/tuned_s19.lua; pk
for x in 1T 1U 2U 2T; do
  FLASHGEN_LIB=/tmp/bT/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fg${x#?} timeout 70 python3 bench/compare.py --seqlens 512,1024,4096 --out $L/f_$x > $L/f_$x.log 2>&1; el "fwd $x rc=$?"; pk
done
python3 bench/ab.py $L/f_1T $L/f_1U $L/f_2T $L/f_2U | tail -8
