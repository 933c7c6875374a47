# bench/device_prelude.sh: the common start of a script run on the lent GPU machine (`run` with carry
# `.deps`), sourced from the repository root: `. bench/device_prelude.sh`. That host has no Lua or Criterion;
# .deps holds them, with an offline-deps.sh that relocates them (prepared on a machine that has them).
# Defines:
#   L        the folder of this call's outputs (/tmp/l, emptied), packed into $OUT/l.tgz by pk
#   el MSG   prints MSG with the seconds since the start
#   pk       packs $L into $OUT/l.tgz (call it after each step: a call that runs past its limit keeps it)
#   db X     a cache folder /tmp/fgX holding the H200 tuning database configs/tuned/NVIDIA-H200-sm90-132sm.lua.gz
#            (the one bench/BASELINE.md's H200 tables use)
#   keep X   copies build/'s flashgen, libflashgen.so and the GPU test programs to /tmp/bX, and db X
#   T        the ninja targets keep needs
# Compare two builds by FLASHGEN_LIB=/tmp/bX/libflashgen.so FLASHGEN_CACHE_DIR=/tmp/fgX python3 bench/compare.py
# ..., alternating them, and python3 bench/ab.py A1 B1 A2 B2.
set -u
sh .deps/offline-deps.sh --relocate .deps >/dev/null
export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
L=/tmp/l; rm -rf $L; mkdir -p $L; DBN=tune-NVIDIA-H200-sm90-132sm.lua
pk() { tar czf $OUT/l.tgz -C /tmp l; }
db() { rm -rf /tmp/fg$1; mkdir -p /tmp/fg$1; zcat configs/tuned/NVIDIA-H200-sm90-132sm.lua.gz > /tmp/fg$1/$DBN; }
keep() { mkdir -p /tmp/b$1; cp build/flashgen build/libflashgen.so build/tests/test_gpu_* /tmp/b$1/; db $1; }
T="build/libflashgen.so build/flashgen build/tests/test_gpu_forward build/tests/test_gpu_fp8 build/tests/test_gpu_backward build/tests/test_gpu_runtime"
