"""test_mods.py: custom score and mask mods in the Python binding (flashgen.Mod, the mod= and mod_aux= keywords;
docs/mods.md).

Without a GPU (the library built, no PyTorch needed): a mod's tracing, its id and aux declarations, a bad mod's
FlashgenError with its file:line, closing; mod_aux's checks raising ValueError naming the array and the rule
before anything is allocated (on torch-like stand-ins, and on CPU torch tensors where PyTorch is installed);
the FgVarlenArgs the binding fills; ValueError for an aux array that requires grad but is not declared trainable. On a
GPU (skipped with the reason without one): a document mask and an ALiBi score mod through attention_varlen against a
float32 reference, the gradients of trainable aux arrays (a bias table, a per-head temperature) against autograd on it
computed here, both mods at once with mod_aux by name and in order, a decode over a KV cache, the dense
flashgen.attention route, explain_varlen naming the mod, and the Python example of docs/mods.md as printed.

Run:  python3 python/tests/test_mods.py        (or: python3 -m pytest python/tests/test_mods.py)
"""

import ctypes
import os
import re
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..")))

try:
    import torch
except ImportError:
    torch = None

import flashgen  # noqa: E402
from flashgen import _capi, _mods, _tensors  # noqa: E402
from gpu_reason import gpu_reason  # noqa: E402

REASON = gpu_reason(torch)

ALIBI = ("aux = { slope = fg.aux('f32', 1) }\n"
         "score_mod = function(s, b, h, q, kv) return s - fg.load(slope, h) * fg.abs(q - kv) end\n")
DOCUMENT = ("aux = { doc = fg.aux('i32', 2) }                         -- [batch, positions]: each token's document\n"
            "mask_mod = function(b, h, q, kv) return fg.eq(fg.load(doc, b, q), fg.load(doc, b, kv)) end\n")
BOTH = ("aux = { slope = fg.aux('f32', 1), doc = fg.aux('i32', 2) }\n"
        "score_mod = function(s, b, h, q, kv) return s - fg.load(slope, h) * fg.abs(q - kv) end\n"
        "mask_mod = function(b, h, q, kv) return fg.eq(fg.load(doc, b, q), fg.load(doc, b, kv)) end\n")
SOFTCAP = "score_mod = function(s, b, h, q, kv) return 20 * fg.tanh(s / 20) end\n"


def library_reason():
    """Why the library cannot be loaded here (None when it can): tracing a mod needs it, not a GPU."""
    try:
        flashgen.library_path()
    except flashgen.LibraryNotFoundError as e:
        return "libflashgen not found: %s" % e
    return None


LIB_REASON = library_reason()


class _Device:
    def __init__(self, kind, index):
        self.type, self.index = kind, index


class _Array:
    """The torch.Tensor surface the aux checks read (data_ptr, dtype, shape, stride, device), with no memory."""

    def __init__(self, dtype, shape, stride=None, device=("cuda", 0), ptr=0x7F0000010000):
        self.dtype, self.shape, self.device, self.ptr = dtype, tuple(shape), _Device(*device), ptr
        self._stride = tuple(stride) if stride is not None else _tensors.contiguous_strides(self.shape)
        self.requires_grad = False

    def data_ptr(self):
        return self.ptr

    def stride(self):
        return self._stride


def packed_q(lens, heads, d, fill):
    """A stand-in packed q/k/v [sum(lens), heads, d] (no memory): the calls below refuse before reading it."""
    return _Array("torch.bfloat16", (sum(lens), heads, d), ptr=fill)


