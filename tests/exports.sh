#!/bin/sh
# tests/exports.sh: the library's symbols are its public API and nothing else. Checks, after `ninja`:
#   - build/libflashgen.so exports exactly the functions declared FG_API in include/flashgen.h
#     (an internal one exported would clash with a host's symbols; a public one missing breaks users);
#   - its SONAME is libflashgen.so.FG_VERSION_MAJOR;
#   - build/install/libflashgen.a (the archive `ninja install` installs) defines no global outside the
#     public fg_ functions and the private prefix fgi_.
# Exit 0 when all hold; 1 listing the offending symbols otherwise.
set -u
cd "$(dirname "$0")/.." || exit 1
fail=0
bad() { echo "exports: $*" >&2; fail=1; }
so=build/libflashgen.so ar=build/install/libflashgen.a
for f in $so $ar; do [ -f "$f" ] || { echo "exports: $f is missing: run ninja first" >&2; exit 1; }; done
dir=$(mktemp -d) || exit 1 # under $TMPDIR, else /tmp
trap 'rm -rf "$dir"' EXIT INT TERM

sed -n 's/^FG_API [^(]*[ *]\(fg_[A-Za-z0-9_]*\)(.*/\1/p' include/flashgen.h | sort -u >"$dir/public"
[ -s "$dir/public" ] || bad "no FG_API declarations found in include/flashgen.h"
nm -D --defined-only "$so" | awk 'NF == 3 { print $3 }' | sed 's/@.*//' | sort -u >"$dir/exported"
extra=$(comm -13 "$dir/public" "$dir/exported")
missing=$(comm -23 "$dir/public" "$dir/exported")
[ -z "$extra" ] || bad "$so exports symbols not declared FG_API in include/flashgen.h:" $extra
[ -z "$missing" ] || bad "$so does not export these FG_API functions:" $missing

major=$(sed -n 's/^#define FG_VERSION_MAJOR //p' include/flashgen.h)
soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libflashgen.so.$major" ] || bad "$so has SONAME '$soname', expected libflashgen.so.$major"

nm -g --defined-only "$ar" | awk 'NF == 3 { print $3 }' | sort -u >"$dir/archive"
stray=$(grep -vxF -f "$dir/public" "$dir/archive" | grep -v '^fgi_')
[ -z "$stray" ] || bad "$ar defines globals neither public nor fgi_:" $stray

[ $fail = 0 ] || exit 1
echo "exports: $so exports the $(wc -l <"$dir/exported") FG_API functions, SONAME $soname;" \
  "$ar: $(grep -c '^fgi_' "$dir/archive") internal globals, all fgi_"
