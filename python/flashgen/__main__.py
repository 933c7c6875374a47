"""python -m flashgen [COMMAND ...]: runs the flashgen program that goes with the loaded library.

The program is looked for next to the library (build/flashgen beside build/libflashgen.so in a checkout;
flashgen/bin/flashgen beside flashgen/lib/libflashgen.so in a wheel), then on PATH. Without one, `info`
(the default command) prints what the binding can say through the C API: the versions, the library and
NVRTC in use, the disk cache directory and the GPUs' state.
"""

import ctypes
import os
import shutil
import subprocess
import sys

from . import _capi


def _program():
    """The flashgen program matching the library, or None."""
    here = os.path.dirname(os.path.abspath(__file__))
    cands = []
    try:
        libp = _capi.lib_path()
        if os.path.isabs(libp):
            d = os.path.dirname(libp)
            cands += [os.path.join(d, "flashgen"), os.path.join(os.path.dirname(d), "bin", "flashgen")]
    except _capi.FlashgenError:
        pass
    cands.append(os.path.join(here, "bin", "flashgen"))
    for c in cands:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return shutil.which("flashgen")


def _loaded(name):
    """The path of a loaded shared object whose file name starts with name (from /proc/self/maps), or None."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split()[-1]
                if os.path.basename(p).startswith(name):
                    return p
    except OSError:
        pass
    return None


def info(out=sys.stdout):
    """Prints the versions, the library, NVRTC, the cache directory and each GPU's state through the C API."""
    from . import __version__, _context, FlashgenError
    w = lambda k, v: out.write("%-16s%s\n" % (k + ":", v))  # noqa: E731
    w("flashgen", "%s (Python binding; no flashgen program found)" % __version__)
    try:
        w("library", _capi.lib_path())
    except FlashgenError as e:
        w("library", "not loaded: %s" % e)
        return 1
    nv = _loaded("libnvrtc.so")
    if nv:
        major, minor = ctypes.c_int(), ctypes.c_int()
        try:
            ctypes.CDLL(nv).nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
            w("NVRTC", "%d.%d (%s)" % (major.value, minor.value, nv))
        except (OSError, AttributeError):
            w("NVRTC", nv)
    cache = os.environ.get("FLASHGEN_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "flashgen")
    w("disk cache", cache)
    try:
        _context(0)
        torch = sys.modules.get("torch")
        name = torch.cuda.get_device_name(0) if torch is not None and torch.cuda.is_available() else "device 0"
        w("GPU", "%s: context created" % name)
    except FlashgenError as e:
        w("GPU", "no CUDA device: %s" % e.message)
    return 0


def main(argv):
    prog = _program()
    if prog is not None:
        return subprocess.call([prog] + (argv or ["info"]))
    if argv and argv[0] not in ("info",):
        sys.stderr.write("python -m flashgen: no flashgen program found next to the library or on PATH; "
                         "without it only `info` works (build it with `ninja` in the repository root)\n")
        return 2
    return info()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
