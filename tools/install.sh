#!/bin/sh
# tools/install.sh: what `ninja install` runs (after building): copies the library, header, program,
# configs and docs under $DESTDIR$PREFIX and writes flashgen.pc. The version comes from
# include/flashgen.h's FG_VERSION_* macros; the shared library is installed as
# libflashgen.so.MAJOR.MINOR.PATCH (its SONAME is libflashgen.so.MAJOR) with the two usual symlinks.
#   DESTDIR=/tmp/stage sh tools/install.sh BUILDDIR PREFIX CUDA_LIBDIR "LUA_LIBS"
# Run from the repository root (ninja does). PREFIX is baked into flashgen.pc; DESTDIR is not.
set -eu
b=$1 prefix=$2 cuda_libdir=$3 lua_libs=$(echo $4)
dest=${DESTDIR:-}
version_part() { sed -n "s/^#define FG_VERSION_$1 \([0-9][0-9]*\)$/\1/p" include/flashgen.h; }
major=$(version_part MAJOR) minor=$(version_part MINOR) patch=$(version_part PATCH)
[ -n "$major" ] && [ -n "$minor" ] && [ -n "$patch" ] || {
  echo "install: no FG_VERSION_MAJOR/MINOR/PATCH in include/flashgen.h" >&2; exit 1; }
version=$major.$minor.$patch

lib=$dest$prefix/lib inc=$dest$prefix/include bin=$dest$prefix/bin
share=$dest$prefix/share/flashgen doc=$dest$prefix/share/doc/flashgen
install -d "$lib/pkgconfig" "$inc" "$bin" "$share/configs" "$doc/docs"
install -m 0755 "$b/libflashgen.so" "$lib/libflashgen.so.$version"
ln -sf "libflashgen.so.$version" "$lib/libflashgen.so.$major"
ln -sf "libflashgen.so.$major" "$lib/libflashgen.so"
install -m 0644 "$b/install/libflashgen.a" "$lib/libflashgen.a"
install -m 0644 include/flashgen.h "$inc/flashgen.h"
install -m 0755 "$b/flashgen" "$bin/flashgen"
install -m 0644 configs/*.lua "$share/configs/"
install -m 0644 README.md "$doc/README.md"
install -m 0644 docs/*.md "$doc/docs/"

# Libs.private is for static linking: the archive needs NVRTC (found through the CUDA run path, as the
# shared library finds it), Lua, dlopen for the driver, libm and threads.
cat >"$lib/pkgconfig/flashgen.pc" <<EOPC
prefix=$prefix
exec_prefix=\${prefix}
libdir=\${exec_prefix}/lib
includedir=\${prefix}/include

Name: flashgen
Description: FlashAttention kernels generated, compiled with NVRTC and launched at run time
Version: $version
Libs: -L\${libdir} -lflashgen
Libs.private: $lua_libs -L$cuda_libdir -Wl,-rpath,$cuda_libdir -lnvrtc -ldl -lm -pthread
Cflags: -I\${includedir}
EOPC
chmod 0644 "$lib/pkgconfig/flashgen.pc"
echo "install: flashgen $version under $dest$prefix"
