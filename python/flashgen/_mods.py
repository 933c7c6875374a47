"""_mods.py: custom score and mask mods (docs/mods.md) in the binding: flashgen.Mod, which traces a mod's Lua
text through fg_mod_create and owns the handle, and the check of a call's mod_aux arrays against the mod's
declarations before the serving call fills fg_varlen_args.mod and mod_aux with them.

The aux arrays are checked here, before anything is allocated or launched, for what a user gets wrong most
(the wrong dtype, rank, device or layout, a name missing or misspelled), so the ValueError names the array and
the rule in Python's terms; the library checks them again (serving_check_mod) and stays the authority.
"""

import ctypes
import sys
import threading

from . import _capi, _tensors

_DTYPE_NAMES = {_capi.FG_DTYPE_F32: "f32", _capi.FG_DTYPE_I32: "i32"}
_TORCH_DTYPES = {"f32": "torch.float32", "i32": "torch.int32"}  # str() of the torch dtype each declaration takes


class Mod:
    """A custom score and/or mask mod: Lua text defining score_mod(s, b, h, q, kv) and/or mask_mod(b, h, q, kv)
    over fg's expression vocabulary, with its aux arrays declared as aux = { name = fg.aux('f32'|'i32', rank) }
    (an f32 array declared fg.aux('f32', rank, 'trainable') gets its gradient under autograd)
    (docs/mods.md). The text is traced once, here (fg_mod_create); a mod outside the vocabulary raises
    FlashgenError (FG_ERR_CONFIG) whose message starts "name:line:" (or "name:" for the whole text). Pass it as mod= to attention_varlen,
    attention_with_kvcache, attention or explain_varlen, with its arrays as mod_aux=.

    id: the mod's id (16 hex digits; the mod=ID of its variants' names, so caches and bundles stay exact).
    aux: its aux arrays as [(name, dtype, rank)], dtype 'f32' or 'i32', in the order mod_aux takes them (by
    name, byte order). trainable: the names of the arrays declared trainable (a frozenset). A Mod is immutable and may be shared by threads; close() (or the end of a with block, or
    garbage collection) frees the handle, and must not run while a call in another thread uses it. Kernels
    compiled for it stay valid: the library keeps every traced tree by its id for the life of the process
    (4096 distinct mods at most)."""

    _handle = None  # fg_mod * as an integer; None once closed (or when __init__ failed)

    def __init__(self, text, name="mod"):
        data = text.encode() if isinstance(text, str) else bytes(text)
        lib = _capi.lib()
        handle = ctypes.c_void_p()
        st = lib.fg_mod_create(data, len(data), str(name).encode(), ctypes.byref(handle))
        if st != _capi.FG_OK:
            raise _capi.error_from(st, None)  # fg_last_error(NULL): this thread's failure, with name:line
        self._destroy = lib.fg_mod_destroy  # kept, so __del__ at interpreter exit needs no module globals
        self._lock = threading.Lock()
        self._handle = handle.value
        self.name = str(name)
        self.text = data.decode(errors="replace")
        self.id = lib.fg_mod_id(self._handle).decode()
        self.aux = []
        aux_name, dtype, rank = ctypes.c_char_p(), ctypes.c_int(), ctypes.c_int()
        for i in range(lib.fg_mod_aux_count(self._handle)):
            st = lib.fg_mod_aux_info(self._handle, i, ctypes.byref(aux_name), ctypes.byref(dtype), ctypes.byref(rank))
            if st != _capi.FG_OK:
                err = _capi.error_from(st, None)
                self.close()
                raise err
            self.aux.append((aux_name.value.decode(), _DTYPE_NAMES.get(dtype.value, "dtype %d" % dtype.value),
                             rank.value))
        self.trainable = frozenset(n for i, (n, _, _) in enumerate(self.aux) if lib.fg_mod_aux_trainable(self._handle, i) == 1)

    @property
    def handle(self):
        """The fg_mod * (an int) for fg_varlen_args.mod; ValueError once closed."""
        h = self._handle
        if h is None:
            raise ValueError("Mod %s (%s) is closed" % (self.name, getattr(self, "id", "?")))
        return h

    def close(self):
        """Frees the handle (fg_mod_destroy); later calls with this Mod raise ValueError. Idempotent."""
        lock = getattr(self, "_lock", None)
        if lock is None:
            return
        with lock:
            h, self._handle = self._handle, None
        if h is not None:
            self._destroy(h)

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "Mod(name=%r, id=%s, aux=%r%s)" % (self.name, getattr(self, "id", "?"), getattr(self, "aux", []),
                                                  "" if self._handle is not None else ", closed")


