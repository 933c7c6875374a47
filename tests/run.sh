#!/bin/sh
# tests/run.sh: runs every test program (build/tests/test_*) from the repository root and prints a
# summary. GPU suites skip with a reason where no GPU exists; the summary lists what was skipped.
# Exit status: 0 when every program passed. Extra arguments go to each Criterion program.
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
  grep -E '\[SKIP\]' "$log" | sed 's/^/   skipped: /' | head -n 5
  printf -- '-- %s: %s (%ss)\n' "$name" "$status" "$(( $(date +%s) - start ))"
done
rm -f "$log"
if [ "$total" = 0 ]; then echo "no test programs in build/tests: run ninja first"; exit 1; fi
if [ -n "$failed" ]; then echo "FAILED:$failed"; exit 1; fi
echo "all $total test programs passed"
