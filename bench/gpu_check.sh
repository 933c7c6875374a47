#!/bin/sh
# bench/gpu_check.sh: the GPU half of the checks, in one command for a lent GPU host.
# Builds flashgen (with Lua and Criterion staged in .deps/, with its offline-deps.sh, when the host has no
# packages), then runs the GPU test suite, `flashgen run` on a few problems
# (every element checked against the CPU reference, then timed), and compute-sanitizer on a small run.
# Logs go to $OUT (or /tmp) as gpu_tests.log, run.log, binding.log, sanitizer.log; a summary is printed
# last. On the H200 (2026-11-29) each run of the GPU suite took 45-50 s and the binding tests 27 s.
set -u
out=${OUT:-/tmp}
if [ -d .deps ]; then
  sh .deps/offline-deps.sh --relocate .deps >/dev/null
  export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig
  export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
sh configure >/dev/null && ninja >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
export FLASHGEN_CACHE_DIR=$(mktemp -d)/cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
git rev-parse --short HEAD 2>/dev/null

start=$(date +%s)
gpu_rc=0
for t in build/tests/test_gpu_*; do
  "$t" --verbose=1 -j8 ${GPU_TEST_FILTER:+--filter "$GPU_TEST_FILTER"} || gpu_rc=1
done >"$out/gpu_tests.log" 2>&1
echo "test_gpu_*: rc=$gpu_rc in $(( $(date +%s) - start )) s"
# On an H100/H200 the suite above runs the sm_90a (wgmma) family wherever it applies; run it again on the
# mma.sync family there.
if nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | grep -q '^9\.0'; then
  start=$(date +%s)
  for t in build/tests/test_gpu_*; do
    FLASHGEN_WGMMA=0 "$t" --verbose=1 -j8 ${GPU_TEST_FILTER:+--filter "$GPU_TEST_FILTER"} || gpu_rc=1
  done >"$out/gpu_tests_mma.log" 2>&1
  echo "test_gpu_* with FLASHGEN_WGMMA=0: rc=$gpu_rc in $(( $(date +%s) - start )) s"
fi

: >"$out/run.log"
run_rc=0
for args in "--dtype bf16 --batch 4 --seqlen-q 2048 --seqlen-k 2048 --heads 16 --head-dim 128" \
            "--dtype fp16 --batch 4 --seqlen-q 2048 --seqlen-k 2048 --heads 16 --head-dim 128 --causal" \
            "--dtype bf16 --batch 2 --seqlen-q 4096 --seqlen-k 4096 --heads 16 --head-dim 64 --causal" \
            "--dtype bf16 --batch 2 --seqlen-q 4096 --seqlen-k 4096 --heads 8 --head-dim 256" \
            "--dtype bf16 --batch 2 --seqlen-q 1000 --seqlen-k 3000 --heads 32 --heads-kv 4 --head-dim 96 --causal"; do
  echo "flashgen run $args" >>"$out/run.log"
  build/flashgen run $args >>"$out/run.log" 2>&1 || run_rc=1
done
echo "flashgen run: rc=$run_rc"

# The Python binding's tests (their GPU half: against SDPA, FP8, autograd gradients), where torch is.
py_rc=0
if python3 -c "import torch" 2>/dev/null; then
  python3 python/tests/test_binding.py >"$out/binding.log" 2>&1 || py_rc=1
  python3 python/tests/test_binding_gpu.py >>"$out/binding.log" 2>&1 || py_rc=1
  echo "python/tests/test_binding*.py: rc=$py_rc ($(grep -E '^Ran ' "$out/binding.log" | tr '\n' ' '))"
  python3 python/tests/test_serving.py >>"$out/binding.log" 2>&1 || py_rc=1
  echo "python/tests/test_serving.py: rc=$py_rc"
  python3 python/tests/test_mods.py >>"$out/binding.log" 2>&1 || py_rc=1
  echo "python/tests/test_mods.py: rc=$py_rc"
else
  echo "python/tests/test_binding*.py: skipped (no torch)"
fi

san_rc=0
: >"$out/sanitizer.log"
if command -v compute-sanitizer >/dev/null 2>&1; then
  for tool in memcheck racecheck initcheck synccheck; do
    # head_dim 72: the mma.sync family everywhere; 128: the sm_90a family on Hopper
    # racecheck does not model mbarrier ordering: it flags the sm_90a forward's tile ring (the dynamic
    # schedule's hand-off, correct; bench/probes/mbarrier_ring_racecheck.cu shows the same on a 60-line
    # kernel), so its pass runs that family one CTA per tile, without the ring; the other tools see the ring.
    grid=auto; [ "$tool" = racecheck ] && grid=tiles
    for d in 72 128; do
      FLASHGEN_SM90_GRID=$grid FLASHGEN_LINEINFO=1 compute-sanitizer --tool $tool --error-exitcode 9 build/flashgen run --batch 1 --seqlen-q 300 \
        --seqlen-k 257 --heads 4 --heads-kv 2 --head-dim $d --causal --iters 1 >>"$out/sanitizer.log" 2>&1 || san_rc=1
      echo "compute-sanitizer $tool (head_dim $d): $(tail -1 "$out/sanitizer.log")"
    done
  done
  # san TOOL PROGRAM FILTER [VAR=VALUE]: one GPU test program under the tool, every Criterion worker followed
  san() {
    env ${4:-FG_NONE=} compute-sanitizer --tool "$1" --target-processes all --error-exitcode 9 "$2" -j1 --filter "$3" \
      >>"$out/sanitizer.log" 2>&1 || san_rc=1
  }
  # the serving kernel and the merge (paged, packed GQA of 7, three key splits, the combine) and the merge's
  # own tests; the sm_90a forward's varlen variants (the prefill, FLASHGEN_PREFILL_SM90A=1; one CTA per tile
  # for racecheck, as above), the serving kernel's TMA loads, and the backward of packed sequences
  for tool in memcheck racecheck initcheck; do
    san $tool build/tests/test_gpu_serving 'decode/gqa_group_of_7'
    san $tool build/tests/test_gpu_merge 'merge/two_states_in_either_order'
    san $tool build/tests/test_gpu_prefill 'prefill/dense_cache_with_nan_in_unused_slots' FLASHGEN_SM90_GRID=tiles
    san $tool build/tests/test_gpu_serving 'varlen/tma_loads_of_keys'
    san $tool build/tests/test_gpu_backward_varlen 'bwd_varlen/queries_and_keys_of_other_lengths'
    echo "compute-sanitizer $tool (serving, merge, prefill, serving TMA, varlen backward): $(tail -1 "$out/sanitizer.log")"
  done
  # the backward's GPU tests (every Criterion worker process followed): the mma.sync kernels (bwd/shapes, head
  # dims to 256) and the sm_90a one (bwd/shapes_sm90a, skipped off Hopper)
  for tool in memcheck racecheck; do
    san $tool build/tests/test_gpu_backward 'bwd/shapes*'
    echo "compute-sanitizer $tool (backward tests): $(grep -c 'ERROR SUMMARY: 0 errors' "$out/sanitizer.log") clean summaries so far"
  done
else
  echo "compute-sanitizer: not found"
fi

echo "==== summary"
grep -E "Synthesis|FAIL|Assertion" "$out/gpu_tests.log" | head -20
grep -E "TFLOP|error|FAIL|flashgen run" "$out/run.log" | head -30
grep -E "^(FAIL|ERROR):" "$out/binding.log" 2>/dev/null | head -10
exit $(( gpu_rc | run_rc | py_rc | san_rc ))
