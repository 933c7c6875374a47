"""_capi.py: the ctypes mirror of include/flashgen.h and the loader of libflashgen.so.

Every structure here repeats a C struct field for field, in order, with the same C types, so ctypes lays
it out as the C compiler does; python/tests/test_binding.py compiles a small C program against the
header and compares sizes and offsets. The library is loaded on first use, not at import, so that
`import flashgen` works (and says what is missing) on a machine where the library is not built.
"""

import ctypes
import os
import threading

# ---------------------------------------------------------------- enums (values of flashgen.h)

FG_OK = 0
FG_ERR_INVALID_ARGUMENT = 1
FG_ERR_UNSUPPORTED = 2
FG_ERR_NO_DEVICE = 3
FG_ERR_CUDA = 4
FG_ERR_COMPILE = 5
FG_ERR_NOT_FOUND = 6
FG_ERR_IO = 7
FG_ERR_FORMAT = 8
FG_ERR_CONFIG = 9
FG_ERR_NO_MEMORY = 10
FG_ERR_INTERNAL = 11

# The names fg_status_string returns, used only when the library itself cannot be asked.
STATUS_NAMES = {
    FG_OK: "FG_OK",
    FG_ERR_INVALID_ARGUMENT: "FG_ERR_INVALID_ARGUMENT",
    FG_ERR_UNSUPPORTED: "FG_ERR_UNSUPPORTED",
    FG_ERR_NO_DEVICE: "FG_ERR_NO_DEVICE",
    FG_ERR_CUDA: "FG_ERR_CUDA",
    FG_ERR_COMPILE: "FG_ERR_COMPILE",
    FG_ERR_NOT_FOUND: "FG_ERR_NOT_FOUND",
    FG_ERR_IO: "FG_ERR_IO",
    FG_ERR_FORMAT: "FG_ERR_FORMAT",
    FG_ERR_CONFIG: "FG_ERR_CONFIG",
    FG_ERR_NO_MEMORY: "FG_ERR_NO_MEMORY",
    FG_ERR_INTERNAL: "FG_ERR_INTERNAL",
}

FG_OPTION_CHECK_INPUTS = 1  # fg_option
FG_OPTION_JIT_TIERS = 2

FG_DTYPE_F16 = 0
FG_DTYPE_BF16 = 1
FG_DTYPE_F32 = 2
FG_DTYPE_E4M3 = 3
FG_DTYPE_E5M2 = 4
FG_DTYPE_I32 = 5   # a custom mod's i32 aux arrays

FG_MOD_AUX_MAX = 8  # aux arrays a custom mod may declare (fg_varlen_args.mod_aux)

FG_LOG_NONE = 0
FG_LOG_ERROR = 1
FG_LOG_WARN = 2
FG_LOG_INFO = 3
FG_LOG_DEBUG = 4

# FG_VERSION_STRING of the header this binding mirrors (the C library exports no version function).
VERSION_STRING = "0.4.0"

# ---------------------------------------------------------------- structures


class FgTensor(ctypes.Structure):
    """fg_tensor: a strided view of device memory (strides in elements, outermost first)."""

    _fields_ = [
        ("data", ctypes.c_void_p),        # device pointer
        ("dtype", ctypes.c_int),          # fg_dtype (a C enum: int-sized)
        ("ndim", ctypes.c_int),           # 4 for Q/K/V/O, 3 for the LSE
        ("shape", ctypes.c_int64 * 4),    # sizes
        ("stride", ctypes.c_int64 * 4),   # strides in elements
    ]


class FgFwdArgs(ctypes.Structure):
    """fg_fwd_args: the arguments of one forward call (FP8: V key-major, descale factors)."""

    _fields_ = [
        ("q", FgTensor),                  # [batch, seqlen_q, heads_q, head_dim]
        ("k", FgTensor),                  # [batch, seqlen_k, heads_kv, head_dim]
        ("v", FgTensor),                  # [batch, seqlen_k, heads_kv, head_dim]
        ("o", FgTensor),                  # like q, written
        ("lse", FgTensor),                # [batch, heads_q, seqlen_q] fp32; data NULL: no LSE
        ("softmax_scale", ctypes.c_float),  # 0: 1/sqrt(head_dim)
        ("causal", ctypes.c_int),
        ("q_descale", FgTensor),          # FP8 only: fp32 [1] or [batch, heads_kv]; data NULL: 1.0
        ("k_descale", FgTensor),
        ("v_descale", FgTensor),
    ]


