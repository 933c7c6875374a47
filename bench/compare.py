#!/usr/bin/env python3
"""bench/compare.py: flashgen's forward pass against PyTorch's peers, by the benchmark
protocol of docs/performance.md, in one process on the same inputs.

Shapes: hidden 2048 (heads = 2048 / head_dim), 16384 tokens (batch = 16384 / seqlen), layout
[batch, seqlen, heads, head_dim]; head_dim 64/128/256, causal and not, bf16 and fp16, seqlen 512..16384.
Implementations: flashgen (python/flashgen), torch SDPA under sdpa_kernel(CUDNN_ATTENTION) and under
sdpa_kernel(FLASH_ATTENTION) (FlashAttention-2), given [b, h, s, d] transposed views of the same memory,
and with --flex FlexAttention (torch.compile(flex_attention), a causal BlockMask).

Per config: inputs are rotated among enough copies to exceed twice the L2 cache; flashgen's output is
checked first (the tolerance rule of docs/numerics.md: max|out - ref32| <= 2 * max|ref_lowp - ref32| + 1e-5 on a slice, ref32 =
fp32 math on upcast inputs, ref_lowp = SDPA FlashAttention-2's output; no NaN/Inf anywhere; LSE within
5e-4 + 5e-5|ref|) and a failing config is reported WRONG, not timed as a speed. Timing: warm-up calls
(compiles excluded: flashgen is prepared and FlexAttention compiled before them), then CUDA events around
each of --iters calls, enqueued behind a GPU sleep so the host's launch cost never shows in a kernel's
time; the median is reported. FLOPs = 4 * b * h * sq * sk * d, halved when causal.

Output (--out, default bench/results/<date>-<gpu>/): compare.csv, compare.json (every figure, the
environment and the check details) and fwd_d<head_dim>_<dtype>.png, merged with what earlier parts of a
sweep wrote to the same directory, so the sweep can run in pieces (--head-dims, --seqlens, --causal).
The table is printed last. Exit status: 0, or 1 when a config failed the check, 2 without PyTorch/CUDA.

--bwd: the backward pass instead (head dims 64 and 128 unless --head-dims says others; flashgen's
backward takes every multiple of 8 up to 256, as its forward). flashgen's
attention_backward against SDPA's cuDNN and FlashAttention-2 backward (torch.autograd.grad through the
backend's forward, retained, so only the backward kernels run in the timed calls); each from its own
forward's outputs. Check: dQ, dK, dV against fp32 autograd through attention math on a slice with the
3x rule (max|grad - ref32| <= 3 * max|ref_lowp - ref32| + 1e-5 per gradient, ref_lowp = FA2's gradients),
no NaN/Inf. FLOPs = 2.5 x the forward's. Files as above (bwd_d<head_dim>_<dtype>.png).

--redraw DIR: no benchmark; redraws the charts and reprints the table of DIR/compare.json (no GPU or
PyTorch needed).
"""

import argparse
import csv
import datetime
import gzip
import hashlib
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import warnings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (64, 128, 256)
DTYPES = ("bf16", "fp16")
TOTAL_TOKENS = 16384
HIDDEN = 2048
QUICK = {"dtypes": ("bf16",), "head_dims": (64, 128), "seqlens": (1024, 4096), "causal": "both"}
IMPLS = ("flashgen", "cudnn", "fa2", "flex")
LABELS = {"flashgen": "flashgen", "cudnn": "cuDNN", "fa2": "FA2", "flex": "flex"}
LSE_ATOL, LSE_RTOL = 5e-4, 5e-5  # reference/reference.h: REF_LSE_ATOL, REF_LSE_RTOL
SCHEMA = 1


# ====================================================================== arguments


def int_list(text):
    """argparse type: "64,128" -> (64, 128)."""
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not a comma-separated list of integers" % text)


def dtype_list(text):
    """argparse type: "bf16,fp16" -> ("bf16", "fp16"), each checked against DTYPES."""
    items = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in items if x not in DTYPES]
    if bad or not items:
        raise argparse.ArgumentTypeError("dtypes must be from %s, got %r" % (",".join(DTYPES), text))
    return items


def parse_args(argv):
    """The options, with the sweep selection filled from --quick or the full protocol; exits on bad input."""
    global HIDDEN
    p = argparse.ArgumentParser(
        description="flashgen forward vs torch SDPA (cuDNN, FlashAttention-2) and FlexAttention, "
                    "by the benchmark protocol of docs/performance.md.",
        epilog="The default sweep is 3 head dims x 2 masks x 6 seqlens x 2 dtypes = 72 configs. "
               "Run parts with --head-dims/--seqlens/--causal/--dtypes into one --out directory: "
               "each part is merged with the results already there.")
    p.add_argument("--dtypes", type=dtype_list, default=None, help="comma list of bf16,fp16 (default both)")
    p.add_argument("--head-dims", type=int_list, default=None, help="comma list (default 64,128,256)")
    p.add_argument("--seqlens", type=int_list, default=None,
                   help="comma list (default 512,1024,2048,4096,8192,16384); batch = %d / seqlen" % TOTAL_TOKENS)
    p.add_argument("--causal", choices=("0", "1", "both"), default=None, help="mask: 0 none, 1 causal, both (default)")
    p.add_argument("--iters", type=int, default=20, help="timed calls per implementation; the median is reported (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls before timing, after any compile (default 5)")
    p.add_argument("--hidden", type=int, default=HIDDEN,
                   help="hidden size (heads = hidden / head_dim; default %d, the protocol's: 1536 lets head_dim 192 "
                        "run, off the protocol's shapes)" % HIDDEN)
    p.add_argument("--flex", action="store_true", help="also time FlexAttention (torch.compile; ~2-4 s of compile per config)")
    p.add_argument("--quick", action="store_true",
                   help="smoke test: bf16, head_dim 64,128, seqlen 1024,4096, both masks (8 configs), "
                        "unless the selection flags say otherwise")
    p.add_argument("--out", default=None, help="output directory (default bench/results/<date>-<gpu>/)")
    p.add_argument("--device", type=int, default=0, help="CUDA device ordinal (default 0)")
    p.add_argument("--fresh", action="store_true", help="do not merge with results already in --out")
    p.add_argument("--bwd", action="store_true",
                   help="the backward pass (default head dims 64,128; default out: bench/results/<date>-<gpu>-bwd/)")
    p.add_argument("--deterministic", action="store_true",
                   help="with --bwd: flashgen in its deterministic mode (bitwise-repeatable gradients), to measure "
                        "its cost")
    p.add_argument("--redraw", metavar="DIR",
                   help="no benchmark: redraw the charts and reprint the table of DIR/compare.json (no GPU or "
                        "PyTorch needed), e.g. where a run's PNGs were lost")
    p.add_argument("--fg-log", default="warn", choices=("none", "error", "warn", "info", "debug"),
                   help="flashgen's log level (info logs each JIT compile with its time); default warn")
    a = p.parse_args(argv)
    base = QUICK if a.quick else {"dtypes": DTYPES, "head_dims": (64, 128) if a.bwd else HEAD_DIMS,
                                  "seqlens": SEQLENS, "causal": "both"}
    for key in ("dtypes", "head_dims", "seqlens", "causal"):
        if getattr(a, key) is None:
            setattr(a, key, base[key])
    if a.deterministic and not a.bwd:
        p.error("--deterministic is the backward's mode: it needs --bwd")
    if a.iters < 1 or a.warmup < 0:
        p.error("--iters must be >= 1 and --warmup >= 0")
    for s in a.seqlens:
        if s <= 0 or TOTAL_TOKENS % s:
            p.error("seqlen %d does not divide the %d tokens of the protocol" % (s, TOTAL_TOKENS))
    if a.hidden <= 0:
        p.error("--hidden must be positive")
    HIDDEN = a.hidden
    for d in a.head_dims:
        if d <= 0 or HIDDEN % d:
            p.error("head_dim %d does not divide the hidden size %d (--hidden)" % (d, HIDDEN))
    return a


