"""test_binding_gpu.py: the Python binding (python/flashgen) on a GPU: attention against PyTorch SDPA in fp32 on
upcast inputs with the rule of docs/numerics.md (max|out - ref32| <= 2 * max|ref_lowp - ref32| + 1e-5), the LSE,
autograd, streams and graphs, explain/prepare, and bad input raising FlashgenError naming the argument; the FP8 tests
against the same rule with reference/reference.h's FP8 lowp reference. Skipped, with the reason printed, when
PyTorch, a CUDA device or the library is absent. The binding's CPU tests are test_binding.py.

Run:  python3 python/tests/test_binding_gpu.py        (or: python3 -m pytest python/tests)
"""

import math
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..")))
sys.path.insert(0, HERE)

import flashgen  # noqa: E402  (after the path change)
from test_binding import library_available  # noqa: E402


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


def _heads_and_mask(torch, q, k, v, causal):
    """q, k, v as fp32 [b, h, s, d] with K and V repeated over their query heads (GQA), and the bottom-right causal
    mask [sq, sk] (True where a key is seen), or None without one."""
    sq, hq, sk, hkv = q.shape[1], q.shape[2], k.shape[1], k.shape[2]
    qf = q.float().transpose(1, 2)
    kf = k.float().repeat_interleave(hq // hkv, dim=2).transpose(1, 2)
    vf = v.float().repeat_interleave(hq // hkv, dim=2).transpose(1, 2)
    mask = None
    if causal:
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        mask = j <= i + (sk - sq)
    return qf, kf, vf, mask


def reference(torch, q, k, v, causal, scale=None):
    """(ref32, ref_lowp, lse32) for q [b, sq, hq, d] and k/v [b, sk, hkv, d] (fp16/bf16 on the GPU), all
    [b, sq, hq, d] / [b, hq, sq] float32. ref32: PyTorch SDPA (math backend) in fp32 on upcast inputs,
    with the bottom-right causal mask and GQA by repeat_interleave; rows that see no key are 0.
    ref_lowp: the kernel's precision (P = exp(s - rowmax) rounded to the dtype before P.V, the row sum
    from the unrounded P, O rounded to the dtype), as reference/reference.h defines it."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    d = q.shape[3]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    qf, kf, vf, mask = _heads_and_mask(torch, q, k, v, causal)
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
    hq, d = q8.shape[2], q8.shape[3]
    g = hq // k8.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale

    def per_head(x):  # a descale as [b, hq, 1, 1]
        if x is None:
            return torch.ones((1, 1, 1, 1), device=q8.device)
        x = x.float()
        if x.dim() == 1:
            return x.reshape(1, 1, 1, 1)
        return x.repeat_interleave(g, dim=1)[:, :, None, None]

    cq, ck, cv = per_head(qd), per_head(kd), per_head(vd)
    qf, kf, vf, mask = _heads_and_mask(torch, q8, k8, v8, causal)
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