class FgBwdArgs(ctypes.Structure):
    """fg_bwd_args: the arguments of one backward call."""

    _fields_ = [
        ("q", FgTensor), ("k", FgTensor), ("v", FgTensor), ("o", FgTensor),  # the forward's inputs and output
        ("dout", FgTensor),               # dL/dO, like o
        ("lse", FgTensor),                # the forward's LSE (required)
        ("dq", FgTensor), ("dk", FgTensor), ("dv", FgTensor),  # written
        ("softmax_scale", ctypes.c_float),
        ("causal", ctypes.c_int),
        ("deterministic", ctypes.c_int),
        ("workspace", ctypes.c_void_p),
        ("workspace_size", ctypes.c_size_t),
    ]


class FgVarlenArgs(ctypes.Structure):
    """fg_varlen_args: one serving call (packed tokens, dense or paged KV caches, decode)."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),   # sizeof: set by fg_varlen_args_init
        ("q", FgTensor),                    # [total_q, heads_q, d] with cu_seqlens_q, or [batch, seqlen_q, heads_q, d]
        ("k", FgTensor),                    # [total_k, heads_kv, d], [batch, seqlen_k, heads_kv, d] or pages
        ("v", FgTensor),
        ("o", FgTensor),
        ("lse", FgTensor),                  # [heads_q, total_q] or [batch, heads_q, seqlen_q]; data NULL: none
        ("cu_seqlens_q", ctypes.c_void_p),  # int32 device pointers, or NULL
        ("cu_seqlens_k", ctypes.c_void_p),
        ("seqused_k", ctypes.c_void_p),
        ("block_table", ctypes.c_void_p),
        ("block_table_stride", ctypes.c_int64),
        ("max_pages", ctypes.c_int),
        ("batch", ctypes.c_int),
        ("max_seqlen_q", ctypes.c_int),
        ("max_seqlen_k", ctypes.c_int),
        ("softmax_scale", ctypes.c_float),
        ("causal", ctypes.c_int),
        ("num_splits", ctypes.c_int),
        ("split_size", ctypes.c_int),
        ("workspace", ctypes.c_void_p),
        ("workspace_size", ctypes.c_size_t),
        ("sinks", ctypes.c_void_p),         # fp32 [heads_q] device pointer, or NULL
        ("window", ctypes.c_int),           # 1: window_left, window_right (-1: unbounded side) apply
        ("window_left", ctypes.c_int),
        ("window_right", ctypes.c_int),
        ("softcap", ctypes.c_float),        # > 0: logits capped by softcap * tanh(logit / softcap)
        ("alibi_slopes", ctypes.c_void_p),  # fp32 [heads_q] device pointer, or NULL
        ("causal_top_left", ctypes.c_int),  # 1 with causal: query i sees keys j <= i
        ("mod", ctypes.c_void_p),           # fg_mod * (fg_mod_create), or NULL: a custom score and/or mask mod
        ("mod_aux", FgTensor * FG_MOD_AUX_MAX),  # the mod's aux arrays in its order; the rest unset
        ("mask_map", ctypes.c_void_p),      # a custom mask's block map kept across calls, or NULL
        ("mask_map_size", ctypes.c_size_t),
        ("mask_map_ready", ctypes.c_int),   # 1: an earlier call filled it
        ("k_descale", FgTensor),            # FP8 k and v: fp32 [1] or [batch, heads_kv]; data NULL: 1
        ("v_descale", FgTensor),
    ]


class FgVarlenBwdArgs(ctypes.Structure):
    """fg_varlen_bwd_args: the backward of packed sequences."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),   # sizeof: set by fg_varlen_bwd_args_init
        ("q", FgTensor),                    # [total_q, heads_q, d]
        ("k", FgTensor),                    # [total_k, heads_kv, d]
        ("v", FgTensor),
        ("o", FgTensor),
        ("dout", FgTensor),
        ("lse", FgTensor),                  # [heads_q, total_q] fp32
        ("dq", FgTensor),
        ("dk", FgTensor),
        ("dv", FgTensor),
        ("cu_seqlens_q", ctypes.c_void_p),  # int32 device pointers
        ("cu_seqlens_k", ctypes.c_void_p),
        ("batch", ctypes.c_int),
        ("max_seqlen_q", ctypes.c_int),
        ("max_seqlen_k", ctypes.c_int),
        ("softmax_scale", ctypes.c_float),
        ("causal", ctypes.c_int),
        ("deterministic", ctypes.c_int),
        ("workspace", ctypes.c_void_p),
        ("workspace_size", ctypes.c_size_t),
        ("sinks", ctypes.c_void_p),         # the forward's model variants (FgVarlenArgs' fields)
        ("dsink", ctypes.c_void_p),         # with sinks: fp32 [heads_q], written
        ("window", ctypes.c_int),
        ("window_left", ctypes.c_int),
        ("window_right", ctypes.c_int),
        ("softcap", ctypes.c_float),
        ("alibi_slopes", ctypes.c_void_p),
        ("causal_top_left", ctypes.c_int),
        ("mod", ctypes.c_void_p),           # the forward's custom mod, or NULL
        ("mod_aux", FgTensor * FG_MOD_AUX_MAX),
        ("mod_aux_grad", FgTensor * FG_MOD_AUX_MAX),  # written: trainable arrays' gradients, where set
        ("mask_map", ctypes.c_void_p),      # as FgVarlenArgs'
        ("mask_map_size", ctypes.c_size_t),
        ("mask_map_ready", ctypes.c_int),
    ]