class ModCall:
    """A call's mod and its aux arrays, checked: what _set_mod writes into an FgVarlenArgs."""

    __slots__ = ("mod", "arrays")

    def __init__(self, mod, arrays):
        self.mod = mod        # the Mod (kept alive by the call that holds this)
        self.arrays = arrays  # [(label, tensor)] in the mod's order; label like "mod_aux['doc']"


def _where(x):
    """The device of a tensor-like as text: 'cuda:0', 'cpu', or '?'."""
    dev = getattr(x, "device", None)
    kind = getattr(dev, "type", None)
    if kind is None:
        return str(dev) if dev is not None else "?"
    index = getattr(dev, "index", None)
    return kind if index is None else "%s:%d" % (kind, index)


def _check_array(x, label, dtype, rank, fn):
    """Refuses, with a ValueError ("fn(): " then label and the rule), what the library would refuse or could not
    see (host memory): x must be a torch tensor (or have its surface: data_ptr, dtype, shape, stride, device) on a
    CUDA device, of the declared dtype and rank, each extent at least 1, row-major contiguous."""
    if not (hasattr(x, "data_ptr") and hasattr(x, "dtype") and hasattr(x, "shape") and hasattr(x, "stride")):
        raise ValueError("%s(): %s is a %s; a mod's aux array must be a torch tensor on the GPU (%s, rank %d)"
                         % (fn, label, type(x).__name__, _TORCH_DTYPES[dtype], rank))
    if getattr(getattr(x, "device", None), "type", None) != "cuda":
        raise ValueError("%s(): %s is on %s; a mod's aux arrays must be in CUDA device memory (the kernel reads them)"
                         % (fn, label, _where(x)))
    if str(x.dtype) != _TORCH_DTYPES[dtype]:
        raise ValueError("%s(): %s is %s; the mod declares it %s, so it must be %s"
                         % (fn, label, x.dtype, dtype, _TORCH_DTYPES[dtype]))
    shape = tuple(int(s) for s in x.shape)
    if len(shape) != rank:
        raise ValueError("%s(): %s has rank %d (shape %s); the mod declares rank %d"
                         % (fn, label, len(shape), list(shape), rank))
    if any(s < 1 for s in shape):
        raise ValueError("%s(): %s has shape %s; each extent must be at least 1" % (fn, label, list(shape)))
    want = _tensors.contiguous_strides(shape)
    if any(s > 1 and int(st) != w for s, st, w in zip(shape, x.stride(), want)):
        raise ValueError("%s(): %s must be contiguous (row-major; strides %s for shape %s, got %s): pass .contiguous()"
                         % (fn, label, list(want), list(shape), list(x.stride())))


