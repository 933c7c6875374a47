#!/bin/sh
# tests/fuzz/run.sh: builds and runs flashgen's libFuzzer targets (docs/internals.md, "Tests"):
#   fuzz_spec    spec_parse -> spec_format round trips                  (generator/spec.c)
#   fuzz_config  config_load_string on any text, through the Lua sandbox (generator/config*.c, core/lua_sandbox*.c)
#   fuzz_bundle  bundle_parse on any bytes, serialize round trips       (runtime/bundle.c, sha256.c)
#   fuzz_serving a call's rules (serving and dense), the device lengths' checks (runtime/serving_args.c, call_args.c)
#   fuzz_tunedb  tunedb_load on any text, lookups, save and reload       (runtime/tunedb*.c, the Lua sandbox)
#   fuzz_mod     mod_trace on any text: the scan, the fg library, the tree, and the tree's consumers (check,
#                evaluation, emission, derivative, block classes: generator/mod*.c, the Lua sandbox)
# usage: sh tests/fuzz/run.sh [SECONDS] [TARGET...]    (default: 60 seconds each, every target)
#
# Each target is built with clang -fsanitize=fuzzer,address,undefined (UBSan made fatal, so it counts
# as a crash) into build/fuzz/, then run for SECONDS with a corpus kept in tests/fuzz/corpus-TARGET/
# (ignored by git; delete it to start over). Seeds: configs/*.lua and a few small configs written here
# for fuzz_config; for fuzz_bundle, small bundles (0, 1 and 3 entries, fake payloads) from the seed
# generator, fuzz_bundle.c built with -DFG_FUZZ_SEED_MAIN. Not a bundle from `flashgen bundle`: one real
# cubin is ~200 KB, every execution would hash all of it and run ~20x slower, and the reader treats
# payload bytes as opaque, so the small seeds reach the same code.
# Exit status: 0 when no target found anything; 1 when one crashed, leaked, hit UB, timed out or broke
# an invariant (the input is saved as build/fuzz/artifacts/TARGET-crash-..., and replayed once here so
# the reason is printed); 2 on a build or usage problem; 77 when the toolchain is missing and cannot be
# installed (not root), with the reason as the last line. tests/run.sh runs every target for
# $FLASHGEN_FUZZ_SECONDS (default 20) seconds.
#
# Needs: clang 14 with its compiler-rt (Debian: clang-14 and libclang-rt-14-dev, which holds
# libclang_rt.fuzzer), liblua5.4-dev and pkg-config. When one is missing and this runs as root (or
# sudo works), it installs them with apt-get, as `sh configure --install-deps` does; otherwise it says
# what to install. Set FUZZ_CC to use another clang.
#
# Sanitizer settings: none are needed in the environment. libFuzzer turns on LeakSanitizer after every
# input by itself (-detect_leaks=1 is its default). Options passed: -timeout=25 (the Lua sandbox stops
# any config within 2 s of wall time; more than that is a hang), -rss_limit_mb=4096, and for
# fuzz_config and fuzz_mod -close_fd_mask=2: a config may print() as much as its instruction budget allows, and
# libFuzzer then keeps its own and the sanitizers' reports on a private copy of stderr. The system's
# liblua5.4 is not instrumented: ASan sees Lua's memory only through the sandbox's allocator (leaks and
# frees are checked; overflows inside liblua are not).
set -u
cd "$(dirname "$0")/../.." || exit 2

seconds=60
case "${1:-}" in
  -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
  ''|*[!0-9]*) ;;
  *) seconds=$1; shift ;;
esac
targets=${*:-"fuzz_spec fuzz_config fuzz_bundle fuzz_serving fuzz_tunedb fuzz_mod"}
for t in $targets; do
  case "$t" in fuzz_spec|fuzz_config|fuzz_bundle|fuzz_serving|fuzz_tunedb|fuzz_mod) ;; *) echo "run.sh: unknown target '$t'" >&2; exit 2 ;; esac
done

out=build/fuzz
mkdir -p "$out/artifacts" || exit 2