def configs(a):
    """The sweep in the order that compiles least: dtype, head_dim, mask, then seqlen."""
    masks = {"0": (False,), "1": (True,), "both": (False, True)}[a.causal]
    out = []
    for dt in a.dtypes:
        for d in a.head_dims:
            for c in masks:
                for s in a.seqlens:
                    out.append({"dtype": dt, "head_dim": d, "causal": c, "seqlen": s,
                                "batch": TOTAL_TOKENS // s, "heads": HIDDEN // d,
                                "pass": "bwd" if a.bwd else "fwd"})
    return out


def flops(cfg):
    """FLOPs of a config (docs/performance.md): forward 4 * b * h * sq * sk * d, halved when causal; backward 2.5x."""
    f = 4.0 * cfg["batch"] * cfg["heads"] * cfg["seqlen"] * cfg["seqlen"] * cfg["head_dim"]
    f = f / 2 if cfg["causal"] else f
    return 2.5 * f if cfg.get("pass") == "bwd" else f


def record_explain(row, text):
    """Puts flashgen's variant (the first line of fg_explain / fg_explain_bwd) and where its code came
    from (the "code:" line) into the result row."""
    lines = text.splitlines()
    row["variant"] = lines[0].replace("variant ", "", 1)
    row["code_from"] = next((ln.split(":", 1)[1].strip() for ln in lines if ln.strip().startswith("code:")), None)


def key_of(row):
    """A result row's identity when parts of a sweep are merged."""
    return (row["implementation"], row["dtype"], row["head_dim"], bool(row["causal"]), row["seqlen"])


# ====================================================================== environment


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


def read_json(path):
    """(the JSON at path, or at path + ".gz" where only that exists (an archived run, gzipped),
    the path read). Raises OSError or ValueError as open and json.load do."""
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        path += ".gz"
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return json.load(f), path


