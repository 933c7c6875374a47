"""test_binding.py: tests of the Python binding (python/flashgen).

Run:  python3 python/tests/test_binding.py        (or: python3 -m pytest python/tests)
CPU tests need only Python and a C compiler: the import works without PyTorch or the library, the ctypes
structures match include/flashgen.h (sizes and offsets from a C program compiled here), a missing
library is a clear error, and the translation of torch-like, __cuda_array_interface__ and DLPack
objects into fg_tensor is right, FP8 arguments included. The FP8 helpers (hadamard_rotate,
quantize_fp8, key_major_v) are checked on CPU tensors when PyTorch is installed. GPU tests (skipped
with the reason printed when PyTorch or CUDA is absent) compare against PyTorch SDPA in fp32 on upcast
inputs with the rule of docs/numerics.md (max|out - ref32| <= 2 * max|ref_lowp - ref32| + 1e-5), check the
LSE, and check that bad input raises FlashgenError naming the argument; the FP8 ones compare against
the same rule with reference/reference.h's FP8 lowp reference.
"""

import ctypes
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYROOT = os.path.normpath(os.path.join(HERE, ".."))
REPO = os.path.normpath(os.path.join(PYROOT, ".."))
HEADER = os.path.join(REPO, "include", "flashgen.h")
sys.path.insert(0, PYROOT)

import flashgen  # noqa: E402  (after the path change)
from flashgen import _capi, _tensors  # noqa: E402


def run_python(code, env_extra=None):
    """Runs `code` in a fresh interpreter with the package importable; returns (rc, stdout+stderr)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = PYROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(env_extra or {})
    p = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=120)
    return p.returncode, p.stdout


def library_available():
    try:
        _capi.lib()
        return True
    except flashgen.LibraryNotFoundError:
        return False


# ====================================================================== CPU tests


class ImportTest(unittest.TestCase):
    def test_import_without_torch(self):
        # sys.modules["torch"] = None makes any `import torch` fail, as on a machine without PyTorch.
        rc, out = run_python(
            "import sys; sys.modules['torch'] = None\n"
            "import flashgen\n"
            "d = flashgen.TensorDesc((1, 16, 2, 64), 'bf16')\n"
            "print('version', flashgen.version, d.stride())\n")
        self.assertEqual(rc, 0, out)
        self.assertIn("version %s (2048, 128, 64, 1)" % flashgen.version, out)

    def test_error_is_runtime_error(self):
        e = flashgen.FlashgenError("FG_ERR_IO", "bundle x.fgb could not be read", 7)
        self.assertIsInstance(e, RuntimeError)
        self.assertEqual((e.status, e.code, e.message), ("FG_ERR_IO", 7, "bundle x.fgb could not be read"))
        self.assertEqual(str(e), "FG_ERR_IO: bundle x.fgb could not be read")
        self.assertTrue(issubclass(flashgen.LibraryNotFoundError, flashgen.FlashgenError))


class LayoutTest(unittest.TestCase):
    """The ctypes structures and constants against the C compiler's view of include/flashgen.h."""

    STRUCTS = ((_capi.FgTensor, "fg_tensor"), (_capi.FgFwdArgs, "fg_fwd_args"), (_capi.FgBwdArgs, "fg_bwd_args"),
               (_capi.FgContextOptions, "fg_context_options"), (_capi.FgVarlenArgs, "fg_varlen_args"),
               (_capi.FgMergeArgs, "fg_merge_args"))

    @classmethod
    def setUpClass(cls):
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
        if not cc:
            raise unittest.SkipTest("no C compiler (cc/gcc/clang) to compute the header's layout")
        if not os.path.exists(HEADER):
            raise unittest.SkipTest("%s not found" % HEADER)
        with open(HEADER) as f:
            cls.header_text = f.read()
        cls.constants = sorted(n for n in dir(_capi) if re.fullmatch(r"FG_[A-Z0-9_]+", n) and n != "FG_LOG_FN")
        lines = ["#include <stddef.h>", "#include <stdio.h>", "#include \"flashgen.h\"", "int main(void) {"]
        for py, c in cls.STRUCTS:
            lines.append('printf("%s sizeof %%zu\\n", sizeof(%s));' % (c, c))
            for field in py._fields_:
                lines.append('printf("%s %s %%zu\\n", offsetof(%s, %s));' % (c, field[0], c, field[0]))
        for n in cls.constants:
            lines.append('printf("const %s %%d\\n", (int)%s);' % (n, n))
        lines.append('printf("version %s\\n", FG_VERSION_STRING);')
        lines.append("return 0; }")
        tmp = tempfile.mkdtemp(prefix="fg_layout_")
        try:
            src, exe = os.path.join(tmp, "layout.c"), os.path.join(tmp, "layout")
            with open(src, "w") as f:
                f.write("\n".join(lines) + "\n")
            subprocess.run([cc, "-std=c11", "-Wall", "-I", os.path.dirname(HEADER), src, "-o", exe], check=True)
            out = subprocess.run([exe], check=True, stdout=subprocess.PIPE, universal_newlines=True).stdout
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        cls.c = {}  # ("fg_tensor", "data") -> "0", ("const", "FG_OK") -> "0", ("version",) -> "0.2.0"
        for line in out.splitlines():
            words = line.split(" ")
            cls.c[tuple(words[:-1])] = words[-1]

    def test_struct_sizes_and_offsets(self):
        for py, c in self.STRUCTS:
            self.assertEqual(ctypes.sizeof(py), int(self.c[(c, "sizeof")]), "sizeof(%s)" % c)
            for field in py._fields_:
                self.assertEqual(getattr(py, field[0]).offset, int(self.c[(c, field[0])]),
                                 "offsetof(%s, %s)" % (c, field[0]))

    def test_constants(self):
        for n in self.constants:
            self.assertEqual(getattr(_capi, n), int(self.c[("const", n)]), n)
        # every enum constant of the header is mirrored
        declared = set(re.findall(r"\b(FG_[A-Z0-9_]+)\s*=", self.header_text))
        self.assertTrue(declared, "no enum constants parsed from the header")
        self.assertEqual(declared - set(self.constants), set())
        self.assertEqual(set(_capi.STATUS_NAMES.values()),
                         {n for n in declared if n == "FG_OK" or n.startswith("FG_ERR_")})

    def test_version(self):
        self.assertEqual(flashgen.version, self.c[("version",)])


class LibraryTest(unittest.TestCase):
    def test_missing_library_is_a_clear_error(self):
        rc, out = run_python(
            "import flashgen\n"
            "d = flashgen.TensorDesc((1, 16, 2, 64), 'bf16')\n"
            "try:\n"
            "    flashgen.explain(d, d, d)\n"
            "except flashgen.LibraryNotFoundError as e:\n"
            "    print('ERROR', e)\n",
            {"FLASHGEN_LIB": "/nonexistent/dir/libflashgen.so"})
        self.assertEqual(rc, 0, out)
        self.assertIn("ERROR FLASHGEN_LIB is /nonexistent/dir/libflashgen.so, which does not exist", out)
        self.assertIn("ninja", out)

    def test_unloadable_library_is_a_clear_error(self):
        with tempfile.NamedTemporaryFile(suffix=".so") as f:
            f.write(b"not an ELF file")
            f.flush()
            rc, out = run_python(
                "import flashgen\n"
                "try:\n"
                "    flashgen.library_path()\n"
                "except flashgen.LibraryNotFoundError as e:\n"
                "    print('ERROR', e)\n",
                {"FLASHGEN_LIB": f.name})
        self.assertEqual(rc, 0, out)
        self.assertIn("ERROR libflashgen could not be loaded from %s" % f.name, out)

    def test_status_names_from_library(self):
        if not library_available():
            self.skipTest("libflashgen.so is not built (sh configure && ninja)")
        for code, name in _capi.STATUS_NAMES.items():
            self.assertEqual(_capi.status_name(code), name)

    def test_library_errors_become_flashgen_error(self):
        # With no GPU, context creation fails and the library's sentence comes through; with one, the
        # same call explains a kernel.
        if not library_available():
            self.skipTest("libflashgen.so is not built (sh configure && ninja)")
        d = flashgen.TensorDesc((2, 300, 8, 64), "bf16")
        kv = flashgen.TensorDesc((2, 300, 2, 64), "bf16")
        try:
            text = flashgen.explain(d, kv, kv, causal=True)
        except flashgen.FlashgenError as e:
            self.assertEqual(e.status, "FG_ERR_NO_DEVICE", str(e))
            self.assertEqual(e.code, _capi.FG_ERR_NO_DEVICE)
            self.assertRegex(e.message, r"CUDA", "the library's sentence is carried")
        else:
            self.assertIn("head_dim=64", text)
            self.assertIn("causal=1", text)