# ---- the toolchain: install what is missing when allowed ----
cc=${FUZZ_CC:-}
if [ -z "$cc" ]; then
  if command -v clang-14 >/dev/null 2>&1; then cc=clang-14; else cc=clang; fi
fi
# True when $cc can build and link a libFuzzer target with ASan and UBSan.
fuzz_toolchain_ok() {
  command -v "$cc" >/dev/null 2>&1 || return 1
  printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' \
    >"$out/probe.c"
  "$cc" -fsanitize=fuzzer,address,undefined "$out/probe.c" -o "$out/probe" >/dev/null 2>&1
}
need=""
fuzz_toolchain_ok || need="clang-14 libclang-rt-14-dev"
pkg-config --exists lua5.4 2>/dev/null || need="$need liblua5.4-dev pkg-config"
if [ -n "$need" ]; then
  if [ "$(id -u)" = 0 ]; then sudo=""; elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo"
  else
    echo "run.sh: skipped: missing $need (install them, or run as root to have them installed)" >&2
    exit 77
  fi
  echo "run.sh: installing $need" >&2
  $sudo apt-get update -qq >/dev/null &&
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $need >/dev/null || exit 2
  [ -n "${FUZZ_CC:-}" ] || { command -v clang-14 >/dev/null 2>&1 && cc=clang-14; }
  fuzz_toolchain_ok || { echo "run.sh: $cc still cannot build a libFuzzer target" >&2; exit 2; }
fi

# ---- build ----
san="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
cflags="-std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra -Wno-unused-parameter -I. -Iinclude"
lua_cflags=$(pkg-config --cflags lua5.4)
lua_libs=$(pkg-config --libs lua5.4)
# validation looks a variant's custom mod up in the registry (mod_registry.c), which checks and hashes trees (mod.c)
spec_src="generator/spec.c generator/validate.c generator/tile_policy.c generator/mod_registry.c generator/mod.c
          core/sha256.c core/error.c core/dtype.c core/alloc.c"
mod_trace_src="generator/mod_trace.c generator/mod_build.c generator/mod_scan.c"
# The bundle reader checks a bundle's template digest (emit_templates_id), so it links the emitter and
# the embedded templates, which ninja writes (build/templates.c).
[ -f build/templates.c ] || ninja build/templates.c >/dev/null || { echo "run.sh: ninja build/templates.c failed" >&2; exit 2; }
# the serving target reads CUDA's types (cuda.h) for the driver table it links; the driver is never loaded
cuda_cflags="-I${CUDA_HOME:-/usr/local/cuda}/include"
bundle_src="runtime/bundle.c runtime/cache.c runtime/cache_dir.c core/files.c core/sha256.c core/error.c core/knobs.c core/dtype.c core/alloc.c
            generator/emit.c generator/spec.c generator/validate.c generator/tile_policy.c build/templates.c
            generator/mod.c generator/mod_emit.c generator/mod_grad.c generator/mod_registry.c"
build() { # build NAME SOURCES... [LIBS]: one clang command per binary, every file instrumented
  name=$1; shift
  echo "== build $name"
  # shellcheck disable=SC2086
  "$cc" $cflags $san "$@" -o "$out/$name" || { echo "run.sh: building $name failed" >&2; exit 2; }
}
for t in $targets; do
  case "$t" in
    fuzz_spec) build fuzz_spec -fsanitize=fuzzer tests/fuzz/fuzz_spec.c $spec_src ;;
    fuzz_config) build fuzz_config -fsanitize=fuzzer $lua_cflags tests/fuzz/fuzz_config.c generator/config.c \
                   generator/config_finish.c $mod_trace_src core/lua_sandbox.c core/lua_sandbox_host.c core/files.c \
                   $spec_src $lua_libs -lm ;;
    fuzz_serving) build fuzz_serving -fsanitize=fuzzer $cuda_cflags tests/fuzz/fuzz_serving.c runtime/serving_args.c \
                    runtime/call_args.c runtime/mask_map.c runtime/launch.c runtime/cuda_api.c generator/mod.c \
                    core/sha256.c core/error.c core/dtype.c core/alloc.c -ldl ;;
    fuzz_tunedb) build fuzz_tunedb -fsanitize=fuzzer $lua_cflags $cuda_cflags tests/fuzz/fuzz_tunedb.c runtime/tunedb.c \
                   runtime/tunedb_file.c runtime/tunedb_show.c core/lua_sandbox.c core/lua_sandbox_host.c core/files.c \
                   core/csv.c $spec_src $lua_libs -lm ;;
    fuzz_mod) build fuzz_mod -fsanitize=fuzzer $lua_cflags tests/fuzz/fuzz_mod.c $mod_trace_src \
                generator/mod.c generator/mod_emit.c generator/mod_grad.c generator/mod_interval.c core/sha256.c \
                core/lua_sandbox.c core/lua_sandbox_host.c core/files.c core/error.c core/alloc.c $lua_libs -lm ;;
    fuzz_bundle) build fuzz_bundle -fsanitize=fuzzer tests/fuzz/fuzz_bundle.c $bundle_src
                 build fuzz_bundle_seeds -DFG_FUZZ_SEED_MAIN tests/fuzz/fuzz_bundle.c $bundle_src ;;
  esac