@unittest.skipIf(LIB_REASON is not None, LIB_REASON or "")
class ModTest(unittest.TestCase):
    def test_trace_id_and_aux(self):
        m = flashgen.Mod(BOTH, name="both.lua")
        self.assertRegex(m.id, r"^[0-9a-f]{16}$")
        self.assertEqual(m.aux, [("doc", "i32", 2), ("slope", "f32", 1)])  # by name, byte order
        self.assertEqual(m.name, "both.lua")
        self.assertEqual(flashgen.Mod(BOTH).id, m.id, "the id is the tree's, not the name's")
        self.assertNotEqual(flashgen.Mod(ALIBI).id, m.id)
        self.assertEqual(flashgen.Mod(SOFTCAP.encode()).aux, [])
        self.assertIn(m.id, repr(m))
        self.assertIn("Mod", flashgen.__all__)

    def test_bad_mod_names_its_line(self):
        text = "score_mod = function(s, b, h, q, kv)\n  if q > kv then return s end\n  return s\nend\n"
        with self.assertRaises(flashgen.FlashgenError) as cm:
            flashgen.Mod(text, name="bad.lua")
        e = cm.exception
        self.assertEqual((e.status, e.code), ("FG_ERR_CONFIG", _capi.FG_ERR_CONFIG))
        self.assertTrue(e.message.startswith("bad.lua:2:"), e.message)
        self.assertIn("fg.where", e.message)
        with self.assertRaises(flashgen.FlashgenError) as cm:
            flashgen.Mod("x = 1\n", name="empty.lua")
        self.assertIn("neither score_mod nor mask_mod", cm.exception.message)
        with self.assertRaises(flashgen.FlashgenError) as cm:
            flashgen.Mod("aux = { t = fg.aux('f64', 1) }\nscore_mod = function(s, b, h, q, kv) return s end\n",
                         name="f64.lua")
        self.assertTrue(cm.exception.message.startswith("f64.lua:1:"), cm.exception.message)

    def test_close(self):
        m = flashgen.Mod(ALIBI)
        h = m.handle
        self.assertTrue(h)
        m.close()
        m.close()  # idempotent
        with self.assertRaises(ValueError) as cm:
            m.handle
        self.assertIn("closed", str(cm.exception))
        with self.assertRaises(ValueError):  # a call with a closed mod is refused before anything else
            flashgen.attention_varlen(None, None, None, None, None, 1, 1, mod=m,
                                      mod_aux=[_Array("torch.float32", (8,))])
        with flashgen.Mod(DOCUMENT) as m2:
            self.assertEqual(m2.aux, [("doc", "i32", 2)])
        self.assertIn("closed", repr(m2))
        del m2  # __del__ after close: nothing left to free

    def test_mod_aux_checks(self):
        m = flashgen.Mod(BOTH, name="both.lua")
        q = packed_q([3, 4], 8, 64, 0x7F0000100000)
        slope = _Array("torch.float32", (8,))
        doc = _Array("torch.int32", (2, 4))

        def refused(aux, *words, error=ValueError, mod=m):
            with self.assertRaises(error) as cm:
                flashgen.attention_varlen(q, q, q, None, None, 4, 4, mod=mod, mod_aux=aux)
            for w in words:
                self.assertIn(w, str(cm.exception))

        refused(None, "attention_varlen(): the mod declares aux arrays, doc (i32, rank 2), slope (f32, rank 1)",
                "pass them as mod_aux")
        refused([doc], "mod_aux has 1 arrays; the mod declares 2")
        refused([slope, doc], "attention_varlen(): mod_aux['doc'] is torch.float32", "must be torch.int32")  # order
        refused({"doc": doc}, "mod_aux lacks 'slope'")
        refused({"doc": doc, "slope": slope, "bias": slope}, "names 'bias'", "does not declare")
        refused(doc, "mod_aux is a _Array", "dict by name or a list")
        refused({"doc": _Array("torch.int32", (8,)), "slope": slope}, "mod_aux['doc'] has rank 1", "rank 2")
        refused({"doc": doc, "slope": _Array("torch.float16", (8,))}, "mod_aux['slope'] is torch.float16",
                "torch.float32")
        refused({"doc": doc, "slope": _Array("torch.float32", (8,), device=("cpu", None))},
                "mod_aux['slope'] is on cpu", "CUDA device memory")
        refused({"doc": _Array("torch.int32", (2, 4), stride=(1, 2)), "slope": slope},
                "mod_aux['doc'] must be contiguous", ".contiguous()")
        refused({"doc": _Array("torch.int32", (2, 0)), "slope": slope}, "each extent must be at least 1")
        refused({"doc": doc, "slope": [0.1] * 8}, "mod_aux['slope'] is a list", "torch tensor on the GPU")
        refused([doc, slope], "mod must be a flashgen.Mod", error=TypeError, mod=m.id)
        with self.assertRaises(ValueError) as cm:
            flashgen.attention_varlen(q, q, q, None, None, 4, 4, mod_aux=[doc])
        self.assertIn("mod_aux is given without a mod", str(cm.exception))
        with self.assertRaises(ValueError):
            flashgen.attention_with_kvcache(q, q, q, mod=m, mod_aux={"doc": doc})
        with self.assertRaises(ValueError):
            flashgen.explain_varlen(q, q, q, mod=m, mod_aux=[doc])
        with self.assertRaises(ValueError):  # the dense route checks the same way
            flashgen.attention(q, q, q, mod=m, mod_aux=[slope])
        with self.assertRaises(ValueError):
            flashgen.attention(q, q, q, mod_aux=[slope])

    def test_args_carry_the_mod(self):
        m = flashgen.Mod(BOTH)
        slope = _Array("torch.float32", (8,), ptr=0x7F0000200000)
        # an extent of 1 may have any stride: the binding passes the row-major ones
        doc = _Array("torch.int32", (2, 1), stride=(1, 5), device=("cuda", 1), ptr=0x7F0000300000)
        for aux in ([doc, slope], {"slope": slope, "doc": doc}):
            call = _mods.mod_call(m, aux, "test")
            a = _capi.FgVarlenArgs()
            _capi.lib().fg_varlen_args_init(ctypes.byref(a))
            self.assertEqual(a.struct_size, ctypes.sizeof(_capi.FgVarlenArgs))
            views = _mods.set_mod(a, call)
            self.assertEqual(a.mod, m.handle)
            self.assertEqual([(n, v.device) for n, v in views], [("mod_aux['doc']", 1), ("mod_aux['slope']", 0)])
            got = [(t.data, t.dtype, t.ndim, list(t.shape)[:t.ndim], list(t.stride)[:t.ndim]) for t in a.mod_aux[:2]]
            self.assertEqual(got, [(0x7F0000300000, _capi.FG_DTYPE_I32, 2, [2, 1], [1, 1]),
                                   (0x7F0000200000, _capi.FG_DTYPE_F32, 1, [8], [1])])
            self.assertTrue(all(t.data is None and t.ndim == 0 for t in a.mod_aux[2:]), "the rest stays unset")
        described = _mods.mod_call(m, None, "explain_varlen", describe=True)
        a = _capi.FgVarlenArgs()
        _mods.set_mod(a, described)
        self.assertEqual([(t.data, t.dtype, t.ndim) for t in a.mod_aux[:2]],
                         [(None, _capi.FG_DTYPE_I32, 2), (None, _capi.FG_DTYPE_F32, 1)])
        self.assertIsNone(_mods.mod_call(None, {}, "test"))

    def test_devices_of_the_aux_arrays_are_checked(self):
        # q on device 0, an aux array on device 1: refused by the binding (the library cannot see devices)
        m = flashgen.Mod(ALIBI)
        q = packed_q([4], 8, 64, 0x7F0000100000)
        call = _mods.mod_call(m, [_Array("torch.float32", (8,), device=("cuda", 1))], "test")
        a = _capi.FgVarlenArgs()
        views = _mods.set_mod(a, call)
        with self.assertRaises(flashgen.FlashgenError) as cm:
            flashgen._device_for([("q", _tensors.view(q, "q"))] + views, True, 0)
        self.assertIn("mod_aux['slope'] is on CUDA device 1 but q is on device 0", str(cm.exception))


