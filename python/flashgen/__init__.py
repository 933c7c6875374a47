"""flashgen: FlashAttention kernels generated and compiled at run time; a thin ctypes binding over
libflashgen.so (see README.md and include/flashgen.h).

    import torch, flashgen
    q, k, v = (torch.randn(2, 4096, 16, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o = flashgen.attention(q, k, v, causal=True)                  # [batch, seqlen, heads, head_dim]
    o, lse = flashgen.attention(q, k, v, return_lse=True)         # lse: [batch, heads, seqlen_q], fp32
    print(flashgen.explain(q, k, v, causal=True))                 # which kernel, from where, why

Importing needs neither PyTorch nor the library: the library is loaded on first use (from $FLASHGEN_LIB,
else ../../build/libflashgen.so relative to this package, else the dynamic loader's path). The binding
translates and never re-checks what the C library checks; every failure of the library becomes a
FlashgenError carrying the status name and the library's sentence. One fg_context per CUDA device is
created on first use (it retains the device's primary context, the one PyTorch uses) and destroyed at
exit or by close().
"""

import atexit
import ctypes
import os
import sys
import threading

from . import _capi, _tensors
from ._capi import FlashgenError, LibraryNotFoundError
from ._tensors import TensorDesc

version = _capi.VERSION_STRING
__version__ = version

__all__ = [
    "attention", "explain", "prepare", "bundle_load", "bundle_load_memory", "configure", "close",
    "library_path", "FlashgenError", "LibraryNotFoundError", "TensorDesc", "version",
]

_LOG_LEVELS = {"none": _capi.FG_LOG_NONE, "error": _capi.FG_LOG_ERROR, "warn": _capi.FG_LOG_WARN,
               "warning": _capi.FG_LOG_WARN, "info": _capi.FG_LOG_INFO, "debug": _capi.FG_LOG_DEBUG}


class _Context:
    """One fg_context and the lock that pairs each call with its fg_last_error (kept per context by the
    library, so a failure must be read before another thread's call on the same context)."""

    __slots__ = ("handle", "device", "lock")

    def __init__(self, handle, device):
        self.handle = handle          # fg_context * as an integer
        self.device = device          # CUDA ordinal
        self.lock = threading.Lock()  # held from a call until its error, if any, is read


_contexts = {}                       # CUDA ordinal -> _Context
_contexts_lock = threading.Lock()    # guards _contexts, _options and _atexit_done
_options = {}                        # fg_context_options fields set by configure()
_atexit_done = False


def configure(log_level=None, strict=None, cache_dir=None, disable_disk_cache=None):
    """Sets fg_context_options for contexts created from now on (each device's context is created on its
    first use). log_level: "none", "error", "warn", "info" (logs each JIT compile with its time) or
    "debug", or an fg_log_level int; strict: a variant in no cache and no bundle is an error instead of a
    compile; cache_dir: the disk cache directory; disable_disk_cache: keep kernels in memory only.
    Raises RuntimeError when a context already exists (close() first)."""
    with _contexts_lock:
        if _contexts:
            raise RuntimeError("flashgen.configure: contexts already exist for devices %s; call "
                               "flashgen.close() first" % sorted(_contexts))
        if isinstance(log_level, str):
            if log_level not in _LOG_LEVELS:
                raise ValueError("log_level %r is not one of %s" % (log_level, ", ".join(_LOG_LEVELS)))
            _options["log_level"] = _LOG_LEVELS[log_level]
        elif log_level is not None:
            _options["log_level"] = int(log_level)  # the library refuses a value outside 0..4
        if strict is not None:
            _options["strict"] = int(bool(strict))
        if cache_dir is not None:
            _options["cache_dir"] = os.fsencode(cache_dir)
        if disable_disk_cache is not None:
            _options["disable_disk_cache"] = int(bool(disable_disk_cache))


def _context(device):
    """The context of CUDA device `device`, created on first use (thread-safe). Raises FlashgenError
    (FG_ERR_NO_DEVICE without a driver or GPU) or LibraryNotFoundError."""
    global _atexit_done
    ctx = _contexts.get(device)
    if ctx is not None:
        return ctx
    lib = _capi.lib()
    with _contexts_lock:
        ctx = _contexts.get(device)
        if ctx is not None:
            return ctx
        opts = _capi.FgContextOptions()
        lib.fg_context_options_init(ctypes.byref(opts))
        opts.device = device
        for field, value in _options.items():
            setattr(opts, field, value)
        handle = ctypes.c_void_p()
        st = lib.fg_context_create(ctypes.byref(handle), ctypes.byref(opts))
        if st != _capi.FG_OK:
            raise _capi.error_from(st, None)  # fg_last_error(NULL): this thread's create failure
        ctx = _Context(handle.value, device)
        _contexts[device] = ctx
        if not _atexit_done:
            atexit.register(close)
            _atexit_done = True
        return ctx