def slug(text):
    """"NVIDIA H200" -> "nvidia-h200", for the default output directory."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "gpu"


# ====================================================================== the benchmark (needs torch)


class Bench:
    """One run: the torch modules, flashgen, the timing helpers and the per-config measurements."""

    def __init__(self, args):
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        self.torch, self.F, self.SDPBackend, self.sdpa_kernel = torch, F, SDPBackend, sdpa_kernel
        self.args = args
        self.dev = torch.device("cuda", args.device)
        torch.cuda.set_device(self.dev)
        # ref32 must be fp32 math, not TF32
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        props = torch.cuda.get_device_properties(self.dev)
        self.props = props
        self.l2 = int(getattr(props, "L2_cache_size", 0) or 0) or 60 * 2**20
        self.cycles_per_ms = self.calibrate_sleep()
        self.fg, self.fg_error = self.load_flashgen(args.fg_log)
        self.flex = None
        self.flex_error = None
        if args.flex:
            self.setup_flex()

    # ---------------------------------------------------------------- setup

    def load_flashgen(self, level):
        """(the flashgen module, None), or (None, why) when the binding or its library cannot load."""
        sys.path.insert(0, os.path.join(REPO, "python"))
        try:
            import flashgen
            flashgen.configure(log_level=level)
            flashgen.library_path()
            return flashgen, None
        except Exception as e:  # the library missing or unloadable: flashgen is n/a, the peers still run
            return None, "%s: %s" % (type(e).__name__, e)

    def setup_flex(self):
        """torch.compile(flex_attention) with static shapes, or self.flex_error saying why not."""
        torch = self.torch
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        except ImportError as e:
            self.flex_error = "torch.nn.attention.flex_attention is not importable: %s" % e
            return
        cfg = torch._dynamo.config
        # one static-shape compile per config: lift the recompile limits (their names changed over releases)
        for name in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit", "accumulated_recompile_limit"):
            if hasattr(cfg, name):
                setattr(cfg, name, 4096)
        self.flex = torch.compile(flex_attention, dynamic=False)
        self.create_block_mask = create_block_mask

    def calibrate_sleep(self):
        """GPU clock cycles per millisecond for torch.cuda._sleep, or None when it is unavailable."""
        torch = self.torch
        if not hasattr(torch.cuda, "_sleep"):
            return None
        torch.cuda._sleep(1000)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        torch.cuda._sleep(20_000_000)
        b.record()
        torch.cuda.synchronize()
        ms = a.elapsed_time(b)
        return 20_000_000 / ms if ms > 0 else None

    def environment(self):
        """What the JSON records of this run: GPU, driver, versions, commit, options."""
        torch = self.torch
        drv, api = driver_info(self.args.device)
        commit, dirty = git_info()
        env = {
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "host": platform.node(),
            "gpu": torch.cuda.get_device_name(self.dev),
            "compute_capability": "%d.%d" % (self.props.major, self.props.minor),
            "sm_count": self.props.multi_processor_count,
            "l2_bytes": self.l2,
            "memory_bytes": self.props.total_memory,
            "driver": drv or "unknown (nvidia-smi not available)",
            "cuda_driver_api": api,
            "torch": torch.__version__,
            "torch_cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "python": platform.python_version(),
            "flashgen_version": self.fg.version if self.fg else None,
            "flashgen_library": self.fg.library_path() if self.fg else self.fg_error,
            "git_commit": commit,
            "git_dirty": dirty,
            **provenance(self.fg),
            "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
            "iters": self.args.iters,
            "warmup": self.args.warmup,
            "sleep_cycles_per_ms": self.cycles_per_ms,
        }
        if self.args.flex:
            try:
                import triton
                env["triton"] = triton.__version__
            except ImportError:
                env["triton"] = None
        return env

    # ---------------------------------------------------------------- timing

    def time_calls(self, fn, ncopies):
        """(median ms, all ms, host us per call) of fn(i) over --iters calls after --warmup calls."""
        torch, a = self.torch, self.args
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(a.warmup):
            fn(i % ncopies)
        host_us = (time.perf_counter() - t0) / max(a.warmup, 1) * 1e6
        torch.cuda.synchronize()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(a.iters)]
        if self.cycles_per_ms:
            # Keep the GPU busy while the host enqueues every timed call, so each event pair brackets
            # only GPU work, whatever the host's cost per call.
            sleep_ms = min(1000.0, 2.0 + 2.0 * a.iters * max(host_us, 50.0) / 1000.0)
            torch.cuda._sleep(int(sleep_ms * self.cycles_per_ms))
        for i in range(a.iters):
            events[i][0].record()
            fn((a.warmup + i) % ncopies)
            events[i][1].record()
        torch.cuda.synchronize()
        ms = [s.elapsed_time(e) for s, e in events]
        return statistics.median(ms), ms, host_us

    # ---------------------------------------------------------------- references

    def ref32_slice(self, q, k, v, causal, pairs):
        """fp32 math on upcast inputs for the (batch, head) pairs: {pair: (O [s, d], LSE [s])}."""
        torch = self.torch
        s_q, s_k, d = q.shape[1], k.shape[1], q.shape[3]
        scale = 1.0 / math.sqrt(d)
        chunk = max(1, (256 * 2**20) // (4 * s_k))
        out = {}
        for (bi, hi) in pairs:
            qs, ks, vs = q[bi, :, hi].float(), k[bi, :, hi].float(), v[bi, :, hi].float()
            o = torch.empty(s_q, d, device=q.device)
            lse = torch.empty(s_q, device=q.device)
            for r0 in range(0, s_q, chunk):
                r1 = min(s_q, r0 + chunk)
                sc = (qs[r0:r1] @ ks.T) * scale
                if causal:
                    i = torch.arange(r0, r1, device=q.device)[:, None]
                    j = torch.arange(s_k, device=q.device)[None, :]
                    sc = sc.masked_fill(j > i + (s_k - s_q), float("-inf"))
                lse[r0:r1] = torch.logsumexp(sc, dim=-1)
                o[r0:r1] = torch.softmax(sc, dim=-1) @ vs
                del sc
            out[(bi, hi)] = (o, lse)
        return out

    def sdpa(self, backend, q, k, v, causal):
        """SDPA under one backend on [b, h, s, d] views; raises RuntimeError with the backend's reasons."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with self.sdpa_kernel(backend):
                    return self.F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            except RuntimeError as e:
                why = [str(w.message).strip() for w in caught]
                raise RuntimeError("; ".join([str(e).strip().splitlines()[0]] + why)) from None

    # ---------------------------------------------------------------- one config

    def run(self, cfg):
        """Measures every implementation on one config: a list of result rows and the check record."""
        torch = self.torch
        b, s, h, d, causal = cfg["batch"], cfg["seqlen"], cfg["heads"], cfg["head_dim"], cfg["causal"]
        dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[cfg["dtype"]]
        set_bytes = 3 * b * s * h * d * 2
        ncopies = min(64, max(2, math.ceil(2 * self.l2 / set_bytes)))  # 2 for the protocol's 192 MiB sets
        gen = torch.Generator(device=self.dev)
        gen.manual_seed(1000 + s + d)
        copies = [tuple(torch.randn(b, s, h, d, device=self.dev, dtype=dt, generator=gen) for _ in range(3))
                  for _ in range(ncopies)]
        views = [tuple(x.transpose(1, 2) for x in c) for c in copies]  # [b, h, s, d] over the same memory
        rows = {impl: dict(cfg, implementation=impl, flops=flops(cfg), median_ms=None, tflops=None,
                           check="n/a", note="", ncopies=ncopies)
                for impl in IMPLS if impl != "flex" or self.args.flex}
        check = dict(cfg, status="n/a")

        # ---- outputs for the check (the first calls; compiles are timed here, not below)
        outs = {}
        q, k, v = copies[0]
        if self.fg is None:
            rows["flashgen"]["note"] = self.fg_error
        else:
            try:
                record_explain(rows["flashgen"], self.fg.explain(q, k, v, causal=causal))
                t0 = time.perf_counter()
                self.fg.prepare(q, k, v, causal=causal)
                rows["flashgen"]["prepare_s"] = round(time.perf_counter() - t0, 4)
                o = torch.full_like(q, float("nan"))
                lse = torch.empty(b, h, s, device=self.dev, dtype=torch.float32)
                self.fg.attention(q, k, v, causal=causal, out=o, lse=lse)
                torch.cuda.synchronize()
                outs["flashgen"] = (o, lse)
            except Exception as e:  # FlashgenError (the library's sentence) or a binding failure
                rows["flashgen"]["note"] = str(e) if isinstance(e, self.fg.FlashgenError) else "%s: %s" % (type(e).__name__, e)
        sdpa_inputs = {}  # impl -> the per-copy (q, k, v) it runs on
        for impl, backend in (("cudnn", self.SDPBackend.CUDNN_ATTENTION), ("fa2", self.SDPBackend.FLASH_ATTENTION)):
            try:
                t0 = time.perf_counter()
                outs[impl] = self.sdpa(backend, *views[0], causal)
                torch.cuda.synchronize()
                rows[impl]["first_call_s"] = round(time.perf_counter() - t0, 4)
                sdpa_inputs[impl] = views
            except RuntimeError as e:
                # Refused on the transposed views: try contiguous [b, h, s, d] copies before giving up.
                first = str(e)
                try:
                    contig = [tuple(x.contiguous() for x in c) for c in views]
                    outs[impl] = self.sdpa(backend, *contig[0], causal)
                    torch.cuda.synchronize()
                    sdpa_inputs[impl] = contig
                    rows[impl]["note"] = "ran on contiguous [b,h,s,d] copies; the transposed views were refused: " + first
                except RuntimeError as e2:
                    rows[impl]["note"] = "refused: " + first + (" | contiguous: " + str(e2) if str(e2) != first else "")
        if self.args.flex:
            self.flex_first_call(cfg, views, rows, outs)

        # ---- the check
        if "flashgen" in outs:
            check = self.check(cfg, copies[0], outs)
            rows["flashgen"]["check"] = "ok" if check["status"] == "ok" else "WRONG"
            if check["status"] != "ok":
                rows["flashgen"]["note"] = check["why"]
        for impl in ("cudnn", "fa2", "flex"):
            if impl in rows and impl in outs:
                rows[impl]["check"] = check.get("peer_status", {}).get(impl, "unchecked")

        # ---- timing
        fg_out = torch.empty_like(q)
        if "flashgen" in outs and rows["flashgen"]["check"] == "ok":
            fg = self.fg

            def call_fg(i):
                qi, ki, vi = copies[i]
                fg.attention(qi, ki, vi, causal=causal, out=fg_out)
            self.timed(rows["flashgen"], call_fg, ncopies)
        for impl, backend in (("cudnn", self.SDPBackend.CUDNN_ATTENTION), ("fa2", self.SDPBackend.FLASH_ATTENTION)):
            if impl not in outs:
                continue
            src = sdpa_inputs[impl]
            F = self.F
            with self.sdpa_kernel(backend):
                self.timed(rows[impl], lambda i: F.scaled_dot_product_attention(*src[i], is_causal=causal), ncopies)
        if "flex" in outs:
            bm = self._block_mask
            flex = self.flex
            self.timed(rows["flex"], lambda i: flex(*views[i], block_mask=bm), ncopies)
            self._block_mask = None
        for r in rows.values():
            if r["median_ms"]:
                r["tflops"] = r["flops"] / (r["median_ms"] * 1e-3) / 1e12
        return list(rows.values()), check

    def timed(self, row, fn, ncopies):
        """Times fn into row (median_ms, min/max, every time, host cost); a failure becomes the row's note."""
        try:
            med, all_ms, host_us = self.time_calls(fn, ncopies)
        except Exception as e:  # a failure while timing: the row says why, the sweep goes on
            row["note"] = (row["note"] + "; " if row["note"] else "") + "failed while timing: %s: %s" % (type(e).__name__, e)
            return
        row["median_ms"] = med
        row["min_ms"], row["max_ms"] = min(all_ms), max(all_ms)
        row["times_ms"] = [round(x, 5) for x in all_ms]
        row["host_us_per_call"] = round(host_us, 2)

    def flex_first_call(self, cfg, views, rows, outs):
        """Builds the BlockMask and compiles FlexAttention for this shape (timed as first_call_s)."""
        torch = self.torch
        self._block_mask = None
        if self.flex is None:
            rows["flex"]["note"] = self.flex_error
            return
        s = cfg["seqlen"]
        try:
            torch._dynamo.reset()  # static shapes: one compile per config; keep the guard list short
            t0 = time.perf_counter()
            if cfg["causal"]:
                def causal_mask(b, h, q_idx, kv_idx):
                    return q_idx >= kv_idx
                self._block_mask = self.create_block_mask(causal_mask, B=None, H=None, Q_LEN=s, KV_LEN=s,
                                                          device=self.dev)
            outs["flex"] = self.flex(*views[0], block_mask=self._block_mask)
            torch.cuda.synchronize()
            rows["flex"]["first_call_s"] = round(time.perf_counter() - t0, 3)
        except Exception as e:  # Triton/inductor refusals come as many exception types
            rows["flex"]["note"] = "refused: %s: %s" % (type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else "")
            outs.pop("flex", None)

    def check(self, cfg, inputs, outs):
        """The tolerance rule (docs/numerics.md) on flashgen's output, against fp32 math on a slice (batch 0 / head 0 and
        the last batch / head), with SDPA FA2's output as the low-precision reference (else cuDNN's,
        else the kernel-precision math computed here); plus no NaN/Inf anywhere and the LSE."""
        torch = self.torch
        q, k, v = inputs
        b, h = cfg["batch"], cfg["heads"]
        pairs = sorted({(0, 0), (b - 1, h - 1)})
        ref = self.ref32_slice(q, k, v, cfg["causal"], pairs)
        o_fg, lse_fg = outs["flashgen"]
        rec = dict(cfg, slice="batch,head in %s, all rows" % (pairs,))
        nonfinite = int((~torch.isfinite(o_fg)).sum().item())
        rec["nonfinite"] = nonfinite

        def err(get):  # max |x - ref32| over the slice
            return max((get(bi, hi).float() - ref[(bi, hi)][0]).abs().max().item() for bi, hi in pairs)

        getters = {"flashgen": lambda bi, hi: o_fg[bi, :, hi]}
        for impl in ("cudnn", "fa2", "flex"):
            if impl in outs:
                o = outs[impl]  # [b, h, s, d]
                getters[impl] = (lambda o: lambda bi, hi: o[bi, hi])(o)
        errs = {impl: err(g) for impl, g in getters.items()}
        rec["err32"] = errs
        # the low-precision reference: FA2, else cuDNN, else the kernel-precision math (also when the
        # peer's own output is not finite, which would make any bound meaningless)
        lowp_from = next((i for i in ("fa2", "cudnn") if i in errs and math.isfinite(errs[i])), "math")
        if lowp_from == "math":
            lowp = self.lowp_err(q, k, v, cfg["causal"], pairs, ref)
        else:
            lowp = errs[lowp_from]
        rec["lowp_reference"], rec["err_lowp"] = lowp_from, lowp
        bound = 2 * lowp + 1e-5
        rec["bound"] = bound
        lse_err, lse_bad = 0.0, 0
        for bi, hi in pairs:
            r = ref[(bi, hi)][1]
            got = lse_fg[bi, hi]
            diff = (got - r).abs()
            lse_err = max(lse_err, diff.max().item())
            lse_bad += int(((diff > LSE_ATOL + LSE_RTOL * r.abs()) | ~torch.isfinite(got)).sum().item())
        rec["lse_err"], rec["lse_bad_rows"] = lse_err, lse_bad
        for impl in ("cudnn", "fa2"):
            if impl in outs:
                rec["maxdiff_" + impl] = (o_fg.float() - outs[impl].transpose(1, 2).float()).abs().max().item()
        why = []
        if nonfinite:
            why.append("%d NaN/Inf outputs (NaN-filled before the call: elements not written?)" % nonfinite)
        if errs["flashgen"] > bound:
            why.append("max|out-ref32| %.3g > bound %.3g (2 x %s's %.3g + 1e-5)" % (errs["flashgen"], bound, lowp_from, lowp))
        if lse_bad:
            why.append("%d LSE rows off by more than %g + %g|ref| (max %.3g)" % (lse_bad, LSE_ATOL, LSE_RTOL, lse_err))
        rec["status"] = "WRONG" if why else "ok"
        rec["why"] = "; ".join(why)
        rec["peer_status"] = {impl: ("ok" if e <= bound else "outside bound") for impl, e in errs.items() if impl != "flashgen"}
        if lowp_from in rec["peer_status"]:
            rec["peer_status"][lowp_from] = "reference"
        return rec

    def lowp_err(self, q, k, v, causal, pairs, ref):
        """max|ref_lowp - ref32| with ref_lowp computed here (P rounded to the dtype before P.V, the row
        sum from the unrounded P, O rounded), for when neither SDPA backend ran."""
        torch = self.torch
        s_q, s_k, d = q.shape[1], k.shape[1], q.shape[3]
        scale = 1.0 / math.sqrt(d)
        chunk = max(1, (256 * 2**20) // (4 * s_k))
        worst = 0.0
        for bi, hi in pairs:
            qs, ks, vs = q[bi, :, hi].float(), k[bi, :, hi].float(), v[bi, :, hi].float()
            for r0 in range(0, s_q, chunk):
                r1 = min(s_q, r0 + chunk)
                sc = (qs[r0:r1] @ ks.T) * scale
                if causal:
                    i = torch.arange(r0, r1, device=q.device)[:, None]
                    j = torch.arange(s_k, device=q.device)[None, :]
                    sc = sc.masked_fill(j > i + (s_k - s_q), float("-inf"))
                p = torch.exp(sc - sc.amax(dim=-1, keepdim=True))
                o = ((p.to(q.dtype).float() @ vs) / p.sum(dim=-1, keepdim=True)).to(q.dtype).float()
                worst = max(worst, (o - ref[(bi, hi)][0][r0:r1]).abs().max().item())
        return worst


class BwdBench(Bench):
    """--bwd: the backward pass of each implementation, after its own forward (see the module doc)."""

    def run(self, cfg):
        torch, F = self.torch, self.F
        b, s, h, d, causal = cfg["batch"], cfg["seqlen"], cfg["heads"], cfg["head_dim"], cfg["causal"]
        dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[cfg["dtype"]]
        ncopies = min(8, max(2, math.ceil(2 * self.l2 / (4 * b * s * h * d * 2))))
        gen = torch.Generator(device=self.dev)
        gen.manual_seed(2000 + s + d)
        copies = [tuple(torch.randn(b, s, h, d, device=self.dev, dtype=dt, generator=gen) for _ in range(4))
                  for _ in range(ncopies)]  # q, k, v, dO
        impls = ("flashgen", "cudnn", "fa2")
        rows = {i: dict(cfg, implementation=i, flops=flops(cfg), median_ms=None, tflops=None, check="n/a", note="",
                        ncopies=ncopies) for i in impls}
        grads, timers = {}, {}
        if self.fg is None:
            rows["flashgen"]["note"] = self.fg_error
        else:
            try:
                fg = self.fg
                state = []
                for q, k, v, do in copies:
                    o, lse = fg.attention(q, k, v, causal=causal, return_lse=True)
                    state.append((q, k, v, o, lse, do, torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)))
                q, k, v, o, lse, do, dq, dk, dv = state[0]
                record_explain(rows["flashgen"], fg.explain_backward(q, k, v, o, lse, do, causal=causal,
                                                                     deterministic=self.args.deterministic))
                for g in (dq, dk, dv):
                    g.fill_(float("nan"))  # every element must be written
                t0 = time.perf_counter()
                grads["flashgen"] = fg.attention_backward(q, k, v, o, lse, do, causal=causal, deterministic=self.args.deterministic,
                                        dq=dq, dk=dk, dv=dv)
                torch.cuda.synchronize()
                rows["flashgen"]["first_call_s"] = round(time.perf_counter() - t0, 4)

                def call_fg(i):
                    q, k, v, o, lse, do, dq, dk, dv = state[i]
                    fg.attention_backward(q, k, v, o, lse, do, causal=causal, deterministic=self.args.deterministic,
                                        dq=dq, dk=dk, dv=dv)
                timers["flashgen"] = call_fg
            except Exception as e:
                rows["flashgen"]["note"] = str(e) if isinstance(e, self.fg.FlashgenError) else "%s: %s" % (type(e).__name__, e)
        for impl, backend in (("cudnn", self.SDPBackend.CUDNN_ATTENTION), ("fa2", self.SDPBackend.FLASH_ATTENTION)):
            try:
                graphs = []
                for q, k, v, do in copies:
                    leaves = [x.detach().requires_grad_() for x in (q, k, v)]
                    with self.sdpa_kernel(backend):
                        o = F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in leaves), is_causal=causal)
                    graphs.append((o, leaves, do.transpose(1, 2)))
                o, leaves, dov = graphs[0]
                grads[impl] = torch.autograd.grad(o, leaves, dov, retain_graph=True)
                torch.cuda.synchronize()
                timers[impl] = (lambda gs: lambda i: torch.autograd.grad(gs[i][0], gs[i][1], gs[i][2], retain_graph=True))(graphs)
            except RuntimeError as e:
                rows[impl]["note"] = "refused: " + str(e).strip().splitlines()[0]
        check = dict(cfg, status="n/a")
        if "flashgen" in grads:
            check = self.check_bwd(cfg, copies[0], grads)
            rows["flashgen"]["check"] = "ok" if check["status"] == "ok" else "WRONG"
            if check["status"] != "ok":
                rows["flashgen"]["note"] = check["why"]
                timers.pop("flashgen", None)
        for impl in ("cudnn", "fa2"):
            if impl in grads:
                rows[impl]["check"] = check.get("peer_status", {}).get(impl, "unchecked")
        for impl, fn in timers.items():
            self.timed(rows[impl], fn, ncopies)
        for r in rows.values():
            if r["median_ms"]:
                r["tflops"] = r["flops"] / (r["median_ms"] * 1e-3) / 1e12
        return list(rows.values()), check

    def check_bwd(self, cfg, inputs, grads):
        """dQ, dK, dV of flashgen against fp32 autograd through attention math on (batch, head) slices
        (batch 0 / head 0 and the last ones), 3x FA2's (else cuDNN's) error as the bound; no NaN/Inf."""
        torch = self.torch
        q, k, v, do = inputs
        b, h, s, d = cfg["batch"], cfg["heads"], cfg["seqlen"], cfg["head_dim"]
        pairs = sorted({(0, 0), (b - 1, h - 1)})
        names = ("dq", "dk", "dv")
        errs = {impl: [0.0, 0.0, 0.0] for impl in grads}
        for bi, hi in pairs:
            leaves = [x[bi, :, hi].float().requires_grad_() for x in (q, k, v)]
            sc = (leaves[0] @ leaves[1].T) / math.sqrt(d)
            if cfg["causal"]:
                i = torch.arange(s, device=q.device)[:, None]
                j = torch.arange(s, device=q.device)[None, :]
                sc = sc.masked_fill(j > i, float("-inf"))
            o = torch.softmax(sc, dim=-1) @ leaves[2]
            ref = torch.autograd.grad(o, leaves, do[bi, :, hi].float())
            del sc, o
            for impl, g in grads.items():
                for n in range(3):
                    x = g[n][bi, :, hi]  # every implementation's gradients are [b, s, h, d]
                    errs[impl][n] = max(errs[impl][n], (x.float() - ref[n]).abs().max().item())
        rec = dict(cfg, slice="batch,head in %s" % (pairs,), err32={i: dict(zip(names, e)) for i, e in errs.items()})
        lowp_from = next((i for i in ("fa2", "cudnn") if i in errs and all(math.isfinite(x) for x in errs[i])), None)
        why = []
        nonfinite = sum(int((~torch.isfinite(g)).sum().item()) for g in grads["flashgen"])
        if nonfinite:
            why.append("%d NaN/Inf gradient elements (NaN-filled before the call: elements not written?)" % nonfinite)
        if lowp_from is None:
            why.append("no SDPA backward ran: no low-precision reference for the bound")
        else:
            rec["lowp_reference"] = lowp_from
            for n, name in enumerate(names):
                bound = 3 * errs[lowp_from][n] + 1e-5
                rec["bound_" + name] = bound
                if errs["flashgen"][n] > bound:
                    why.append("%s: max|grad-ref32| %.3g > 3 x %s's %.3g + 1e-5" % (name, errs["flashgen"][n], lowp_from,
                                                                                   errs[lowp_from][n]))
        rec["status"] = "WRONG" if why else "ok"
        rec["why"] = "; ".join(why)
        rec["peer_status"] = {i: "reference" if i == lowp_from else "unchecked" for i in grads if i != "flashgen"}
        return rec