class _FakeDevice:
    def __init__(self, kind, index):
        self.type, self.index = kind, index


class _FakeDtype:
    def __init__(self, text):
        self.text = text

    def __str__(self):
        return self.text


class _FakeTensor:
    """The torch.Tensor surface the binding reads: data_ptr(), dtype, shape, stride(), device."""

    def __init__(self, ptr, dtype, shape, stride, device=("cuda", 0)):
        self.ptr, self.dtype, self.shape, self._stride = ptr, _FakeDtype(dtype), shape, stride
        self.device = _FakeDevice(*device)

    def data_ptr(self):
        return self.ptr

    def stride(self):
        return self._stride


class _FakeCAI:
    def __init__(self, ptr, typestr, shape, strides=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False),
                                         "strides": strides, "version": 3}


class TranslationTest(unittest.TestCase):
    def test_torch_like(self):
        t = _FakeTensor(0x7F0000001000, "torch.bfloat16", (2, 300, 8, 64), (300 * 8 * 128, 8 * 128, 128, 1),
                        ("cuda", 1))
        v = _tensors.view(t, "q")
        self.assertEqual((v.data, v.dtype, v.shape, v.stride, v.device),
                         (0x7F0000001000, _capi.FG_DTYPE_BF16, (2, 300, 8, 64), (307200, 1024, 128, 1), 1))
        st = v.struct()
        self.assertEqual((st.data, st.dtype, st.ndim, list(st.shape), list(st.stride)),
                         (0x7F0000001000, _capi.FG_DTYPE_BF16, 4, [2, 300, 8, 64], [307200, 1024, 128, 1]))

    def test_lse_shape_fills_three_dims(self):
        t = _FakeTensor(0x1000, "torch.float32", (2, 8, 300), (2400, 300, 1))
        st = _tensors.view(t, "lse").struct()
        self.assertEqual((st.dtype, st.ndim, list(st.shape), list(st.stride)),
                         (_capi.FG_DTYPE_F32, 3, [2, 8, 300, 0], [2400, 300, 1, 0]))

    def test_dtypes(self):
        for text, code in (("torch.float16", _capi.FG_DTYPE_F16), ("torch.bfloat16", _capi.FG_DTYPE_BF16),
                           ("torch.float8_e4m3fn", _capi.FG_DTYPE_E4M3)):
            self.assertEqual(_tensors.view(_FakeTensor(16, text, (1,), (1,)), "q").dtype, code)
        with self.assertRaises(flashgen.FlashgenError) as cm:
            _tensors.view(_FakeTensor(16, "torch.float64", (1,), (1,)), "k")
        self.assertEqual(cm.exception.status, "FG_ERR_INVALID_ARGUMENT")
        self.assertIn("k.dtype is torch.float64", str(cm.exception))

    def test_cuda_array_interface(self):
        v = _tensors.view(_FakeCAI(0x2000, "<f2", (2, 16, 4, 32)), "v")
        self.assertEqual((v.data, v.dtype, v.stride), (0x2000, _capi.FG_DTYPE_F16, (2048, 128, 32, 1)))
        v = _tensors.view(_FakeCAI(0x2000, "<f2", (2, 16, 4, 32), (8192, 512, 64, 2)), "v")
        self.assertEqual(v.stride, (4096, 256, 32, 1))
        with self.assertRaises(flashgen.FlashgenError) as cm:
            _tensors.view(_FakeCAI(0x2000, "<f8", (1,)), "v")
        self.assertIn("typestr", str(cm.exception))

    def test_dlpack(self):
        try:
            import numpy as np
        except ImportError:
            self.skipTest("numpy is not installed (it provides the DLPack producer used here)")
        if not hasattr(np.ndarray, "__dlpack__"):
            self.skipTest("this numpy has no __dlpack__")
        a = np.arange(2 * 8 * 4 * 16, dtype=np.float16).reshape(2, 8, 4, 16)
        t = a.transpose(0, 2, 1, 3)  # a strided view
        v = _tensors.view(t, "q")
        self.assertEqual((v.dtype, v.shape, v.stride, v.device),
                         (_capi.FG_DTYPE_F16, (2, 4, 8, 16), (512, 16, 64, 1), "cpu"))
        self.assertEqual(v.data, a.__array_interface__["data"][0])
        with self.assertRaises(flashgen.FlashgenError) as cm:
            flashgen.attention(t, t, t, out=t)
        self.assertIn("q is in cpu memory", str(cm.exception))

    def test_tensor_desc(self):
        d = flashgen.TensorDesc((2, 100, 4, 64), "fp16", stride=(100 * 4 * 72, 4 * 72, 72, 1))
        v = _tensors.view(d, "q")
        self.assertEqual((v.data, v.dtype, v.stride), (0, _capi.FG_DTYPE_F16, (28800, 288, 72, 1)))

    def test_binding_refuses_what_the_library_cannot_see(self):
        q = _FakeTensor(0x1000, "torch.bfloat16", (1, 16, 2, 64), (2048, 128, 64, 1), ("cuda", 0))
        k = _FakeTensor(0x2000, "torch.bfloat16", (1, 16, 2, 64), (2048, 128, 64, 1), ("cuda", 1))
        with self.assertRaises(flashgen.FlashgenError) as cm:
            flashgen.attention(q, k, q, out=q)
        self.assertIn("k is on CUDA device 1 but q is on device 0", str(cm.exception))
        cpu = _FakeTensor(0x1000, "torch.bfloat16", (1, 16, 2, 64), (2048, 128, 64, 1), ("cpu", None))
        with self.assertRaises(flashgen.FlashgenError) as cm:
            flashgen.attention(q, q, cpu, out=q)
        self.assertIn("v is in cpu memory", str(cm.exception))

    def test_non_torch_needs_out(self):
        a = _FakeCAI(0x2000, "<f2", (1, 16, 2, 64))
        with self.assertRaises(TypeError) as cm:
            flashgen.attention(a, a, a)
        self.assertIn("out=", str(cm.exception))
        with self.assertRaises(TypeError):
            flashgen.attention(a, a, a, out=a, return_lse=True)

    def test_args_struct(self):
        q = _tensors.view(flashgen.TensorDesc((1, 5, 4, 64), "bf16"), "q")
        kv = _tensors.view(flashgen.TensorDesc((1, 7, 2, 64), "bf16"), "k")
        a = flashgen._args(q, kv, kv, q, None, True, None)
        self.assertEqual((a.causal, a.softmax_scale, a.lse.data, list(a.k.shape)), (1, 0.0, None, [1, 7, 2, 64]))
        a = flashgen._args(q, kv, kv, q, None, False, 0.25)
        self.assertEqual((a.causal, a.softmax_scale), (0, 0.25))
        self.assertEqual((a.q_descale.data, a.k_descale.data, a.v_descale.data), (None, None, None))
        qd = _tensors.view(_FakeTensor(0x2000, "torch.float32", (1,), (1,)), "q_descale")
        kd = _tensors.view(_FakeTensor(0x3000, "torch.float32", (1, 2), (1, 1)), "k_descale")
        a = flashgen._args(q, kv, kv, q, None, False, None, (qd, kd, None))
        self.assertEqual((a.q_descale.data, a.q_descale.dtype, a.q_descale.ndim, list(a.q_descale.shape)),
                         (0x2000, _capi.FG_DTYPE_F32, 1, [1, 0, 0, 0]))
        self.assertEqual((a.k_descale.data, a.k_descale.ndim, list(a.k_descale.shape), list(a.k_descale.stride)),
                         (0x3000, 2, [1, 2, 0, 0], [1, 1, 0, 0]))
        self.assertIsNone(a.v_descale.data)

    def test_fp8_dtypes_translate(self):
        for text, code in (("torch.float8_e4m3fn", _capi.FG_DTYPE_E4M3), ("torch.float8_e5m2", _capi.FG_DTYPE_E5M2),
                           ("e4m3", _capi.FG_DTYPE_E4M3), ("float8_e5m2", _capi.FG_DTYPE_E5M2)):
            self.assertEqual(_tensors.view(_FakeTensor(16, text, (1,), (1,)), "q").dtype, code)
        self.assertEqual(_tensors._DL_DTYPES[(10, 8)], _capi.FG_DTYPE_E4M3)
        self.assertEqual(_tensors._DL_DTYPES[(12, 8)], _capi.FG_DTYPE_E5M2)
        with self.assertRaises(flashgen.FlashgenError) as cm:
            _tensors.view(_FakeTensor(16, "torch.float8_e4m3fnuz", (1,), (1,)), "q")
        self.assertIn("e4m3 or e5m2", str(cm.exception))

    def test_key_major_layout(self):
        # [b=2, sk=300, h=3, d=64] as the FP8 kernel takes V: a [2, 3, 64, 304] buffer viewed back
        self.assertEqual(_tensors.key_major_strides((2, 300, 3, 64)), (3 * 64 * 304, 1, 64 * 304, 304))
        self.assertEqual(_tensors.key_major_strides((1, 0, 1, 32))[3], 16)
        ok = (3 * 64 * 304, 1, 64 * 304, 304)
        self.assertTrue(_tensors.is_key_major((2, 300, 3, 64), ok, 0x1000))
        self.assertFalse(_tensors.is_key_major((2, 300, 3, 64), (300 * 192, 192, 64, 1), 0x1000), "K's layout")
        self.assertFalse(_tensors.is_key_major((2, 300, 3, 64), ok, 0x1008), "misaligned pointer")
        self.assertFalse(_tensors.is_key_major((2, 300, 3, 64), (3 * 64 * 300, 1, 64 * 300, 300), 0x1000),
                         "rows of 300: not a multiple of 16")
        self.assertFalse(_tensors.is_key_major((2, 300, 3, 64), (3 * 64 * 288, 1, 64 * 288, 288), 0x1000),
                         "rows shorter than seqlen_k")
        self.assertTrue(_tensors.is_key_major((1, 1, 1, 64), (64, 64, 64, 16), 0x1000), "one key: stride[1] unused")

    def test_fp8_plan_describes_the_call_attention_makes(self):
        q = flashgen.TensorDesc((1, 5, 4, 64), "e4m3")
        kv = flashgen.TensorDesc((1, 300, 2, 64), "e4m3")
        a, dev = flashgen._plan_args(q, kv, kv, False, None, None, 3)
        self.assertEqual(dev, 3)
        self.assertEqual(a.o.dtype, _capi.FG_DTYPE_BF16, "fp8 O defaults to bf16")
        self.assertEqual(list(a.v.stride), [2 * 64 * 304, 1, 64 * 304, 304], "V described key-major")
        self.assertEqual(list(a.k.stride), [300 * 128, 128, 64, 1])
        a, _ = flashgen._plan_args(q, kv, kv, False, None, None, 0, out_dtype="fp16")
        self.assertEqual(a.o.dtype, _capi.FG_DTYPE_F16)
        b16 = flashgen.TensorDesc((1, 5, 4, 64), "bf16")
        a, _ = flashgen._plan_args(b16, b16, b16, False, None, None, 0)
        self.assertEqual((a.o.dtype, list(a.v.stride)), (_capi.FG_DTYPE_BF16, [1280, 256, 64, 1]))

    def test_fp8_helpers_check_their_arguments_before_needing_torch(self):
        q48 = flashgen.TensorDesc((1, 5, 4, 48), "bf16")
        with self.assertRaisesRegex(ValueError, "head_dim 48 is not a power of two from 32 to 256"):
            flashgen.hadamard_rotate(q48, q48)
        q64, k32 = flashgen.TensorDesc((1, 5, 4, 64), "bf16"), flashgen.TensorDesc((1, 5, 4, 32), "bf16")
        with self.assertRaisesRegex(ValueError, "differ"):
            flashgen.hadamard_rotate(q64, k32)
        with self.assertRaisesRegex(ValueError, "per must be 'tensor' or 'head'"):
            flashgen.quantize_fp8(q64, per="row")
        with self.assertRaisesRegex(ValueError, "must divide the 4 heads"):
            flashgen.quantize_fp8(q64, per="head", heads_kv=3)
        with self.assertRaisesRegex(ValueError, "needs per='head'"):
            flashgen.quantize_fp8(q64, heads_kv=2)
        with self.assertRaisesRegex(ValueError, "dims"):
            flashgen.quantize_fp8(flashgen.TensorDesc((5, 64), "bf16"))


