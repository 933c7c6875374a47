"""flashgen: FlashAttention kernels generated and compiled at run time; a thin ctypes binding over
libflashgen.so (see README.md and include/flashgen.h).

    import torch, flashgen
    q, k, v = (torch.randn(2, 4096, 16, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o = flashgen.attention(q, k, v, causal=True)                  # [batch, seqlen, heads, head_dim]
    o, lse = flashgen.attention(q, k, v, return_lse=True)         # lse: [batch, heads, seqlen_q], fp32
    print(flashgen.explain(q, k, v, causal=True))                 # which kernel, from where, why
    flashgen.wait_compiles()   # a first call runs a quick build; this waits for the optimized ones (benchmarks)

FP8 (sm_89 and newer): quantize with a descale factor per tensor or per (batch, head), optionally after a
Hadamard rotation of Q and K that spreads outliers over the head dim:

    q, k = flashgen.hadamard_rotate(q, k)                         # QK^T unchanged, outliers spread
    q8, qd = flashgen.quantize_fp8(q, per="head", heads_kv=k.shape[2])
    k8, kd = flashgen.quantize_fp8(k, per="head")
    v8, vd = flashgen.quantize_fp8(v)
    o = flashgen.attention(q8, k8, v8, q_descale=qd, k_descale=kd, v_descale=vd)   # o: bf16

Importing needs neither PyTorch nor the library: the library is loaded on first use (from $FLASHGEN_LIB,
else flashgen/lib/libflashgen.so of an installed package,
else ../../build/libflashgen.so relative to this package, else the dynamic loader's path). The binding
translates and never re-checks what the C library checks; every failure of the library becomes a
FlashgenError carrying the status name and the library's sentence. One fg_context per CUDA device is
created on first use (it retains the device's primary context, the one PyTorch uses) and destroyed at
exit or by close().
"""

import atexit
import contextlib
import ctypes
import os
import sys
import threading

from . import _capi, _mods, _tensors
from ._capi import FlashgenError, LibraryNotFoundError
from ._mods import MaskMap, Mod
from ._tensors import TensorDesc
from ._serving import (attention_varlen, attention_varlen_backward, attention_with_kvcache, explain_varlen,
                       merge_states, set_check_inputs)

version = _capi.VERSION_STRING
__version__ = version

