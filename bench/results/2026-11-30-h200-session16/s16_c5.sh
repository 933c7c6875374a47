# Session 16, call 5: compute-sanitizer on the final tree (the new post kernel in every backward family).
set -u
sh .deps/offline-deps.sh --relocate .deps >/dev/null
export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
L=/tmp/l; rm -rf $L; mkdir -p $L; pk() { tar czf $OUT/l.tgz -C /tmp l; }
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; el built; sha256sum build/libflashgen.so | cut -c1-16
export FLASHGEN_CACHE_DIR=/tmp/fgF; mkdir -p $FLASHGEN_CACHE_DIR
for f in 'bwd/shapes_sm90a' 'bwd/tiles'; do
  timeout 200 compute-sanitizer --tool memcheck build/tests/test_gpu_fwd -j1 --filter "$f" > $L/memcheck_$(echo $f | tr / _).log 2>&1; el "memcheck $f rc=$?"; grep -a 'ERROR SUMMARY' $L/memcheck_$(echo $f | tr / _).log | tail -1; grep -a "Synthesis" $L/memcheck_$(echo $f | tr / _).log; pk
done
timeout 100 compute-sanitizer --tool synccheck build/tests/test_gpu_fwd -j1 --filter 'bwd/shapes_sm90a' > $L/synccheck.log 2>&1; el "synccheck rc=$?"; grep -a 'ERROR SUMMARY' $L/synccheck.log | tail -1; pk
