"""_tensors.py: turns array objects into fg_tensor structures, without judging them.

Accepted, in this order of preference:
  - objects with data_ptr(), dtype, shape and stride() (PyTorch tensors and look-alikes);
  - objects with __cuda_array_interface__ (CuPy, Numba, ...); bf16 has no typestr there, so bf16 arrays
    must come through one of the other two;
  - objects with __dlpack__ (DLPack capsules, read without taking ownership);
  - TensorDesc, a shape and dtype with no memory, for explain() and prepare().
Shapes, strides, dtypes and alignment are the C library's to check; this module only translates. What
the library cannot see, the binding must: which device the memory is on (the context is chosen by it)
and whether it is device memory at all; and a dtype with no fg_dtype value cannot be translated.
"""

import ctypes
import sys

from . import _capi
from ._capi import FlashgenError, FG_ERR_INVALID_ARGUMENT

# dtype text (str() of a torch/numpy/cupy dtype, or a flashgen spec name) -> fg_dtype
_DTYPES = {
    "torch.float16": _capi.FG_DTYPE_F16,
    "torch.bfloat16": _capi.FG_DTYPE_BF16,
    "torch.float32": _capi.FG_DTYPE_F32,
    "torch.float8_e4m3fn": _capi.FG_DTYPE_E4M3,
    "torch.float8_e5m2": _capi.FG_DTYPE_E5M2,
    "float16": _capi.FG_DTYPE_F16,
    "bfloat16": _capi.FG_DTYPE_BF16,
    "float32": _capi.FG_DTYPE_F32,
    "float8_e4m3fn": _capi.FG_DTYPE_E4M3,
    "float8_e5m2": _capi.FG_DTYPE_E5M2,
    "fp16": _capi.FG_DTYPE_F16,
    "bf16": _capi.FG_DTYPE_BF16,
    "fp32": _capi.FG_DTYPE_F32,
    "e4m3": _capi.FG_DTYPE_E4M3,
    "e5m2": _capi.FG_DTYPE_E5M2,
}

# __cuda_array_interface__ typestr (byte order stripped) -> (fg_dtype, bytes per element)
_TYPESTRS = {"f2": (_capi.FG_DTYPE_F16, 2), "f4": (_capi.FG_DTYPE_F32, 4)}

# DLPack (type code, bits) -> fg_dtype; codes from dlpack.h: kDLFloat 2, kDLBfloat 4, kDLFloat8_e4m3fn 10,
# kDLFloat8_e5m2 12.
_DL_DTYPES = {(2, 16): _capi.FG_DTYPE_F16, (4, 16): _capi.FG_DTYPE_BF16, (2, 32): _capi.FG_DTYPE_F32,
              (10, 8): _capi.FG_DTYPE_E4M3, (12, 8): _capi.FG_DTYPE_E5M2}
FP8_DTYPES = (_capi.FG_DTYPE_E4M3, _capi.FG_DTYPE_E5M2)
_DL_CUDA = 2          # kDLCUDA
_DL_CUDA_MANAGED = 13 # kDLCUDAManaged
_DL_CPU = 1           # kDLCPU


class TensorDesc:
    """A tensor described without memory (shape, dtype, optional strides in elements, optional CUDA device
    index), for explain() and prepare(): they choose and compile the kernel for the shape alone.
    Example: TensorDesc((2, 4096, 16, 128), "bf16")."""

    def __init__(self, shape, dtype, stride=None, device=None):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        self._stride = tuple(int(s) for s in stride) if stride is not None else contiguous_strides(self.shape)
        self.device_index = device

    def stride(self):
        """Strides in elements, outermost first (contiguous unless given)."""
        return self._stride

    def __repr__(self):
        return "TensorDesc(shape=%r, dtype=%r, stride=%r)" % (self.shape, self.dtype, self._stride)


_I64x4 = ctypes.c_int64 * 4


class View:
    """What the binding knows about one argument: enough to fill an fg_tensor, plus its device."""

    __slots__ = ("data", "dtype", "shape", "stride", "device", "is_torch", "keepalive")

    def __init__(self, data, dtype, shape, stride, device, is_torch=False, keepalive=None):
        self.data = data            # integer address (0 for none)
        self.dtype = dtype          # fg_dtype value
        self.shape = shape          # tuple of ints
        self.stride = stride        # tuple of ints, in elements
        self.device = device        # CUDA ordinal, "cpu"-like text for host memory, or None when unknown
        self.is_torch = is_torch    # a torch.Tensor (so torch is importable and outputs can be allocated)
        self.keepalive = keepalive  # an object that must outlive the call (a DLPack capsule)

    def struct(self):
        """This view as an FgTensor. More than 4 dims keep their count (for the library to refuse) but
        only the first 4 sizes and strides fit."""
        n = len(self.shape)
        pad = (0, 0, 0, 0)
        return _capi.FgTensor(self.data or None, self.dtype, n, _I64x4(*(self.shape + pad)[:4]),
                              _I64x4(*(self.stride + pad)[:4]))


