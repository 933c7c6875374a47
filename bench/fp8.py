#!/usr/bin/env python3
"""bench/fp8.py: the FP8 forward's accuracy and speed (whichever family dispatch picks: sm_90a's wgmma on
Hopper, mma.sync elsewhere), against bf16.

    python3 bench/fp8.py --out DIR [--skip-speed] [--skip-accuracy]

Accuracy (the FlashAttention-3 paper's test): Q, K, V of N(0, 1) entries, and the same with 0.1% of the
entries replaced by N(0, 10^2) outliers; the RMSE of O against an fp64 reference (softmax(QK^T/sqrt(d))V
computed in float64 on the GPU) for flashgen in fp16 and bf16, and in FP8 (e4m3, e5m2) with per-tensor
and per-head descales, with and without incoherent processing (flashgen.hadamard_rotate on Q and K before
quantization). The paper's figures for scale: fp16 1.9e-4, fp8 per-tensor 2.4e-2, fp8 with incoherent
processing 9.1e-3. Then long key ranges (256 queries, 16384 keys, d 64/128/256, V of mean 0 and 1): bf16
and e4m3, RMSE absolute and relative to O's RMS (long_accuracy).

Speed (the benchmark protocol's shapes, docs/performance.md: hidden 2048, 16k tokens): flashgen e4m3 (V already key-major, as an engine
keeping V^T would give it), flashgen bf16, cuDNN bf16 and FlashAttention-2 bf16 (SDPA's cuDNN and flash
backends; neither takes FP8), and cuDNN's own e4m3 forward through the cudnn frontend where that package
imports (bench/cudnn_fp8.py; it writes O in e4m3 on Hopper, and its long-key accuracy is a row too), same
process, same
timing as bench/compare.py (CUDA events behind a GPU sleep, median of 20). Every FP8 output is checked
against the fp32 math on its dequantized inputs before it is timed (the tolerance rule of docs/numerics.md with the
kernel-precision reference rounding P to e4m3 is the C test suite's; here the check is a sanity bound).

Writes DIR/fp8.json and DIR/fp8.md (tables), prints the tables.
"""
import argparse
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
from cudnn_fp8 import CudnnFp8, available  # noqa: E402

CUDNN_FP8 = [False, "not probed"]  # (importable, version or reason), set in main


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--skip-accuracy", action="store_true")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--head-dims", default="64,128,256")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--lse", action="store_true",
                    help="also time flashgen e4m3 with the LSE returned (on sm_90a at d 64/128 the kernel then "
                         "keeps fp32 row sums as well: forward_wgmma.cuh FG_PV_SUM)")
    return ap.parse_args(argv)


def ref64(torch, q, k, v):
    """softmax(q k^T / sqrt(d)) v in float64, [b, s, h, d] in and out, chunked over query rows."""
    b, s, h, d = q.shape
    out = torch.empty(b, s, h, d, dtype=torch.float64, device=q.device)
    qd, kd, vd = (x.double().transpose(1, 2) for x in (q, k, v))  # [b, h, s, d]
    step = 512
    for r0 in range(0, s, step):
        sc = qd[:, :, r0:r0 + step] @ kd.transpose(-1, -2) / math.sqrt(d)
        out[:, r0:r0 + step] = (torch.softmax(sc, dim=-1) @ vd).transpose(1, 2)
    return out


def rmse(torch, o, ref):
    return torch.sqrt(torch.mean((o.double() - ref) ** 2)).item()


def accuracy(fg, torch, dev, shape=(2, 2048, 16, 128)):
    """Rows: (inputs, method, rmse)."""
    rows = []
    gen = torch.Generator(device=dev).manual_seed(1234)
    b, s, h, d = shape
    for inputs in ("N(0,1)", "N(0,1) + 0.1% outliers (std 10)"):
        x = [torch.randn(shape, device=dev, generator=gen) for _ in range(3)]
        if "outliers" in inputs:
            for t in x:
                m = torch.rand(shape, device=dev, generator=gen) < 0.001
                t[m] = torch.randn(int(m.sum().item()), device=dev, generator=gen) * 10
        q, k, v = x
        ref = ref64(torch, q, k, v)
        for name, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
            o = fg.attention(q.to(dt), k.to(dt), v.to(dt))
            rows.append((inputs, "flashgen " + name, rmse(torch, o, ref)))
        for fmt, tdt in (("e4m3", torch.float8_e4m3fn), ("e5m2", torch.float8_e5m2)):
            for per in ("tensor", "head"):
                for rot in (False, True):
                    qq, kk = (fg.hadamard_rotate(q, k, seed=7) if rot else (q, k))
                    q8, qs = fg.quantize_fp8(qq, dtype=tdt, per=per)
                    k8, ks = fg.quantize_fp8(kk, dtype=tdt, per=per)
                    v8, vs = fg.quantize_fp8(v, dtype=tdt, per=per)
                    o = fg.attention(q8, k8, v8, q_descale=qs, k_descale=ks, v_descale=vs, out_dtype=torch.bfloat16)
                    method = "flashgen %s, per-%s descale%s" % (fmt, per, ", Hadamard on Q, K" if rot else "")
                    rows.append((inputs, method, rmse(torch, o, ref)))
    return rows


