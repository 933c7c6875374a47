#!/bin/sh
# tests/readme_example.sh: compiles and runs the C example of README.md from the README's own text, so
# the two cannot drift. Run from anywhere after `ninja`; it works in the repository root.
#
# It takes the first ```c block after the "## C" heading, and the compile command from the first
# indented line after that block that starts with "cc ", and runs that command as printed (with
# example.c and ./example in a temporary directory). Then:
#   - with a GPU the example must exit 0;
#   - without one it must exit 1 (not killed by a signal) with one line on stderr starting "flashgen: ".
# Then it stages an install (the command of `ninja install`, with DESTDIR a temporary directory; not
# ninja itself, which may be running this test) and runs the README's pkg-config command (the first
# indented "cc " line with pkg-config after the block) against it, judged the same way. Last, the
# public header alone must compile as C99 and as C++11, both -pedantic -Werror.
# Exit status 0 when the example behaved; 1 with the reason otherwise.
set -u
cd "$(dirname "$0")/.." || exit 1
fail() { echo "readme_example: $*" >&2; exit 1; }
for f in build/libflashgen.so build/install/libflashgen.a build/flashgen; do
  [ -f "$f" ] || fail "$f is missing: run ninja first"
done

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

# Runs $dir/example and judges it: exit 0 on a GPU, else exit 1 with the library's one-line sentence.
judge() {
  "$dir/example" >"$dir/out" 2>"$dir/err"
  rc=$?
  if [ "$rc" -eq 0 ]; then
    echo "readme_example: ran on a GPU, exit 0; it printed:"
    sed 's/^/    /' "$dir/out" | head -n 5
    return 0
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
}
judge

# Against an install staged under $dir/stage, compiled with the README's pkg-config command.
install_cmd=$(ninja -t commands -s install) || fail "ninja -t commands -s install failed"
DESTDIR="$dir/stage" sh -c "$install_cmd" >/dev/null || fail "staging the install failed: $install_cmd"
prefix=$(sed -n 's/^prefix = //p' config.ninja)
pc_cmd=$(awk '
  /^## C$/ { in_c = 1; next }
  in_c && /^```$/ { after = 1; next }
  in_c && after && /^    cc .*pkg-config/ { sub(/^    /, ""); print; exit }
' README.md)
[ -n "$pc_cmd" ] || fail "no indented \"cc ... pkg-config ...\" command after the C example in README.md"
pc_build=${pc_cmd%%" && ./example"*}
pc_build=$(printf '%s' "$pc_build" | sed "s# example\.c # $dir/example.c #; s# -o example # -o $dir/example #")
rm -f "$dir/example"
echo "readme_example: installed: $pc_build"
PKG_CONFIG_SYSROOT_DIR="$dir/stage" PKG_CONFIG_PATH="$dir/stage$prefix/lib/pkgconfig" sh -c "$pc_build" ||
  fail "the README's pkg-config command failed against the staged install"
LD_LIBRARY_PATH="$dir/stage$prefix/lib" judge

# The public header stands alone in C99 and C++11.
printf '#include <flashgen.h>\nint main(void) { fg_context_options o; fg_context_options_init(&o); return o.device; }\n' \
  >"$dir/header.c"
cp "$dir/header.c" "$dir/header.cc"
cc -std=c99 -pedantic -Wall -Wextra -Werror -Iinclude -c "$dir/header.c" -o "$dir/header_c.o" ||
  fail "include/flashgen.h does not compile alone as C99 (cc -std=c99 -pedantic -Werror)"
${CXX:-c++} -std=c++11 -pedantic -Wall -Wextra -Werror -Iinclude -c "$dir/header.cc" -o "$dir/header_cc.o" ||
  fail "include/flashgen.h does not compile alone as C++11 (c++ -std=c++11 -pedantic -Werror)"
echo "readme_example: include/flashgen.h compiles alone as C99 and C++11"
exit 0