@unittest.skipIf(LIB_REASON is not None or torch is None, LIB_REASON or "needs PyTorch")
class TorchChecksTest(unittest.TestCase):
    """What the binding refuses on real torch tensors before the GPU is touched (CPU tensors do)."""

    def test_aux_of_host_memory_and_wrong_dtype(self):
        m = flashgen.Mod(ALIBI)
        q = torch.zeros(4, 8, 64, dtype=torch.bfloat16)
        with self.assertRaises(ValueError) as cm:
            flashgen.attention_varlen(q, q, q, None, None, 4, 4, mod=m, mod_aux=[torch.ones(8)])
        self.assertIn("mod_aux['slope'] is on cpu", str(cm.exception))
        if torch.cuda.is_available():
            with self.assertRaises(ValueError) as cm:
                flashgen.attention_varlen(q, q, q, None, None, 4, 4, mod=m,
                                          mod_aux=[torch.ones(8, dtype=torch.float64, device="cuda")])
            self.assertIn("is torch.float64", str(cm.exception))
            t = torch.ones(8, 2, device="cuda")[:, 0]
            with self.assertRaises(ValueError) as cm:
                flashgen.attention_varlen(q, q, q, None, None, 4, 4, mod=m, mod_aux=[t])
            self.assertIn("must be contiguous", str(cm.exception))

    def test_aux_arrays_requiring_grad_need_the_trainable_declaration(self):
        if not torch.cuda.is_available():
            self.skipTest("the aux array's checks want a CUDA tensor first")
        m = flashgen.Mod(ALIBI)
        self.assertEqual(m.trainable, frozenset())
        self.assertEqual(flashgen.Mod(ALIBI.replace("fg.aux('f32', 1)", "fg.aux('f32', 1, 'trainable')")).trainable,
                         frozenset({"slope"}))
        q = torch.zeros(4, 8, 64, dtype=torch.bfloat16, device="cuda")
        slopes = torch.ones(8, device="cuda", requires_grad=True)
        for call in (lambda: flashgen.attention_varlen(q, q, q, None, None, 4, 4, mod=m, mod_aux=[slopes]),
                     lambda: flashgen.attention(q[None], q[None], q[None], mod=m, mod_aux=[slopes])):
            with self.assertRaises(ValueError) as cm:
                call()
            self.assertIn("without 'trainable'; declare it fg.aux('f32', 1, 'trainable')", str(cm.exception))


