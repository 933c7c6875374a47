#!/bin/sh
# tests/run.sh: runs every test program (build/tests/test_*, the Python tests, then the README's C example) from the
# repository root and prints a summary. GPU suites skip with a reason where no GPU exists; the summary lists what was skipped.
# Exit status: 0 when every program passed. Extra arguments go to each Criterion program.
# With a sanitizer build (`sh configure --asan && ninja`), run:
#   LSAN_OPTIONS=suppressions=$PWD/tests/fuzz/lsan.supp UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 sh tests/run.sh
# The suppression is a 48-byte leak inside Criterion 2.4.1's own runner. halt_on_error makes undefined
# behaviour fail the test that hit it, also in a `flashgen` child whose stderr a test captures. Leaks in
# Criterion's forked workers are printed ("LeakSanitizer") but do not fail the test: read the log. The
# Python test then fails ("ASan runtime does not come first"); run it alone with the runtime preloaded:
#   LD_PRELOAD=$(cc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 python3 python/tests/test_binding.py
set -u
cd "$(dirname "$0")/.." || exit 1
failed=""
total=0
log=${TMPDIR:-/tmp}/flashgen-tests.$$
for t in build/tests/test_*; do
  [ -x "$t" ] || continue
  total=$((total + 1))
  name=$(basename "$t")
  printf '== %s\n' "$name"
  start=$(date +%s)
  if "$t" --verbose=0 "$@" >"$log" 2>&1; then status=ok; else status=FAILED; failed="$failed $name"; fi
  cat "$log"
  skipped=$(grep -c '\[SKIP\]' "$log")
  if [ "$skipped" -gt 0 ]; then
    echo "   skipped $skipped test(s); reasons:"
    grep '\[SKIP\]' "$log" | sed 's/^\[SKIP\] [^:]*: /     /' | sort | uniq -c | head -n 5
  fi
  printf -- '-- %s: %s (%ss)\n' "$name" "$status" "$(( $(date +%s) - start ))"
done
# The Python tests: the binding's (CPU parts here; its GPU parts skip with a reason without torch and a
# GPU), bench/compare.py's GPU-free parts and bench/ab.py.
if command -v python3 >/dev/null 2>&1; then
  for t in python/tests/test_*.py; do
    total=$((total + 1))
    name=$(basename "$t")
    printf '== %s\n' "$t"
    if python3 "$t" >"$log" 2>&1; then status=ok; else status=FAILED; failed="$failed $name"; fi
    tail -n 4 "$log"
    grep -iE 'skip' "$log" | head -n 5 | sed 's/^/   /'
    printf -- '-- %s: %s\n' "$name" "$status"
  done
else
  echo "== python/tests: skipped (no python3)"
fi
programs=$total
# The library's exported symbols against the public header.
printf '== %s\n' "tests/exports.sh"
total=$((total + 1))
if sh tests/exports.sh >"$log" 2>&1; then status=ok; else status=FAILED; failed="$failed exports.sh"; fi
sed 's/^/   /' "$log"
printf -- '-- %s: %s\n' "exports.sh" "$status"
# The README's C example, compiled and run from the README's own text.
total=$((total + 1))
printf '== %s\n' "tests/readme_example.sh"
if sh tests/readme_example.sh >"$log" 2>&1; then status=ok; else status=FAILED; failed="$failed readme_example.sh"; fi
sed 's/^/   /' "$log"
printf -- '-- %s: %s\n' "readme_example.sh" "$status"
rm -f "$log"
if [ "$programs" = 0 ]; then echo "no test programs in build/tests: run ninja first"; exit 1; fi
if [ -n "$failed" ]; then echo "FAILED:$failed"; exit 1; fi
echo "all $total test programs passed"
