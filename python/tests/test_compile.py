"""test_compile.py: flashgen's torch.library custom ops under torch.compile and CUDA graphs.

Run:  python3 python/tests/test_compile.py        (or: python3 -m pytest python/tests/test_compile.py)
CPU tests (need PyTorch >= 2.4, no GPU, no library): torch.ops.flashgen.fwd/bwd are registered; their fake
kernels give O like q in the out dtype, LSE fp32 [b, h, sq] and dq/dk/dv like q/k/v (under FakeTensorMode
and on meta tensors); torch.library.opcheck passes on meta tensors; torch._dynamo.explain of a function
calling flashgen.attention (inference, and with inputs that require grad) on meta tensors, backend "eager",
fullgraph=True, finds one graph and no graph break; backend 'aot_eager' traces the backward. GPU tests (skipped with the reason without CUDA or the
library): torch.compile(fullgraph=True) of a small attention model matches eager (forward and gradients),
and a CUDA graph capturing flashgen.attention replays to the eager result.
"""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..")))

try:
    import torch
    HAVE_TORCH = hasattr(torch, "library") and hasattr(torch.library, "custom_op")
except ImportError:
    torch = None
    HAVE_TORCH = False

import flashgen  # noqa: E402
from gpu_reason import gpu_reason  # noqa: E402

NO_TORCH = "needs PyTorch >= 2.4 (torch.library.custom_op)"


def _gpu_reason():
    return gpu_reason(torch, HAVE_TORCH, NO_TORCH)


def _qkv(device, dtype, b=2, sq=128, sk=128, h=4, hkv=2, d=64, requires_grad=False):
    g = torch.Generator(device="cpu").manual_seed(0)
    mk = lambda s, hh: torch.randn((b, s, hh, d), generator=g).to(device=device, dtype=dtype)  # noqa: E731
    q, k, v = mk(sq, h), mk(sk, hkv), mk(sk, hkv)
    if requires_grad:
        for x in (q, k, v):
            x.requires_grad_(True)
    return q, k, v


@unittest.skipUnless(HAVE_TORCH, NO_TORCH)
class OpsCpuTest(unittest.TestCase):
    def setUp(self):
        flashgen.register_ops()

    def test_registered(self):
        self.assertTrue(hasattr(torch.ops.flashgen, "fwd"))
        self.assertTrue(hasattr(torch.ops.flashgen, "bwd"))
        schema = str(torch.ops.flashgen.fwd.default._schema)
        self.assertIn("flashgen::fwd(", schema)
        self.assertIn("-> (Tensor, Tensor)", schema)

    def test_fake_shapes(self):
        from torch._subclasses.fake_tensor import FakeTensorMode
        with FakeTensorMode():
            q, k, v = (torch.empty((2, 100, 8, 64), dtype=torch.bfloat16) for _ in range(3))
            k, v = torch.empty((2, 70, 2, 64), dtype=torch.bfloat16), torch.empty((2, 70, 2, 64), dtype=torch.bfloat16)
            o, lse = torch.ops.flashgen.fwd(q, k, v, True, None, True, None, None, None, None, False, None)
            self.assertEqual((tuple(o.shape), o.dtype), ((2, 100, 8, 64), torch.bfloat16))
            self.assertEqual((tuple(lse.shape), lse.dtype), ((2, 8, 100), torch.float32))
            o2, _ = torch.ops.flashgen.fwd(q, k, v, False, 0.1, False, None, None, None, torch.float16, False, None)
            self.assertEqual(o2.dtype, torch.float16)
            dq, dk, dv = torch.ops.flashgen.bwd(q, k, v, o, lse, o, False, None, False, None)
            self.assertEqual([tuple(x.shape) for x in (dq, dk, dv)], [(2, 100, 8, 64), (2, 70, 2, 64), (2, 70, 2, 64)])
            # q in a [b, h, s, d] buffer seen as [b, s, h, d]: O keeps q's layout, as the eager path does
            qt = torch.empty((2, 8, 100, 64), dtype=torch.bfloat16).transpose(1, 2)
            ot, _ = torch.ops.flashgen.fwd(qt, k, v, False, None, False, None, None, None, None, False, None)
            self.assertEqual(ot.stride(), qt.stride())

    def test_fake_fp8_out_dtype(self):
        if not hasattr(torch, "float8_e4m3fn"):
            self.skipTest("this PyTorch has no float8_e4m3fn")
        q = torch.empty((1, 64, 4, 64), dtype=torch.float8_e4m3fn, device="meta")
        o, lse = torch.ops.flashgen.fwd(q, q, q, False, None, False, None, None, None, None, False, None)
        self.assertEqual(o.dtype, torch.bfloat16)
        self.assertEqual(tuple(lse.shape), (0,))

    def test_opcheck_meta(self):
        q, k, v = _qkv("meta", torch.float16)
        checks = ("test_schema", "test_autograd_registration", "test_faketensor")
        torch.library.opcheck(torch.ops.flashgen.fwd.default,
                              (q, k, v, True, None, True, None, None, None, None, False, None), test_utils=checks)
        o, lse = torch.ops.flashgen.fwd(q, k, v, True, None, True, None, None, None, None, False, None)
        torch.library.opcheck(torch.ops.flashgen.bwd.default, (q, k, v, o, lse, o, True, None, False, None),
                              test_utils=checks)

    def _explain(self, fn, *args):
        torch._dynamo.reset()
        ex = torch._dynamo.explain(fn)(*args)
        self.assertEqual(ex.graph_break_count, 0, ex.break_reasons)
        self.assertEqual(ex.graph_count, 1)
        return ex

    def test_compile_forward_no_graph_break(self):
        def f(q, k, v):
            o = flashgen.attention(q, k, v, causal=True)
            o2, lse = flashgen.attention(q, k, v, return_lse=True, softmax_scale=0.125)
            return o * 2 + o2, lse.sum()
        q, k, v = _qkv("meta", torch.bfloat16)
        ex = self._explain(f, q, k, v)
        self.assertIn("flashgen.fwd", str(ex.graphs[0].code))
        torch._dynamo.reset()
        o, s = torch.compile(f, fullgraph=True, backend="eager")(q, k, v)
        self.assertEqual((tuple(o.shape), o.dtype), (tuple(q.shape), q.dtype))

    def test_compile_training_no_graph_break(self):
        # inputs that require grad take attention()'s autograd branch (the op records its backward)
        def f(q, k, v):
            return flashgen.attention(q, k, v, causal=True, deterministic=True).float().sum()
        q, k, v = _qkv("meta", torch.float16, requires_grad=True)
        self._explain(f, q, k, v)

    def test_compile_aot_eager_training(self):
        # aot_eager traces forward and backward through the fake kernels and register_autograd
        def f(q, k, v):
            return flashgen.attention(q, k, v, causal=True).float().square().sum()
        q, k, v = _qkv("meta", torch.float16, requires_grad=True)
        torch._dynamo.reset()
        loss = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v)
        loss.backward()
        self.assertEqual([tuple(x.grad.shape) for x in (q, k, v)], [tuple(x.shape) for x in (q, k, v)])