done

# ---- seeds and dictionaries ----
seed_spec() {
  d=tests/fuzz/corpus-fuzz_spec; mkdir -p "$d"
  printf 'arch=sm_90,block_m=128,block_n=64,causal=0,dtype=bf16,head_dim=128,kind=fwd,stages=2,warps=8' >"$d/seed-canonical"
  printf 'arch=sm_90a,block_m=128,block_n=128,causal=1,dtype=fp16,head_dim=128,kind=fwd,stages=2,warps=12' >"$d/seed-wgmma"
  printf 'arch=sm_80 dtype=fp16 head_dim=64 causal=true kind=fwd' >"$d/seed-short"
  printf 'kind=fwd,arch=sm_120,dtype=e4m3,head_dim=256, block_n=32\twarps=4\nstages=3' >"$d/seed-mixed"
  printf '"kind=fwd"\n"arch=sm_80"\n"arch=sm_90"\n"arch=sm_90a"\n"dtype=fp16"\n"dtype=bf16"\n"dtype=e5m2"\n"head_dim="\n' >"$out/spec.dict"
  printf '"block_m="\n"block_n="\n"warps="\n"stages="\n"causal=1"\n"causal=false"\n","\n"="\n' >>"$out/spec.dict"
}
seed_config() {
  d=tests/fuzz/corpus-fuzz_config; mkdir -p "$d"
  for f in configs/*.lua; do cp "$f" "$d/seed-$(basename "$f")"; done
  cat >"$d/seed-policy.lua" <<'EOF'
local dims = {}
for d = 64, 128, 32 do dims[#dims + 1] = d end
tile_policy { arch = {"sm_80", "sm_90"}, head_dim = {65, 128}, causal = false, dtype = "bf16",
              block_m = 64, block_n = 64, warps = 4, stages = 2 }
tile_policy { arch = "sm_90a", head_dim = {65, 128}, causal = true, block_m = 192, block_n = 64, warps = 16, stages = 2 }
variants { kind = "fwd", arch = {"sm_90", "sm_90a"}, dtype = {"bf16", "fp16"}, head_dim = dims, causal = {0, 1},
           block_n = 32 }
EOF
  cat >"$d/seed-errors.lua" <<'EOF'
local ok, msg = pcall(variants, { kind = "fwd", arch = "sm_80", dtype = "fp32", head_dim = 64 })
print(ok, msg)
variants { kind = "fwd", arch = "sm_86", dtype = "fp16", head_dim = 256, warps = 8, stages = 4 }
EOF
  printf 'variants { kind = "fwd", arch = "sm_80", dtype = "fp16", head_dim = 64 }\n' >"$d/seed-tiny.lua"
  : >"$out/config.dict"
  for w in variants tile_policy kind arch dtype head_dim causal block_m block_n warps stages true false nil \
           local function return end for while repeat until pcall error setmetatable string.rep \
           '"fwd"' '"sm_80"' '"sm_90"' '"sm_90a"' '"sm_120"' '"fp16"' '"bf16"' '"e4m3"' '{' '}' '=' ',' '..'; do
    printf '"%s"\n' "$(printf '%s' "$w" | sed 's/\\/\\\\/g; s/"/\\"/g')" >>"$out/config.dict"
  done
}
seed_bundle() {
  d=tests/fuzz/corpus-fuzz_bundle; mkdir -p "$d"
  "$out/fuzz_bundle_seeds" "$d" || { echo "run.sh: the bundle seed generator failed" >&2; exit 2; }
  printf '"FGBUNDL\\x00"\n"\\x01\\x00\\x00\\x00"\n"0.1.0\\x00"\n"arch=sm_80,"\n' >"$out/bundle.dict"
}
seed_serving() {
  d=tests/fuzz/corpus-fuzz_serving; mkdir -p "$d"
  printf '\003\001\002\010\002\002\000\002\001\002\200\001' >"$d/seed-small"
  printf '"\\x00\\x00\\x00\\x00"\n"\\xff\\xff\\xff\\x7f"\n"\\x80\\x00\\x00\\x00"\n' >"$out/serving.dict"
}

seed_tunedb() {
  d=tests/fuzz/corpus-fuzz_tunedb; mkdir -p "$d"
  cat >"$d/seed-small.lua" <<'SEED'
tuning {
    format = 1, results = 2,
    gpu = { name = "NVIDIA H200", arch = 90, sms = 132, driver = 13000, nvrtc = "13.0", flashgen = "0.4.0" },
}
result { kind = "fwd", dtype = "bf16", head_dim = 128, causal = false, gqa = 4, seqlen_q = 4096, seqlen_k = 4096, batch_heads = 256, spec = "arch=sm_90a,block_m=128,block_n=128,causal=0,dtype=bf16,head_dim=128,kind=fwd,stages=2,warps=12", status = "ok", ms = 0.5, tflops = 600, note = "max err 0.0001" }
result { kind = "serve", dtype = "bf16", head_dim = 128, causal = false, gqa = 4, seqlen_q = 1, seqlen_k = 131072, batch_heads = 32, spec = "arch=sm_90,block_m=16,block_n=64,causal=0,dtype=bf16,head_dim=128,kind=serve,splits=16,stages=2,tma=1,warps=4", status = "ok", ms = 0.2, tflops = 5, note = "" }
SEED
  : >"$out/tunedb.dict"
  for w in tuning result format results gpu name arch sms driver nvrtc flashgen kind dtype head_dim causal gqa \
           seqlen_q seqlen_k batch_heads spec status ms tflops note '"ok"' '"wrong"' '"spilled"' '"refused"' '"fwd"' \
           '"bwd"' '"serve"' '{' '}' '=' ','; do
    printf '"%s"\n' "$(printf '%s' "$w" | sed 's/\\/\\\\/g; s/"/\\"/g')" >>"$out/tunedb.dict"
  done
}

seed_mod() {
  d=tests/fuzz/corpus-fuzz_mod; mkdir -p "$d"
  cat >"$d/seed-prefix-lm.lua" <<'SEED'
aux = { prefix_len = fg.aux("i32", 1) }
mask_mod = function(b, h, q, kv)
  return fg.or_(fg.le(kv, fg.load(prefix_len, b)), fg.le(kv, q))
end
SEED
  cat >"$d/seed-alibi-window.lua" <<'SEED'
aux = { slope = fg.aux("f32", 1) }
local W = 256
score_mod = function(s, b, h, q, kv) return s - fg.load(slope, h) * fg.abs(q - kv) end
mask_mod = function(b, h, q, kv) return fg.and_(fg.le(kv, q), fg.gt(kv, q - W)) end
SEED
  cat >"$d/seed-t5.lua" <<'SEED'
aux = { t5 = fg.aux("f32", 2) }
local N, EXACT, FAR = 16, 8, 128
local function bucket(q, kv)
  local rel = kv - q
  local side = fg.where(fg.gt(rel, 0), N, 0)
  local a = fg.abs(rel)
  local lg = fg.log(a / EXACT) / math.log(FAR / EXACT) * (N - EXACT)
  local far = EXACT
  for k = 1, N - EXACT - 1 do far = far + fg.where(fg.ge(lg, k), 1, 0) end
  return side + fg.where(fg.lt(a, EXACT), a, fg.min(far, N - 1))
end
score_mod = function(s, b, h, q, kv) return s + fg.load(t5, h % 8, bucket(q, kv)) end
SEED
  cat >"$d/seed-blocks-softcap.lua" <<'SEED'
aux = { blocks = fg.aux("i32", 2), doc = fg.aux("i32", 1) }
score_mod = function(s, b, h, q, kv) return 30 * fg.tanh(s / 30.0) + fg.exp(fg.float(q // 7 % 3)) end
mask_mod = function(b, h, q, kv)
  return fg.and_(fg.eq(fg.load(blocks, q // 128, kv // 128), 1), fg.not_(fg.ne(fg.load(doc, q), fg.load(doc, kv))))
end
SEED
  printf 'score_mod = function(s, b, h, q, kv)
  if q < kv then return s end
  return fg.sqrt(fg.max(s, 0.5))
end
' \
    >"$d/seed-refused.lua"
  : >"$out/mod.dict"
  for w in fg.aux fg.load fg.eq fg.ne fg.lt fg.le fg.gt fg.ge fg.and_ fg.or_ fg.not_ fg.where fg.min fg.max \
           fg.abs fg.exp fg.log fg.tanh fg.sqrt fg.float aux score_mod mask_mod '"f32"' '"i32"' \
           'function(s, b, h, q, kv)' 'function(b, h, q, kv)' return end local for do '//' '%' '<' '==' \
           '[[' ']]' '--' 0.5 1e39 2147483648 '0/0' math.huge; do
    printf '"%s"\n' "$(printf '%s' "$w" | sed 's/\\/\\\\/g; s/"/\\"/g')" >>"$out/mod.dict"
  done
}

# ---- run ----
failed=""
for t in $targets; do
  case "$t" in
    fuzz_spec) seed_spec; dict=spec.dict; extra="" ;;
    fuzz_config) seed_config; dict=config.dict; extra="-close_fd_mask=2" ;;
    fuzz_bundle) seed_bundle; dict=bundle.dict; extra="" ;;
    fuzz_serving) seed_serving; dict=serving.dict; extra="" ;;
    fuzz_tunedb) seed_tunedb; dict=tunedb.dict; extra="-close_fd_mask=2" ;;
    fuzz_mod) seed_mod; dict=mod.dict; extra="-close_fd_mask=2" ;;
  esac
  log=$out/$t.log
  rm -f "$out/artifacts/$t-"*
  echo "== $t: ${seconds}s, corpus tests/fuzz/corpus-$t"
  # shellcheck disable=SC2086
  "$out/$t" -max_total_time="$seconds" -timeout=25 -rss_limit_mb=4096 -print_final_stats=1 \
    -dict="$out/$dict" -artifact_prefix="$out/artifacts/$t-" $extra "tests/fuzz/corpus-$t" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  cov=$(grep -E '^#[0-9]+' "$log" | tail -n 1 | sed -n 's/.*cov: \([0-9]*\).*ft: \([0-9]*\).*corp: \([0-9]*\).*/cov \1, ft \2, corpus \3/p')
  if [ "$rc" = 0 ]; then
    echo "-- $t: ok, ${execs:-?} executions ($cov)"
  else
    failed="$failed $t"
    echo "-- $t: FAILED (exit $rc) after ${execs:-?} executions; the end of $log:"
    tail -n 40 "$log" | sed 's/^/   /'
    for a in "$out/artifacts/$t-"*; do
      [ -f "$a" ] || continue
      echo "   replaying $a:"
      "$out/$t" "$a" 2>&1 | grep -v '^INFO:' | tail -n 30 | sed 's/^/     /'
    done
  fi
done
rm -f "$out/probe.c" "$out/probe"
if [ -n "$failed" ]; then echo "FUZZ FAILED:$failed"; exit 1; fi
echo "fuzzing found nothing ($seconds s per target: $targets)"