# ====================================================================== GPU tests


def offsets(lens):
    return torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device="cuda")


def reference32(q, k, v, b, causal, score=None, mask=None):
    """O [sq, hq, dv] and LSE [hq, sq] of sequence b in float32: logits q.k / sqrt(d), score(s, b, h, i, j) on them
    (i = row + sk - sq, the query's position among the keys, as a mod's q; j from 0), keys where mask(b, h, i, j) is
    false hidden, causal bottom-right (j <= i); a row left with no key gets O = 0 and LSE = -inf. GQA by repetition."""
    sq, hq, d = q.shape
    sk, hkv = k.shape[0], k.shape[1]
    kk = k.float().repeat_interleave(hq // hkv, dim=1)
    vv = v.float().repeat_interleave(hq // hkv, dim=1)
    s = torch.einsum("qhd,khd->hqk", q.float(), kk) / d ** 0.5
    h = torch.arange(hq, device=q.device)[:, None, None]
    i = torch.arange(sq, device=q.device)[None, :, None] + (sk - sq)
    j = torch.arange(sk, device=q.device)[None, None, :]
    if score is not None:
        s = score(s, b, h, i, j)
    keep = torch.ones(s.shape, dtype=torch.bool, device=q.device)
    if mask is not None:
        keep = keep & mask(b, h, i, j)
    if causal:
        keep = keep & (j <= i)
    s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    return torch.einsum("hqk,khd->qhd", p, vv), lse


def close(test, out, ref, what, tol=2e-2):
    out, ref = out.float().nan_to_num(0.0, neginf=-1e30), ref.float().nan_to_num(0.0, neginf=-1e30)
    err = (out - ref).abs().max().item() if out.numel() else 0.0
    test.assertLess(err, tol, "%s: max error %g" % (what, err))


@unittest.skipIf(REASON is not None or LIB_REASON is not None, REASON or LIB_REASON or "")
class ModGpuTest(unittest.TestCase):
    def test_gradients_through_a_score_mod_and_a_mask(self):
        """Autograd through attention_varlen with a mod: dq, dk, dv against torch.autograd on the float32
        reference, for ALiBi (score_mod's derivative 1) with causal and for a softcap (tanh's) with a document mask."""
        torch.manual_seed(9)
        lens = [130, 1, 77]
        cu = offsets(lens)
        n = sum(lens)
        slope = torch.tensor([0.5 ** (h + 1) for h in range(8)], device="cuda")
        doc = torch.stack([torch.arange(200, device="cuda", dtype=torch.int32) // (13 + b) for b in range(3)])
        both = flashgen.Mod("aux = { doc = fg.aux('i32', 2) }\n" + SOFTCAP +
                            "mask_mod = function(b, h, q, kv) return fg.eq(fg.load(doc, b, q), fg.load(doc, b, kv)) end\n",
                            name="both.lua")
        cases = [(flashgen.Mod(ALIBI), [slope], True, lambda s, b, h, i, j: s - slope[h] * (i - j).abs(), None),
                 (both, {"doc": doc.contiguous()}, False, lambda s, b, h, i, j: 20 * torch.tanh(s / 20),
                  lambda b, h, i, j: doc[b][i] == doc[b][j])]
        for m, aux, causal, score, mask in cases:
            q = torch.randn(n, 8, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            k = torch.randn(n, 2, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            v = torch.randn(n, 2, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            do = torch.randn(n, 8, 64, device="cuda", dtype=torch.bfloat16)
            o = flashgen.attention_varlen(q, k, v, cu, cu, max(lens), max(lens), causal=causal, mod=m, mod_aux=aux)
            dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
            for b, (lo, hi) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
                qs, ks, vs = (x.detach()[lo:hi].float().requires_grad_() for x in (q, k, v))
                ro, _ = reference32(qs, ks, vs, b, causal, score=score, mask=mask)
                rq, rk, rv = torch.autograd.grad(ro, (qs, ks, vs), do[lo:hi].float())
                for got, want, name in ((dq[lo:hi], rq, "dq"), (dk[lo:hi], rk, "dk"), (dv[lo:hi], rv, "dv")):
                    close(self, got, want, "%s of sequence %d (%s)" % (name, b, "alibi" if causal else "softcap+doc"),
                          tol=5e-2 * max(1.0, want.abs().max().item()))

    def test_gradients_of_trainable_aux_arrays(self):
        """A relative-position bias table [8, 65] and a per-head temperature declared trainable: their gradients
        (summed over every score by the kernel's atomics) against torch.autograd on the float32 reference, with q,
        k, v's, causal and not, through attention_varlen and the dense flashgen.attention."""
        torch.manual_seed(11)
        text = ("aux = { bias = fg.aux('f32', 2, 'trainable'), temp = fg.aux('f32', 1, 'trainable') }\n"
                "score_mod = function(s, b, h, q, kv)\n"
                "  return s * fg.load(temp, h) + fg.load(bias, h, fg.min(fg.max(kv - q, -32), 32) + 32)\n"
                "end\n")
        m = flashgen.Mod(text, name="trained.lua")
        self.assertEqual(m.trainable, frozenset({"bias", "temp"}))
        lens = [150, 1, 90]
        cu = offsets(lens)
        n = sum(lens)
        for causal in (True, False):
            bias = (0.1 * torch.randn(8, 65, device="cuda")).requires_grad_()
            temp = (1 + 0.1 * torch.randn(8, device="cuda")).requires_grad_()
            q = torch.randn(n, 8, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            k = torch.randn(n, 2, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            v = torch.randn(n, 2, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            do = torch.randn(n, 8, 64, device="cuda", dtype=torch.bfloat16)
            o = flashgen.attention_varlen(q, k, v, cu, cu, max(lens), max(lens), causal=causal, mod=m,
                                          mod_aux={"bias": bias, "temp": temp})
            got = torch.autograd.grad(o, (q, bias, temp), do)
            rb, rt = bias.detach().clone().requires_grad_(), temp.detach().clone().requires_grad_()
            rq = q.detach().float().requires_grad_()
            outs = []
            for b, (lo, hi) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
                def score(s, b_, h, i, j):
                    return s * rt[h] + rb[h.expand_as(s), (j - i).clamp(-32, 32).expand_as(s) + 32]
                ro, _ = reference32(rq[lo:hi], k.detach()[lo:hi], v.detach()[lo:hi], b, causal, score=score)
                outs.append(ro)
            want = torch.autograd.grad(torch.cat(outs), (rq, rb, rt), do.float())
            for g, w, name in zip(got, want, ("dq", "dbias", "dtemp")):
                close(self, g, w, "%s (%s)" % (name, "causal" if causal else "not causal"),
                      tol=2e-2 * max(1.0, w.abs().max().item()))
        # the dense route takes the same gradients
        bias = (0.1 * torch.randn(8, 65, device="cuda")).requires_grad_()
        temp = torch.ones(8, device="cuda", requires_grad=True)
        q = torch.randn(2, 70, 8, 64, device="cuda", dtype=torch.bfloat16)
        k, v = torch.randn(2, 2, 70, 2, 64, device="cuda", dtype=torch.bfloat16)
        o = flashgen.attention(q, k, v, causal=True, mod=m, mod_aux=[bias, temp])
        (gb,) = torch.autograd.grad(o.float().sum(), (bias,))
        packed = [x.reshape(-1, *x.shape[2:]) for x in (q, k, v)]
        cu2 = offsets([70, 70])
        o2 = flashgen.attention_varlen(*packed, cu2, cu2, 70, 70, causal=True, mod=m, mod_aux=[bias, temp])
        (gb2,) = torch.autograd.grad(o2.float().sum(), (bias,))
        close(self, gb, gb2, "dbias dense against packed", tol=1e-3 * max(1.0, gb2.abs().max().item()))

    def test_mask_map_kept_across_calls(self):
        """A MaskMap shared by calls: the second reads the first's map (the same bits out), an in-place change of the
        aux array refills it (the output follows the new documents), each against the float32 reference; a mod whose
        mask reads no aux array ignores it."""
        torch.manual_seed(12)
        m = flashgen.Mod(DOCUMENT, name="doc.lua")
        lens = [300, 129, 1]
        cu = offsets(lens)
        n = sum(lens)
        q = torch.randn(n, 8, 64, device="cuda", dtype=torch.bfloat16)
        k, v = torch.randn(2, n, 2, 64, device="cuda", dtype=torch.bfloat16)
        doc = torch.stack([torch.arange(300, device="cuda", dtype=torch.int32) // (17 + b) for b in range(3)]).contiguous()
        mm = flashgen.MaskMap()

        def run_and_check(what):
            o = flashgen.attention_varlen(q, k, v, cu, cu, 300, 300, mod=m, mod_aux=[doc], mask_map=mm)
            for b, (lo, hi) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
                ro, _ = reference32(q[lo:hi], k[lo:hi], v[lo:hi], b, False,
                                    mask=lambda bb, h, i, j: doc[bb][i] == doc[bb][j])
                close(self, o[lo:hi], ro, "%s, sequence %d" % (what, b))
            return o

        first = run_and_check("first call (fills the map)")
        self.assertIn("bytes", repr(mm))
        again = run_and_check("second call (reads it)")
        self.assertTrue(torch.equal(first, again))
        doc.copy_(torch.stack([torch.arange(300, device="cuda", dtype=torch.int32) // (5 + 3 * b) for b in range(3)]))
        changed = run_and_check("after an in-place change of doc (refills it)")
        self.assertFalse(torch.equal(first, changed))
        w = flashgen.Mod("mask_mod = function(b, h, q, kv) return fg.le(kv, q) end\n", name="causal.lua")
        plain = flashgen.MaskMap()
        flashgen.attention_varlen(q, k, v, cu, cu, 300, 300, mod=w, mask_map=plain)
        self.assertEqual(repr(plain), "MaskMap(empty)")

    LENS = [5, 0, 1, 130, 64, 17]  # self-attention sequences, 0 and 1 among them

    def packed(self, heads_q, heads_kv, d, dtype, seed):
        torch.manual_seed(seed)
        n = sum(self.LENS)
        q = torch.randn(n, heads_q, d, device="cuda", dtype=dtype)
        k = torch.randn(n, heads_kv, d, device="cuda", dtype=dtype)
        return q, k, torch.randn_like(k), offsets(self.LENS)

    def check_sequences(self, o, lse, q, k, v, cu, causal, what, score=None, mask=None):
        for b in range(len(self.LENS)):
            rows = slice(cu[b].item(), cu[b + 1].item())
            ro, rl = reference32(q[rows], k[rows], v[rows], b, causal, score, mask)
            close(self, o[rows], ro, "%s, sequence %d O" % (what, b))
            self.assertTrue(torch.equal(torch.isfinite(lse[:, rows]), torch.isfinite(rl)), "%s, sequence %d: -inf rows"
                            % (what, b))
            close(self, lse[:, rows], rl, "%s, sequence %d LSE" % (what, b))

    def documents(self):
        """doc [batch, longest] int32: position t of sequence b is in document t // (7 + 3 b)."""
        width = max(self.LENS)
        t = torch.arange(width, dtype=torch.int32, device="cuda")
        return torch.stack([t // (7 + 3 * b) for b in range(len(self.LENS))]).contiguous()

    def test_document_mask(self):
        m = flashgen.Mod(DOCUMENT, name="document.lua")
        q, k, v, cu = self.packed(8, 2, 128, torch.bfloat16, 1)
        doc = self.documents()

        def same_document(b, h, i, j):
            return doc[b, i] == doc[b, j]
        for causal in (False, True):
            o, lse = flashgen.attention_varlen(q, k, v, cu, cu, max(self.LENS), max(self.LENS), causal=causal,
                                               return_lse=True, mod=m, mod_aux={"doc": doc})
            self.check_sequences(o, lse, q, k, v, cu, causal, "document mask, causal %s" % causal, mask=same_document)

    def test_document_mask_over_long_sequences(self):
        """Documents of 150 tokens in sequences up to 600: whole key blocks of other documents are skipped (on
        Hopper by the per-call block map in the workspace, which explain_varlen reports), and every row's result is
        still the reference's."""
        m = flashgen.Mod(DOCUMENT, name="document.lua")
        lens = [600, 300, 70]
        torch.manual_seed(5)
        n = sum(lens)
        q = torch.randn(n, 8, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(n, 2, 128, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        cu = offsets(lens)
        doc = (torch.arange(600, dtype=torch.int32, device="cuda") // 150).repeat(3, 1).contiguous()
        for causal in (False, True):
            o, lse = flashgen.attention_varlen(q, k, v, cu, cu, 600, 600, causal=causal, return_lse=True, mod=m,
                                               mod_aux={"doc": doc})
            for b in range(len(lens)):
                rows = slice(cu[b].item(), cu[b + 1].item())
                ro, rl = reference32(q[rows], k[rows], v[rows], b, causal, None,
                                     lambda bb, h, i, j: doc[bb, i] == doc[bb, j])
                close(self, o[rows], ro, "long documents, causal %s, sequence %d O" % (causal, b))
                close(self, lse[:, rows], rl, "long documents, causal %s, sequence %d LSE" % (causal, b))
        text = flashgen.explain_varlen(q, k, v, cu, cu, max_seqlen_q=600, max_seqlen_k=600, mod=m)
        if "sm_90a" in text:
            self.assertIn("block map (given)", text)

    def test_alibi_score_mod(self):
        m = flashgen.Mod(ALIBI, name="alibi.lua")
        q, k, v, cu = self.packed(8, 2, 64, torch.float16, 2)
        slope = torch.tensor([0.5 ** (h + 1) for h in range(8)], device="cuda")

        def alibi(s, b, h, i, j):
            return s - slope[h] * (i - j).abs()
        o, lse = flashgen.attention_varlen(q, k, v, cu, cu, max(self.LENS), max(self.LENS), causal=True,
                                           return_lse=True, mod=m, mod_aux=[slope])
        self.check_sequences(o, lse, q, k, v, cu, True, "ALiBi score mod", score=alibi)
        # the built-in ALiBi computes the same where each sequence's queries and keys are alike
        ob = flashgen.attention_varlen(q, k, v, cu, cu, max(self.LENS), max(self.LENS), causal=True,
                                       alibi_slopes=slope)
        close(self, o, ob.float(), "ALiBi score mod against alibi_slopes")

    def test_both_functions_aux_by_name_and_in_order(self):
        m = flashgen.Mod(BOTH, name="both.lua")
        q, k, v, cu = self.packed(4, 4, 64, torch.bfloat16, 3)
        slope = torch.tensor([0.3, 0.1, 0.03, 0.01], device="cuda")
        doc = self.documents()
        by_name = flashgen.attention_varlen(q, k, v, cu, cu, max(self.LENS), max(self.LENS), mod=m,
                                            mod_aux={"slope": slope, "doc": doc})
        in_order, lse = flashgen.attention_varlen(q, k, v, cu, cu, max(self.LENS), max(self.LENS), mod=m,
                                                  mod_aux=[doc, slope], return_lse=True)
        self.assertTrue(torch.equal(by_name, in_order))
        self.check_sequences(in_order, lse, q, k, v, cu, False, "ALiBi and a document mask",
                             score=lambda s, b, h, i, j: s - slope[h] * (i - j).abs(),
                             mask=lambda b, h, i, j: doc[b, i] == doc[b, j])
        text = flashgen.explain_varlen(q, k, v, cu, cu, max_seqlen_q=max(self.LENS), max_seqlen_k=max(self.LENS),
                                       mod=m)
        self.assertIn("mod=" + m.id, text)

    def test_decode_over_a_cache(self):
        """A decode's query is at q = its sequence's keys - 1 (a mod's q counts among the keys, bottom-right aligned)."""
        m = flashgen.Mod("aux = { slope = fg.aux('f32', 1) }\n"
                         "score_mod = function(s, b, h, q, kv)\n"
                         "  return s - fg.load(slope, h) * fg.abs(q - kv)\n"
                         "end\n", name="decode.lua")
        torch.manual_seed(4)
        lens = torch.tensor([300, 1, 77], dtype=torch.int32, device="cuda")
        q = torch.randn(3, 1, 8, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(3, 320, 2, 128, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        slope = torch.tensor([0.5 ** (h + 1) for h in range(8)], device="cuda")
        o = flashgen.attention_with_kvcache(q, k, v, cache_seqlens=lens, causal=True, num_splits=3, mod=m,
                                            mod_aux={"slope": slope})
        for b in range(3):
            n = lens[b].item()
            ro, _ = reference32(q[b], k[b, :n], v[b, :n], b, True,
                                score=lambda s, bb, h, i, j: s - slope[h] * (i - j).abs())
            close(self, o[b], ro, "decode with a score mod, sequence %d" % b)
        ob = flashgen.attention_with_kvcache(q, k, v, cache_seqlens=lens, causal=True, alibi_slopes=slope)
        close(self, o, ob.float(), "decode score mod against alibi_slopes")

    def test_dense_attention_takes_a_mod(self):
        m = flashgen.Mod(DOCUMENT, name="document.lua")
        torch.manual_seed(5)
        q = torch.randn(2, 96, 4, 64, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(2, 96, 2, 64, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        doc = (torch.arange(96, dtype=torch.int32, device="cuda") // 40).repeat(2, 1).contiguous()
        doc[1] = torch.arange(96, dtype=torch.int32, device="cuda") // 25
        o = flashgen.attention(q, k, v, causal=True, mod=m, mod_aux=[doc])
        for b in range(2):
            ro, _ = reference32(q[b], k[b], v[b], b, True, mask=lambda bb, h, i, j: doc[bb, i] == doc[bb, j])
            close(self, o[b], ro, "dense call with a document mask, batch %d" % b)
        self.assertIn("mod=" + m.id, flashgen.explain(q, k, v, causal=True, mod=m))

    def test_documented_example_runs(self):
        root = os.path.normpath(os.path.join(HERE, "..", ".."))
        text = open(os.path.join(root, "docs", "mods.md")).read()
        block = re.search(r"## Python.*?```python\n(.*?)```", text, re.S).group(1)
        exec(compile(block, "docs/mods.md", "exec"), {"torch": torch, "flashgen": flashgen})
        torch.cuda.synchronize()


if __name__ == "__main__":
    unittest.main()
