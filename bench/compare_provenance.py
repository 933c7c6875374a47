"""bench/compare_provenance.py: what a bench run records of where it ran and what it measured: the driver,
the checkout's commit, the sha256 of the library sources and of the flashgen library under test.

    from compare_provenance import git_info, provenance

Needs no GPU or PyTorch. Used by bench/compare_bench.py (Bench.environment) and bench/fp8.py; not a script.
"""
import hashlib
import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_text(cmd, cwd=None):
    """stdout of a command, stripped, or None when it cannot run or fails."""
    try:
        p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           universal_newlines=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def driver_info(device):
    """(driver version text, CUDA driver API version) from nvidia-smi and libcuda, None where unknown."""
    drv = run_text(["nvidia-smi", "-i", str(device), "--query-gpu=driver_version", "--format=csv,noheader"])
    api = None
    try:
        import ctypes
        v = ctypes.c_int()
        if ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(v)) == 0:
            api = "%d.%d" % (v.value // 1000, (v.value % 1000) // 10)
    except (OSError, AttributeError):
        pass
    return drv, api


def git_info():
    """(commit, dirty) of the checkout; without git (a copied tree), $FLASHGEN_COMMIT or "unknown"."""
    commit = run_text(["git", "rev-parse", "HEAD"], cwd=REPO)
    if commit is None:
        return os.environ.get("FLASHGEN_COMMIT", "unknown (no git checkout)"), None
    status = run_text(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO)
    return commit, bool(status) if status is not None else None


def file_sha256(path):
    """sha256 of a file's bytes (the flashgen library under test), or None when it cannot be read."""
    try:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()
    except (OSError, TypeError):
        return None


def source_sha256():
    """sha256 over the checkout's library sources (include, core, generator, runtime, autotune, templates:
    names and bytes, sorted): which tree a run measured even where the git metadata is stale or absent (a
    copied tree carries no .git)."""
    h = hashlib.sha256()
    for top in ("include", "core", "generator", "runtime", "autotune", "templates"):
        for root, dirs, files in os.walk(os.path.join(REPO, top)):
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(root, name)
                h.update(os.path.relpath(path, REPO).encode() + b"\0")
                with open(path, "rb") as f:
                    h.update(f.read())
    return h.hexdigest()


def provenance(fg):
    """What a run measured, even where the git metadata is stale or absent: the sources' sha256 and the
    flashgen library's (None without a library). compare.py and fp8.py record both."""
    return {"source_sha256": source_sha256(),
            "flashgen_library_sha256": file_sha256(fg.library_path()) if fg else None}
