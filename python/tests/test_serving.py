"""test_serving.py: the serving calls of the Python binding on the GPU (skipped with the reason without CUDA,
PyTorch or the library): attention_varlen against a float64 per-sequence reference, its gradients through
autograd (attention_varlen_backward) against the reference's (V of its own head dim too), sinks, sliding windows,
softcaps and ALiBi, attention_with_kvcache with a dense cache and with a shuffled paged cache against the same, an FP8
KV cache with its descales,
merge_states against a float64 merge, explain_varlen's text, the input check raising FlashgenError, and the examples of
docs/serving.md and the README run as printed.

Run:  python3 python/tests/test_serving.py        (or: python3 -m pytest python/tests/test_serving.py)
"""

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
from gpu_reason import gpu_reason  # noqa: E402


REASON = gpu_reason(torch)


def reference(q, k, v, causal, window=(-1, -1), softcap=0.0, slopes=None, top_left=False, sinks=None):
    """O [sq, hq, d] and LSE [hq, sq] of one sequence in float64 (bottom-right causal and window (left, right)
    around the diagonal i + sk - sq, -1 unbounded; a logit softcap, then ALiBi slopes [hq]; top_left: the causal
    mask j <= i instead; sinks [hq]: a logit a head in every row's denominator; GQA by repetition)."""
    sq, hq, d = q.shape
    sk, hkv = k.shape[0], k.shape[1]
    kk = k.double().repeat_interleave(hq // hkv, dim=1)
    vv = v.double().repeat_interleave(hq // hkv, dim=1)
    s = torch.einsum("qhd,khd->hqk", q.double(), kk) / d ** 0.5
    i = torch.arange(sq, device=q.device)[:, None] + sk - sq
    j = torch.arange(sk, device=q.device)[None, :]
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if slopes is not None:
        s = s - slopes.double()[:, None, None] * (i - j).abs()
    if causal:
        s = s.masked_fill(j > (i - (sk - sq) if top_left else i), float("-inf"))
    if window[0] >= 0:
        s = s.masked_fill(j < i - window[0], float("-inf"))
    if window[1] >= 0:
        s = s.masked_fill(j > i + window[1], float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    if sinks is not None:
        lse = torch.logaddexp(lse, sinks.double()[:, None].expand_as(lse))
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    return torch.einsum("hqk,khd->qhd", p, vv), lse


def packed_batch(lens_q, lens_k, heads_q, heads_kv, head_dim, dtype):
    """Random packed q [total_q, heads_q, d], k and v [total_k, heads_kv, d] on the GPU, with their int32
    cu_seqlens_q and cu_seqlens_k."""
    def offsets(lens):
        return torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device="cuda")
    q = torch.randn(sum(lens_q), heads_q, head_dim, device="cuda", dtype=dtype)
    k = torch.randn(sum(lens_k), heads_kv, head_dim, device="cuda", dtype=dtype)
    return q, k, torch.randn_like(k), offsets(lens_q), offsets(lens_k)


def close(test, out, ref, what):
    err = (out.double() - ref).abs().max().item() if out.numel() else 0.0
    test.assertLess(err, 2e-2, "%s: max error %g" % (what, err))


def close_grads(test, q, k, v, rq, rk, rv, qs, ks, what):
    """dq, dk, dv of q, k, v at rows qs / ks against the float64 reference leaves rq, rk, rv (a leaf no loss
    reached, a sequence without keys or queries, has gradient 0)."""
    for name, got, ref in (("dq", q.grad[qs], rq.grad), ("dk", k.grad[ks], rk.grad), ("dv", v.grad[ks], rv.grad)):
        ref = torch.zeros(got.shape, dtype=torch.float64, device=got.device) if ref is None else ref
        err = (got.double() - ref).abs().max().item() if got.numel() else 0.0
        test.assertLess(err, 5e-2, "%s %s: max error %g" % (what, name, err))


@unittest.skipIf(REASON is not None, REASON or "")
class ServingTest(unittest.TestCase):
    def test_varlen_against_reference(self):
        lens_q, lens_k = [5, 0, 1, 130, 64], [5, 3, 1, 200, 64]
        q, k, v, cq, ck = packed_batch(lens_q, lens_k, 8, 2, 64, torch.float16)
        for causal in (False, True):
            o, lse = flashgen.attention_varlen(q, k, v, cq, ck, max(lens_q), max(lens_k), causal=causal,
                                               return_lse=True)
            self.assertEqual(tuple(lse.shape), (8, sum(lens_q)))
            for b in range(len(lens_q)):
                qs, ks = slice(cq[b].item(), cq[b + 1].item()), slice(ck[b].item(), ck[b + 1].item())
                ro, rl = reference(q[qs], k[ks], v[ks], causal)
                close(self, o[qs], ro, "sequence %d O" % b)
                finite = torch.isfinite(rl)
                self.assertTrue(torch.equal(torch.isfinite(lse[:, qs]), finite), "sequence %d: -inf rows" % b)
                close(self, lse[:, qs][finite], rl[finite], "sequence %d LSE" % b)

    def test_varlen_gradients_by_autograd(self):
        lens_q, lens_k = [70, 1, 0, 130], [70, 5, 9, 100]
        cq = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), dtype=torch.int32, device="cuda")
        ck = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0)), dtype=torch.int32, device="cuda")
        for causal, det in ((False, False), (True, True)):
            q = torch.randn(sum(lens_q), 4, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            k = torch.randn(sum(lens_k), 2, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            v = torch.randn(sum(lens_k), 2, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            do = torch.randn(sum(lens_q), 4, 64, device="cuda", dtype=torch.bfloat16)
            o = flashgen.attention_varlen(q, k, v, cq, ck, max(lens_q), max(lens_k), causal=causal,
                                          deterministic=det)
            o.backward(do)
            for b in range(len(lens_q)):
                qs, ks = slice(cq[b].item(), cq[b + 1].item()), slice(ck[b].item(), ck[b + 1].item())
                rq, rk, rv = (x.detach()[s].double().requires_grad_() for x, s in ((q, qs), (k, ks), (v, ks)))
                ro, _ = reference(rq, rk, rv, causal)
                ro.backward(do[qs].double())
                close_grads(self, q, k, v, rq, rk, rv, qs, ks, "sequence %d (causal %s)" % (b, causal))

    def test_dense_gradients_by_autograd(self):
        """attention_varlen on 4-d dense tensors (cu_seqlens None) with a window: autograd runs the packed backward on
        the same rows."""
        q = torch.randn(2, 150, 4, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(2, 180, 2, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(2, 180, 2, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        do = torch.randn(2, 150, 4, 64, device="cuda", dtype=torch.bfloat16)
        o = flashgen.attention_varlen(q, k, v, None, None, 150, 180, causal=True, window_size=(40, 0))
        o.backward(do)
        for b in range(2):
            rq, rk, rv = (x.detach()[b].double().requires_grad_() for x in (q, k, v))
            ro, _ = reference(rq, rk, rv, True, window=(40, 0))
            close(self, o[b], ro, "dense batch %d O" % b)
            ro.backward(do[b].double())
            close_grads(self, q, k, v, rq, rk, rv, b, b, "dense batch %d" % b)

    def test_dense_attention_takes_variants(self):
        """flashgen.attention with FlashAttention's flash_attn_func keywords (window_size, softcap, alibi_slopes)
        and a V of its own head dim runs the serving call on the same tensors, gradients included."""
        q = torch.randn(2, 130, 4, 192, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(2, 170, 2, 192, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(2, 170, 2, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        slopes = torch.tensor([0.1, 0.05, 0.02, 0.01], device="cuda")
        do = torch.randn(2, 130, 4, 128, device="cuda", dtype=torch.bfloat16)
        o = flashgen.attention(q, k, v, causal=True, window_size=(60, 0), softcap=5.0, alibi_slopes=slopes)
        self.assertEqual(tuple(o.shape), (2, 130, 4, 128))
        o.backward(do)
        for b in range(2):
            rq, rk, rv = (x.detach()[b].double().requires_grad_() for x in (q, k, v))
            ro, _ = reference(rq, rk, rv, True, window=(60, 0), softcap=5.0, slopes=slopes)
            close(self, o[b], ro, "batch %d O" % b)
            ro.backward(do[b].double())
            close_grads(self, q, k, v, rq, rk, rv, b, b, "batch %d" % b)
        with self.assertRaises(TypeError):
            flashgen.attention(q.detach(), k.detach(), v.detach(), softcap=5.0, q_descale=1.0)
        text = flashgen.explain(q, k, v, causal=True, window_size=(60, 0), softcap=5.0, alibi_slopes=slopes)
        for key in ("head_dim_v=128", "window=1", "softcap=1", "alibi=1"):
            self.assertIn(key, text)

    def test_model_variant_gradients(self):
        lens_q, lens_k = [70, 1, 0, 130], [70, 5, 9, 100]
        cq = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), dtype=torch.int32, device="cuda")
        ck = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0)), dtype=torch.int32, device="cuda")
        q = torch.randn(sum(lens_q), 4, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(sum(lens_k), 2, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(sum(lens_k), 2, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        sinks = torch.tensor([-1.0, 0.5, 1.0, 2.0], device="cuda", requires_grad=True)
        do = torch.randn(sum(lens_q), 4, 64, device="cuda", dtype=torch.bfloat16)
        o = flashgen.attention_varlen(q, k, v, cq, ck, max(lens_q), max(lens_k), causal=True, window_size=(16, 0),
                                      softcap=2.0, sinks=sinks)
        o.backward(do)
        rs = sinks.detach().double().requires_grad_()
        for b in range(len(lens_q)):
            qs, ks = slice(cq[b].item(), cq[b + 1].item()), slice(ck[b].item(), ck[b + 1].item())
            rq, rk, rv = (x.detach()[s].double().requires_grad_() for x, s in ((q, qs), (k, ks), (v, ks)))
            ro, _ = reference(rq, rk, rv, True, window=(16, 0), softcap=2.0, sinks=rs)
            ro.backward(do[qs].double())
            close_grads(self, q, k, v, rq, rk, rv, qs, ks, "sequence %d with window, softcap, sinks" % b)
        err = (sinks.grad.double() - rs.grad).abs().max().item()
        self.assertLess(err, 5e-2, "dsink: max error %g" % err)

    def test_sinks_join_the_denominator(self):
        lens_q, lens_k = [3, 1, 40], [50, 0, 40]
        q, k, v, cq, ck = packed_batch(lens_q, lens_k, 4, 2, 64, torch.bfloat16)
        sinks = torch.tensor([-1.0, 0.0, 1.5, 3.0], device="cuda")
        o, lse = flashgen.attention_varlen(q, k, v, cq, ck, max(lens_q), max(lens_k), causal=True,
                                           return_lse=True, sinks=sinks)
        for b in range(len(lens_q)):
            qs, ks = slice(cq[b].item(), cq[b + 1].item()), slice(ck[b].item(), ck[b + 1].item())
            ro, rl = reference(q[qs], k[ks], v[ks], True)
            # the sink joins the denominator: O scales by l / (l + e^sink), the LSE takes log(e^lse + e^sink)
            total = torch.logaddexp(rl, sinks.double()[:, None].expand_as(rl))
            ro = ro * torch.exp(rl - total).nan_to_num(0.0).t()[:, :, None]
            close(self, o[qs], ro, "sequence %d O with sinks" % b)
            close(self, lse[:, qs], total, "sequence %d LSE with sinks" % b)
        with self.assertRaises(TypeError):
            flashgen.attention_varlen(q, k, v, cq, ck, 40, 50, sinks=sinks[:3])

    def test_sliding_windows(self):
        lens_q, lens_k = [5, 1, 70], [300, 9, 70]
        q, k, v, cq, ck = packed_batch(lens_q, lens_k, 8, 2, 128, torch.float16)
        for causal, window in ((True, (32, -1)), (False, (16, 3)), (False, (-1, 0)), (True, (0, 0))):
            o, lse = flashgen.attention_varlen(q, k, v, cq, ck, max(lens_q), max(lens_k), causal=causal,
                                               return_lse=True, window_size=window)
            for b in range(len(lens_q)):
                qs, ks = slice(cq[b].item(), cq[b + 1].item()), slice(ck[b].item(), ck[b + 1].item())
                ro, rl = reference(q[qs], k[ks], v[ks], causal, window)
                close(self, o[qs], ro, "sequence %d O, causal %s, window %s" % (b, causal, window))
                close(self, lse[:, qs].nan_to_num(0.0, neginf=-1e30), rl.nan_to_num(0.0, neginf=-1e30),
                      "sequence %d LSE, causal %s, window %s" % (b, causal, window))
        with self.assertRaises(TypeError):
            flashgen.attention_varlen(q, k, v, cq, ck, max(lens_q), max(lens_k), window_size=(1, 2, 3))
        with self.assertRaises(flashgen.FlashgenError) as cm:
            flashgen.attention_varlen(q, k, v, cq, ck, max(lens_q), max(lens_k), window_size=(-2, 0))
        self.assertIn("window_left", str(cm.exception))

    def test_softcap_alibi_and_top_left_causal(self):
        lens_q, lens_k = [5, 1, 70, 0], [300, 9, 70, 4]
        q, k, v, cq, ck = packed_batch(lens_q, lens_k, 8, 2, 64, torch.bfloat16)
        slopes = torch.tensor([0.5 ** (h + 1) for h in range(8)], device="cuda")
        for causal, softcap, alibi, top in ((False, 1.5, False, False), (True, 0.0, True, False),
                                            (True, 4.0, True, False), (True, 0.0, False, True)):
            o, lse = flashgen.attention_varlen(q, k, v, cq, ck, max(lens_q), max(lens_k), causal=causal,
                                               return_lse=True, softcap=softcap,
                                               alibi_slopes=slopes if alibi else None, causal_top_left=top)
            for b in range(len(lens_q)):
                qs, ks = slice(cq[b].item(), cq[b + 1].item()), slice(ck[b].item(), ck[b + 1].item())
                ro, rl = reference(q[qs], k[ks], v[ks], causal, softcap=softcap, slopes=slopes if alibi else None,
                                   top_left=top)
                what = "sequence %d, causal %s, softcap %g, alibi %s, top-left %s" % (b, causal, softcap, alibi, top)
                close(self, o[qs], ro, what + " O")
                close(self, lse[:, qs].nan_to_num(0.0, neginf=-1e30), rl.nan_to_num(0.0, neginf=-1e30), what + " LSE")
        with self.assertRaises(TypeError):
            flashgen.attention_varlen(q, k, v, cq, ck, 70, 300, alibi_slopes=slopes.double())
        with self.assertRaises(flashgen.FlashgenError) as cm:
            flashgen.attention_varlen(q, k, v, cq, ck, 70, 300, softcap=-1.0)
        self.assertIn("softcap", str(cm.exception))

    def test_v_of_its_own_head_dim(self):
        lens_q, lens_k = [5, 1, 70], [300, 9, 70]
        q, k, _, cq, ck = packed_batch(lens_q, lens_k, 8, 2, 192, torch.bfloat16)
        v = torch.randn(k.shape[0], 2, 128, device="cuda", dtype=torch.bfloat16)
        o, lse = flashgen.attention_varlen(q, k, v, cq, ck, max(lens_q), max(lens_k), causal=True, return_lse=True)
        self.assertEqual(tuple(o.shape), (q.shape[0], 8, 128))
        for b in range(len(lens_q)):
            qs, ks = slice(cq[b].item(), cq[b + 1].item()), slice(ck[b].item(), ck[b + 1].item())
            ro, rl = reference(q[qs], k[ks], v[ks], True)
            close(self, o[qs], ro, "sequence %d O, 192/128" % b)
            close(self, lse[:, qs], rl, "sequence %d LSE, 192/128" % b)

    def test_absorbed_mla_decode(self):
        """DeepSeek's absorbed MLA: one KV head of 576 columns in a paged cache, V its first 512 (a view of the same
        memory, which the call reads once), 16 query heads."""
        b, ps, pages = 3, 64, 6
        lens = torch.tensor([330, 1, 64], dtype=torch.int32, device="cuda")
        q = torch.randn(b, 1, 16, 576, device="cuda", dtype=torch.bfloat16)
        kv = torch.randn(b * pages + 2, ps, 1, 576, device="cuda", dtype=torch.bfloat16)
        table = torch.randperm(b * pages + 2, device="cuda")[: b * pages].to(torch.int32).reshape(b, pages)
        v = kv[..., :512]
        o = flashgen.attention_with_kvcache(q, kv, v, cache_seqlens=lens, block_table=table)
        self.assertEqual(tuple(o.shape), (b, 1, 16, 512))
        for s in range(b):
            n = lens[s].item()
            rows = kv[table[s].long()].reshape(pages * ps, 1, 576)[:n]
            ro, _ = reference(q[s], rows, rows[..., :512], False)
            close(self, o[s], ro, "MLA decode, sequence %d" % s)
        self.assertIn("v_in_k=1", flashgen.explain_varlen(q, kv, v, seqused_k=lens, block_table=table))

    def test_v_of_its_own_head_dim_gradients(self):
        # DeepSeek's 192/128 with GQA through autograd: dq, dk of 192, dv of 128, lengths 0 and 1 among them
        lens_q, lens_k = [70, 1, 0, 130], [70, 5, 9, 100]
        cq = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), dtype=torch.int32, device="cuda")
        ck = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0)), dtype=torch.int32, device="cuda")
        q = torch.randn(sum(lens_q), 8, 192, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(sum(lens_k), 2, 192, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(sum(lens_k), 2, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        do = torch.randn(sum(lens_q), 8, 128, device="cuda", dtype=torch.bfloat16)
        o = flashgen.attention_varlen(q, k, v, cq, ck, max(lens_q), max(lens_k), causal=True)
        self.assertEqual(tuple(o.shape), (sum(lens_q), 8, 128))
        o.backward(do)
        self.assertEqual(tuple(v.grad.shape), tuple(v.shape))
        for b in range(len(lens_q)):
            qs, ks = slice(cq[b].item(), cq[b + 1].item()), slice(ck[b].item(), ck[b + 1].item())
            rq, rk, rv = (x.detach()[s].double().requires_grad_() for x, s in ((q, qs), (k, ks), (v, ks)))
            ro, _ = reference(rq, rk, rv, True)
            ro.backward(do[qs].double())
            close_grads(self, q, k, v, rq, rk, rv, qs, ks, "sequence %d at 192/128" % b)

    def test_kvcache_dense_and_paged(self):
        b, cap, ps = 3, 700, 16
        lens = torch.tensor([700, 1, 333], dtype=torch.int32, device="cuda")
        q = torch.randn(b, 2, 32, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, cap, 8, 128, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        dense = flashgen.attention_with_kvcache(q, k, v, cache_seqlens=lens, causal=True)
        pages = (cap + ps - 1) // ps
        kp = torch.full((b * pages + 5, ps, 8, 128), float("nan"), device="cuda", dtype=torch.bfloat16)
        vp = kp.clone()
        perm = torch.randperm(b * pages + 5, device="cuda")[: b * pages]
        table = perm.to(torch.int32).reshape(b, pages)
        padded = torch.nn.functional.pad(k, (0, 0, 0, 0, 0, pages * ps - cap))
        kp[perm] = padded.reshape(b * pages, ps, 8, 128)
        vp[perm] = torch.nn.functional.pad(v, (0, 0, 0, 0, 0, pages * ps - cap)).reshape(b * pages, ps, 8, 128)
        for s in range(b):  # slots past each sequence's keys hold NaN: never read
            n = lens[s].item()
            if n % ps:
                kp[table[s, n // ps].long(), n % ps:] = float("nan")
                vp[table[s, n // ps].long(), n % ps:] = float("nan")
        paged = flashgen.attention_with_kvcache(q, kp, vp, cache_seqlens=lens, block_table=table, causal=True,
                                                num_splits=3)
        for s in range(b):
            n = lens[s].item()
            ro, _ = reference(q[s], k[s, :n], v[s, :n], True)
            close(self, dense[s], ro, "dense cache, sequence %d" % s)
            close(self, paged[s], ro, "paged cache, sequence %d" % s)
        text = flashgen.explain_varlen(q, kp, vp, seqused_k=lens, block_table=table, causal=True)
        self.assertIn("kind=serve", text)
        self.assertIn("packed", text)

    def test_fp8_kv_cache(self):
        """FP8 K and V beside 16-bit queries (e4m3 with bf16 and per-(sequence, head) descales, e5m2 with fp16 and
        per-tensor ones): paged decode with a shuffled table and packed prefill against the float64 reference on the
        dequantized K and V; the binding's ValueErrors and the library's refusal of mixed FP8 dtypes."""
        b, hq, hkv, d, ps = 4, 32, 8, 128, 16
        lens = torch.tensor([300, 17, 1, 530], dtype=torch.int32, device="cuda")
        for fp8, qdt, per_head in ((torch.float8_e4m3fn, torch.bfloat16, True), (torch.float8_e5m2, torch.float16, False)):
            pages = (530 + ps - 1) // ps
            kp = torch.randn(b * pages + 3, ps, hkv, d, device="cuda").to(fp8)
            vp = torch.randn_like(kp, dtype=torch.float32).to(fp8)
            table = torch.randperm(b * pages + 3, device="cuda")[: b * pages].to(torch.int32).reshape(b, pages)
            shape = (b, hkv) if per_head else (1,)
            kd = torch.rand(shape, device="cuda") + 0.5
            vd = torch.rand(shape, device="cuda") + 0.5
            q = torch.randn(b, 1, hq, d, device="cuda", dtype=qdt)
            o = flashgen.attention_with_kvcache(q, kp, vp, cache_seqlens=lens, block_table=table, k_descale=kd,
                                                v_descale=vd, num_splits=3)
            self.assertEqual(o.dtype, qdt)
            for s in range(b):
                n = lens[s].item()
                rows = table[s].long()
                ks = kp[rows].reshape(-1, hkv, d)[:n].float() * (kd[s] if per_head else kd)[:, None]
                vs = vp[rows].reshape(-1, hkv, d)[:n].float() * (vd[s] if per_head else vd)[:, None]
                ro, _ = reference(q[s], ks, vs, False)
                close(self, o[s], ro, "%s paged decode, sequence %d" % (fp8, s))
            qp, kk, _, cu_q, cu_k = packed_batch([5, 0, 1, 64], [5, 9, 1, 200], 8, 2, 64, qdt)
            kk8, vv8 = kk.to(fp8), torch.randn_like(kk).to(fp8)
            o, lse = flashgen.attention_varlen(qp, kk8, vv8, cu_q, cu_k, 64, 200, causal=True, return_lse=True,
                                               k_descale=0.5, v_descale=2.0)
            for s in range(4):
                a, e, c, f = cu_q[s].item(), cu_q[s + 1].item(), cu_k[s].item(), cu_k[s + 1].item()
                ro, rl = reference(qp[a:e], kk8[c:f].float() * 0.5, vv8[c:f].float() * 2.0, True)
                close(self, o[a:e], ro, "%s packed prefill, sequence %d" % (fp8, s))
                close(self, lse[:, a:e], rl, "%s packed prefill LSE, sequence %d" % (fp8, s))
        self.assertIn("an FP8 KV cache", flashgen.explain_varlen(q, kp, vp, seqused_k=lens, block_table=table))
        bf = torch.randn(b, pages * ps, hkv, d, device="cuda", dtype=torch.bfloat16)
        with self.assertRaises(ValueError):  # a descale beside a 16-bit cache
            flashgen.attention_with_kvcache(q, bf, bf, cache_seqlens=lens, k_descale=1.0)
        with self.assertRaises(ValueError):  # [heads_kv] is neither [1] nor [batch, heads_kv]
            flashgen.attention_with_kvcache(q, kp, vp, cache_seqlens=lens, block_table=table,
                                            k_descale=torch.ones(hkv, device="cuda"))
        with self.assertRaises(flashgen.FlashgenError) as cm:  # the library's rule: one FP8 dtype
            flashgen.attention_with_kvcache(q, kp, vp.view(torch.float8_e4m3fn) if vp.dtype != torch.float8_e4m3fn
                                            else vp.view(torch.float8_e5m2), cache_seqlens=lens, block_table=table)
        self.assertIn("one FP8 dtype", cm.exception.message)

    def test_merge_states(self):
        o = torch.randn(3, 10, 4, 64, device="cuda", dtype=torch.float32)
        lse = torch.randn(3, 10, 4, device="cuda", dtype=torch.float32)
        lse[1, 2] = float("-inf")
        o[1, 2] = float("nan")  # an empty state's O is never read
        out, l = flashgen.merge_states(o, lse)
        w = torch.softmax(lse.double(), dim=0).nan_to_num(0.0)
        ref = (w[..., None] * o.double().nan_to_num(0.0)).sum(0)
        close(self, out, ref, "merged O")
        close(self, l, torch.logsumexp(lse.double(), dim=0), "merged LSE")

    def test_check_inputs(self):
        cu = torch.tensor([0, 10, 5, 20], dtype=torch.int32, device="cuda")
        q = torch.randn(20, 4, 64, device="cuda", dtype=torch.float16)
        flashgen.set_check_inputs(True)
        try:
            with self.assertRaises(flashgen.FlashgenError) as cm:
                flashgen.attention_varlen(q, q, q, cu, cu, 20, 20)
            self.assertEqual(cm.exception.status, "FG_ERR_INVALID_ARGUMENT")
            self.assertIn("cu_seqlens_q[2]", cm.exception.message)
        finally:
            flashgen.set_check_inputs(False)

    def test_documented_examples_run(self):
        root = os.path.normpath(os.path.join(HERE, "..", ".."))
        for path, marker in (("docs/serving.md", "## Python"), ("README.md", "Serving (packed")):
            text = open(os.path.join(root, path)).read()
            block = re.search(re.escape(marker) + r".*?```python\n(.*?)```", text, re.S).group(1)
            exec(compile(block, path, "exec"), {"torch": torch, "flashgen": flashgen})
        torch.cuda.synchronize()


if __name__ == "__main__":
    unittest.main()