def mod_call(mod, mod_aux, fn, describe=False):
    """The checked ModCall of a call's mod= and mod_aux= (None without a mod). mod_aux: a dict name -> tensor
    holding exactly the mod's arrays, or a sequence of them in the mod's order (Mod.aux). fn names the calling
    function in messages. describe (explain_varlen): mod_aux None stands for arrays of the declared dtypes and
    ranks, with no memory. Raises TypeError for a mod that is not a Mod, ValueError for the arrays."""
    empty = isinstance(mod_aux, (dict, list, tuple)) and not mod_aux
    if mod is None:
        if mod_aux is not None and not empty:
            raise ValueError("%s(): mod_aux is given without a mod" % fn)
        return None
    if not isinstance(mod, Mod):
        raise TypeError("%s(): mod must be a flashgen.Mod (made from the mod's Lua text), not a %s"
                        % (fn, type(mod).__name__))
    mod.handle  # raises ValueError when closed
    names = [n for n, _, _ in mod.aux]
    declared = ", ".join("%s (%s, rank %d)" % a for a in mod.aux) or "none"
    if mod_aux is None and describe:
        return ModCall(mod, [("mod_aux[%r]" % n, None) for n in names])
    if mod_aux is None and names:
        raise ValueError("%s(): the mod declares aux arrays, %s; pass them as mod_aux (a dict by name, or a list in "
                         "this order)" % (fn, declared))
    if mod_aux is None:
        mod_aux = ()
    if isinstance(mod_aux, dict):
        unknown = sorted(set(mod_aux) - set(names))
        if unknown:
            raise ValueError("%s(): mod_aux names %s, which the mod does not declare; it declares %s"
                             % (fn, ", ".join(repr(n) for n in unknown), declared))
        missing = [n for n in names if n not in mod_aux]
        if missing:
            raise ValueError("%s(): mod_aux lacks %s; the mod declares %s" % (fn, ", ".join(repr(n) for n in missing),
                                                                               declared))
        given = [mod_aux[n] for n in names]
    elif hasattr(mod_aux, "data_ptr") or not hasattr(mod_aux, "__len__"):
        raise ValueError("%s(): mod_aux is a %s; pass the arrays as a dict by name or a list in the mod's order "
                         "(it declares %s)" % (fn, type(mod_aux).__name__, declared))
    else:
        given = list(mod_aux)
        if len(given) != len(names):
            raise ValueError("%s(): mod_aux has %d arrays; the mod declares %d: %s (in this order; or pass a dict "
                             "by name)" % (fn, len(given), len(names), declared))
    arrays = []
    torch = sys.modules.get("torch")
    for (name, dtype, rank), x in zip(mod.aux, given):
        label = "mod_aux[%r]" % name
        _check_array(x, label, dtype, rank, fn)
        if (getattr(x, "requires_grad", False) and name not in mod.trainable and torch is not None
                and torch.is_grad_enabled()):
            raise ValueError("%s(): %s requires grad, but the mod declares '%s' without 'trainable'; declare it "
                             "fg.aux('%s', %d, 'trainable') for its gradient, or pass it detached"
                             % (fn, label, name, dtype, rank))
        arrays.append((label, x))
    return ModCall(mod, arrays)


def set_mod(a, call):
    """Writes a ModCall into FgVarlenArgs a (mod and mod_aux; the rest of mod_aux stays unset) and returns the
    arrays' Views, for the device check."""
    if call is None:
        return []
    a.mod = call.mod.handle
    views = []
    for i, (label, x) in enumerate(call.arrays):
        _, dtype, rank = call.mod.aux[i]
        code = _capi.FG_DTYPE_I32 if dtype == "i32" else _capi.FG_DTYPE_F32  # the declared dtype, which x has
        if x is None:  # described only (explain_varlen): the declared dtype and rank, extents of 1, no memory
            a.mod_aux[i] = _tensors.View(0, code, (1,) * rank, (1,) * rank, None).struct()
            continue
        v = _array_view(x, code)
        a.mod_aux[i] = v.struct()
        views.append((label, v))
    return views


def _array_view(x, code):
    """The View of a checked contiguous CUDA tensor x as dtype code. Strides of extents of 1 do not address
    anything: the row-major ones say the same layout to the library."""
    shape = tuple(int(s) for s in x.shape)
    dev = x.device
    return _tensors.View(int(x.data_ptr()), code, shape, _tensors.contiguous_strides(shape),
                         dev.index if dev.index is not None else 0)