def e4m3_per_tensor(fg, torch, *xs):
    """(x8, descale) of each x in e4m3 with one factor per tensor: the quantization of the speed and
    long-key rows."""
    return [fg.quantize_fp8(x.float(), dtype=torch.float8_e4m3fn, per="tensor") for x in xs]


def long_accuracy(fg, torch, dev, sq=256, sk=16384, heads=4):
    """Rows: (head_dim, V's mean, method, rmse, rmse relative to the reference's RMS). Long key ranges with V's
    columns averaging 0 and 1: Hopper's FP8 tensor cores accumulate with about 14 bits, so a P.V product
    carried over every key block in them drifts where the terms do not cancel (the kernels flush it into
    fp32: an FP8 accumulator carried over 16k keys with mean 1 comes out about 20% low)."""
    rows = []
    gen = torch.Generator(device=dev).manual_seed(4321)
    for d in (64, 128, 256):
        for mean in (0.0, 1.0):
            q = torch.randn((1, sq, heads, d), device=dev, generator=gen)
            k = torch.randn((1, sk, heads, d), device=dev, generator=gen)
            v = torch.randn((1, sk, heads, d), device=dev, generator=gen) + mean
            ref = ref64(torch, q, k, v)
            scale = torch.sqrt(torch.mean(ref ** 2)).item()
            o = fg.attention(q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16))
            e = rmse(torch, o, ref)
            rows.append((d, mean, "flashgen bf16", e, e / scale))
            (q8, qs), (k8, ks), (v8, vs) = e4m3_per_tensor(fg, torch, q, k, v)
            o = fg.attention(q8, k8, v8, q_descale=qs, k_descale=ks, v_descale=vs, out_dtype=torch.bfloat16)
            e = rmse(torch, o, ref)
            rows.append((d, mean, "flashgen e4m3, per-tensor descale", e, e / scale))
            if CUDNN_FP8[0]:
                try:
                    op = CudnnFp8(torch, q8, k8, v8, qs, ks, vs, False)
                    op()
                    e = rmse(torch, op.o_float(), ref)
                    rows.append((d, mean, "cuDNN e4m3, per-tensor descale (O in e4m3)", e, e / scale))
                except Exception as ex:  # noqa: BLE001 -- an unsupported shape is a row, not a crash
                    print("cuDNN e4m3 d%d: %s" % (d, str(ex).splitlines()[0][:200]), flush=True)
    return rows