__all__ = [
    "attention", "explain", "explain_backward", "prepare", "wait_compiles", "set_jit_tiers", "bundle_load", "bundle_load_memory", "configure", "close",
    "library_path", "FlashgenError", "LibraryNotFoundError", "TensorDesc", "version", "hadamard_rotate",
    "quantize_fp8", "key_major_v", "attention_backward", "register_ops", "attention_varlen", "attention_varlen_backward",
    "attention_with_kvcache", "explain_varlen", "merge_states", "set_check_inputs", "Mod", "MaskMap",
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


def _args(vq, vk, vv, vo, vlse, causal, softmax_scale, descales=(None, None, None)):
    """The fg_fwd_args of one call (softmax_scale None: the library's default, 1/sqrt(head_dim); descales: the
    Views of q/k/v_descale, None for absent)."""
    d = [x.struct() if x is not None else _capi.FgTensor() for x in descales]
    return _capi.FgFwdArgs(vq.struct(), vk.struct(), vv.struct(), vo.struct(),
                           vlse.struct() if vlse is not None else _capi.FgTensor(),
                           0.0 if softmax_scale is None else float(softmax_scale), int(causal), d[0], d[1], d[2])


def _torch():
    """PyTorch, imported on demand (the helpers that compute need it; importing flashgen does not)."""
    try:
        import torch
    except ImportError:
        raise ImportError("this flashgen function needs PyTorch, which is not installed") from None
    return torch


def key_major_v(v):
    """The FP8 kernel's V layout for a torch tensor v [batch, seqlen_k, heads_kv, head_dim]: a copy into a
    zero-padded [batch, heads_kv, head_dim, seqlen_k'] buffer (seqlen_k' = seqlen_k rounded up to 16), returned
    as its [batch, seqlen_k, heads_kv, head_dim] view (stride[1] == 1). This is one pass over V; callers that
    keep V in this layout (for example a KV cache written key-major) pass the view to attention() directly.
    Returns v itself when it is already in that layout."""
    vv = _tensors.view(v, "v")
    if _tensors.is_key_major(vv.shape, vv.stride, vv.data):
        return v
    torch = _torch()
    b, sk, h, d = v.shape
    skp = max((sk + 15) // 16 * 16, 16)
    # Through uint8 views: zero-filling and copying bytes needs no fp8 kernels in this PyTorch build.
    buf = torch.zeros((b, h, d, skp), dtype=torch.uint8, device=v.device)
    buf[..., :sk].copy_(v.view(torch.uint8).permute(0, 2, 3, 1))
    return buf.view(v.dtype).permute(0, 3, 1, 2)[:, :sk]


def _on_launch_stream(handle, device):
    """A context in which PyTorch work (the V copy, a descale made from a number) is queued on the stream the
    kernel launches on, so it is done before the kernel reads it and its memory is not reused before the
    kernel is (PyTorch's allocator orders reuse on the stream a block was allocated on)."""
    torch = sys.modules["torch"]
    if torch.cuda.current_stream(device).cuda_stream == handle:
        return contextlib.nullcontext()
    return torch.cuda.stream(torch.cuda.ExternalStream(handle, device=device))


def _descale_view(x, name, like, dl_stream):
    """(View, object to keep alive) of a descale argument, or None for None. A Python number becomes a
    one-element fp32 tensor on like's device (a small host-to-device copy; pass a device tensor to avoid it)."""
    if x is None:
        return None
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        torch = _torch()
        x = torch.tensor([float(x)], dtype=torch.float32, device=like.device)
    return _tensors.view(x, name, dl_stream), x


def _out_dtype_for(torch, vq, q, out_dtype):
    """The dtype O is allocated in: out_dtype when given; for fp8 inputs bf16; otherwise q's."""
    if out_dtype is not None:
        return out_dtype
    return torch.bfloat16 if vq.dtype in _tensors.FP8_DTYPES else q.dtype


def _serving_call(q, v, window_size, softcap, alibi_slopes, sinks, causal_top_left, mod=None):
    """Whether a dense call names a model variant, a custom mod or a v of its own head dim: attention() then runs
    the serving call (attention_varlen) on its tensors."""
    variants = (window_size is not None and tuple(window_size) != (-1, -1)) or bool(softcap) or \
        alibi_slopes is not None or sinks is not None or bool(causal_top_left) or mod is not None
    return variants or (hasattr(q, "shape") and hasattr(v, "shape") and v.shape[-1] != q.shape[-1])


def attention(q, k, v, causal=False, softmax_scale=None, return_lse=False, out=None, stream=None, lse=None,
              q_descale=None, k_descale=None, v_descale=None, out_dtype=None, deterministic=False, window_size=None,
              softcap=0.0, alibi_slopes=None, sinks=None, causal_top_left=False, mod=None, mod_aux=None):
    """O = softmax(softmax_scale * Q K^T [causal mask]) V, on the GPU, by a flashgen kernel.

    q [batch, seqlen_q, heads_q, head_dim]; k, v [batch, seqlen_k, heads_kv, head_dim] (heads_kv divides
    heads_q: GQA/MQA); fp16 or bf16, last dim contiguous: torch tensors, or objects exposing
    __cuda_array_interface__ or __dlpack__ (then out= is required). causal is bottom-right aligned when
    seqlen_q != seqlen_k. softmax_scale None means 1/sqrt(head_dim). out: where O goes (default
    torch.empty_like(q)). return_lse: also return the natural-log LSE, fp32 [batch, heads_q, seqlen_q]
    (allocated for torch inputs; otherwise pass lse=, which is written whenever given). stream: the
    CUstream (default: PyTorch's current stream for torch inputs, else the legacy default stream).

    FP8 (sm_89 and newer): q, k, v all torch.float8_e4m3fn or all torch.float8_e5m2; head_dim a multiple of
    32. O is allocated in out_dtype (torch.bfloat16 by default, torch.float16 allowed; a given out= decides
    by its own dtype). q_descale, k_descale, v_descale: fp32 tensors on the device of shape [1] or [batch,
    heads_kv] (a Python number is copied to the device), None for 1.0; the softmax uses softmax_scale *
    q_descale * k_descale and O = (P V) * v_descale / l. The kernel takes V key-major: unless v already is
    (see key_major_v), the binding copies it into that layout first, which costs one pass over V; keep V
    in that layout and pass the view to avoid it.

    torch tensors (without out= and lse=) go through the custom op torch.ops.flashgen.fwd, so torch.compile
    traces the call without a graph break (see _ops.py). Training: when autograd is on and q, k or v
    requires grad (fp16/bf16), the op's registered backward runs attention_backward (deterministic: its
    mode); out=, lse= and the FP8 arguments are not taken then.

    The model variants, as FlashAttention's flash_attn_func names them: window_size (left, right), softcap,
    alibi_slopes, and sinks and causal_top_left (attention_varlen's); and a v of its own head dim (v.shape[-1]).
    Such calls run attention_varlen on the same 4-d tensors (16-bit; autograd through it, its gradients included;
    torch.compile breaks the graph there). So does a custom mod (mod=, a flashgen.Mod, with its arrays as mod_aux=;
    see attention_varlen; autograd through it): b is the batch index, kv the key's position from 0 and q the
    query's among the keys (bottom-right aligned).

    Nothing synchronizes. Returns out, or (out, lse) with return_lse.
    Raises FlashgenError (status name and the library's sentence) when the library refuses the call."""
    if _serving_call(q, v, window_size, softcap, alibi_slopes, sinks, causal_top_left, mod):
        if any(x is not None for x in (q_descale, k_descale, v_descale)) or out_dtype is not None:
            raise TypeError("attention(): the model variants, custom mods and a v of its own head dim are 16-bit only "
                            "(no descales or out_dtype)")
        return attention_varlen(q, k, v, None, None, q.shape[1], k.shape[1], causal=causal,
                                softmax_scale=softmax_scale, return_lse=return_lse, out=out, lse=lse, stream=stream,
                                deterministic=deterministic, sinks=sinks, window_size=window_size, softcap=softcap,
                                alibi_slopes=alibi_slopes, causal_top_left=causal_top_left, mod=mod, mod_aux=mod_aux)
    _mods.mod_call(None, mod_aux, "attention")  # mod_aux without a mod: ValueError
    grad = _needs_grad(q, k, v)
    if grad and (out is not None or lse is not None or any(x is not None for x in (q_descale, k_descale, v_descale))):
        raise TypeError("attention() with autograd takes no out=, lse= or descale arguments")
    torch = sys.modules.get("torch")
    if torch is not None and out is None and lse is None and isinstance(q, torch.Tensor):
        ops = _OPS if _OPS is not None else register_ops()
        ds = [x for x in (q_descale, k_descale, v_descale)]
        if not ops:
            if grad:
                raise TypeError("attention() with autograd needs PyTorch 2.4 or newer (torch.library.custom_op)")
        elif stream is None or not any(isinstance(x, (int, float)) and not isinstance(x, bool) for x in ds):
            for i, x in enumerate(ds):  # a number becomes a device tensor queued on the current stream
                if isinstance(x, (int, float)) and not isinstance(x, bool):
                    ds[i] = torch.full((1,), float(x), dtype=torch.float32, device=q.device)
            handle = stream if stream is None or isinstance(stream, int) else _stream_handle(stream, q)
            o, l = ops.fwd(q, k, v, bool(causal), None if softmax_scale is None else float(softmax_scale),
                           bool(return_lse or grad), ds[0], ds[1], ds[2], out_dtype, bool(deterministic), handle)
            return (o, l) if return_lse else o
    return _attention_direct(q, k, v, causal, softmax_scale, return_lse, out, stream, lse, q_descale, k_descale,
                             v_descale, out_dtype)


def _attention_direct(q, k, v, causal=False, softmax_scale=None, return_lse=False, out=None, stream=None, lse=None,
                      q_descale=None, k_descale=None, v_descale=None, out_dtype=None):
    """attention() without the custom op: the ctypes call itself (the op's implementation, and the path of
    non-torch arguments, out= and lse=)."""
    handle = _stream_handle(stream, q)
    dl_stream = handle or None  # DLPack: None means the legacy default stream
    vq = _tensors.view(q, "q", dl_stream)
    vk = _tensors.view(k, "k", dl_stream)
    vv = _tensors.view(v, "v", dl_stream)
    copy_v = vq.dtype in _tensors.FP8_DTYPES and vv.dtype == vq.dtype and vv.is_torch and len(vv.shape) == 4 \
        and not _tensors.is_key_major(vv.shape, vv.stride, vv.data)
    numbers = any(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (q_descale, k_descale, v_descale))
    keep = []  # what the binding made: alive until the launch is queued behind it on the same stream
    with (_on_launch_stream(handle, q.device) if (copy_v or numbers) and vq.is_torch and q.device.type == "cuda"
          else contextlib.nullcontext()):
        if copy_v:
            v = key_major_v(v)
            vv = _tensors.view(v, "v", dl_stream)
        ds = []
        for name, x in (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale)):
            r = _descale_view(x, name, q, dl_stream)
            ds.append(r[0] if r else None)
            keep.append(r[1] if r else None)
    if out is None:
        if not vq.is_torch:
            raise TypeError("out= is required when q is not a torch tensor (the binding allocates through torch only)")
        torch = sys.modules["torch"]
        dt = _out_dtype_for(torch, vq, q, out_dtype)
        out = torch.empty_like(q) if dt is q.dtype else torch.empty(tuple(q.shape), dtype=dt, device=q.device)
    if return_lse and lse is None:
        if not vq.is_torch:
            raise TypeError("return_lse=True with a non-torch q needs lse= (an fp32 [batch, heads_q, seqlen_q] array)")
        if len(vq.shape) == 4:  # otherwise the library refuses q; there is no LSE shape to allocate
            b, sq, h, _ = vq.shape
            lse = sys.modules["torch"].empty((b, h, sq), dtype=sys.modules["torch"].float32, device=q.device)
    vo = _tensors.view(out, "out", dl_stream)
    vlse = _tensors.view(lse, "lse", dl_stream) if lse is not None else None
    device = _device_for((("q", vq), ("k", vk), ("v", vv), ("out", vo), ("lse", vlse), ("q_descale", ds[0]),
                          ("k_descale", ds[1]), ("v_descale", ds[2])), True, None)
    if device is None:
        device = _default_device()
    ctx = _context(device)
    a = _args(vq, vk, vv, vo, vlse, causal, softmax_scale, ds)
    _call(ctx, _capi.lib().fg_attention_fwd, ctypes.byref(a), handle)
    return (out, lse) if return_lse else out


def _needs_grad(*inputs):
    """True when the call must record for autograd: torch is loaded, grad mode is on, and an input asks."""
    torch = sys.modules.get("torch")
    grad_enabled = getattr(torch, "is_grad_enabled", None) if torch is not None else None
    if grad_enabled is None or not grad_enabled():
        return False
    return any(_tensors._is_torch_tensor(x) and getattr(x, "requires_grad", False) for x in inputs)


def _bwd_args(tensors, causal, softmax_scale, deterministic, dl_stream):
    """The context and fg_bwd_args for (q, k, v, out, lse, dout, dq, dk, dv); no workspace yet."""
    names = ("q", "k", "v", "out", "lse", "dout", "dq", "dk", "dv")
    views = [_tensors.view(x, n, dl_stream) for x, n in zip(tensors, names)]
    device = _device_for(tuple(zip(names, views)), True, None)
    ctx = _context(device if device is not None else _default_device())
    s = [x.struct() for x in views]
    a = _capi.FgBwdArgs(s[0], s[1], s[2], s[3], s[5], s[4], s[6], s[7], s[8],
                        0.0 if softmax_scale is None else float(softmax_scale), int(causal), int(bool(deterministic)),
                        None, 0)
    return ctx, a


def explain_backward(q, k, v, out, lse, dout, causal=False, softmax_scale=None, deterministic=False):
    """Which kernel attention_backward() would run for these arguments (fg_explain_bwd): the variant's name
    on the first line, its main kernel and grid, the workspace it needs and where its code would come from.
    Nothing is allocated or launched. Returns a str; raises FlashgenError."""
    ctx, a = _bwd_args((q, k, v, out, lse, dout, q, k, v), causal, softmax_scale, deterministic, None)
    buf = ctypes.create_string_buffer(8192)
    _call(ctx, _capi.lib().fg_explain_bwd, ctypes.byref(a), buf, len(buf))
    return buf.value.decode(errors="replace")


def attention_backward(q, k, v, out, lse, dout, causal=False, softmax_scale=None, deterministic=False, dq=None,
                       dk=None, dv=None, stream=None):
    """The gradients (dq, dk, dv) of O = attention(q, k, v) for dL/dO = dout, recomputed from the forward's
    out and lse (return_lse=True). fp16/bf16, head_dim a multiple of 8 from 8 to 256 (as the forward's); dq,
    dk, dv are allocated like q, k, v unless given (for GQA dk, dv sum over the query heads of each KV
    head). deterministic: bitwise-identical gradients from run to run (slower). The fp32 workspace is
    allocated by PyTorch on the launch stream. Raises FlashgenError with the library's sentence when the call is refused."""
    torch = _torch()
    handle = _stream_handle(stream, q)
    dl_stream = handle or None
    dq = torch.empty_like(q) if dq is None else dq
    dk = torch.empty_like(k) if dk is None else dk
    dv = torch.empty_like(v) if dv is None else dv
    ctx, a = _bwd_args((q, k, v, out, lse, dout, dq, dk, dv), causal, softmax_scale, deterministic, dl_stream)
    size = ctypes.c_size_t(0)
    _call(ctx, _capi.lib().fg_attention_bwd_workspace_size, ctypes.byref(a), ctypes.byref(size))
    with _on_launch_stream(handle, q.device):  # the workspace belongs to the launch stream's allocations
        ws = torch.empty(max(size.value, 1), dtype=torch.uint8, device=q.device)
    a.workspace, a.workspace_size = ws.data_ptr(), size.value
    _call(ctx, _capi.lib().fg_attention_bwd, ctypes.byref(a), handle)
    return dq, dk, dv


_OPS = None


def register_ops():
    """Registers the torch.library custom ops torch.ops.flashgen.fwd and .bwd (imports PyTorch) and returns
    the module holding them, or False with a PyTorch that has no torch.library.custom_op (before 2.4; then
    attention() calls the library directly, without autograd or torch.compile support). Done once, by
    itself at import when torch was imported first, else on the first attention() call: call it before
    torch.compile traces a first flashgen.attention call when flashgen was imported before torch."""
    global _OPS
    if _OPS is None:
        torch = _torch()
        if not hasattr(getattr(torch, "library", None), "custom_op"):
            _OPS = False
        else:
            from . import _ops
            _OPS = _ops
    return _OPS


_OUT_CODES = {"torch.float16": _capi.FG_DTYPE_F16, "torch.bfloat16": _capi.FG_DTYPE_BF16}


def _plan_args(q, k, v, causal, softmax_scale, out, device, out_dtype=None):
    """Views and device for explain/prepare: no memory is needed, so O is described from q when out is
    not given (fp8 inputs: out_dtype, bf16 by default), fp8 V as the key-major copy attention() would make,
    and host or meta tensors are accepted as shape carriers."""
    vq, vk, vv = _tensors.view(q, "q"), _tensors.view(k, "k"), _tensors.view(v, "v")
    if vq.dtype in _tensors.FP8_DTYPES and vv.dtype == vq.dtype and len(vv.shape) == 4 \
            and not _tensors.is_key_major(vv.shape, vv.stride, vv.data):
        vv = _tensors.View(0, vv.dtype, vv.shape, _tensors.key_major_strides(vv.shape), vv.device)
    if out is not None:
        vo = _tensors.view(out, "out")
    else:
        odt = vq.dtype
        if out_dtype is not None:
            odt = _OUT_CODES.get(str(out_dtype), None)
            if odt is None:
                odt = _tensors._dtype_code(out_dtype, "out_dtype")
        elif vq.dtype in _tensors.FP8_DTYPES:
            odt = _capi.FG_DTYPE_BF16
        vo = _tensors.View(0, odt, vq.shape, _tensors.contiguous_strides(vq.shape), vq.device)
    if device is None:
        device = _device_for((("q", vq), ("k", vk), ("v", vv), ("out", vo)), False, None)
        if device is None:
            device = _default_device()
    return _args(vq, vk, vv, vo, None, causal, softmax_scale), device


def explain(q, k, v, causal=False, softmax_scale=None, out=None, device=None, out_dtype=None, window_size=None,
            softcap=0.0, alibi_slopes=None, sinks=None, causal_top_left=False, mod=None, mod_aux=None):
    """Which kernel attention() would run for these arguments and why (fg_explain): the variant's name,
    where its code would come from (memory, disk cache, bundle, JIT) and the reason for its tiles.
    Arguments may be TensorDesc (no memory). device: the CUDA ordinal, when the arguments do not say.
    out_dtype: O's dtype for fp8 inputs when out is not given (bf16 by default), as in attention().
    With a model variant, a custom mod or a v of its own head dim, attention() runs the serving call, and this is
    explain_varlen's account of it. Returns a str; raises FlashgenError."""
    if _serving_call(q, v, window_size, softcap, alibi_slopes, sinks, causal_top_left, mod):
        return explain_varlen(q, k, v, max_seqlen_q=q.shape[1], max_seqlen_k=k.shape[1], causal=causal, sinks=sinks,
                              window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                              causal_top_left=causal_top_left, mod=mod, mod_aux=mod_aux)
    _mods.mod_call(None, mod_aux, "explain")  # mod_aux without a mod: ValueError
    a, dev = _plan_args(q, k, v, causal, softmax_scale, out, device, out_dtype)
    ctx = _context(dev)
    buf = ctypes.create_string_buffer(8192)
    _call(ctx, _capi.lib().fg_explain, ctypes.byref(a), buf, len(buf))
    return buf.value.decode(errors="replace")


def prepare(q, k, v, causal=False, softmax_scale=None, out=None, device=None, out_dtype=None):
    """Compiles (or loads from the caches or a bundle) the kernel attention() would run for these
    arguments, so the first call does not pay for it (fg_prepare). Arguments may be TensorDesc.
    Returns None; raises FlashgenError."""
    a, dev = _plan_args(q, k, v, causal, softmax_scale, out, device, out_dtype)
    _call(_context(dev), _capi.lib().fg_prepare, ctypes.byref(a))


def wait_compiles(device=None):
    """Waits until the optimized builds the library compiles in the background have replaced the quick builds
    that first calls of new variants run (fg_wait_compiles), on the context of `device`, or with device None on
    every context this module made; creates none. A build that failed was logged and leaves its quick build
    running, which is no error. Benchmarks call it after their warm-up, so that they never time a quick build.
    Returns None; raises FlashgenError."""
    with _contexts_lock:
        ctxs = list(_contexts.values()) if device is None else [c for c in [_contexts.get(device)] if c]
    for ctx in ctxs:
        _call(ctx, _capi.lib().fg_wait_compiles)


def set_jit_tiers(on, device=None):
    """FG_OPTION_JIT_TIERS on the context of `device` (default: PyTorch's current device, else 0): with `on`, a call's
    JIT compile of a variant in no cache is a quick build, run at once, whose optimized build follows in the
    background (wait_compiles waits for it); off (the default, unless FLASHGEN_JIT_TIERS=1), one full compile the
    call waits for. docs/caches-and-bundles.md says why tiers are opt-in. Returns None; raises FlashgenError."""
    ctx = _context(_default_device() if device is None else device)
    _call(ctx, _capi.lib().fg_context_set_option, _capi.FG_OPTION_JIT_TIERS, int(bool(on)))


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


# ---------------------------------------------------------------- FP8 helpers (need PyTorch)

_FP8_MAX = {"torch.float8_e4m3fn": 448.0, "torch.float8_e5m2": 57344.0}


def _hadamard_matrix(torch, d, device):
    """The normalized Sylvester Hadamard matrix of order d (a power of two), float32: symmetric, orthogonal."""
    h = torch.ones((1, 1), dtype=torch.float32)
    while h.shape[0] < d:
        h = torch.cat((torch.cat((h, h), 1), torch.cat((h, -h), 1)), 0)
    return (h / (d ** 0.5)).to(device)


def hadamard_rotate(q, k, seed=0):
    """Incoherent processing: multiplies the head dim of q and k ([batch, seqlen, heads, head_dim] torch
    tensors) by the same matrix M = diag(s) H, s a random +-1 vector drawn from `seed` and H the normalized
    Hadamard matrix of order head_dim (a power of two from 32 to 256). M is orthogonal, so Q K^T is
    unchanged up to rounding, while outliers of single channels spread over all of them, which makes
    per-tensor or per-head fp8 quantization of Q and K lose less. V and O are untouched. Computed in
    float32; returns (q_rot, k_rot) in the input dtypes. Rotate before quantize_fp8 (rotating fp8 values
    re-rounds them)."""
    d = q.shape[-1]
    if k.shape[-1] != d:
        raise ValueError("hadamard_rotate: q's head_dim (%d) and k's (%d) differ" % (d, k.shape[-1]))
    if d < 32 or d > 256 or d & (d - 1):
        raise ValueError("hadamard_rotate: head_dim %d is not a power of two from 32 to 256" % d)
    torch = _torch()
    gen = torch.Generator().manual_seed(int(seed))
    signs = torch.randint(0, 2, (d,), generator=gen, dtype=torch.int64).to(torch.float32) * 2 - 1
    m = signs[:, None].to(q.device) * _hadamard_matrix(torch, d, q.device)
    return (q.float() @ m).to(q.dtype), (k.float() @ m.to(k.device)).to(k.dtype)


def quantize_fp8(x, dtype=None, per="tensor", heads_kv=None):
    """Quantizes x ([batch, seqlen, heads, head_dim], any float dtype) to fp8 with a descale factor, for
    attention(). dtype: torch.float8_e4m3fn (default) or torch.float8_e5m2. per="tensor": one factor,
    shape [1]; per="head": one per (batch, head), shape [batch, heads] -- or, with heads_kv, one per
    (batch, KV head) over each group of heads / heads_kv query heads, shape [batch, heads_kv], which is what
    q_descale needs under GQA. descale = amax / 448 (e4m3) or amax / 57344 (e5m2), amax the largest |x| it
    covers (1 where that is 0), and x_fp8 = x / descale rounded to the format. Returns (x_fp8, descale), the
    descale fp32 on x's device."""
    if per not in ("tensor", "head"):
        raise ValueError("quantize_fp8: per must be 'tensor' or 'head', got %r" % (per,))
    if len(x.shape) != 4:
        raise ValueError("quantize_fp8: x must be [batch, seqlen, heads, head_dim], got %d dims" % len(x.shape))
    b, _, h, _ = x.shape
    if heads_kv is not None and (per != "head" or heads_kv < 1 or h % heads_kv):
        raise ValueError("quantize_fp8: heads_kv=%r needs per='head' and must divide the %d heads" % (heads_kv, h))
    torch = _torch()
    if dtype is None:
        dtype = torch.float8_e4m3fn
    fmax = _FP8_MAX.get(str(dtype))
    if fmax is None:
        raise ValueError("quantize_fp8: dtype must be torch.float8_e4m3fn or torch.float8_e5m2, got %s" % dtype)
    xf = x.float()
    if per == "tensor":
        amax = xf.abs().amax().reshape(1)
        bshape = (1, 1, 1, 1)
    elif heads_kv is None:
        amax = xf.abs().amax(dim=(1, 3))                                       # [b, h]
        bshape = (b, 1, h, 1)
    else:
        g = h // heads_kv
        amax = xf.abs().amax(dim=(1, 3)).reshape(b, heads_kv, g).amax(dim=2)  # [b, hkv]
        bshape = (b, 1, heads_kv, 1)
    descale = torch.where(amax > 0, amax / fmax, torch.ones_like(amax)).contiguous()
    scale = (1.0 / descale).reshape(bshape)
    if heads_kv is not None:
        scale = scale.repeat_interleave(h // heads_kv, dim=2)
    return (xf * scale).clamp(-fmax, fmax).to(dtype), descale


if sys.modules.get("torch") is not None:  # registered now, so a first call under torch.compile finds the ops
    register_ops()
