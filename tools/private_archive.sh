#!/bin/sh
# tools/private_archive.sh: writes the libflashgen.a that `ninja install` installs. It is
# build/libflashgen.a with every defined global symbol that is not the public API (the FG_API
# declarations of include/flashgen.h) renamed NAME -> fgi_NAME (an internal fg_NAME -> fgi_NAME), so the library's internals (sha256,
# cache_get, spec_parse, fg_fail, ...) cannot clash with a host application's own symbols. The build
# tree's archive keeps the source names: the CLI, fgbench and the tests call internal functions.
#   sh tools/private_archive.sh IN.a HEADER OUT.a
# Exit 1, listing them, if a defined global of OUT.a is neither public nor fgi_.
set -eu
in=$1 header=$2 out=$3
public=$out.public; map=$out.syms
sed -n 's/^FG_API [^(]*[ *]\(fg_[A-Za-z0-9_]*\)(.*/\1/p' "$header" | sort -u >"$public"
[ -s "$public" ] || { echo "private_archive: no FG_API declarations in $header" >&2; exit 1; }
nm -g --defined-only "$in" | awk 'NF == 3 { print $3 }' | sort -u |
  grep -vxF -f "$public" | awk '{ n = $1; sub(/^fg_/, "", n); print $1, "fgi_" n }' >"$map"
clash=$(awk '{ print $2 }' "$map" | sort | uniq -d)
[ -z "$clash" ] || { echo "private_archive: two internal symbols would both become:" $clash >&2; exit 1; }
rm -f "$out"
objcopy --redefine-syms="$map" "$in" "$out"
bad=$(nm -g --defined-only "$out" | awk 'NF == 3 { print $3 }' | sort -u | grep -vxF -f "$public" | grep -v '^fgi_' || true)
rm -f "$public" "$map"
if [ -n "$bad" ]; then
  echo "private_archive: $out defines globals outside fg_ (public) and fgi_:" $bad >&2
  rm -f "$out"; exit 1
fi