def speed(fg, torch, bench, head_dims, seqlens, lse=False):
    """Rows: dict per config with TFLOP/s of flashgen e4m3, flashgen bf16, cuDNN bf16."""
    F = bench.F
    rows = []
    for d in head_dims:
        for s in seqlens:
            for causal in (False, True):
                b, h = 16384 // s, 2048 // d
                shape = (b, s, h, d)
                q, k, v = (torch.randn(shape, device=bench.dev, dtype=torch.bfloat16) for _ in range(3))
                (q8, qs), (k8, ks), (v8, vs) = e4m3_per_tensor(fg, torch, q, k, v)
                # V key-major once, outside the timing: the layout an engine keeping V^T passes directly.
                vt = fg.key_major_v(v8)
                flops = 4.0 * b * h * s * s * d / (2 if causal else 1)
                o8 = fg.attention(q8, k8, vt, causal=causal, q_descale=qs, k_descale=ks, v_descale=vs,
                                  out_dtype=torch.bfloat16)
                ref = F.scaled_dot_product_attention(
                    (q8.float() * qs).transpose(1, 2)[:1, :2], (k8.float() * ks).transpose(1, 2)[:1, :2],
                    (v8.float() * vs).transpose(1, 2)[:1, :2], is_causal=causal).transpose(1, 2)
                err = (o8[:1, :, :2].float() - ref).abs().max().item()
                ok = err < 0.1  # fp8 P rounding bounds the error near 2^-4 of |O|; a broken kernel is O(1)
                res = {"head_dim": d, "seqlen": s, "causal": causal, "batch": b, "heads": h, "fp8_max_err": err,
                       "fp8_check": "ok" if ok else "WRONG"}
                fns = {
                    "flashgen_e4m3": lambda i: fg.attention(q8, k8, vt, causal=causal, q_descale=qs, k_descale=ks,
                                                            v_descale=vs, out_dtype=torch.bfloat16),
                    "flashgen_bf16": lambda i: fg.attention(q, k, v, causal=causal),
                }
                if lse:
                    fns["flashgen_e4m3_lse"] = lambda i: fg.attention(q8, k8, vt, causal=causal, q_descale=qs,
                                                                      k_descale=ks, v_descale=vs, return_lse=True,
                                                                      out_dtype=torch.bfloat16)
                qt, kt, vtt = (x.transpose(1, 2) for x in (q, k, v))

                def cudnn(i):
                    with bench.sdpa_kernel([bench.SDPBackend.CUDNN_ATTENTION]):
                        return F.scaled_dot_product_attention(qt, kt, vtt, is_causal=causal)

                def fa2(i):
                    with bench.sdpa_kernel([bench.SDPBackend.FLASH_ATTENTION]):
                        return F.scaled_dot_product_attention(qt, kt, vtt, is_causal=causal)
                fns["cudnn_bf16"] = cudnn
                fns["fa2_bf16"] = fa2
                if CUDNN_FP8[0]:
                    try:
                        op = CudnnFp8(torch, q8, k8, v8, qs, ks, vs, causal)
                        # The same sanity bound plus e4m3's rounding of O (half a unit: 2^-4 of |O|), since
                        # cuDNN writes O in e4m3 on Hopper: causal rows over a few keys have |O| near 2-3.
                        cdev = (op()[:1, :, :2].float() - ref).abs() - 0.0625 * ref.abs()
                        cerr = cdev.max().item()
                        res["cudnn_e4m3_max_err"] = cerr
                        if cerr < 0.1:
                            fns["cudnn_e4m3"] = op
                        else:  # said as WRONG, apart from "unsupported" (cudnn_e4m3_error)
                            res["cudnn_e4m3"] = None
                            res["cudnn_e4m3_check"] = "WRONG"
                    except Exception as ex:  # noqa: BLE001 -- unsupported shapes give an empty cell
                        res["cudnn_e4m3_error"] = str(ex).splitlines()[0][:300] if str(ex) else type(ex).__name__
                        res["cudnn_e4m3"] = None
                for name, fn in fns.items():
                    if name.startswith("flashgen_e4m3") and not ok:
                        res[name] = None
                        continue
                    med, _, _ = bench.time_calls(fn, 1)
                    res[name] = flops / (med * 1e-3) / 1e12
                rows.append(res)
                print("d%d s%d %s: e4m3 %s bf16 %.0f cudnn %.0f fa2 %.0f cudnn e4m3 %s TFLOP/s (fp8 max err %.3g)" % (
                    d, s, "causal" if causal else "non-causal",
                    "%.0f" % res["flashgen_e4m3"] if res["flashgen_e4m3"] else "n/a",
                    res["flashgen_bf16"], res["cudnn_bf16"], res["fa2_bf16"],
                    "%.0f" % res["cudnn_e4m3"] if res.get("cudnn_e4m3")
                    else res.get("cudnn_e4m3_check", res.get("cudnn_e4m3_error", "n/a")), err),
                      flush=True)
    return rows


FP8_IMPLS = ("flashgen_e4m3", "flashgen_e4m3_lse", "flashgen_bf16", "cudnn_e4m3", "cudnn_bf16", "fa2_bf16")
FP8_LABELS = {"flashgen_e4m3": "flashgen e4m3", "flashgen_e4m3_lse": "flashgen e4m3 + LSE",
              "flashgen_bf16": "flashgen bf16", "cudnn_e4m3": "cuDNN e4m3", "cudnn_bf16": "cuDNN bf16",
              "fa2_bf16": "FA2 bf16"}
FP8_COLORS = {"flashgen_e4m3": "tab:red", "flashgen_e4m3_lse": "tab:orange", "flashgen_bf16": "tab:brown",
              "cudnn_e4m3": "tab:olive", "cudnn_bf16": "tab:green", "fa2_bf16": "tab:blue"}


def fp8_charts(out_dir, speed_rows, gpu):
    """compare.py's charts (TFLOP/s against seqlen, one PNG per head_dim) for the speed rows."""
    from compare_files import draw_charts
    rows = [{"head_dim": r["head_dim"], "dtype": "e4m3", "seqlen": r["seqlen"], "causal": r["causal"],
             "implementation": impl, "tflops": r[impl]} for r in speed_rows for impl in FP8_IMPLS if r.get(impl)]
    return draw_charts(out_dir, rows, gpu, FP8_IMPLS, FP8_LABELS, FP8_COLORS, prefix="fp8")


