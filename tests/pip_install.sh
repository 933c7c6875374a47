#!/bin/sh
# tests/pip_install.sh: `pip install ./python` into a fresh virtual environment, from a built checkout, gives
# a `flashgen` module that loads the library it packaged and answers `python -m flashgen info`.
# Exit 0 when it does; 77 (skipped, with the reason on stdout) where python3 cannot make a virtual
# environment or pip cannot reach setuptools; 1 otherwise.
set -u
cd "$(dirname "$0")/.." || exit 1
[ -f build/libflashgen.so ] || { echo "pip_install: build/libflashgen.so is missing: run ninja first" >&2; exit 1; }
dir=$(mktemp -d) || exit 1 # under $TMPDIR, else /tmp
trap 'rm -rf "$dir"' EXIT INT TERM
python3 -m venv "$dir/venv" >"$dir/venv.log" 2>&1 ||
  { echo "pip_install: skipped: python3 -m venv is not available ($(tail -n 1 "$dir/venv.log"))"; exit 77; }
if ! FLASHGEN_BUILD=0 "$dir/venv/bin/pip" install -q ./python >"$dir/pip.log" 2>&1; then
  if grep -qiE "could not find a version|connection|network|Temporary failure|No matching distribution" "$dir/pip.log"; then
    echo "pip_install: skipped: pip cannot reach a package index for setuptools ($(grep -iE 'error' "$dir/pip.log" | head -n 1))"
    exit 77
  fi
  cat "$dir/pip.log" >&2
  echo "pip_install: pip install ./python failed" >&2
  exit 1
fi
cd "$dir" || exit 1 # away from the checkout, so the import finds the installed package
"$dir/venv/bin/python" - <<'PY' || exit 1
import os, flashgen
from flashgen import _capi
print("pip_install: imported flashgen from", os.path.dirname(flashgen.__file__))
lib = _capi.lib_path()
assert "site-packages" in lib, "the installed module loads %s, not its packaged library" % lib
print("pip_install: it loads", lib)
PY
"$dir/venv/bin/python" -m flashgen info >"$dir/info.log" 2>&1
rc=$?
grep -q "flashgen" "$dir/info.log" || { cat "$dir/info.log" >&2; echo "pip_install: python -m flashgen info printed nothing useful (exit $rc)" >&2; exit 1; }
echo "pip_install: python -m flashgen info: $(head -n 1 "$dir/info.log")"
