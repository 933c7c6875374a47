#!/bin/sh
# tests/run.sh: runs every test program (build/tests/test_*, the Python tests, then the shell checks:
# exported symbols, pip install, the README's C example, the fuzzers) from the repository root: one line per program (name, ok or FAILED, seconds, tests passed and skipped; a failed program's
# whole log under it), then the skipped tests grouped by reason (GPU suites skip where no GPU exists), then a summary.
# Exit status: 0 when every program passed. Extra arguments go to each Criterion program.
# With a sanitizer build (`sh configure --asan && ninja`), run:
#   LSAN_OPTIONS=suppressions=$PWD/tests/fuzz/lsan.supp UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 sh tests/run.sh
# The suppressions are a 48-byte leak inside Criterion 2.4.1's own runner and the CUDA libraries' own
# allocations. halt_on_error makes undefined
# behaviour fail the test that hit it, also in a `flashgen` child whose stderr a test captures. Leaks in
# Criterion's forked workers are printed ("LeakSanitizer") but do not fail the test: read the log. The
# Python tests and the shell checks run with the ASan runtime preloaded and its leak checks off. A GPU
# program under the sanitizer needs more (the driver's memory in ASan's shadow gap): the header of
# tests/test_gpu_alloc_failures.c gives the command.
set -u
cd "$(dirname "$0")/.." || exit 1
failed=""
total=0; npassed=0; nskipped=0
log=${TMPDIR:-/tmp}/flashgen-tests.$$
skips=$log.skips
: >"$skips"
trap 'rm -f "$log" "$skips"' EXIT
# report NAME STATUS SECONDS PASSED SKIPPED: the program's one line; a failed program's whole log follows it.
report() {
  printf '%-28s %-6s %4ss  %s passed, %s skipped\n' "$1" "$2" "$3" "$4" "$5"
  case "$4" in *[!0-9]*|'') ;; *) npassed=$((npassed + $4)) ;; esac
  nskipped=$((nskipped + $5))
  if [ "$2" != ok ]; then failed="$failed $1"; sed 's/^/    | /' "$log"; fi
}
for t in build/tests/test_*; do
  [ -x "$t" ] || continue
  total=$((total + 1))
  start=$(date +%s)
  if "$t" --verbose=0 "$@" >"$log" 2>&1; then status=ok; else status=FAILED; fi
  # Criterion's synthesis counts the tests that ran; skipped ones print "[SKIP] suite::name: reason".
  passed=$(sed -n 's/.*Synthesis:.*Passing: \([0-9]*\).*/\1/p' "$log" | tail -n 1)
  skipped=$(grep -c '^\[SKIP\]' "$log")
  grep '^\[SKIP\]' "$log" | sed 's/^\[SKIP\] [^ ]*: //' >>"$skips"
  report "$(basename "$t")" "$status" "$(( $(date +%s) - start ))" "${passed:-?}" "$skipped"
done
# With a sanitizer build the library loaded by Python and by the shell checks' programs needs the ASan
# runtime first in the process: preload it for them (leak checks off: the interpreter's own allocations
# are not flashgen's).
if grep -q 'fsanitize=address' config.ninja 2>/dev/null; then
  asan_preload="LD_PRELOAD=$(cc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0"
else
  asan_preload=""
fi
# The Python tests: the binding's (CPU parts here; its GPU parts skip with a reason without torch and a
# GPU), bench/compare.py's GPU-free parts and bench/ab.py. Counts come from unittest's -v output.
if command -v python3 >/dev/null 2>&1; then
  for t in python/tests/test_*.py; do
    total=$((total + 1))
    start=$(date +%s)
    if env $asan_preload python3 "$t" -v >"$log" 2>&1; then status=ok; else status=FAILED; fi
    ran=$(sed -n 's/^Ran \([0-9]*\) tests\{0,1\} in .*/\1/p' "$log" | tail -n 1)
    skipped=$(grep -c "\.\.\. skipped '" "$log")
    whole=$(grep -c "^setUpClass .*\.\.\. skipped '" "$log") # a skipped class: no test of it counts in "Ran"
    bad=$(grep -cE '\.\.\. (FAIL|ERROR)$' "$log")
    grep "\.\.\. skipped '" "$log" | sed "s/.*\.\.\. skipped '\(.*\)'\$/\1/" >>"$skips"
    report "$(basename "$t")" "$status" "$(( $(date +%s) - start ))" "$(( ${ran:-0} - (skipped - whole) - bad ))" "$skipped"
  done
else
  echo "python/tests: skipped (no python3)"
fi
programs=$total
# The shell checks: the library's exported symbols against the public header, `pip install ./python`
# into a fresh virtual environment, the README's C example compiled and run from the README's own text
# (and against a staged install), and the fuzzers (tests/fuzz/run.sh, each target for
# $FLASHGEN_FUZZ_SECONDS, default 20, with their own sanitizer build). Exit 77 means skipped, with the
# reason as the last line.
for t in tests/exports.sh tests/pip_install.sh tests/readme_example.sh tests/fuzz/run.sh; do
  total=$((total + 1))
  start=$(date +%s)
  case "$t" in
    tests/fuzz/run.sh) sh "$t" "${FLASHGEN_FUZZ_SECONDS:-20}" >"$log" 2>&1 ;;
    *) env $asan_preload sh "$t" >"$log" 2>&1 ;;
  esac
  rc=$?
  if [ $rc = 77 ]; then
    tail -n 1 "$log" | sed 's/^[^:]*: skipped: //' >>"$skips"
    report "$(basename "$t")" ok "$(( $(date +%s) - start ))" 0 1
  elif [ $rc = 0 ]; then
    report "$(basename "$t")" ok "$(( $(date +%s) - start ))" 1 0
  else
    report "$(basename "$t")" FAILED "$(( $(date +%s) - start ))" 0 0
  fi
done
if [ "$programs" = 0 ]; then
  echo "no test programs in build/tests: run ninja first (they need Criterion: sh configure --install-deps)"
  exit 1
fi
if [ -s "$skips" ]; then
  echo "skipped tests, by reason:"
  sort "$skips" | uniq -c | sort -rn
fi
if [ -n "$failed" ]; then echo "FAILED:$failed"; exit 1; fi
echo "all $total test programs passed ($npassed tests passed, $nskipped skipped)"