# A stand-in for PyTorch (just the surface the binding touches) and for the C library (it records the
# fg_fwd_args it gets), so attention()'s torch path -- allocation of O and the LSE, the stream, the
# structures passed -- is tested here without PyTorch or a GPU. Run in a subprocess: it replaces
# sys.modules["torch"].
FAKE_TORCH_AND_LIB = r'''
import ctypes, sys, types
torch = types.ModuleType("torch")

class dtype:
    def __init__(self, name):
        self.name = name
    def __str__(self):
        return "torch." + self.name

for _n in ("float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2"):
    setattr(torch, _n, dtype(_n))

class device:
    def __init__(self, type, index=None):
        self.type, self.index = type, index

class Tensor:
    def __init__(self, shape, dt, dev, ptr, strides=None):
        self.shape, self.dtype, self.device, self.ptr = tuple(shape), dt, dev, ptr
        self.strides = strides
    def data_ptr(self):
        return self.ptr
    def stride(self):
        if self.strides is not None:
            return self.strides
        st, acc = [], 1
        for s in reversed(self.shape):
            st.append(acc)
            acc *= s
        return tuple(reversed(st))

torch.Tensor, torch.device = Tensor, device
torch.empty_like = lambda t: Tensor(t.shape, t.dtype, t.device, 0x7f0000100000)
torch.empty = lambda shape, dtype=None, device=None: Tensor(shape, dtype, device, 0x7f0000200000)
class _Stream:
    cuda_stream = 0x1234
torch.cuda = types.SimpleNamespace(current_stream=lambda dev=None: _Stream(), is_initialized=lambda: False,
                                   current_device=lambda: 0)
sys.modules["torch"] = torch

import flashgen
from flashgen import _capi

class FakeLib:
    """Records fg_attention_fwd's arguments; fails with status `fail` when set."""
    fail = 0
    def fg_attention_fwd(self, ctx, args, stream):
        a = args._obj
        t = lambda x: (x.data or 0, x.dtype, x.ndim, list(x.shape), list(x.stride))
        self.got = {"ctx": ctx, "stream": stream, "q": t(a.q), "k": t(a.k), "o": t(a.o), "lse": t(a.lse),
                    "scale": a.softmax_scale, "causal": a.causal, "v": t(a.v), "qd": t(a.q_descale),
                    "kd": t(a.k_descale), "vd": t(a.v_descale)}
        return self.fail
    def fg_last_error(self, ctx):
        return b"q.dtype (fp16) differs from k.dtype (bf16); all four must match"
    def fg_status_string(self, code):
        return _capi.STATUS_NAMES[code].encode()
    waited = []
    def fg_wait_compiles(self, ctx):
        self.waited.append(ctx)
        return 0
    options = []
    def fg_context_set_option(self, ctx, option, value):
        self.options.append((ctx, option, value))
        return 0

fake = FakeLib()
_capi.lib = lambda: fake
flashgen._context = lambda device: flashgen._Context(0xC0DE + device, device)
cuda0 = device("cuda", 0)
'''


