# Session 22, call 5 (carry .deps, .whl): the final tree. The whole GPU suite and test_cli; an emulated run
# (FLASHGEN_EMULATE_ARCH=80) then `flashgen cache ls`, which marks its PTX entry; bench/fp8.py in full
# (512-16k, accuracy, cuDNN's e4m3 timed in the same process); bench/probes/power_clock.py (sustained
# TFLOP/s with the SM clock and power draw of each workload). fp8.py and the probe with session 12's tuning
# database (what the tables use), the tests without.
. bench/device_prelude.sh
rm -rf build; sh configure >/dev/null && ninja >$L/build.log 2>&1 || { tail $L/build.log; exit 1; }; keep A; el built
mkdir -p /tmp/fgT; FLASHGEN_CACHE_DIR=/tmp/fgT timeout 220 build/tests/test_gpu_fwd -j12 > $L/tests.log 2>&1; el "tests rc=$?"; tail -1 $L/tests.log; pk
FLASHGEN_CACHE_DIR=/tmp/fgT timeout 120 build/tests/test_cli -j4 > $L/cli.log 2>&1; el "cli rc=$?"; tail -1 $L/cli.log; pk
mkdir -p /tmp/fgE; FLASHGEN_CACHE_DIR=/tmp/fgE timeout 60 build/flashgen run --head-dim 64 --seqlen-q 300 --heads 2 --iters 2 > $L/emu_native.log 2>&1
FLASHGEN_EMULATE_ARCH=80 FLASHGEN_CACHE_DIR=/tmp/fgE timeout 60 build/flashgen run --head-dim 64 --seqlen-q 300 --heads 2 --iters 2 > $L/emu_run.log 2>&1; el "emulated run rc=$?"
FLASHGEN_CACHE_DIR=/tmp/fgE build/flashgen cache ls > $L/emu_cache_ls.txt 2>&1; cut -c60-300 $L/emu_cache_ls.txt; pk
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
FLASHGEN_CACHE_DIR=/tmp/fgA timeout 200 python3 bench/fp8.py --out $L/fp8 > $L/fp8.log 2>&1; el "fp8.py rc=$?"; tail -3 $L/fp8.log; pk
FLASHGEN_CACHE_DIR=/tmp/fgA timeout 150 python3 bench/probes/power_clock.py --out $L/power_clock.json > $L/power_clock.md 2>$L/power_clock.err; el "power rc=$?"; cat $L/power_clock.md; tail -3 $L/power_clock.err; pk