def main(argv=None):
    a = parse(argv if argv is not None else sys.argv[1:])
    import torch
    import flashgen as fg
    from compare_bench import Bench
    from compare_provenance import git_info, provenance
    os.makedirs(a.out, exist_ok=True)
    args = argparse.Namespace(device=a.device, fg_log="warn", flex=False, iters=a.iters, warmup=a.warmup)
    bench = Bench(args)
    CUDNN_FP8[:] = available()
    print("cuDNN FP8 peer: %s" % (CUDNN_FP8[1] if CUDNN_FP8[0] else "not available (%s)" % CUDNN_FP8[1]), flush=True)
    result = {"cudnn_fp8": CUDNN_FP8[1], "gpu": torch.cuda.get_device_name(bench.dev), "commit": git_info()[0], "torch": torch.__version__,
              **provenance(bench.fg)}
    md = ["# FP8 forward: %s" % result["gpu"], ""]
    if not a.skip_accuracy:
        acc = accuracy(fg, torch, bench.dev)
        result["accuracy"] = [{"inputs": i, "method": m, "rmse": r} for i, m, r in acc]
        md += ["## Accuracy: RMSE of O against fp64 (b=2, s=2048, h=16, d=128, non-causal)", "",
               "| inputs | method | RMSE |", "|---|---|---|"]
        md += ["| %s | %s | %.3g |" % r for r in acc]
        md.append("")
        lacc = long_accuracy(fg, torch, bench.dev)
        result["long_accuracy"] = [{"head_dim": d, "v_mean": m, "method": n, "rmse": r, "relative_rmse": rr}
                                   for d, m, n, r, rr in lacc]
        md += ["## Accuracy over long key ranges: RMSE of O against fp64 (b=1, seqlen_q 256, seqlen_k 16384, h=4, "
               "non-causal, V of N(mean, 1))", "", "| d | V's mean | method | RMSE | RMSE / RMS of O |",
               "|---|---|---|---|---|"]
        md += ["| %d | %g | %s | %.3g | %.3g |" % r for r in lacc]
        md.append("")
    if not a.skip_speed:
        sp = speed(fg, torch, bench, [int(x) for x in a.head_dims.split(",")], [int(x) for x in a.seqlens.split(",")],
                   a.lse)
        result["speed"] = sp
        md += ["## Speed (TFLOP/s; the protocol's shapes)", "",
               "| d | seqlen | mask | flashgen e4m3 | flashgen bf16 | cuDNN e4m3 | cuDNN bf16 | FA2 bf16 | e4m3 / bf16 | "
               "e4m3 / cuDNN e4m3 | e4m3 / cuDNN bf16 | e4m3 / FA2 bf16 | cuDNN e4m3 / cuDNN bf16 |",
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in sp:
            e, ce = r["flashgen_e4m3"], r.get("cudnn_e4m3")
            ratio = lambda peer: "%.2f" % (e / r[peer]) if e and r.get(peer) else "-"
            md.append("| %d | %d | %s | %s | %.0f | %s | %.0f | %.0f | %s | %s | %s | %s | %s |" % (
                r["head_dim"], r["seqlen"], "causal" if r["causal"] else "none", "%.0f" % e if e else r["fp8_check"],
                r["flashgen_bf16"], "%.0f" % ce if ce else r.get("cudnn_e4m3_check", "-"), r["cudnn_bf16"], r["fa2_bf16"],
                ratio("flashgen_bf16"),
                ratio("cudnn_e4m3"), ratio("cudnn_bf16"), ratio("fa2_bf16"),
                "%.2f" % (ce / r["cudnn_bf16"]) if ce else "-"))
        if not CUDNN_FP8[0]:
            md += ["", "cuDNN e4m3 not timed: the cudnn frontend did not import (%s)" % CUDNN_FP8[1]]
        if a.lse:
            md += ["", "With the LSE returned (flashgen e4m3):", "", "| d | seqlen | mask | TFLOP/s | / without | / cuDNN bf16 |",
                   "|---|---|---|---|---|---|"]
            for r in sp:
                e, el = r["flashgen_e4m3"], r.get("flashgen_e4m3_lse")
                md.append("| %d | %d | %s | %s | %s | %s |" % (
                    r["head_dim"], r["seqlen"], "causal" if r["causal"] else "none", "%.0f" % el if el else "-",
                    "%.3f" % (el / e) if el and e else "-", "%.2f" % (el / r["cudnn_bf16"]) if el else "-"))
        charts = fp8_charts(a.out, sp, result["gpu"])
        if charts:
            md += ["", "Charts: " + ", ".join(os.path.basename(c) for c in charts)]
    with open(os.path.join(a.out, "fp8.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(a.out, "fp8.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
