"""bench/serving.py: the serving path against its peers, in one process (the protocol of docs/performance.md:
CUDA events around runs of 5 back-to-back calls, warm-up first, the median of the runs).

  decode   query length 1 (and --sq 4), bf16, head_dim 128, GQA 32/8, cells (batch, keys): flashgen's
           attention_with_kvcache (dense cache) against cuDNN and FlashAttention-2 (PyTorch SDPA, enable_gqa),
           FlashAttention-4 (flash_attn.cute, when importable) and a 1 GiB device-to-device copy. Bandwidth
           counts K and V read once: batch x keys x heads_kv x 128 x 2 bytes x 2.
  paged    flashgen's paged decode (page sizes 16 and 256, pages shuffled) against its own dense decode on the
           same keys.
  kv8      (also --kv-fp8) the decode cells with an FP8 KV cache: e4m3 K and V quantized per (sequence, KV head),
           their descales passed as [batch, heads_kv], against the same keys in bf16, in one process; flashgen
           both times. TB/s of the bytes read (K, V and Q). The bar (issue 38): e4m3 at least 1.8x faster than
           bf16, at 90% or more of the copy's bandwidth.
  varlen   causal prefill of sequences drawn from 1 to 8k tokens summing to 64k: flashgen's attention_varlen
           against FlashAttention-4's flash_attn_varlen_func, and flashgen's dense forward per FLOP.

    python3 bench/serving.py [decode] [paged] [varlen] [kv8] [--kv-fp8] [--sq 1,4] [--iters 30] [--graph]

Prints one table per section; each flashgen output is checked against the peer's before it is timed.
"""

import argparse
import statistics
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/python")
import flashgen  # noqa: E402

FA4_WHY = ""
try:
    from flash_attn.cute import flash_attn_func as fa4_func, flash_attn_varlen_func as fa4_varlen
except Exception as e:  # FA4 is staged for the GPU host only (../shared/tools/fa4-stage.sh)
    fa4_func = fa4_varlen = None
    FA4_WHY = str(e).splitlines()[0][:80]

CELLS = [(32, 4096), (8, 32768), (1, 131072), (64, 2048)]


GRAPH = False  # --graph: replay the calls from a CUDA graph (no host cost between them)


def timed(fn, iters, reps=5):
    """Median microseconds of one fn() over iters runs of `reps` calls back to back between two CUDA events,
    after 3 warm-ups: the calls queue ahead of the GPU, so the Python cost of each call is not timed as idle
    GPU time as long as it stays below the kernel's. With GRAPH the `reps` calls are captured once in a CUDA
    graph and each run replays it: the GPU's time alone, for every implementation alike (what a server that
    replays graphs sees). A variant's first call runs a quick build while the optimized one compiles in the
    background: the wait after the warm-ups times the optimized one."""
    for _ in range(3):
        fn()
    flashgen.wait_compiles()
    torch.cuda.synchronize()
    run = None
    if GRAPH:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(reps):
                fn()
        run = g.replay
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        if run:
            run()
        else:
            for _ in range(reps):
                fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0 / reps)
    return statistics.median(times)


