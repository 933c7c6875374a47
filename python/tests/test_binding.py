"""test_binding.py: tests of the Python binding (python/flashgen).

Run:  python3 python/tests/test_binding.py        (or: python3 -m pytest python/tests)
CPU tests need only Python and a C compiler: the import works without PyTorch or the library, the ctypes
structures match include/flashgen.h (sizes and offsets from a C program compiled here), a missing
library is a clear error, and the translation of torch-like, __cuda_array_interface__ and DLPack
objects into fg_tensor is right, FP8 arguments included. The FP8 helpers (hadamard_rotate,
quantize_fp8, key_major_v) are checked on CPU tensors when PyTorch is installed. The GPU tests are
test_binding_gpu.py.
"""

import ctypes
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


if __name__ == "__main__":
    unittest.main(verbosity=2)