# ====================================================================== results: files, charts, table


def load_previous(path, gpu):
    """Rows, checks and runs of an earlier part in the same directory (same GPU), or empty lists."""
    try:
        with open(path) as f:
            old = json.load(f)
    except (OSError, ValueError):
        return [], [], []
    if old.get("schema") != SCHEMA or not old.get("runs") or old["runs"][-1].get("gpu") != gpu:
        print("note: %s is from another GPU or format; not merged" % path, file=sys.stderr)
        return [], [], []
    return old.get("results", []), old.get("checks", []), old.get("runs", [])


def merge(old_rows, old_checks, new_rows, new_checks):
    """New rows replace old rows of the same (implementation, dtype, head_dim, causal, seqlen)."""
    new_keys = {key_of(r) for r in new_rows}
    rows = [r for r in old_rows if key_of(r) not in new_keys] + new_rows
    ckey = lambda c: (c["dtype"], c["head_dim"], bool(c["causal"]), c["seqlen"])
    new_ck = {ckey(c) for c in new_checks}
    checks = [c for c in old_checks if ckey(c) not in new_ck] + new_checks
    order = lambda r: (DTYPES.index(r["dtype"]) if r["dtype"] in DTYPES else 9, r["head_dim"], bool(r["causal"]), r["seqlen"])
    rows.sort(key=lambda r: order(r) + (IMPLS.index(r["implementation"]),))
    checks.sort(key=order)
    return rows, checks