def copy_tbs(iters):
    """Device-to-device copy of 1 GiB: bytes read plus bytes written over time, TB/s."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = timed(lambda: dst.copy_(src), iters)
    return 2 * src.numel() / us / 1e6


def sdpa(backend):
    from torch.nn.attention import sdpa_kernel

    def run(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                  enable_gqa=True).transpose(1, 2)
    return run


def check(name, out, ref):
    err = (out.float() - ref.float()).abs().max().item()
    if not err < 2e-2:
        raise SystemExit("%s differs from the peer by %g" % (name, err))


def decode_cells(a):
    """The decode grid's cells: (sq, batch, keys, q, k, v, lens), bf16, head_dim 128, 32/8 heads, dense caches."""
    for sq in a.sq:
        for b, sk in CELLS:
            q = torch.randn(b, sq, 32, 128, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(b, sk, 8, 128, device="cuda", dtype=torch.bfloat16)
            yield sq, b, sk, q, k, torch.randn_like(k), torch.full((b,), sk, dtype=torch.int32, device="cuda")


def splits_of(q, k, v, lens, sk, sq, **kw):
    """The split count flashgen's explain gives a decode cell."""
    text = flashgen.explain_varlen(q, k, v, seqused_k=lens, max_seqlen_k=sk, causal=sq > 1, **kw)
    return [ln for ln in text.splitlines() if ln.startswith("splits:")][0].split()[1]


def decode(a, copy):
    from torch.nn.attention import SDPBackend
    print("## decode: bf16, head_dim 128, 32 query / 8 KV heads; us, TB/s of K+V read once; copy %.2f TB/s" % copy)
    print("| sq | batch x keys | flashgen | cuDNN | FA2 | FA4 | flashgen / best peer | flashgen / copy | splits |")
    print("|---|---|---|---|---|---|---|---|---|")
    for sq, b, sk, q, k, v, lens in decode_cells(a):
        kv_bytes = 2 * b * sk * 8 * 128 * 2
        fg = lambda: flashgen.attention_with_kvcache(q, k, v, cache_seqlens=lens, causal=sq > 1)
        out = fg()
        peers = {}
        for name, fn in (("cuDNN", sdpa(SDPBackend.CUDNN_ATTENTION)), ("FA2", sdpa(SDPBackend.FLASH_ATTENTION))):
            if sq > 1:  # SDPA's causal mask is top-left aligned; the bottom-right one is FA4's and flashgen's
                peers[name] = None
                continue
            try:
                ref = fn(q, k, v)
                check("flashgen vs " + name, out, ref)
                peers[name] = timed(lambda: fn(q, k, v), a.iters)
            except RuntimeError as e:
                peers[name] = None
                print("<!-- %s: %s -->" % (name, str(e).splitlines()[0][:100]))
        peers["FA4"] = None
        if fa4_func is not None:
            try:
                ref = fa4_func(q, k, v, causal=sq > 1)
                ref = ref[0] if isinstance(ref, tuple) else ref
                check("flashgen vs FA4", out, ref)
                peers["FA4"] = timed(lambda: fa4_func(q, k, v, causal=sq > 1), a.iters)
            except (RuntimeError, TypeError, ValueError) as e:
                print("<!-- FA4: %s -->" % str(e).splitlines()[0][:100])
        us = timed(fg, a.iters)
        splits = splits_of(q, k, v, lens, sk, sq)
        best = min(t for t in peers.values() if t is not None) if any(peers.values()) else None
        cell = lambda t: "%.0f (%.2f)" % (t, kv_bytes / t / 1e6) if t else "-"
        print("| %d | %d x %dk | %s | %s | %s | %s | %s | %.2f | %s |" % (
            sq, b, sk // 1024, cell(us), cell(peers["cuDNN"]), cell(peers["FA2"]), cell(peers["FA4"]),
            "%.2f" % (best / us) if best else "-", kv_bytes / us / 1e6 / copy, splits))


def kv8(a, copy):
    """The decode cells over an e4m3 KV cache (descales per sequence and KV head) beside the same keys in bf16."""
    print("## FP8 KV cache decode: e4m3 K and V (descales [batch, heads_kv]) vs bf16 K and V; bf16 queries, head_dim "
          "128, 32/8 heads; us (TB/s of K, V and Q read); copy %.2f TB/s" % copy)
    print("| sq | batch x keys | bf16 KV | e4m3 KV | bf16 / e4m3 | e4m3 / copy | splits (bf16, e4m3) |")
    print("|---|---|---|---|---|---|---|")
    for sq, b, sk, q, k, v, lens in decode_cells(a):
        quant = []
        for x in (k, v):  # a descale per (sequence, KV head): amax / 448
            ds = (x.float().abs().amax(dim=(1, 3)) / 448.0).clamp_min(1e-12)
            quant.append(((x.float() / ds[:, None, :, None]).to(torch.float8_e4m3fn), ds.contiguous()))
        (k8, kd), (v8, vd) = quant
        f16 = lambda: flashgen.attention_with_kvcache(q, k, v, cache_seqlens=lens, causal=sq > 1)
        f8 = lambda: flashgen.attention_with_kvcache(q, k8, v8, cache_seqlens=lens, causal=sq > 1, k_descale=kd,
                                                     v_descale=vd)
        deq = [(x8.float() * ds[:, None, :, None]).to(torch.bfloat16) for x8, ds in quant]
        check("e4m3 KV vs bf16 KV of its values", f8(), flashgen.attention_with_kvcache(
            q, deq[0], deq[1], cache_seqlens=lens, causal=sq > 1))
        del deq
        t16, t8 = timed(f16, a.iters), timed(f8, a.iters)
        qb = q.numel() * 2
        b16, b8 = 2 * k.numel() * 2 + qb, 2 * k.numel() + qb
        splits = [splits_of(q, k, v, lens, sk, sq), splits_of(q, k8, v8, lens, sk, sq, k_descale=kd, v_descale=vd)]
        print("| %d | %d x %dk | %.0f (%.2f) | %.0f (%.2f) | %.2f | %.2f | %s, %s |" % (
            sq, b, sk // 1024, t16, b16 / t16 / 1e6, t8, b8 / t8 / 1e6, t16 / t8, b8 / t8 / 1e6 / copy,
            splits[0], splits[1]))
        del k8, v8, k, v


def paged(a):
    print("## paged decode: flashgen, bf16, head_dim 128, 32/8 heads, query length 1; us (paged / dense)")
    print("| batch x keys | dense | page 16 | page 256 |")
    print("|---|---|---|---|")
    for b, sk in CELLS:
        q = torch.randn(b, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, sk, 8, 128, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        lens = torch.full((b,), sk, dtype=torch.int32, device="cuda")
        dense = flashgen.attention_with_kvcache(q, k, v, cache_seqlens=lens)
        t_dense = timed(lambda: flashgen.attention_with_kvcache(q, k, v, cache_seqlens=lens), a.iters)
        cells = []
        for ps in (16, 256):
            n = b * sk // ps
            perm = torch.randperm(n, device="cuda")
            kp = torch.empty(n, ps, 8, 128, device="cuda", dtype=torch.bfloat16)
            vp = torch.empty_like(kp)
            kp[perm] = k.reshape(n, ps, 8, 128)
            vp[perm] = v.reshape(n, ps, 8, 128)
            table = perm.to(torch.int32).reshape(b, sk // ps)
            out = flashgen.attention_with_kvcache(q, kp, vp, cache_seqlens=lens, block_table=table)
            check("paged vs dense", out, dense)
            t = timed(lambda: flashgen.attention_with_kvcache(q, kp, vp, cache_seqlens=lens, block_table=table), a.iters)
            cells.append("%.0f (%.2fx)" % (t, t_dense / t))
            del kp, vp
        print("| %d x %dk | %.0f | %s | %s |" % (b, sk // 1024, t_dense, cells[0], cells[1]))


def varlen(a):
    g = torch.Generator().manual_seed(7)
    lens, total = [], 0
    while total < 65536:
        n = int(torch.randint(1, 8193, (1,), generator=g))
        n = min(n, 65536 - total)
        lens.append(n)
        total += n
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device="cuda")
    flops = sum(2 * n * n * 128 for n in lens) * 16  # causal: half of 4 s^2 d per head, 16 heads
    print("## varlen prefill: %d sequences of 1-8k tokens, %d in all, causal, bf16, head_dim 128, 16 heads" %
          (len(lens), total))
    q = torch.randn(total, 16, 128, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    mx = max(lens)
    fg = lambda: flashgen.attention_varlen(q, k, v, cu, cu, mx, mx, causal=True)
    print("<!-- %s -->" % flashgen.explain_varlen(q, k, v, cu, cu, max_seqlen_q=mx, max_seqlen_k=mx,
                                                  causal=True).splitlines()[0])
    out = fg()
    t = timed(fg, a.iters)
    row = "| flashgen | %.0f us | %.0f TFLOP/s |" % (t, flops / t / 1e6)
    print("| impl | time | rate |\n|---|---|---|")
    print(row)
    if fa4_varlen is not None:
        try:
            fa4 = lambda: fa4_varlen(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=mx, max_seqlen_k=mx,
                                     causal=True)
            ref = fa4()
            ref = ref[0] if isinstance(ref, tuple) else ref
            check("flashgen vs FA4 varlen", out, ref)
            t4 = timed(fa4, a.iters)
            print("| FA4 | %.0f us | %.0f TFLOP/s |" % (t4, flops / t4 / 1e6))
            print("flashgen / FA4: %.2f" % (t4 / t))
        except (RuntimeError, TypeError, ValueError) as e:
            print("FA4 varlen failed: %s" % str(e).splitlines()[0][:120])
    else:
        print("FA4: not importable (%s)" % FA4_WHY)
    qd = torch.randn(8, 8192, 16, 128, device="cuda", dtype=torch.bfloat16)
    td = timed(lambda: flashgen.attention(qd, qd, qd, causal=True), a.iters)
    dflops = 8 * 2 * 8192 * 8192 * 128 * 16
    print("| flashgen dense 8 x 8k | %.0f us | %.0f TFLOP/s |" % (td, dflops / td / 1e6))
    # the backward (2.5x the forward's FLOPs): packed sequences against flashgen's dense backward per FLOP
    o, lse = flashgen.attention_varlen(q, k, v, cu, cu, mx, mx, causal=True, return_lse=True)
    do = torch.randn_like(o)
    tb = timed(lambda: flashgen.attention_varlen_backward(q, k, v, o, lse, do, cu, cu, mx, mx, causal=True), a.iters)
    od, ld = flashgen.attention(qd, qd, qd, causal=True, return_lse=True)
    dod = torch.randn_like(od)
    tbd = timed(lambda: flashgen.attention_backward(qd, qd, qd, od, ld, dod, causal=True), a.iters)
    rv, rd = 2.5 * flops / tb / 1e6, 2.5 * dflops / tbd / 1e6
    print("## varlen backward, the same sequences")
    print("| impl | time | rate |\n|---|---|---|")
    print("| flashgen varlen backward | %.0f us | %.0f TFLOP/s |" % (tb, rv))
    print("| flashgen dense backward 8 x 8k | %.0f us | %.0f TFLOP/s |" % (tbd, rd))
    print("varlen / dense backward per FLOP: %.2f" % (rv / rd))
    # the same sequences' dense backward one call each: what each length costs alone (short causal sequences do
    # less work a tile than 8k ones), summed
    tsum = 0.0
    for n in lens:
        qs = torch.randn(1, n, 16, 128, device="cuda", dtype=torch.bfloat16)
        os_, ls = flashgen.attention(qs, qs, qs, causal=True, return_lse=True)
        dos = torch.randn_like(os_)
        tsum += timed(lambda: flashgen.attention_backward(qs, qs, qs, os_, ls, dos, causal=True), max(5, a.iters // 3))
    print("| flashgen dense backward, a call a sequence (sum) | %.0f us | %.0f TFLOP/s |" % (tsum, 2.5 * flops / tsum / 1e6))
    print("varlen / dense backward of the same sequences: %.2f" % (tsum / tb))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", nargs="*", default=["decode", "paged", "varlen"])
    p.add_argument("--sq", default="1,4", help="decode query lengths")
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--graph", action="store_true", help="time CUDA-graph replays (the GPU's time alone)")
    p.add_argument("--kv-fp8", action="store_true", help="also the decode cells over an e4m3 KV cache (section kv8)")
    a = p.parse_args()
    if a.kv_fp8 and "kv8" not in a.what:
        a.what = a.what + ["kv8"]
    a.sq = [int(x) for x in a.sq.split(",")]
    global GRAPH
    GRAPH = a.graph
    print("# %s, torch %s, cuDNN %s, FA4 %s" % (torch.cuda.get_device_name(), torch.__version__,
                                                torch.backends.cudnn.version(), "yes" if fa4_func else "no"))
    copy = copy_tbs(a.iters)
    if "decode" in a.what:
        decode(a, copy)
    if "kv8" in a.what:
        kv8(a, copy)
    if "paged" in a.what:
        paged(a)
    if "varlen" in a.what:
        varlen(a)


if __name__ == "__main__":
    main()