class FgMergeArgs(ctypes.Structure):
    """fg_merge_args: the merge of attention states."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("o_states", FgTensor),    # [states, tokens, heads, head_dim]
        ("lse_states", FgTensor),  # [states, tokens, heads] fp32
        ("o", FgTensor),           # [tokens, heads, head_dim], written
        ("lse", FgTensor),         # [tokens, heads] fp32, optional
    ]


# fg_log_fn: void (*)(void *user, fg_log_level level, const char *message)
FG_LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)


class FgContextOptions(ctypes.Structure):
    """fg_context_options: how a context is created (filled by fg_context_options_init first)."""

    _fields_ = [
        ("device", ctypes.c_int),                # CUDA ordinal
        ("cache_dir", ctypes.c_char_p),          # NULL: the default directory
        ("disable_disk_cache", ctypes.c_int),    # 1: memory cache only
        ("strict", ctypes.c_int),                # 1: no JIT compile, a miss is FG_ERR_NOT_FOUND
        ("log_level", ctypes.c_int),             # fg_log_level
        ("log_fn", FG_LOG_FN),                   # NULL: stderr
        ("log_user", ctypes.c_void_p),           # passed back to log_fn
        ("tuning_db", ctypes.c_char_p),          # per-GPU tuning database path; NULL: the default file
    ]


# ---------------------------------------------------------------- errors


class FlashgenError(RuntimeError):
    """A failure reported by flashgen: `status` is the status name ("FG_ERR_INVALID_ARGUMENT"), `code` its
    value, `message` the library's sentence naming the argument and the rule it broke."""

    def __init__(self, status, message, code=None):
        self.status = status
        self.code = code
        self.message = message
        super().__init__("%s: %s" % (status, message) if status else message)


class LibraryNotFoundError(FlashgenError):
    """libflashgen.so could not be found or loaded; the message lists what was tried and how to fix it."""

    def __init__(self, message):
        super().__init__(None, message)


# ---------------------------------------------------------------- loading

_lib = None
_lib_path = None
_load_lock = threading.Lock()


def _package_relative():
    """The library next to a source checkout: <repo>/build/libflashgen.so for <repo>/python/flashgen."""
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "build", "libflashgen.so"))