def grad_arrays(call):
    """The aux arrays autograd must differentiate (trainable ones that require grad, with grad mode on), as
    [(index in the mod's order, tensor)]; mod_call has refused one that requires grad without being trainable."""
    torch = sys.modules.get("torch")
    if call is None or torch is None or not torch.is_grad_enabled():
        return []
    return [(i, x) for i, (_, x) in enumerate(call.arrays) if getattr(x, "requires_grad", False)]


def set_aux_grads(a, call, grads):
    """Writes the gradients' buffers (grads: {index in the mod's order: fp32 tensor of that array's shape}) into
    FgVarlenBwdArgs a's mod_aux_grad; returns their Views for the device check."""
    views = []
    for i, g in grads.items():
        v = _array_view(g, _capi.FG_DTYPE_F32)
        a.mod_aux_grad[i] = v.struct()
        views.append(("mod_aux_grad[%r]" % call.mod.aux[i][0], v))
    return views


class MaskMap:
    """A custom mask's block map kept across calls (fg_varlen_args.mask_map): pass the same MaskMap as mask_map= to
    the calls that share a mod, its aux arrays, the lengths and heads (the layers of one batch, say), and only the
    first runs the classification kernel, as FlexAttention's BlockMask is built once. A call whose mod, aux arrays
    (their memory or their torch version counter: an in-place change), cu_seqlens, batch, heads or longest lengths
    differ from the last fill's refills it, so a stale map is not read. Only masks that read aux arrays have one;
    for others it is ignored. Its buffer lives on the device of the first call."""

    __slots__ = ("buffer", "key")

    def __init__(self):
        self.buffer = None  # uint8 CUDA tensor, 256 bytes more than the map (alignment)
        self.key = None     # what the map in buffer was filled for

    def __repr__(self):
        return "MaskMap(%s)" % ("empty" if self.key is None else "%d bytes" % (self.buffer.numel() - 256))


def _version_of(x):
    return None if x is None else (int(x.data_ptr()), getattr(x, "_version", None))


def set_mask_map(a, call, mm, cu_q, cu_k, batch, heads, max_q, max_k, device, ready=None):
    """Points FgVarlenArgs / FgVarlenBwdArgs a at MaskMap mm for the call's mod (a ModCall): allocates or grows its
    buffer, and sets mask_map_ready when the last fill was for the same mod, aux arrays (memory and version), cu_seqlens,
    batch, heads and lengths (ready=True forces it: the backward of the forward that filled it). Nothing for a mod
    whose mask reads no aux array."""
    if mm is None or call is None:
        return
    if not isinstance(mm, MaskMap):
        raise TypeError("mask_map must be a flashgen.MaskMap, not a %s" % type(mm).__name__)
    size = ctypes.c_size_t(0)
    lib = _capi.lib()
    st = lib.fg_mask_map_size(call.mod.handle, int(batch), int(heads), int(max_q), int(max_k), ctypes.byref(size))
    if st != _capi.FG_OK:
        raise _capi.error_from(st, None)
    if size.value == 0:
        return
    torch = sys.modules["torch"]
    key = (call.mod.id, int(batch), int(heads), int(max_q), int(max_k), tuple(_version_of(x) for _, x in call.arrays),
           _version_of(cu_q), _version_of(cu_k))
    if mm.buffer is None or mm.buffer.numel() < size.value + 256 or mm.buffer.device != device:
        mm.buffer, mm.key, ready = torch.empty(size.value + 256, dtype=torch.uint8, device=device), None, False
    a.mask_map = (mm.buffer.data_ptr() + 255) // 256 * 256
    a.mask_map_size = size.value
    a.mask_map_ready = int(bool(ready) or mm.key == key)
    mm.key = key