class FakeTorchTest(unittest.TestCase):
    def run_fake(self, body):
        rc, out = run_python(FAKE_TORCH_AND_LIB + body)
        self.assertEqual(rc, 0, out)
        return out

    def test_attention_torch_path(self):
        out = self.run_fake(
            "q = Tensor((2, 300, 8, 64), torch.bfloat16, cuda0, 0x7f0000000000)\n"
            "kv = Tensor((2, 500, 2, 64), torch.bfloat16, cuda0, 0x7f0000300000)\n"
            "o, lse = flashgen.attention(q, kv, kv, causal=True, return_lse=True)\n"
            "assert (o.ptr, o.shape, o.dtype) == (0x7f0000100000, q.shape, q.dtype)\n"
            "assert (lse.ptr, lse.shape, lse.dtype.name) == (0x7f0000200000, (2, 8, 300), 'float32')\n"
            "g = fake.got\n"
            "assert g['ctx'] == 0xC0DE and g['stream'] == 0x1234, g\n"
            "assert g['q'] == (0x7f0000000000, 1, 4, [2, 300, 8, 64], [153600, 512, 64, 1]), g['q']\n"
            "assert g['k'] == (0x7f0000300000, 1, 4, [2, 500, 2, 64], [64000, 128, 64, 1]), g['k']\n"
            "assert g['o'][:4] == (0x7f0000100000, 1, 4, [2, 300, 8, 64]), g['o']\n"
            "assert g['lse'] == (0x7f0000200000, 2, 3, [2, 8, 300, 0], [2400, 300, 1, 0]), g['lse']\n"
            "assert (g['scale'], g['causal']) == (0.0, 1), g\n"
            "o2 = flashgen.attention(q, kv, kv, softmax_scale=0.5, stream=77, out=q)\n"
            "assert o2 is q and fake.got['stream'] == 77 and fake.got['scale'] == 0.5 and fake.got['lse'][0] == 0\n"
            "print('fine')\n")
        self.assertIn("fine", out)

    def test_attention_fp8_path(self):
        out = self.run_fake(
            "q = Tensor((2, 300, 8, 64), torch.float8_e4m3fn, cuda0, 0x7f0000000000)\n"
            "k = Tensor((2, 500, 2, 64), torch.float8_e4m3fn, cuda0, 0x7f0000300000)\n"
            "vt = (2 * 64 * 512, 1, 64 * 512, 512)  # key-major: passed as is, no copy\n"
            "v = Tensor((2, 500, 2, 64), torch.float8_e4m3fn, cuda0, 0x7f0000400000, vt)\n"
            "qd = Tensor((1,), torch.float32, cuda0, 0x7f0000500000)\n"
            "kd = Tensor((2, 2), torch.float32, cuda0, 0x7f0000500100)\n"
            "o = flashgen.attention(q, k, v, causal=True, q_descale=qd, k_descale=kd)\n"
            "assert (o.ptr, o.shape, o.dtype.name) == (0x7f0000200000, q.shape, 'bfloat16'), (o.shape, o.dtype.name)\n"
            "g = fake.got\n"
            "assert g['q'][:2] == (0x7f0000000000, _capi.FG_DTYPE_E4M3), g['q']\n"
            "assert g['v'] == (0x7f0000400000, _capi.FG_DTYPE_E4M3, 4, [2, 500, 2, 64], list(vt)), g['v']\n"
            "assert g['o'][:2] == (0x7f0000200000, _capi.FG_DTYPE_BF16), g['o']\n"
            "assert g['qd'] == (0x7f0000500000, _capi.FG_DTYPE_F32, 1, [1, 0, 0, 0], [1, 0, 0, 0]), g['qd']\n"
            "assert g['kd'] == (0x7f0000500100, _capi.FG_DTYPE_F32, 2, [2, 2, 0, 0], [2, 1, 0, 0]), g['kd']\n"
            "assert g['vd'][0] == 0 and g['causal'] == 1, g\n"
            "o = flashgen.attention(q, k, v, out_dtype=torch.float16)\n"
            "assert o.dtype.name == 'float16' and fake.got['o'][1] == _capi.FG_DTYPE_F16 and fake.got['qd'][0] == 0\n"
            "try:\n"
            "    flashgen.attention(q, k, v, k_descale=Tensor((2, 2), torch.float32, device('cuda', 1), 64))\n"
            "except flashgen.FlashgenError as e:\n"
            "    print('device', e)\n"
            "print('fine')\n")
        self.assertIn("fine", out)
        self.assertIn("k_descale is on CUDA device 1 but q is on device 0", out)

    def test_wait_compiles_waits_on_the_contexts_made(self):
        out = self.run_fake(
            "flashgen.wait_compiles()\n"
            "assert fake.waited == [], 'no context, no wait'\n"
            "flashgen._contexts[0] = flashgen._Context(0xC0DE, 0)\n"
            "flashgen._contexts[1] = flashgen._Context(0xC0DF, 1)\n"
            "flashgen.wait_compiles()\n"
            "assert sorted(fake.waited) == [0xC0DE, 0xC0DF], fake.waited\n"
            "flashgen.wait_compiles(device=1)\n"
            "assert fake.waited[2:] == [0xC0DF], fake.waited\n"
            "flashgen.wait_compiles(device=5)\n"
            "assert len(fake.waited) == 3 and 5 not in flashgen._contexts, 'no context is made to wait on'\n"
            "print('fine')\n")
        self.assertIn("fine", out)

    def test_set_jit_tiers_sets_the_option(self):
        out = self.run_fake(
            "flashgen.set_jit_tiers(True, device=0)\n"
            "flashgen.set_jit_tiers(0, device=1)\n"
            "assert fake.options == [(0xC0DE, _capi.FG_OPTION_JIT_TIERS, 1), (0xC0DF, _capi.FG_OPTION_JIT_TIERS, 0)], "
            "fake.options\n"
            "print('fine')\n")
        self.assertIn("fine", out)

    def test_library_failure_becomes_flashgen_error(self):
        out = self.run_fake(
            "q = Tensor((1, 16, 2, 64), torch.float16, cuda0, 0x7f0000000000)\n"
            "fake.fail = _capi.FG_ERR_INVALID_ARGUMENT\n"
            "try:\n"
            "    flashgen.attention(q, q, q)\n"
            "except flashgen.FlashgenError as e:\n"
            "    print('status', e.status, e.code, '|', e.message)\n"
            "fake.fail = 0\n"
            "try:\n"
            "    flashgen.attention(Tensor((1, 16, 2, 64), torch.float64, cuda0, 16), q, q)\n"
            "except flashgen.FlashgenError as e:\n"
            "    print('binding', e)\n"
            "try:\n"
            "    flashgen.attention(q, q, Tensor((1, 16, 2, 64), torch.float16, device('cuda', 3), 16))\n"
            "except flashgen.FlashgenError as e:\n"
            "    print('device', e)\n")
        self.assertIn("status FG_ERR_INVALID_ARGUMENT 1 | q.dtype (fp16) differs from k.dtype (bf16)", out)
        self.assertIn("binding FG_ERR_INVALID_ARGUMENT: q.dtype is torch.float64", out)
        self.assertIn("device FG_ERR_INVALID_ARGUMENT: v is on CUDA device 3 but q is on device 0", out)


# ====================================================================== FP8 helpers on CPU tensors


def _torch_cpu():
    """(torch, None) when PyTorch with the float8 dtypes is importable, else (None, reason)."""
    try:
        import torch
    except ImportError:
        return None, "PyTorch is not installed"
    if not hasattr(torch, "float8_e4m3fn"):
        return None, "this PyTorch has no float8 dtypes"
    return torch, None