def close():
    """Destroys every context this module created (their kernels are unloaded); later calls create new
    ones. Registered with atexit. Do not call it while another thread is inside a flashgen call."""
    with _contexts_lock:
        ctxs = list(_contexts.values())
        _contexts.clear()
    if ctxs:
        lib = _capi.lib()
        for ctx in ctxs:
            with ctx.lock:
                lib.fg_context_destroy(ctx.handle)


def library_path():
    """The path libflashgen was loaded from (loading it if needed; raises LibraryNotFoundError)."""
    return _capi.lib_path()


def _call(ctx, fn, *args):
    """Calls fn(ctx, *args); a non-OK status becomes FlashgenError with fg_last_error(ctx)."""
    with ctx.lock:
        st = fn(ctx.handle, *args)
        if st != _capi.FG_OK:
            raise _capi.error_from(st, ctx.handle)


def _default_device():
    """PyTorch's current device when PyTorch has initialized CUDA, else 0 (PyTorch is never imported here)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return torch.cuda.current_device()
    return 0


def _bad(message):
    """The FlashgenError of a rule the binding itself enforces (where memory lives)."""
    return FlashgenError(_capi.STATUS_NAMES[_capi.FG_ERR_INVALID_ARGUMENT], message, _capi.FG_ERR_INVALID_ARGUMENT)


def _device_for(named_views, need_device_memory, fallback):
    """The CUDA ordinal all arguments live on: the first one an argument states, else `fallback`. The
    library cannot see where memory lives, so the binding refuses host memory (a launch would fault) and
    arguments on two devices (the context, and so the pointers' meaning, is per device)."""
    device, first = None, None
    for name, v in named_views:
        if v is None:
            continue
        if isinstance(v.device, str):
            if need_device_memory:
                raise _bad("%s is in %s memory; flashgen reads and writes CUDA device memory" % (name, v.device))
            continue
        if v.device is None:
            continue
        if device is None:
            device, first = v.device, name
        elif v.device != device:
            raise _bad("%s is on CUDA device %d but %s is on device %d; all tensors must be on one device"
                       % (name, v.device, first, device))
    return device if device is not None else fallback


def _stream_handle(stream, q):
    """The CUstream to launch on: `stream` when given (an int handle, or an object with .cuda_stream
    (torch) or .ptr (CuPy)); else PyTorch's current stream on q's device when q is a torch tensor; else 0,
    the legacy default stream."""
    if stream is not None:
        if isinstance(stream, int):
            return stream
        for attr in ("cuda_stream", "ptr", "handle"):
            h = getattr(stream, attr, None)
            if isinstance(h, int):
                return h
        raise TypeError("stream is a %s; pass an int CUstream handle or a torch/CuPy stream" % type(stream).__name__)
    if _tensors._is_torch_tensor(q) and q.device.type == "cuda":
        return sys.modules["torch"].cuda.current_stream(q.device).cuda_stream
    return 0


def _args(vq, vk, vv, vo, vlse, causal, softmax_scale):
    """The fg_fwd_args of one call (softmax_scale None: the library's default, 1/sqrt(head_dim))."""
    return _capi.FgFwdArgs(vq.struct(), vk.struct(), vv.struct(), vo.struct(),
                           vlse.struct() if vlse is not None else _capi.FgTensor(),
                           0.0 if softmax_scale is None else float(softmax_scale), int(causal))


def attention(q, k, v, causal=False, softmax_scale=None, return_lse=False, out=None, stream=None, lse=None):
    """O = softmax(softmax_scale * Q K^T [causal mask]) V, on the GPU, by a flashgen kernel.

    q [batch, seqlen_q, heads_q, head_dim]; k, v [batch, seqlen_k, heads_kv, head_dim] (heads_kv divides
    heads_q: GQA/MQA); fp16 or bf16, last dim contiguous: torch tensors, or objects exposing
    __cuda_array_interface__ or __dlpack__ (then out= is required). causal is bottom-right aligned when
    seqlen_q != seqlen_k. softmax_scale None means 1/sqrt(head_dim). out: where O goes (default
    torch.empty_like(q)). return_lse: also return the natural-log LSE, fp32 [batch, heads_q, seqlen_q]
    (allocated for torch inputs; otherwise pass lse=, which is written whenever given). stream: the
    CUstream (default: PyTorch's current stream for torch inputs, else the legacy default stream).
    Nothing synchronizes; forward only (no autograd). Returns out, or (out, lse) with return_lse.
    Raises FlashgenError (status name and the library's sentence) when the library refuses the call."""
    handle = _stream_handle(stream, q)
    dl_stream = handle or None  # DLPack: None means the legacy default stream
    vq = _tensors.view(q, "q", dl_stream)
    vk = _tensors.view(k, "k", dl_stream)
    vv = _tensors.view(v, "v", dl_stream)
    if out is None:
        if not vq.is_torch:
            raise TypeError("out= is required when q is not a torch tensor (the binding allocates through torch only)")
        out = sys.modules["torch"].empty_like(q)
    if return_lse and lse is None:
        if not vq.is_torch:
            raise TypeError("return_lse=True with a non-torch q needs lse= (an fp32 [batch, heads_q, seqlen_q] array)")
        if len(vq.shape) == 4:  # otherwise the library refuses q; there is no LSE shape to allocate
            b, sq, h, _ = vq.shape
            lse = sys.modules["torch"].empty((b, h, sq), dtype=sys.modules["torch"].float32, device=q.device)
    vo = _tensors.view(out, "out", dl_stream)
    vlse = _tensors.view(lse, "lse", dl_stream) if lse is not None else None
    device = _device_for((("q", vq), ("k", vk), ("v", vv), ("out", vo), ("lse", vlse)), True, None)
    if device is None:
        device = _default_device()
    ctx = _context(device)
    a = _args(vq, vk, vv, vo, vlse, causal, softmax_scale)
    _call(ctx, _capi.lib().fg_attention_fwd, ctypes.byref(a), handle)
    return (out, lse) if return_lse else out


def _plan_args(q, k, v, causal, softmax_scale, out, device):
    """Views and device for explain/prepare: no memory is needed, so O is described from q when out is
    not given, and host or meta tensors are accepted as shape carriers."""
    vq, vk, vv = _tensors.view(q, "q"), _tensors.view(k, "k"), _tensors.view(v, "v")
    if out is not None:
        vo = _tensors.view(out, "out")
    else:
        vo = _tensors.View(0, vq.dtype, vq.shape, _tensors.contiguous_strides(vq.shape), vq.device)
    if device is None:
        device = _device_for((("q", vq), ("k", vk), ("v", vv), ("out", vo)), False, None)
        if device is None:
            device = _default_device()
    return _args(vq, vk, vv, vo, None, causal, softmax_scale), device


def explain(q, k, v, causal=False, softmax_scale=None, out=None, device=None):
    """Which kernel attention() would run for these arguments and why (fg_explain): the variant's name,
    where its code would come from (memory, disk cache, bundle, JIT) and the reason for its tiles.
    Arguments may be TensorDesc (no memory). device: the CUDA ordinal, when the arguments do not say.
    Returns a str; raises FlashgenError."""
    a, dev = _plan_args(q, k, v, causal, softmax_scale, out, device)
    ctx = _context(dev)
    buf = ctypes.create_string_buffer(8192)
    _call(ctx, _capi.lib().fg_explain, ctypes.byref(a), buf, len(buf))
    return buf.value.decode(errors="replace")


def prepare(q, k, v, causal=False, softmax_scale=None, out=None, device=None):
    """Compiles (or loads from the caches or a bundle) the kernel attention() would run for these
    arguments, so the first call does not pay for it (fg_prepare). Arguments may be TensorDesc.
    Returns None; raises FlashgenError."""
    a, dev = _plan_args(q, k, v, causal, softmax_scale, out, device)
    _call(_context(dev), _capi.lib().fg_prepare, ctypes.byref(a))


def bundle_load(path, device=None):
    """Loads a bundle written by `flashgen bundle` into the context of `device` (default: PyTorch's
    current device, else 0); its kernels are then used before any JIT compile. Raises FlashgenError."""
    ctx = _context(_default_device() if device is None else device)
    _call(ctx, _capi.lib().fg_bundle_load, os.fsencode(path))


def bundle_load_memory(data, device=None):
    """Loads a bundle held in memory (bytes-like; the library copies it). Raises FlashgenError."""
    ctx = _context(_default_device() if device is None else device)
    raw = bytes(data)
    buf = ctypes.create_string_buffer(raw, len(raw))
    _call(ctx, _capi.lib().fg_bundle_load_memory, ctypes.cast(buf, ctypes.c_void_p), len(raw))