CSV_FIELDS = ("implementation", "dtype", "head_dim", "causal", "seqlen", "batch", "heads", "median_ms", "tflops",
              "check", "run", "note")


def write_files(out_dir, rows, checks, runs):
    """compare.json (protocol, runs, every row and check) and compare.csv, each replaced atomically."""
    os.makedirs(out_dir, exist_ok=True)
    doc = {
        "schema": SCHEMA,
        "protocol": {
            "source": "docs/performance.md",
            "shapes": "hidden %d (heads = %d / head_dim), %d tokens (batch = %d / seqlen), [b, s, h, d]"
                      % (HIDDEN, HIDDEN, TOTAL_TOKENS, TOTAL_TOKENS),
            "flops": "4 * b * h * sq * sk * d, halved when causal",
            "timing": "CUDA events around each call, enqueued behind a GPU sleep; median of iters; compile excluded",
            "check": "max|out - ref32| <= 2 * max|ref_lowp - ref32| + 1e-5 on a slice (ref32: fp32 math on upcast "
                     "inputs; ref_lowp: SDPA FA2), no NaN/Inf, LSE within %g + %g|ref|" % (LSE_ATOL, LSE_RTOL),
            "sdpa_inputs": "transposed [b, h, s, d] views of the [b, s, h, d] tensors flashgen gets",
            "flashgen_lse": "timed without the LSE output",
        },
        "runs": runs,
        "results": rows,
        "checks": checks,
    }
    tmp = os.path.join(out_dir, "compare.json.tmp")
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, default=str)
    os.replace(tmp, os.path.join(out_dir, "compare.json"))
    tmp = os.path.join(out_dir, "compare.csv.tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            r2 = dict(r)
            r2["median_ms"] = "%.5f" % r["median_ms"] if r.get("median_ms") else ""
            r2["tflops"] = "%.2f" % r["tflops"] if r.get("tflops") else ""
            r2["causal"] = int(bool(r["causal"]))
            w.writerow(r2)
    os.replace(tmp, os.path.join(out_dir, "compare.csv"))


def draw_charts(out_dir, rows, gpu, impls=IMPLS, labels=LABELS, colors=None, prefix=None):
    """One PNG per (head_dim, dtype): TFLOP/s against seqlen, a color per implementation, solid lines
    without mask and dashed with the causal mask. Returns the paths written (none without matplotlib).
    impls/labels/colors name other implementations (bench/fp8.py's); prefix replaces "fwd"/"bwd" in the
    file names."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print("note: no charts (matplotlib is not importable: %s)" % e, file=sys.stderr)
        return []
    colors = colors or {"flashgen": "tab:red", "cudnn": "tab:green", "fa2": "tab:blue", "flex": "tab:purple"}
    paths = []
    groups = sorted({(r["head_dim"], r["dtype"]) for r in rows})
    for d, dt in groups:
        sel = [r for r in rows if r["head_dim"] == d and r["dtype"] == dt]
        fig, ax = plt.subplots(figsize=(8, 5))
        seqlens = sorted({r["seqlen"] for r in sel})
        for impl in impls:
            for causal in (False, True):
                pts = sorted((r["seqlen"], r["tflops"]) for r in sel
                             if r["implementation"] == impl and bool(r["causal"]) == causal and r.get("tflops")
                             and r.get("check") != "WRONG")
                if not pts:
                    continue
                ax.plot([p[0] for p in pts], [p[1] for p in pts], color=colors[impl], marker="o", markersize=4,
                        linestyle="--" if causal else "-",
                        label="%s%s" % (labels[impl], ", causal" if causal else ""))
        ax.set_xscale("log", base=2)
        ax.set_xticks(seqlens)
        ax.set_xticklabels([str(s) if s < 1024 else "%dk" % (s // 1024) for s in seqlens])
        ax.set_xlabel("seqlen (batch = %d / seqlen, heads = %d / head_dim)" % (TOTAL_TOKENS, HIDDEN))
        ax.set_ylabel("TFLOP/s")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        which = "backward" if any(r.get("pass") == "bwd" for r in sel) else "forward"
        ax.set_title("attention %s, %s, head_dim %d, %s (solid: no mask, dashed: causal)" % (which, gpu, d, dt), fontsize=10)
        if ax.get_lines():
            ax.legend(fontsize=8, ncol=2)
        fig.tight_layout()
        path = os.path.join(out_dir, "%s_d%d_%s.png" % (prefix or ("bwd" if which == "backward" else "fwd"), d, dt))
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def table(rows):
    """The comparison table: one row per config, TFLOP/s per implementation, then flashgen/cuDNN and
    flashgen/FA2, and a geometric-mean line over the configs where both ratios exist."""
    impls = [i for i in IMPLS if any(r["implementation"] == i for r in rows)]
    by_cfg = {}
    for r in rows:
        by_cfg.setdefault((r["dtype"], r["head_dim"], bool(r["causal"]), r["seqlen"], r["batch"], r["heads"]), {})[
            r["implementation"]] = r

    def cell(r):
        if r is None:
            return "-"
        if r.get("check") == "WRONG":
            return "WRONG"
        return "%.1f" % r["tflops"] if r.get("tflops") else "n/a"

    def ratio(a, b):
        if a and b and a.get("tflops") and b.get("tflops") and a.get("check") != "WRONG":
            return a["tflops"] / b["tflops"]
        return None

    head = ["dtype", "d", "mask", "seqlen", "batch", "heads"] + [LABELS[i] for i in impls] + ["fg/cuDNN", "fg/FA2"]
    lines, r_cudnn, r_fa2 = [], [], []
    order = lambda k: (DTYPES.index(k[0]) if k[0] in DTYPES else 9,) + k[1:]
    for key in sorted(by_cfg, key=order):
        dt, d, causal, s, b, h = key
        got = by_cfg[key]
        fg = got.get("flashgen")
        rc, rf = ratio(fg, got.get("cudnn")), ratio(fg, got.get("fa2"))
        if rc:
            r_cudnn.append(rc)
        if rf:
            r_fa2.append(rf)
        lines.append([dt, str(d), "causal" if causal else "none", str(s), str(b), str(h)]
                     + [cell(got.get(i)) for i in impls]
                     + ["%.2f" % rc if rc else "-", "%.2f" % rf if rf else "-"])
    geo = lambda xs: "%.2f" % math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else "-"
    lines.append(["geomean", "", "", "", "", ""] + [""] * len(impls) + [geo(r_cudnn), geo(r_fa2)])
    widths = [max(len(x) for x in col) for col in zip(head, *lines)]
    fmt = lambda cols: "  ".join(c.rjust(w) if i >= 1 else c.ljust(w) for i, (c, w) in enumerate(zip(cols, widths)))
    out = [fmt(head), "  ".join("-" * w for w in widths)]
    out += [fmt(x) for x in lines]
    which = "backward, 2.5x the forward's FLOPs" if any(r.get("pass") == "bwd" for r in rows) else "forward"
    return "TFLOP/s (%s; WRONG: failed the check, not timed; n/a: refused, see notes)\n" % which + "\n".join(out)


def notes(rows):
    """Why each n/a or WRONG entry is so, one line each."""
    out = []
    for r in rows:
        if (r.get("check") == "WRONG" or not r.get("tflops")) and r.get("note"):
            out.append("%s %s d%d %s s%d: %s" % (LABELS[r["implementation"]], r["dtype"], r["head_dim"],
                                                 "causal" if r["causal"] else "none", r["seqlen"], r["note"]))
        elif r.get("note"):
            out.append("(info) %s %s d%d %s s%d: %s" % (LABELS[r["implementation"]], r["dtype"], r["head_dim"],
                                                        "causal" if r["causal"] else "none", r["seqlen"], r["note"]))
    return out


# ====================================================================== main


def redraw(out_dir):
    """--redraw: the charts and the table of an existing result directory (DIR/compare.json, or
    compare.json.gz). Exit status 0, or 1 when it is missing or not this script's format."""
    path = os.path.join(out_dir, "compare.json")
    try:
        old, path = read_json(path)
    except (OSError, ValueError) as e:
        print("compare.py: cannot read %s: %s" % (path, e), file=sys.stderr)
        return 1
    if old.get("schema") != SCHEMA or not old.get("runs") or not old.get("results"):
        print("compare.py: %s is not a compare.py result (schema %s expected)" % (path, SCHEMA), file=sys.stderr)
        return 1
    rows = old["results"]
    paths = draw_charts(out_dir, rows, old["runs"][-1].get("gpu", "unknown GPU"))
    print("compare.py: redrew %s" % ", ".join(os.path.basename(p) for p in paths) if paths else
          "compare.py: no charts drawn", file=sys.stderr)
    print(table(rows))
    return 0


def main(argv=None):
    """Runs the sweep; the exit status is documented at the top of the file."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.redraw:
        return redraw(args.redraw)
    try:
        import torch
    except ImportError:
        print("compare.py: PyTorch is not installed; it runs the peers and the references", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("compare.py: no CUDA device visible to PyTorch", file=sys.stderr)
        return 2
    bench = BwdBench(args) if args.bwd else Bench(args)
    env = bench.environment()
    gpu = env["gpu"]
    out_dir = args.out or os.path.join(REPO, "bench", "results", "%s-%s%s" % (
        datetime.date.today().isoformat(), slug(gpu), "-bwd" if args.bwd else ""))
    old_rows, old_checks, runs = ([], [], []) if args.fresh else load_previous(os.path.join(out_dir, "compare.json"), gpu)
    run_id = len(runs)
    env["run"] = run_id
    runs = runs + [env]
    print("compare.py: %s, driver %s, torch %s, cuDNN %s, flashgen %s (%s), commit %s" % (
        gpu, env["driver"], env["torch"], env["cudnn"], env["flashgen_version"], env["flashgen_library"],
        env["git_commit"]), file=sys.stderr)
    if bench.fg is None:
        print("compare.py: flashgen is n/a in this run: %s" % bench.fg_error, file=sys.stderr)
    if args.iters < 20:
        print("compare.py: note: --iters %d is below the protocol's 20" % args.iters, file=sys.stderr)
    if bench.cycles_per_ms is None:
        print("compare.py: note: torch.cuda._sleep is missing; host launch cost may show at small sizes", file=sys.stderr)

    cfgs = configs(args)
    new_rows, new_checks = [], []
    t_start = time.time()
    for n, cfg in enumerate(cfgs, 1):
        t0 = time.time()
        try:
            rows, check = bench.run(cfg)
        except Exception as e:  # out of memory or a peer crashing: record and go on
            torch.cuda.empty_cache()
            why = "config failed: %s: %s" % (type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else "")
            rows = [dict(cfg, implementation=i, flops=flops(cfg), median_ms=None, tflops=None, check="n/a", note=why)
                    for i in IMPLS if i != "flex" or args.flex]
            check = dict(cfg, status="n/a", why=why)
        torch.cuda.empty_cache()  # the config's inputs are gone; give their blocks back before the next size
        for r in rows:
            r["run"] = run_id
        check["run"] = run_id
        new_rows += rows
        new_checks.append(check)
        got = {r["implementation"]: r for r in rows}
        print("[%d/%d] %s d%d %s s%d b%d h%d: %s  (check %s, %.1f s)" % (
            n, len(cfgs), cfg["dtype"], cfg["head_dim"], "causal" if cfg["causal"] else "none", cfg["seqlen"],
            cfg["batch"], cfg["heads"],
            "  ".join("%s %s" % (LABELS[i], "WRONG" if got[i].get("check") == "WRONG" else
                                 "%.1f" % got[i]["tflops"] if got[i].get("tflops") else "n/a") for i in got),
            check.get("status"), time.time() - t0), file=sys.stderr, flush=True)
        # written after every config, so a part cut short by a time limit keeps what it measured
        rows_all, checks_all = merge(old_rows, old_checks, new_rows, new_checks)
        write_files(out_dir, rows_all, checks_all, runs)
    rows_all, checks_all = merge(old_rows, old_checks, new_rows, new_checks)
    charts = draw_charts(out_dir, rows_all, gpu)
    print("compare.py: %d configs in %.0f s; wrote %s, %s%s" % (
        len(cfgs), time.time() - t_start, os.path.join(out_dir, "compare.csv"), os.path.join(out_dir, "compare.json"),
        "".join(", " + os.path.basename(p) for p in charts)))
    merged_runs = sorted({r.get("run") for r in rows_all})
    if len(merged_runs) > 1:
        print("compare.py: the table merges runs %s in %s (see compare.json runs[])" % (merged_runs, out_dir))
    for line in notes(rows_all):
        print("note: " + line)
    print()
    print(table(rows_all))
    return 1 if any(c.get("status") == "WRONG" for c in new_checks) else 0


if __name__ == "__main__":
    sys.exit(main())
