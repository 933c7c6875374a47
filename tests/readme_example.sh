#!/bin/sh
# tests/readme_example.sh: compiles and runs the C example of README.md from the README's own text, so
# the two cannot drift. Run from anywhere after `ninja`; it works in the repository root.
#
# It takes the first ```c block after the "## C" heading, and the compile command from the first
# indented line after that block that starts with "cc ", and runs that command as printed (with
# example.c and ./example in a temporary directory). Then:
#   - with a GPU the example must exit 0;
#   - without one it must exit 1 (not killed by a signal) with one line on stderr starting "flashgen: ".
# Exit status 0 when the example behaved; 1 with the reason otherwise.
set -u
cd "$(dirname "$0")/.." || exit 1
fail() { echo "readme_example: $*" >&2; exit 1; }
[ -f build/libflashgen.so ] || fail "build/libflashgen.so is missing: run ninja first"

dir=$(mktemp -d "${TMPDIR:-/tmp}/fg-readme.XXXXXX") || fail "mktemp failed"
trap 'rm -rf "$dir"' EXIT INT TERM

# The example: the first ```c fence after "## C", up to the closing fence.
awk '
  /^## C$/ { in_c = 1; next }
  /^## / && in_c && !seen { in_c = 0 }
  in_c && !seen && /^```c$/ { grab = 1; next }
  grab && /^```$/ { grab = 0; seen = 1; next }
  grab { print }
' README.md >"$dir/example.c"
[ -s "$dir/example.c" ] || fail "no \`\`\`c block after the \"## C\" heading of README.md"

# The compile command the README prints: the first 4-space-indented "cc " line after that block.
cmd=$(awk '
  /^## C$/ { in_c = 1; next }
  in_c && /^```$/ { after = 1; next }
  in_c && after && /^    cc / { sub(/^    /, ""); print; exit }
' README.md)
[ -n "$cmd" ] || fail "no indented \"cc ...\" command after the C example in README.md"
case $cmd in
  *"&& ./example"*) build_cmd=${cmd%%" && ./example"*} ;;
  *) fail "the README's command does not end in \"&& ./example\": $cmd" ;;
esac
# As printed, run from the repository root; only example.c and example live in the temporary directory.
build_cmd=$(printf '%s' "$build_cmd" | sed "s# example\.c # $dir/example.c #; s# -o example # -o $dir/example #")
echo "readme_example: $build_cmd"
sh -c "$build_cmd" || fail "the README's compile command failed"

"$dir/example" >"$dir/out" 2>"$dir/err"
rc=$?
if [ "$rc" -eq 0 ]; then
  echo "readme_example: ran on a GPU, exit 0; it printed:"
  sed 's/^/    /' "$dir/out" | head -n 5
  exit 0
fi
[ "$rc" -gt 128 ] && fail "the example was killed by signal $((rc - 128))"
[ "$rc" -eq 1 ] || fail "the example exited $rc; expected 0 (GPU) or 1 (no GPU)"
lines=$(wc -l <"$dir/err")
first=$(head -n 1 "$dir/err")
case $first in
  "flashgen: "?*) ;;
  *) fail "exit 1 without the library's sentence on stderr (got: $first)" ;;
esac
[ "$lines" -eq 1 ] || fail "expected one line on stderr, got $lines"
echo "readme_example: no GPU here, exit 1 with: $first"
exit 0