class Fp8HelpersTest(unittest.TestCase):
    """hadamard_rotate, quantize_fp8 and key_major_v on CPU tensors (no GPU, no library needed)."""

    @classmethod
    def setUpClass(cls):
        torch, why = _torch_cpu()
        if torch is None:
            raise unittest.SkipTest("FP8 helper tests skipped: " + why)
        cls.torch = torch

    def test_hadamard_matrix_is_orthogonal(self):
        t = self.torch
        for d in (32, 64, 128, 256):
            h = flashgen._hadamard_matrix(t, d, "cpu")
            self.assertTrue(bool(t.allclose(h @ h.T, t.eye(d), atol=1e-5)), "d %d" % d)
            self.assertTrue(bool(t.equal(h, h.T)))
            self.assertTrue(bool(t.allclose(h.abs(), t.full((d, d), d ** -0.5))))

    def test_rotation_keeps_qk_and_spreads_outliers(self):
        t = self.torch
        g = t.Generator().manual_seed(1)
        q = t.randn(2, 37, 4, 128, generator=g)
        k = t.randn(2, 53, 2, 128, generator=g)
        q[..., 5] *= 50  # an outlier channel
        qr, kr = flashgen.hadamard_rotate(q, k, seed=3)
        self.assertEqual((qr.dtype, qr.shape, kr.shape), (q.dtype, q.shape, k.shape))
        s = t.einsum("bqhd,bkhd->bhqk", q[:, :, :2], k)
        sr = t.einsum("bqhd,bkhd->bhqk", qr[:, :, :2], kr)
        self.assertLess((s - sr).abs().max().item(), 1e-3 * s.abs().max().item(), "QK^T must not change")
        self.assertLess(qr.abs().amax().item(), 0.5 * q.abs().amax().item(), "the outlier spreads over channels")
        q2, _ = flashgen.hadamard_rotate(q, k, seed=3)
        q3, _ = flashgen.hadamard_rotate(q, k, seed=4)
        self.assertTrue(bool(t.equal(qr, q2)), "one seed, one rotation")
        self.assertFalse(bool(t.equal(qr, q3)), "another seed, another rotation")
        qb, kb = flashgen.hadamard_rotate(q.bfloat16(), k.bfloat16(), seed=3)
        self.assertEqual(qb.dtype, t.bfloat16)
        sb = t.einsum("bqhd,bkhd->bhqk", qb[:, :, :2].float(), kb.float())
        self.assertLess((s - sb).abs().max().item(), 2e-2 * s.abs().max().item(), "bf16: up to rounding")

    def test_quantize_per_tensor_and_per_head(self):
        t = self.torch
        g = t.Generator().manual_seed(2)
        x = t.randn(2, 40, 4, 64, generator=g)
        x[1, :, 2] *= 30
        for dtype, fmax in ((t.float8_e4m3fn, 448.0), (t.float8_e5m2, 57344.0)):
            x8, d = flashgen.quantize_fp8(x, dtype=dtype)
            self.assertEqual((x8.dtype, x8.shape, d.dtype, tuple(d.shape)), (dtype, x.shape, t.float32, (1,)))
            self.assertAlmostEqual(d.item(), x.abs().max().item() / fmax, delta=1e-6 * d.item())
            self.assertAlmostEqual(x8.float().abs().max().item(), fmax, delta=1e-3 * fmax)
            back = x8.float() * d
            rel = 2.0 ** -4 if dtype == t.float8_e4m3fn else 2.0 ** -3
            big = x.abs() > 16 * d  # normal numbers of the format: relative error at most half a step
            self.assertLessEqual(((back - x).abs() / x.abs())[big].max().item(), rel + 1e-6)
            x8, d = flashgen.quantize_fp8(x, dtype=dtype, per="head")
            self.assertEqual(tuple(d.shape), (2, 4))
            want = x.abs().amax(dim=(1, 3)) / fmax
            self.assertTrue(bool(t.allclose(d, want, rtol=1e-6)))
            self.assertTrue(bool(t.allclose(x8.float().abs().amax(dim=(1, 3)), t.full((2, 4), fmax), rtol=1e-3)))
        x8, d = flashgen.quantize_fp8(x, per="head", heads_kv=2)  # GQA: one factor per group of 2 heads
        self.assertEqual(tuple(d.shape), (2, 2))
        want = x.abs().amax(dim=(1, 3)).reshape(2, 2, 2).amax(dim=2) / 448.0
        self.assertTrue(bool(t.allclose(d, want, rtol=1e-6)))
        back = x8.float() * d.repeat_interleave(2, dim=1)[:, None, :, None]
        self.assertLess((back - x).abs().max().item(), 2.0 ** -4 * x.abs().max().item())
        z8, dz = flashgen.quantize_fp8(t.zeros(1, 3, 2, 32))
        self.assertEqual(dz.item(), 1.0, "an all-zero tensor gets descale 1, not 0")
        self.assertEqual(z8.float().abs().max().item(), 0.0)

    def test_key_major_v_copies_into_the_kernel_layout(self):
        t = self.torch
        v = t.randn(2, 300, 3, 64).to(t.float8_e4m3fn)
        vt = flashgen.key_major_v(v)
        self.assertEqual((vt.dtype, tuple(vt.shape)), (v.dtype, (2, 300, 3, 64)))
        self.assertEqual(vt.stride(), (3 * 64 * 304, 1, 64 * 304, 304))
        self.assertTrue(bool(t.equal(vt.view(t.uint8), v.view(t.uint8))), "the same values")
        self.assertTrue(_tensors.is_key_major(tuple(vt.shape), vt.stride(), vt.data_ptr()))
        self.assertIs(flashgen.key_major_v(vt), vt, "already key-major: no copy")
        pad = vt.as_strided((2, 3, 64, 304), (3 * 64 * 304, 64 * 304, 304, 1))[..., 300:]
        self.assertEqual(int(pad.view(t.uint8).abs().max() if pad.numel() else 0), 0, "padding keys are zero")


# ====================================================================== GPU tests


def _torch_cuda():
    """(torch, None) when PyTorch with a CUDA device and the library are usable, else (None, reason)."""
    try:
        import torch
    except ImportError:
        return None, "PyTorch is not installed"
    if not torch.cuda.is_available():
        return None, "no CUDA device visible to PyTorch"
    if not library_available():
        return None, "libflashgen.so is not built"
    return torch, None


