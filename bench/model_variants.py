"""bench/model_variants.py: the model variants (sliding window, softcap, sinks, ALiBi) of the serving call,
in one process with the protocol of bench/serving.py (CUDA events around runs of 5 back-to-back calls,
warm-up first, the median of the runs).

  window     causal sliding window of 4k keys over 32k tokens (bf16, head_dim 128, 16 heads, batch 1):
             flashgen's attention_varlen on the dense tensors against FlashAttention-4's flash_attn_func
             with window_size (when importable); FLOPs count the keys each row sees.
  overhead   softcap, sinks and ALiBi each against the same call without them (bf16, head_dim 128, 16
             heads, 4 x 8k, causal): time with / time without.
  dims       Q and K of head_dim 192 with V of 128 (DeepSeek), bf16, 16 heads, 2 x 8k, causal: flashgen's
             attention_varlen on the dense tensors against FlashAttention-4's flash_attn_func (when it takes
             the pair).
  bwd_dims   the backward at head dims FlashAttention-2 takes and flashgen's wgmma backward does not (72, 96,
             200; bf16, 16 heads, 2 x 4k, causal): flashgen's attention against SDPA's FlashAttention-2.

window and dims also time the backward: torch.autograd.grad through each implementation's own forward, retained,
so only the backward kernels run in the timed calls (FLOPs 2.5x the forward's).

    python3 bench/model_variants.py [window] [overhead] [dims] [bwd_dims] [--iters 30]

Each flashgen output is checked against the peer's (window) or a float32 PyTorch reference on a slice
(overhead) before it is timed.
"""

import argparse
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit("/", 1)[0])
sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/python")
import flashgen  # noqa: E402
from serving import FA4_WHY, check, fa4_func, timed  # noqa: E402


def against_fa4(what, fg, fa4, flops, iters):
    """Times flashgen's call fg, then (FA4 importable and taking the call) FA4's fa4 after checking their outputs
    agree; prints the rows and the ratio."""
    out = fg()
    t = timed(fg, iters)
    print("| impl | time | rate |\n|---|---|---|")
    print("| flashgen | %.0f us | %.0f TFLOP/s |" % (t, flops / t / 1e6))
    if fa4_func is None:
        print("FA4: not importable (%s)" % FA4_WHY)
        return
    try:
        ref = fa4()
        ref = ref[0] if isinstance(ref, tuple) else ref
        check("flashgen vs FA4 " + what, out, ref)
        t4 = timed(fa4, iters)
    except (RuntimeError, TypeError, ValueError, AssertionError) as e:
        print("FA4 %s failed: %s" % (what, str(e).splitlines()[0][:120]))
        return
    print("| FA4 | %.0f us | %.0f TFLOP/s |" % (t4, flops / t4 / 1e6))
    print("flashgen / FA4: %.2f" % (t4 / t))


def grad_call(fwd):
    """A call that runs the backward of fwd's output (its forward run once, retained) with a fixed dO, and the
    gradients of one call (for the check)."""
    out = fwd()
    out = out[0] if isinstance(out, tuple) else out
    leaves = fwd.leaves
    do = torch.randn_like(out)
    def run():
        return torch.autograd.grad(out, leaves, do, retain_graph=True)
    return run, run()


def against_peer_bwd(what, peer, fg_fwd, peer_fwd, flops, iters):
    """Times flashgen's backward, then the peer's after checking their gradients agree (same inputs, same dO)."""
    print("| impl | backward | rate |\n|---|---|---|")
    try:
        torch.manual_seed(7)
        fg, g = grad_call(fg_fwd)
    except (RuntimeError, TypeError, ValueError, flashgen.FlashgenError) as e:
        print("flashgen %s backward: %s" % (what, str(e).splitlines()[0][:160]))
        return
    t = timed(fg, iters)
    print("| flashgen | %.0f us | %.0f TFLOP/s |" % (t, 2.5 * flops / t / 1e6))
    if peer_fwd is None:
        print("%s: not importable (%s)" % (peer, FA4_WHY))
        return
    try:
        torch.manual_seed(7)
        pc, gp = grad_call(peer_fwd)
        for name, x, y in zip(("dq", "dk", "dv"), g, gp):  # relative to the gradient's largest element
            err = (x.float() - y.float()).abs().max().item() / max(y.float().abs().max().item(), 1e-30)
            assert err < 2e-2, "%s differs from %s's by %g of its largest element" % (name, peer, err)
        tp = timed(pc, iters)
    except (RuntimeError, TypeError, ValueError, AssertionError) as e:
        print("%s %s backward failed: %s" % (peer, what, str(e).splitlines()[0][:120]))
        return
    print("| %s | %.0f us | %.0f TFLOP/s |" % (peer, tp, 2.5 * flops / tp / 1e6))
    print("flashgen / %s backward: %.2f" % (peer, tp / t))


def with_leaves(fn, *leaves):
    """fn with .leaves: the tensors the backward differentiates (made to require grad)."""
    for x in leaves:
        x.requires_grad_(True)
    fn.leaves = leaves
    return fn