def key_major_strides(shape):
    """Strides (in elements) of the FP8 kernel's V layout for a [b, sk, h, d] view: a [b, h, d, sk'] buffer with
    sk' = sk rounded up to 16, keys contiguous."""
    b, sk, h, d = (int(x) for x in shape)
    skp = max((sk + 15) // 16 * 16, 16)
    return (h * d * skp, 1, d * skp, skp)


def is_key_major(shape, stride, data_ptr):
    """True when a 4-dim fp8 V view [b, sk, h, d] is already in the layout the FP8 kernel takes (keys contiguous,
    the head-dim stride a multiple of 16 elements and >= sk, the pointer and the other strides of dims longer
    than 1 multiples of 16 bytes), so attention() can pass it without a copy."""
    if len(shape) != 4 or len(stride) != 4:
        return False
    b, sk, h, d = shape
    if sk > 1 and stride[1] != 1:
        return False
    if d > 1 and (stride[3] % 16 or stride[3] < sk):
        return False
    if data_ptr % 16:
        return False
    return all(stride[i] % 16 == 0 for i in (0, 2) if shape[i] > 1)


def contiguous_strides(shape):
    """Row-major strides in elements for shape."""
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(strides))


def _dtype_code(dtype, name):
    """fg_dtype for a dtype object or text; FlashgenError naming `name` when it has none."""
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        return dtype
    text = str(dtype)
    code = _DTYPES.get(text)
    if code is None:
        raise FlashgenError(_capi.STATUS_NAMES[FG_ERR_INVALID_ARGUMENT],
                            "%s.dtype is %s; flashgen takes fp16, bf16, e4m3 or e5m2 (fp32 for lse and descale "
                            "factors)" % (name, text),
                            FG_ERR_INVALID_ARGUMENT)
    return code