def reference(torch, q, k, v, causal, scale=None):
    """(ref32, ref_lowp, lse32) for q [b, sq, hq, d] and k/v [b, sk, hkv, d] (fp16/bf16 on the GPU), all
    [b, sq, hq, d] / [b, hq, sq] float32. ref32: PyTorch SDPA (math backend) in fp32 on upcast inputs,
    with the bottom-right causal mask and GQA by repeat_interleave; rows that see no key are 0.
    ref_lowp: the kernel's precision (P = exp(s - rowmax) rounded to the dtype before P.V, the row sum
    from the unrounded P, O rounded to the dtype), as reference/reference.h defines it."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    qf = q.float().transpose(1, 2)
    kf = k.float().repeat_interleave(hq // hkv, dim=2).transpose(1, 2)
    vf = v.float().repeat_interleave(hq // hkv, dim=2).transpose(1, 2)
    mask = None
    if causal:
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        mask = j <= i + (sk - sq)
    with sdpa_kernel(SDPBackend.MATH):
        o32 = F.scaled_dot_product_attention(qf, kf, vf, attn_mask=mask, scale=scale)
    s = (qf @ kf.transpose(-1, -2)) * scale
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    p = torch.exp(s - m)
    l = p.sum(dim=-1, keepdim=True)
    olow = (p.to(q.dtype).float() @ vf) / l
    seen = torch.isfinite(lse)[..., None]  # rows that see at least one key
    o32 = torch.where(seen, o32, torch.zeros_like(o32))
    olow = torch.where(seen, olow, torch.zeros_like(olow)).to(q.dtype).float()
    return o32.transpose(1, 2), olow.transpose(1, 2), lse


class GpuTest(unittest.TestCase):
    # (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, causal, dtype)
    SHAPES = (
        (2, 128, 128, 4, 4, 64, False, "bfloat16"),
        (1, 113, 203, 8, 2, 80, True, "float16"),      # tails, GQA 4, causal with sq < sk
        (2, 239, 1, 4, 4, 128, False, "bfloat16"),     # one key
        (3, 200, 200, 6, 3, 96, True, "float16"),
        (1, 799, 3, 4, 4, 32, True, "bfloat16"),       # causal with sq > sk: rows that see no key
        (2, 1024, 1023, 16, 2, 128, True, "float16"),  # GQA 8
        (1, 1025, 1025, 8, 1, 256, True, "bfloat16"),  # MQA, head_dim 256
    )

    @classmethod
    def setUpClass(cls):
        torch, why = _torch_cuda()
        if torch is None:
            raise unittest.SkipTest("GPU tests skipped: " + why)
        cls.torch = torch
        torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference must be fp32
        torch.manual_seed(0)

    def inputs(self, b, sq, sk, hq, hkv, d, dtype):
        t = self.torch
        dt = getattr(t, dtype)
        return (t.randn(b, sq, hq, d, device="cuda", dtype=dt), t.randn(b, sk, hkv, d, device="cuda", dtype=dt),
                t.randn(b, sk, hkv, d, device="cuda", dtype=dt))

    def judge(self, out, o32, olow, what):
        t = self.torch
        self.assertTrue(bool(t.isfinite(out).all()), "%s: NaN/Inf in the output" % what)
        err = (out.float() - o32).abs().max().item()
        lowp = (olow - o32).abs().max().item()
        self.assertLessEqual(err, 2 * lowp + 1e-5, "%s: max|out-ref32| %.3g > 2*%.3g + 1e-5" % (what, err, lowp))

    def judge_lse(self, lse, ref, what, slack=None):
        """LSE within 5e-4 + 5e-5 |ref| (+ slack per row: FP8's allowance, see reference_fp8)."""
        t = self.torch
        fin = t.isfinite(ref)
        self.assertTrue(bool(t.isneginf(lse[~fin]).all()), "%s: rows that see no key must have LSE -inf" % what)
        tol = 5e-4 + 5e-5 * ref[fin].abs() + (0 if slack is None else slack[fin])
        bad = ((lse[fin] - ref[fin]).abs() > tol) | ~t.isfinite(lse[fin])
        self.assertFalse(bool(bad.any()), "%s: LSE max error %.3g" % (what, (lse[fin] - ref[fin]).abs().max().item()))

    def test_against_sdpa(self):
        for shape in self.SHAPES:
            b, sq, sk, hq, hkv, d, causal, dtype = shape
            with self.subTest(shape=shape):
                q, k, v = self.inputs(b, sq, sk, hq, hkv, d, dtype)
                o32, olow, lse32 = reference(self.torch, q, k, v, causal)
                out = self.torch.full_like(q, float("nan"))  # every element must be written
                got, lse = flashgen.attention(q, k, v, causal=causal, out=out, return_lse=True)
                self.assertIs(got, out)
                self.assertEqual(tuple(lse.shape), (b, hq, sq))
                self.assertEqual(lse.dtype, self.torch.float32)
                self.judge(out, o32, olow, str(shape))
                self.judge_lse(lse, lse32, str(shape))
                self.judge(flashgen.attention(q, k, v, causal=causal), o32, olow, str(shape) + " allocated")

    def test_autograd_gradients(self):
        """flashgen.attention under autograd: the gradients of sum(O * dO) against fp32 autograd through
        explicit attention math (ref32) with docs/numerics.md's 3x rule, the gap measured by the same math in
        the input dtype (ref_lowp); both modes; GQA, tails and causal with sq != sk; head_dim 256 (the
        8-keys-a-warp tile, dQ by atomics)."""
        t = self.torch
        shapes = ((2, 128, 128, 4, 4, 64, False, "bfloat16"), (1, 113, 203, 8, 2, 128, True, "float16"),
                  (1, 203, 113, 4, 2, 96, True, "bfloat16"), (2, 77, 300, 4, 1, 32, False, "float16"),
                  (1, 150, 170, 2, 2, 256, True, "bfloat16"))

        def math_attention(q, k, v, causal, dtype):
            b, sq, hq, d = q.shape
            sk, hkv = k.shape[1], k.shape[2]
            qf = q.to(dtype).transpose(1, 2)
            kf = k.to(dtype).repeat_interleave(hq // hkv, dim=2).transpose(1, 2)
            vf = v.to(dtype).repeat_interleave(hq // hkv, dim=2).transpose(1, 2)
            s = (qf.float() @ kf.float().transpose(-1, -2)) / math.sqrt(d)
            if causal:
                i = t.arange(sq, device=q.device)[:, None]
                j = t.arange(sk, device=q.device)[None, :]
                s = s.masked_fill(~(j <= i + (sk - sq)), float("-inf"))
            p = t.softmax(s, dim=-1).nan_to_num(0.0)  # rows that see no key: P = 0
            return (p.to(dtype) @ vf).float().transpose(1, 2)

        # The head_dim 256 tiles need 209 KiB of shared memory a block (an H100 or newer).
        smem = getattr(t.cuda.get_device_properties(0), "shared_memory_per_block_optin", 0)
        for shape in shapes:
            b, sq, sk, hq, hkv, d, causal, dtype = shape
            if d > 192 and smem < 214016:
                continue
            for det in (False, True):
                with self.subTest(shape=shape, deterministic=det):
                    q, k, v = [x.requires_grad_() for x in self.inputs(b, sq, sk, hq, hkv, d, dtype)]
                    do = t.randn(b, sq, hq, d, device="cuda", dtype=q.dtype)
                    o = flashgen.attention(q, k, v, causal=causal, deterministic=det)
                    got = t.autograd.grad(o, (q, k, v), do)
                    refs = {}
                    for name, dt in (("ref32", t.float32), ("lowp", q.dtype)):
                        leaves = [x.detach().float().requires_grad_() for x in (q, k, v)]
                        out = math_attention(*leaves, causal, dt)
                        refs[name] = t.autograd.grad(out, leaves, do.float())
                    for i, gname in enumerate(("dq", "dk", "dv")):
                        g = got[i].float()
                        self.assertTrue(bool(t.isfinite(g).all()), "%s %s: NaN/Inf" % (shape, gname))
                        err = (g - refs["ref32"][i]).abs().max().item()
                        lowp = (refs["lowp"][i] - refs["ref32"][i]).abs().max().item()
                        self.assertLessEqual(err, 3 * lowp + 1e-5,
                                             "%s %s: max|grad-ref32| %.3g > 3*%.3g + 1e-5" % (shape, gname, err, lowp))

    def test_softmax_scale_and_strided_views(self):
        t = self.torch
        big = t.randn(2, 300, 12, 64, device="cuda", dtype=t.bfloat16)
        q, k, v = big[:, :, 0:4], big[:, :, 4:8], big[:, 7:, 8:12]  # heads sliced; v also shorter
        k = k[:, 7:]
        self.assertFalse(q.is_contiguous())
        o32, olow, lse32 = reference(t, q, k, v, True, scale=0.3)
        out, lse = flashgen.attention(q, k, v, causal=True, softmax_scale=0.3, return_lse=True)
        self.judge(out, o32, olow, "strided, scale 0.3")
        self.judge_lse(lse, lse32, "strided, scale 0.3")

    def test_current_stream(self):
        t = self.torch
        q, k, v = self.inputs(2, 512, 512, 8, 8, 128, "bfloat16")
        o32, olow, _ = reference(t, q, k, v, False)
        s = t.cuda.Stream()
        s.wait_stream(t.cuda.current_stream())
        with t.cuda.stream(s):
            out = flashgen.attention(q, k, v)
        s.synchronize()
        self.judge(out, o32, olow, "side stream")

    def test_graph_capture_beside_eager_calls(self):
        """A causal call warmed up on stream S (on Hopper S gets a tile counter of the dynamic schedule), then
        captured into a CUDA graph on S, and the graph replayed on another stream while eager calls run on S:
        a counter shared by the graph and S would let each launch take tiles the other needed, leaving poison
        in the outputs. Every output, poisoned before each launch, is checked."""
        t = self.torch
        q, k, v = self.inputs(2, 1100, 1500, 8, 8, 128, "bfloat16")
        o32, olow, _ = reference(t, q, k, v, True)
        s, side = t.cuda.Stream(), t.cuda.Stream()
        s.wait_stream(t.cuda.current_stream())
        side.wait_stream(t.cuda.current_stream())
        with t.cuda.stream(s):
            self.judge(flashgen.attention(q, k, v, causal=True), o32, olow, "warm-up on S")
            g_out = t.full_like(q, float("nan"))
            g = t.cuda.CUDAGraph()
            with t.cuda.graph(g, stream=s):
                flashgen.attention(q, k, v, causal=True, out=g_out)
        t.cuda.synchronize()
        eager = [t.full_like(q, float("nan")) for _ in range(4)]
        for i in range(4):
            with t.cuda.stream(side):
                g_out.fill_(float("nan"))
                g.replay()
            with t.cuda.stream(s):
                flashgen.attention(q, k, v, causal=True, out=eager[i])
            t.cuda.synchronize()
            self.judge(g_out, o32, olow, "graph replay %d" % i)
            self.judge(eager[i], o32, olow, "eager call %d on S beside the replay" % i)

    def test_two_streams_at_once(self):
        """Causal calls queued on two streams in turn, so that they overlap on the GPU: each stream has a tile
        counter of its own on Hopper (a shared one would let each launch take the other's tiles). Every
        output, poisoned before its launch, is checked."""
        t = self.torch
        q, k, v = self.inputs(2, 1100, 1500, 8, 8, 128, "bfloat16")
        o32, olow, _ = reference(t, q, k, v, True)
        streams = (t.cuda.Stream(), t.cuda.Stream())
        for st in streams:
            st.wait_stream(t.cuda.current_stream())
        outs = [t.full_like(q, float("nan")) for _ in range(8)]
        t.cuda.synchronize()
        for i, out in enumerate(outs):
            with t.cuda.stream(streams[i % 2]):
                flashgen.attention(q, k, v, causal=True, out=out)
        t.cuda.synchronize()
        for i, out in enumerate(outs):
            self.judge(out, o32, olow, "call %d on stream %d" % (i, i % 2))

    def test_explain_and_prepare(self):
        t = self.torch
        q, k, v = self.inputs(1, 64, 64, 4, 4, 64, "float16")
        flashgen.prepare(q, k, v, causal=True)
        text = flashgen.explain(q, k, v, causal=True)
        self.assertIn("kind=fwd", text)
        self.assertIn("head_dim=64", text)
        self.assertIn("memory", text.lower(), "prepared, so the explain names the in-memory cache: " + text)
        d = flashgen.TensorDesc((1, 64, 4, 64), "bf16")
        self.assertIn("dtype=bf16", flashgen.explain(d, d, d, device=t.cuda.current_device()))

    def test_explain_backward(self):
        t = self.torch
        q, k, v = self.inputs(1, 128, 128, 4, 2, 128, "bfloat16")
        o, lse = flashgen.attention(q, k, v, causal=True, return_lse=True)
        do = t.randn_like(o)
        text = flashgen.explain_backward(q, k, v, o, lse, do, causal=True)
        self.assertTrue(text.startswith("variant "), text)
        self.assertIn("kind=bwd", text)
        self.assertIn("workspace: ", text)
        hopper = (t.cuda.get_device_capability() == (9, 0) and os.environ.get("FLASHGEN_WGMMA_BWD") != "0"
                  and os.environ.get("FLASHGEN_WGMMA") != "0")
        self.assertEqual("arch=sm_90a" in text, hopper, "the sm_90a backward on Hopper, else mma.sync: " + text)
        det = flashgen.explain_backward(q, k, v, o, lse, do, causal=True, deterministic=True)
        self.assertIn("deterministic=1", det)
        self.assertNotIn("arch=sm_90a", det, "the deterministic mode runs the mma.sync kernel: " + det)
        self.assertRaisesNaming("FG_ERR_INVALID_ARGUMENT", ["lse"],
                                lambda: flashgen.explain_backward(q, k, v, o, lse[:, :1], do))

    def assertRaisesNaming(self, status, words, fn):
        with self.assertRaises(flashgen.FlashgenError) as cm:
            fn()
        self.assertEqual(cm.exception.status, status, str(cm.exception))
        for w in words:
            self.assertIn(w, cm.exception.message)

    def test_bad_input(self):
        t = self.torch
        q, k, v = self.inputs(1, 16, 16, 2, 2, 64, "bfloat16")
        self.assertRaisesNaming("FG_ERR_INVALID_ARGUMENT", ["k.dtype"],
                                lambda: flashgen.attention(q, k.half(), v))
        q7 = t.randn(1, 16, 2, 7, device="cuda", dtype=t.bfloat16)
        self.assertRaisesNaming("FG_ERR_UNSUPPORTED", ["head_dim 7"], lambda: flashgen.attention(q7, q7, q7))
        gapped = t.randn(1, 16, 2, 128, device="cuda", dtype=t.bfloat16)[..., ::2]
        self.assertRaisesNaming("FG_ERR_INVALID_ARGUMENT", ["q.stride[3]"], lambda: flashgen.attention(gapped, k, v))
        q6 = t.randn(1, 16, 6, 64, device="cuda", dtype=t.bfloat16)
        k4 = t.randn(1, 16, 4, 64, device="cuda", dtype=t.bfloat16)
        self.assertRaisesNaming("FG_ERR_INVALID_ARGUMENT", ["must divide"], lambda: flashgen.attention(q6, k4, k4))
        self.assertRaisesNaming("FG_ERR_INVALID_ARGUMENT", ["q is in cpu memory"],
                                lambda: flashgen.attention(q.cpu(), k, v))
        self.assertRaisesNaming("FG_ERR_INVALID_ARGUMENT", ["softmax_scale"],
                                lambda: flashgen.attention(q, k, v, softmax_scale=-1.0))
        self.assertRaisesNaming("FG_ERR_IO", ["/nonexistent/x.fgb"], lambda: flashgen.bundle_load("/nonexistent/x.fgb"))


def reference_fp8(torch, q8, k8, v8, qd, kd, vd, causal, out_dtype, scale=None):
    """(ref32, ref_lowp, lse32, lse_slack) of an FP8 call, [b, sq, hq, d] / [b, hq, sq] float32, per
    reference/reference.h:
    ref32 is SDPA (math backend, fp32) on the dequantized inputs (each element times its descale);
    ref_lowp is the kernel's precision: c = scale * qd * kd; m = rowmax(c * s) on the raw fp8 values;
    P = exp2((c * s - m) * log2(e) + 8); l = sum of P; P rounded to e4m3 before P.V; O = (P V) * vd / l,
    rounded to out_dtype. lse_slack is the LSE rule's allowance for the FP8 tensor cores' ~13-bit
    accumulation of the scores, as reference/forward.c's forward_row computes it: 2^-12 (d/32 + 1) times the
    row's largest scale * descales * sum |q k| over its visible keys. Descales are None, [1] or [b, hkv]
    fp32 tensors; query head h takes KV head h / (hq / hkv)'s factor."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    b, sq, hq, d = q8.shape
    sk, hkv = k8.shape[1], k8.shape[2]
    g = hq // hkv
    scale = 1.0 / math.sqrt(d) if scale is None else scale

    def per_head(x):  # a descale as [b, hq, 1, 1]
        if x is None:
            return torch.ones((1, 1, 1, 1), device=q8.device)
        x = x.float()
        if x.dim() == 1:
            return x.reshape(1, 1, 1, 1)
        return x.repeat_interleave(g, dim=1)[:, :, None, None]

    cq, ck, cv = per_head(qd), per_head(kd), per_head(vd)
    qf = q8.float().transpose(1, 2)
    kf = k8.float().repeat_interleave(g, dim=2).transpose(1, 2)
    vf = v8.float().repeat_interleave(g, dim=2).transpose(1, 2)
    mask = None
    if causal:
        i = torch.arange(sq, device=q8.device)[:, None]
        j = torch.arange(sk, device=q8.device)[None, :]
        mask = j <= i + (sk - sq)
    with sdpa_kernel(SDPBackend.MATH):
        o32 = F.scaled_dot_product_attention(qf * cq, kf * ck, vf * cv, attn_mask=mask, scale=scale)
    s = (qf @ kf.transpose(-1, -2)) * (scale * cq * ck)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    mag = (qf.abs() @ kf.abs().transpose(-1, -2)) * (scale * cq * ck).abs()
    if mask is not None:
        mag = mag.masked_fill(~mask, 0.0)
    slack = mag.amax(dim=-1) * (d // 32 + 1) * 2.0 ** -12
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    p = torch.exp2((s - m) * 1.4426950408889634 + 8)
    l = p.sum(dim=-1, keepdim=True)
    olow = (p.to(torch.float8_e4m3fn).float() @ vf) * cv / l
    seen = torch.isfinite(lse)[..., None]
    o32 = torch.where(seen, o32, torch.zeros_like(o32))
    olow = torch.where(seen, olow, torch.zeros_like(olow)).to(out_dtype).float()
    return o32.transpose(1, 2), olow.transpose(1, 2), lse, slack


class GpuFp8Test(GpuTest):
    """FP8 attention against the float reference (sm_89 and newer)."""
    # (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, causal, dtype, out dtype, descale granularity)
    FP8_SHAPES = (
        (2, 128, 128, 4, 4, 64, False, "float8_e4m3fn", "bfloat16", "tensor"),
        (1, 113, 203, 8, 2, 128, True, "float8_e4m3fn", "float16", "head"),    # tails, GQA 4, sq < sk
        (2, 239, 1, 4, 4, 128, False, "float8_e5m2", "bfloat16", "tensor"),    # one key
        (1, 799, 3, 4, 4, 32, True, "float8_e4m3fn", "bfloat16", "head"),      # rows that see no key
        (1, 300, 301, 4, 2, 96, False, "float8_e4m3fn", "bfloat16", "head"),   # head_dim 96
        (2, 1024, 1023, 16, 2, 128, True, "float8_e5m2", "bfloat16", "head"),  # GQA 8
        (1, 1025, 1025, 8, 1, 256, True, "float8_e4m3fn", "bfloat16", "tensor"),  # MQA, head_dim 256
    )

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        major, minor = cls.torch.cuda.get_device_capability()
        if (major, minor) < (8, 9):
            raise unittest.SkipTest("FP8 GPU tests skipped: sm_%d%d has no FP8 tensor cores (sm_89+)" % (major, minor))

    def fp8_inputs(self, b, sq, sk, hq, hkv, d, dtype, per, rotate=False):
        t = self.torch
        q, k, v = self.inputs(b, sq, sk, hq, hkv, d, "bfloat16")
        if rotate:
            q, k = flashgen.hadamard_rotate(q, k, seed=b * 1000 + sq)
        dt = getattr(t, dtype)
        q8, qd = flashgen.quantize_fp8(q, dt, per, heads_kv=hkv if per == "head" else None)
        k8, kd = flashgen.quantize_fp8(k, dt, per)
        v8, vd = flashgen.quantize_fp8(v, dt, per)
        return q8, k8, v8, qd, kd, vd

    def test_against_the_float_reference(self):
        t = self.torch
        for shape in self.FP8_SHAPES:
            b, sq, sk, hq, hkv, d, causal, dtype, odt, per = shape
            with self.subTest(shape=shape):
                q8, k8, v8, qd, kd, vd = self.fp8_inputs(b, sq, sk, hq, hkv, d, dtype, per, rotate=d in (64, 128))
                out_dtype = getattr(t, odt)
                o32, olow, lse32, slack = reference_fp8(t, q8, k8, v8, qd, kd, vd, causal, out_dtype)
                out, lse = flashgen.attention(q8, k8, v8, causal=causal, return_lse=True, q_descale=qd,
                                              k_descale=kd, v_descale=vd, out_dtype=out_dtype)
                self.assertEqual((out.dtype, tuple(out.shape)), (out_dtype, (b, sq, hq, d)))
                self.judge(out, o32, olow, str(shape))
                self.judge_lse(lse, lse32, str(shape), slack)
                rmse = ((out.float() - o32) ** 2).mean().sqrt().item()
                print("fp8 %s: RMSE vs ref32 %.3g, max|lowp - ref32| %.3g" % (shape, rmse,
                                                                              (olow - o32).abs().max().item()))

    def test_key_major_v_view_is_taken_as_is(self):
        t = self.torch
        q8, k8, v8, qd, kd, vd = self.fp8_inputs(2, 200, 333, 4, 2, 128, "float8_e4m3fn", "tensor")
        vt = flashgen.key_major_v(v8)
        self.assertEqual(vt.stride()[1], 1)
        a = flashgen.attention(q8, k8, v8, q_descale=qd, k_descale=kd, v_descale=vd)  # copies V
        b = flashgen.attention(q8, k8, vt, q_descale=qd, k_descale=kd, v_descale=vd)  # takes the view
        self.assertTrue(bool(t.equal(a, b)), "the binding's copy and a caller's V^T give the same O")
        c = flashgen.attention(q8, k8, vt, q_descale=qd.item(), k_descale=kd.item(), v_descale=vd.item())
        self.assertTrue(bool(t.equal(a, c)), "descales given as numbers")

    def test_explain_names_the_fp8_variant(self):
        t = self.torch
        q8, k8, v8, _, _, _ = self.fp8_inputs(1, 64, 64, 4, 4, 64, "float8_e4m3fn", "tensor")
        text = flashgen.explain(q8, k8, v8, causal=True)
        self.assertIn("dtype=e4m3", text)
        self.assertIn("out=bf16", text)
        self.assertIn("out=fp16", flashgen.explain(q8, k8, v8, out_dtype=t.float16))
        flashgen.prepare(q8, k8, v8, causal=True)

    def test_fp8_bad_input(self):
        t = self.torch
        q8, k8, v8, qd, kd, vd = self.fp8_inputs(1, 16, 16, 4, 2, 64, "float8_e4m3fn", "head")
        self.assertRaisesNaming("FG_ERR_INVALID_ARGUMENT", ["q_descale.shape"],
                                lambda: flashgen.attention(q8, k8, v8, q_descale=t.ones(1, 4, device="cuda")))
        self.assertRaisesNaming("FG_ERR_INVALID_ARGUMENT", ["k.dtype"],
                                lambda: flashgen.attention(q8, k8.to(t.float8_e5m2), v8))
        self.assertRaisesNaming("FG_ERR_INVALID_ARGUMENT", ["o.dtype"],
                                lambda: flashgen.attention(q8, k8, v8, out_dtype=t.float32))
        q48 = t.randn(1, 16, 4, 48, device="cuda").to(t.float8_e4m3fn)
        k48 = t.randn(1, 16, 2, 48, device="cuda").to(t.float8_e4m3fn)
        self.assertRaisesNaming("FG_ERR_UNSUPPORTED", ["head_dim 48", "multiple of 32"],
                                lambda: flashgen.attention(q48, k48, k48))
        b16 = t.randn(1, 16, 2, 64, device="cuda", dtype=t.bfloat16)
        self.assertRaisesNaming("FG_ERR_INVALID_ARGUMENT", ["q_descale", "fp8"],
                                lambda: flashgen.attention(b16, b16, b16, q_descale=qd[:, :1].reshape(1)))

    def test_hadamard_rotation_leaves_16_bit_attention_unchanged(self):
        t = self.torch
        q, k, v = self.inputs(2, 256, 256, 4, 4, 128, "float32")
        o = flashgen.attention(q.bfloat16(), k.bfloat16(), v.bfloat16())
        qr, kr = flashgen.hadamard_rotate(q, k, seed=7)
        orot = flashgen.attention(qr.bfloat16(), kr.bfloat16(), v.bfloat16())
        self.assertLess((o.float() - orot.float()).abs().max().item(), 3e-2)

    # the 16-bit tests of GpuTest are not repeated here
    test_against_sdpa = test_softmax_scale_and_strided_views = test_current_stream = None
    test_explain_and_prepare = test_bad_input = None


if __name__ == "__main__":
    unittest.main(verbosity=2)