def window(a):
    n, h, d, w = 32768, 16, 128, 4096
    q = torch.randn(1, n, h, d, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    rows = torch.arange(n, dtype=torch.float64)
    flops = 4 * d * h * float(torch.clamp(rows + 1, max=w + 1).sum())
    print("## sliding window: causal, %d keys left, %dk tokens, bf16, head_dim %d, %d heads" % (w, n // 1024, d, h))
    print("<!-- %s -->" % flashgen.explain_varlen(q, k, v, causal=True, window_size=(w, 0)).splitlines()[0])
    against_fa4("window", lambda: flashgen.attention_varlen(q, k, v, None, None, n, n, causal=True, window_size=(w, 0)),
                lambda: fa4_func(q, k, v, causal=True, window_size=(w, 0)), flops, a.iters)
    fg = with_leaves(lambda: flashgen.attention_varlen(q, k, v, None, None, n, n, causal=True, window_size=(w, 0)), q, k, v)
    peer = fa4_func and with_leaves(lambda: fa4_func(q, k, v, causal=True, window_size=(w, 0)), q, k, v)
    against_peer_bwd("window", "FA4", fg, peer, flops, a.iters)


def reference_rows(q, k, v, rows, softcap=0.0, sinks=None, slopes=None):
    """O of the last `rows` queries of batch 0 in float32 (causal, sq == sk)."""
    n, h, d = q.shape[1], q.shape[2], q.shape[3]
    qq = q[0, n - rows:].float().transpose(0, 1)
    kk, vv = k[0].float().transpose(0, 1), v[0].float().transpose(0, 1)
    s = qq @ kk.transpose(1, 2) / d ** 0.5
    i = torch.arange(n - rows, n, device=q.device)[:, None]
    j = torch.arange(n, device=q.device)[None, :]
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if slopes is not None:
        s = s - slopes[:, None, None] * (i - j).abs()
    s = s.masked_fill(j > i, float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks[:, None, None].expand(h, rows, 1)], dim=2)
    p = torch.softmax(s, dim=-1)[..., :n]
    return (p @ vv).transpose(0, 1)


def overhead(a):
    b, n, h, d = 4, 8192, 16, 128
    q = torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    sinks = torch.linspace(-1.0, 2.0, h, device="cuda")
    slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / h) for i in range(h)], device="cuda")
    cases = [("none", {}), ("softcap 30", {"softcap": 30.0}), ("sinks", {"sinks": sinks}),
             ("ALiBi", {"alibi_slopes": slopes})]
    print("## model variants' cost: causal, %d x %dk, bf16, head_dim %d, %d heads" % (b, n // 1024, d, h))
    print("| variant | time | / none |\n|---|---|---|")
    base = None
    for name, kw in cases:
        fg = lambda: flashgen.attention_varlen(q, k, v, None, None, n, n, causal=True, **kw)
        out = fg()
        ref = reference_rows(q, k, v, 64, kw.get("softcap", 0.0), kw.get("sinks"), kw.get("alibi_slopes"))
        check("flashgen %s" % name, out[0, n - 64:], ref)
        t = timed(fg, a.iters)
        base = t if base is None else base
        print("| %s | %.0f us | %.3f |" % (name, t, t / base))


def dims(a):
    b, n, h = 2, 8192, 16
    q = torch.randn(b, n, h, 192, device="cuda", dtype=torch.bfloat16)
    k = torch.randn_like(q)
    v = torch.randn(b, n, h, 128, device="cuda", dtype=torch.bfloat16)
    flops = b * h * n * n * (192 + 128)  # causal: half of 2 s^2 (d_qk + d_v)
    print("## head_dim 192 / 128: causal, %d x %dk, bf16, %d heads" % (b, n // 1024, h))
    against_fa4("192/128", lambda: flashgen.attention_varlen(q, k, v, None, None, n, n, causal=True),
                lambda: fa4_func(q, k, v, causal=True), flops, a.iters)
    fg = with_leaves(lambda: flashgen.attention_varlen(q, k, v, None, None, n, n, causal=True), q, k, v)
    peer = fa4_func and with_leaves(lambda: fa4_func(q, k, v, causal=True), q, k, v)
    against_peer_bwd("192/128", "FA4", fg, peer, flops, a.iters)


def bwd_dims(a):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    b, n, h = 2, 4096, 16
    for d in (72, 96, 200):
        q = torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16)
        k, v = torch.randn_like(q), torch.randn_like(q)

        def fa2():
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                      is_causal=True).transpose(1, 2)
        print("## backward, head_dim %d: causal, %d x %dk, bf16, %d heads" % (d, b, n // 1024, h))
        fg = with_leaves(lambda: flashgen.attention(q, k, v, causal=True), q, k, v)
        against_peer_bwd("d %d" % d, "FA2", fg, with_leaves(fa2, q, k, v), 2 * b * h * n * n * d, a.iters)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", nargs="*", default=["window", "overhead", "dims", "bwd_dims"])
    p.add_argument("--iters", type=int, default=30)
    a = p.parse_args()
    print("# %s, torch %s, FA4 %s" % (torch.cuda.get_device_name(), torch.__version__, "yes" if fa4_func else "no"))
    if "window" in a.what:
        window(a)
    if "overhead" in a.what:
        overhead(a)
    if "dims" in a.what:
        dims(a)
    if "bwd_dims" in a.what:
        bwd_dims(a)


if __name__ == "__main__":
    main()