def _is_torch_tensor(x):
    """True for a torch.Tensor, without importing torch (a tensor implies torch is already imported)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _device_of(obj):
    """The CUDA ordinal of an object's .device (torch: type/index; CuPy: id), "cpu"-like text for host
    memory, or None when the object does not say."""
    dev = getattr(obj, "device", None)
    if dev is None:
        return None
    kind = getattr(dev, "type", None)
    if kind is not None:  # torch.device
        if kind == "cuda":
            return dev.index if dev.index is not None else 0
        return str(kind)
    ident = getattr(dev, "id", None)  # cupy.cuda.Device
    if isinstance(ident, int):
        return ident
    return None


# ---------------------------------------------------------------- DLPack (dlpack.h, unversioned ABI)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32),  # kDLCPU 1, kDLCUDA 2, ...
                ("device_id", ctypes.c_int32)]    # the CUDA ordinal for CUDA memory


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8),    # kDLFloat 2, kDLBfloat 4, ...
                ("bits", ctypes.c_uint8),    # 16 for fp16/bf16
                ("lanes", ctypes.c_uint16)]  # 1 for scalars


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),                    # base pointer
        ("device", _DLDevice),                        # where the memory lives
        ("ndim", ctypes.c_int32),                     # number of dims
        ("dtype", _DLDataType),                       # element type
        ("shape", ctypes.POINTER(ctypes.c_int64)),    # ndim sizes
        ("strides", ctypes.POINTER(ctypes.c_int64)),  # NULL: compact row-major
        ("byte_offset", ctypes.c_uint64),             # added to data
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor),
                ("manager_ctx", ctypes.c_void_p),  # the producer's
                ("deleter", ctypes.c_void_p)]      # called by the capsule's destructor, not by us


_capsule_get = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get.restype = ctypes.c_void_p
_capsule_get.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _from_dlpack(x, name, stream):
    """Reads a __dlpack__ capsule without consuming it: the capsule keeps its name, so the producer's
    capsule destructor frees it once the View (holding it) is dropped after the call."""
    try:
        capsule = x.__dlpack__(stream=stream) if stream is not None else x.__dlpack__()
    except TypeError:
        capsule = x.__dlpack__()
    ptr = _capsule_get(capsule, b"dltensor")
    t = ctypes.cast(ptr, ctypes.POINTER(_DLManagedTensor)).contents.dl_tensor
    code = _DL_DTYPES.get((t.dtype.code, t.dtype.bits)) if t.dtype.lanes == 1 else None
    if code is None:
        raise FlashgenError(_capi.STATUS_NAMES[FG_ERR_INVALID_ARGUMENT],
                            "%s.dtype is DLPack (code %d, %d bits, %d lanes); flashgen takes fp16, bf16, e4m3 or e5m2"
                            % (name, t.dtype.code, t.dtype.bits, t.dtype.lanes), FG_ERR_INVALID_ARGUMENT)
    shape = tuple(t.shape[i] for i in range(t.ndim))
    stride = tuple(t.strides[i] for i in range(t.ndim)) if t.strides else contiguous_strides(shape)
    if t.device.device_type in (_DL_CUDA, _DL_CUDA_MANAGED):
        device = int(t.device.device_id)
    else:
        device = "cpu" if t.device.device_type == _DL_CPU else "DLPack device type %d" % t.device.device_type
    return View((t.data or 0) + t.byte_offset, code, shape, stride, device, keepalive=capsule)


def _from_cai(x, name):
    """Reads __cuda_array_interface__ (version 2 or 3): byte strides become element strides."""
    cai = x.__cuda_array_interface__
    typestr = cai["typestr"]
    entry = _TYPESTRS.get(typestr[1:]) if typestr[:1] in "<=|" else None
    if entry is None:
        raise FlashgenError(_capi.STATUS_NAMES[FG_ERR_INVALID_ARGUMENT],
                            "%s.__cuda_array_interface__ typestr is %r; flashgen takes fp16 ('<f2') there, "
                            "and bf16 through torch tensors or __dlpack__" % (name, typestr), FG_ERR_INVALID_ARGUMENT)
    code, size = entry
    shape = tuple(int(s) for s in cai["shape"])
    strides = cai.get("strides")
    if strides is None:
        stride = contiguous_strides(shape)
    else:
        if any(int(s) % size for s in strides):
            raise FlashgenError(_capi.STATUS_NAMES[FG_ERR_INVALID_ARGUMENT],
                                "%s strides %r (bytes) are not whole elements of %d bytes" % (name, tuple(strides), size),
                                FG_ERR_INVALID_ARGUMENT)
        stride = tuple(int(s) // size for s in strides)
    data = int(cai["data"][0] or 0)
    return View(data, code, shape, stride, _device_of(x))


_torch_dtypes = {}  # torch dtype object -> fg_dtype, filled on the first torch tensor seen


def _from_torch(torch, x, name):
    """The fast path for torch tensors (the common case: a few microseconds per call matter)."""
    if not _torch_dtypes:
        for attr, code in (("float16", _capi.FG_DTYPE_F16), ("bfloat16", _capi.FG_DTYPE_BF16),
                           ("float32", _capi.FG_DTYPE_F32), ("float8_e4m3fn", _capi.FG_DTYPE_E4M3),
                           ("float8_e5m2", _capi.FG_DTYPE_E5M2)):
            if hasattr(torch, attr):
                _torch_dtypes[getattr(torch, attr)] = code
    code = _torch_dtypes.get(x.dtype)
    if code is None:
        code = _dtype_code(x.dtype, name)  # raises, naming the argument
    dev = x.device
    device = (dev.index if dev.index is not None else 0) if dev.type == "cuda" else dev.type
    return View(x.data_ptr(), code, tuple(x.shape), tuple(x.stride()), device, True)


def view(x, name, stream=None):
    """The View of argument `name` (for messages). Raises FlashgenError for a dtype with no fg_dtype and
    TypeError for an object of no accepted kind."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return _from_torch(torch, x, name)
    if isinstance(x, TensorDesc):
        return View(0, _dtype_code(x.dtype, name), x.shape, x.stride(), x.device_index)
    if hasattr(x, "data_ptr") and hasattr(x, "stride") and hasattr(x, "dtype") and hasattr(x, "shape"):
        shape = tuple(int(s) for s in x.shape)
        return View(int(x.data_ptr()), _dtype_code(x.dtype, name), shape, tuple(int(s) for s in x.stride()),
                    _device_of(x))
    if hasattr(x, "__cuda_array_interface__"):
        return _from_cai(x, name)
    if hasattr(x, "__dlpack__"):
        return _from_dlpack(x, name, stream)
    raise TypeError("%s is a %s; flashgen takes torch tensors, objects with __cuda_array_interface__ or "
                    "__dlpack__, or flashgen.TensorDesc" % (name, type(x).__name__))