class GpuTest(unittest.TestCase):
    def setUp(self):
        reason = _gpu_reason()
        if reason:
            self.skipTest(reason)
        torch._dynamo.reset()

    @staticmethod
    def _close(a, b, tol):
        return (a.float() - b.float()).abs().max().item() <= tol

    def test_compile_matches_eager(self):
        torch.manual_seed(0)
        proj = torch.nn.Linear(64, 64, device="cuda", dtype=torch.bfloat16)

        def model(q, k, v):
            return proj(flashgen.attention(q, k, v, causal=True))

        q, k, v = _qkv("cuda", torch.bfloat16, sq=256, sk=256, requires_grad=True)
        ref = model(q, k, v)
        ref.float().sum().backward()
        gref = [x.grad.clone() for x in (q, k, v)]
        for x in (q, k, v):
            x.grad = None
        out = torch.compile(model, fullgraph=True)(q, k, v)
        out.float().sum().backward()
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(out, ref), (out.float() - ref.float()).abs().max().item())
        for g, r in zip((q.grad, k.grad, v.grad), gref):
            self.assertTrue(self._close(g, r, 1e-2), (g.float() - r.float()).abs().max().item())

    def test_compile_lse_and_fp8(self):
        q, k, v = _qkv("cuda", torch.float16)
        f = torch.compile(lambda q, k, v: flashgen.attention(q, k, v, return_lse=True), fullgraph=True)
        o, lse = f(q, k, v)
        o_ref, lse_ref = flashgen.attention(q, k, v, return_lse=True)
        self.assertTrue(torch.equal(o, o_ref))
        self.assertTrue(torch.equal(lse, lse_ref))
        if torch.cuda.get_device_capability() >= (8, 9):
            q8, k8, v8 = (x.to(torch.float8_e4m3fn) for x in (q, k, v))
            g = torch.compile(lambda a, b, c: flashgen.attention(a, b, c, q_descale=0.5, k_descale=2.0),
                              fullgraph=True)
            self.assertTrue(torch.equal(g(q8, k8, v8), flashgen.attention(q8, k8, v8, q_descale=0.5, k_descale=2.0)))

    def test_cuda_graph_capture(self):
        q, k, v = _qkv("cuda", torch.bfloat16, sq=256, sk=256)
        ref = flashgen.attention(q, k, v, causal=True)  # compiles the kernel outside the capture
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            flashgen.attention(q, k, v, causal=True)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = flashgen.attention(q, k, v, causal=True)
        g.replay()
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(out, ref))
        q.mul_(0.5)
        g.replay()
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(out, flashgen.attention(q, k, v, causal=True)))

    def test_compile_reduce_overhead(self):
        q, k, v = _qkv("cuda", torch.bfloat16)
        f = torch.compile(lambda q, k, v: flashgen.attention(q, k, v), mode="reduce-overhead", fullgraph=True)
        for _ in range(3):
            o = f(q, k, v)
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(o, flashgen.attention(q, k, v)))


if __name__ == "__main__":
    unittest.main(verbosity=2)
