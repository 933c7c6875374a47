"""setup.py: builds the flashgen wheel, carrying the checkout's libflashgen.so (and the flashgen program).

`pip install ./python` (or `pip install .` at the repository root) runs this. The library comes from, in order:
  1. build/libflashgen.so of the checkout when it exists (run `sh configure && ninja` first);
  2. else, when FLASHGEN_BUILD=1 or the CUDA toolkit, Lua 5.4 (pkg-config lua5.4) and ninja are all
     present, `sh configure && ninja build/libflashgen.so build/flashgen` at the repository root;
  3. else the build stops with a sentence naming what to install or run.
It is copied to flashgen/lib/libflashgen.so (and the program to flashgen/bin/flashgen when built), which
flashgen._capi loads first after $FLASHGEN_LIB. FLASHGEN_BUILD=0 skips steps 2-3 and builds a wheel
without the library (the binding then finds one through $FLASHGEN_LIB or the loader's path).
"""

import os
import re
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def _version(pkg_dir):
    with open(os.path.join(pkg_dir, "_capi.py")) as f:
        return re.search(r'^VERSION_STRING = "([^"]+)"', f.read(), re.M).group(1)


def _toolchain_missing(repo):
    """What the library's build needs and this machine lacks (empty when it can build)."""
    missing = []
    cuda = os.environ.get("CUDA_HOME") or ("/usr/local/cuda" if os.path.isdir("/usr/local/cuda") else None)
    if not cuda and shutil.which("nvcc"):
        cuda = os.path.dirname(os.path.dirname(shutil.which("nvcc")))
    if not cuda or not os.path.exists(os.path.join(cuda, "include", "nvrtc.h")):
        missing.append("the CUDA toolkit (NVRTC; set CUDA_HOME)")
    if not shutil.which("ninja"):
        missing.append("ninja (ninja-build)")
    if not shutil.which("pkg-config") or subprocess.call(["pkg-config", "--exists", "lua5.4"]) != 0:
        missing.append("Lua 5.4 (liblua5.4-dev, pkg-config)")
    if not os.path.exists(os.path.join(repo, "configure")):
        missing.append("the flashgen source tree (configure not found at %s)" % repo)
    return missing


def _find_or_build(repo):
    """Path of libflashgen.so to package (building it when allowed), or None with FLASHGEN_BUILD=0."""
    so = os.path.join(repo, "build", "libflashgen.so")
    if os.path.exists(so):
        return so
    want = os.environ.get("FLASHGEN_BUILD")
    if want == "0":
        return None
    missing = _toolchain_missing(repo)
    if want != "1" and missing:
        raise SystemExit(
            "flashgen: %s does not exist and it cannot be built here: missing %s. Build it first in the "
            "repository root with `sh configure --install-deps && ninja`, then run pip again; or set "
            "FLASHGEN_BUILD=0 to install the binding without a library (then set FLASHGEN_LIB)."
            % (so, ", ".join(missing)))
    print("flashgen: building the library: sh configure && ninja build/libflashgen.so build/flashgen", flush=True)
    subprocess.check_call(["sh", "configure"], cwd=repo)
    subprocess.check_call(["ninja", "build/libflashgen.so", "build/flashgen"], cwd=repo)
    return so


def _nvrtc_major(so):
    """The NVRTC major version libflashgen.so links (its DT_NEEDED libnvrtc.so.N), or None."""
    with open(so, "rb") as f:
        m = re.search(rb"libnvrtc\.so\.(\d+)", f.read())
    return int(m.group(1)) if m else None


def make_build_py(repo):
    class BuildPy(build_py):
        """build_py that also copies libflashgen.so (and the flashgen program) into the package."""

        def run(self):
            super().run()
            so = _find_or_build(repo)
            if so is None:
                return
            dst = os.path.join(self.build_lib, "flashgen")
            os.makedirs(os.path.join(dst, "lib"), exist_ok=True)
            shutil.copy2(so, os.path.join(dst, "lib", "libflashgen.so"))
            prog = os.path.join(os.path.dirname(so), "flashgen")
            if os.path.isfile(prog) and os.access(prog, os.X_OK):
                os.makedirs(os.path.join(dst, "bin"), exist_ok=True)
                shutil.copy2(prog, os.path.join(dst, "bin", "flashgen"))
    return BuildPy


def make_bdist_wheel():
    """A platform wheel (it carries a native library), tagged py3-none-<platform>: the binding is ctypes."""
    try:
        from setuptools.command.bdist_wheel import bdist_wheel
    except ImportError:
        try:
            from wheel.bdist_wheel import bdist_wheel
        except ImportError:
            return None

    class BdistWheel(bdist_wheel):
        def finalize_options(self):
            super().finalize_options()
            self.root_is_pure = False

        def get_tag(self):
            _, _, plat = super().get_tag()
            return "py3", "none", plat
    return BdistWheel


def main(package_dir, repo):
    """setup() for the package in package_dir/flashgen, the library from repo (the repository root)."""
    pkg = os.path.join(package_dir, "flashgen")
    so = os.path.join(repo, "build", "libflashgen.so")
    major = _nvrtc_major(so) if os.path.exists(so) else None
    nvrtc = {12: "nvidia-cuda-nvrtc-cu12", None: "nvidia-cuda-nvrtc"}.get(major, "nvidia-cuda-nvrtc==%d.*" % (major or 0))
    cmds = {"build_py": make_build_py(repo)}
    bw = make_bdist_wheel()
    if bw is not None:
        cmds["bdist_wheel"] = bw
    setup(
        name="flashgen",
        version=_version(pkg),
        description="FlashAttention kernels generated and compiled at run time (ctypes binding of libflashgen)",
        packages=["flashgen"],
        package_dir={"flashgen": os.path.relpath(pkg, os.getcwd()) if os.path.isabs(pkg) else pkg},
        python_requires=">=3.8",
        extras_require={"cuda": [nvrtc], "torch": ["torch>=2.4"]},
        cmdclass=cmds,
        zip_safe=False,
        # At the repository root, build/ is ninja's: keep setuptools' files in a folder of their own there.
        options={"build": {"build_base": os.path.join("build", "python")}} if os.path.abspath(os.getcwd()) == os.path.abspath(repo) else {},
    )


if __name__ == "__main__":
    main(HERE, os.path.dirname(HERE))