def _packaged():
    """The library a wheel carries: flashgen/lib/libflashgen.so (put there by setup.py at build time)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", "libflashgen.so")


_nvrtc_preloaded = None


def _preload_nvrtc():
    """Loads libnvrtc from the nvidia-cuda-nvrtc wheel (pip install flashgen[cuda]) when it is installed, so
    that libflashgen.so's libnvrtc.so.N dependency is met by it where no CUDA toolkit is on the library's
    rpath or the loader's path. Loaded RTLD_GLOBAL: the dynamic loader then matches the dependency by its
    SONAME. Returns the path loaded, or None (then the toolkit's NVRTC must be found the usual way)."""
    global _nvrtc_preloaded
    if _nvrtc_preloaded is not None:
        return _nvrtc_preloaded or None
    _nvrtc_preloaded = ""
    import glob
    import sys
    for root in sys.path:
        if not root or not os.path.isdir(os.path.join(root, "nvidia")):
            continue
        # nvidia/cuda_nvrtc/lib (CUDA 12 wheels), nvidia/cu13/lib (CUDA 13 wheels)
        for cand in sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib", "libnvrtc.so.*"))):
            if "builtins" in os.path.basename(cand) or "alt" in os.path.basename(cand):
                continue
            try:
                ctypes.CDLL(cand, mode=ctypes.RTLD_GLOBAL)
            except OSError:
                continue
            _nvrtc_preloaded = cand
            return cand
    return None


def _declare(lib):
    """Gives every entry point its C prototype (ctypes would otherwise truncate pointers to int)."""
    vp, c_int, c_size_t, c_char_p = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p
    args_p = ctypes.POINTER(FgFwdArgs)
    bwd_p = ctypes.POINTER(FgBwdArgs)
    protos = {
        "fg_context_options_init": (None, [ctypes.POINTER(FgContextOptions)]),
        "fg_context_create": (c_int, [ctypes.POINTER(vp), ctypes.POINTER(FgContextOptions)]),
        "fg_context_destroy": (None, [vp]),
        "fg_attention_fwd": (c_int, [vp, args_p, vp]),
        "fg_attention_bwd": (c_int, [vp, bwd_p, vp]),
        "fg_attention_bwd_workspace_size": (c_int, [vp, bwd_p, ctypes.POINTER(c_size_t)]),
        "fg_prepare": (c_int, [vp, args_p]),
        "fg_wait_compiles": (c_int, [vp]),
        "fg_explain": (c_int, [vp, args_p, ctypes.c_char_p, c_size_t]),
        "fg_explain_bwd": (c_int, [vp, bwd_p, ctypes.c_char_p, c_size_t]),
        "fg_bundle_load": (c_int, [vp, c_char_p]),
        "fg_bundle_load_memory": (c_int, [vp, vp, c_size_t]),
        "fg_last_error": (c_char_p, [vp]),
        "fg_status_string": (c_char_p, [c_int]),
        "fg_varlen_args_init": (None, [ctypes.POINTER(FgVarlenArgs)]),
        "fg_attention_fwd_varlen": (c_int, [vp, ctypes.POINTER(FgVarlenArgs), vp]),
        "fg_attention_fwd_varlen_workspace_size": (c_int, [vp, ctypes.POINTER(FgVarlenArgs), ctypes.POINTER(c_size_t)]),
        "fg_explain_varlen": (c_int, [vp, ctypes.POINTER(FgVarlenArgs), ctypes.c_char_p, c_size_t]),
        "fg_varlen_bwd_args_init": (None, [ctypes.POINTER(FgVarlenBwdArgs)]),
        "fg_attention_bwd_varlen": (c_int, [vp, ctypes.POINTER(FgVarlenBwdArgs), vp]),
        "fg_attention_bwd_varlen_workspace_size": (c_int, [vp, ctypes.POINTER(FgVarlenBwdArgs),
                                                           ctypes.POINTER(c_size_t)]),
        "fg_merge_args_init": (None, [ctypes.POINTER(FgMergeArgs)]),
        "fg_merge_states": (c_int, [vp, ctypes.POINTER(FgMergeArgs), vp]),
        "fg_context_set_option": (c_int, [vp, c_int, ctypes.c_int64]),
        "fg_mod_create": (c_int, [c_char_p, c_size_t, c_char_p, ctypes.POINTER(vp)]),
        "fg_mod_destroy": (None, [vp]),
        "fg_mod_id": (c_char_p, [vp]),
        "fg_mod_aux_count": (c_int, [vp]),
        "fg_mod_aux_info": (c_int, [vp, c_int, ctypes.POINTER(c_char_p), ctypes.POINTER(c_int),
                                    ctypes.POINTER(c_int)]),
        "fg_mod_aux_trainable": (c_int, [vp, c_int]),
        "fg_mask_map_size": (c_int, [vp, c_int, c_int, c_int, c_int, ctypes.POINTER(c_size_t)]),
    }
    for name, (restype, argtypes) in protos.items():
        fn = getattr(lib, name)  # AttributeError here means a library from another flashgen: reported by the caller
        fn.restype = restype
        fn.argtypes = argtypes


def _open(path):
    """dlopens path and declares the API; raises LibraryNotFoundError with the loader's reason."""
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise LibraryNotFoundError("libflashgen could not be loaded from %s: %s" % (path, e)) from None
    try:
        _declare(lib)
    except AttributeError as e:
        raise LibraryNotFoundError("%s is not a compatible libflashgen (%s)" % (path, e)) from None
    return lib


def lib():
    """The loaded library (loaded once, thread-safe). Order: $FLASHGEN_LIB exactly when set; else the
    library the installed package carries (flashgen/lib/libflashgen.so); else ../../build/libflashgen.so
    relative to this package (a source checkout); else `libflashgen.so` through the dynamic loader's search
    path (LD_LIBRARY_PATH, ldconfig). NVRTC from the nvidia-cuda-nvrtc wheel is preloaded when installed.
    Raises LibraryNotFoundError."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _load_lock:
        if _lib is not None:
            return _lib
        _preload_nvrtc()
        env = os.environ.get("FLASHGEN_LIB")
        if env:
            if not os.path.exists(env):
                raise LibraryNotFoundError(
                    "FLASHGEN_LIB is %s, which does not exist (build it with `sh configure && ninja`, "
                    "or unset FLASHGEN_LIB to use the checkout's build/libflashgen.so)" % env)
            _lib, _lib_path = _open(env), env
            return _lib
        pkg = _packaged()
        if os.path.exists(pkg):
            _lib, _lib_path = _open(pkg), pkg
            return _lib
        rel = _package_relative()
        if os.path.exists(rel):
            _lib, _lib_path = _open(rel), rel
            return _lib
        try:
            loaded = ctypes.CDLL("libflashgen.so")
        except OSError as e:
            raise LibraryNotFoundError(
                "libflashgen.so was not found: FLASHGEN_LIB is not set, neither %s nor %s exists, and the "
                "dynamic loader could not find it (%s). Build it with `sh configure && ninja` in the repository "
                "root (then `pip install ./python` packages it), or set FLASHGEN_LIB to its path."
                % (pkg, rel, e)) from None
        try:
            _declare(loaded)
        except AttributeError as e:
            raise LibraryNotFoundError("the libflashgen.so on the loader path is not compatible (%s)" % e) from None
        _lib, _lib_path = loaded, "libflashgen.so (loader search path)"
        return _lib


def lib_path():
    """Where the loaded library came from, loading it first (raises LibraryNotFoundError)."""
    lib()
    return _lib_path


def status_name(code):
    """fg_status_string(code) as a Python string."""
    name = lib().fg_status_string(code)
    return name.decode() if name else STATUS_NAMES.get(code, "FG_ERR_UNKNOWN")


def error_from(code, ctx):
    """The FlashgenError for a failed call: the status name and fg_last_error(ctx) (ctx None: the
    calling thread's last context-less failure, as after fg_context_create)."""
    msg = lib().fg_last_error(ctx)
    return FlashgenError(status_name(code), msg.decode(errors="replace") if msg else "no message", code)
