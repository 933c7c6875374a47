"""bench/probes/power_clock.py: what bounds the FP8 forward on this GPU. Runs each workload back to back for a
few seconds while `nvidia-smi` samples the SM clock, the power draw and the clock-event reasons every 50 ms,
then prints per workload its TFLOP/s (CUDA events over the whole window) with the median clock and power of the
samples inside the window. Workloads: FP8 and bf16 GEMMs (torch._scaled_mm, torch.matmul; 8192^3, the ceilings
docs/performance.md names), and the attention forwards of bench/fp8.py's shape (16384 tokens, hidden 2048, no mask) at
head_dim 128 and 256: flashgen e4m3 and bf16, cuDNN bf16 (torch SDPA), cuDNN e4m3 (bench/cudnn_fp8.py, where the
cudnn frontend imports).

    python3 bench/probes/power_clock.py [--seconds 3] [--seqlen 16384] [--out FILE.json]
"""
import argparse, json, math, os, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--seqlen", type=int, default=16384)
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.seqlen <= 0 or 16384 % a.seqlen != 0:
        ap.error("--seqlen must divide the 16384 tokens (512, 1024, ... 16384), got %d" % a.seqlen)
    if a.seconds <= 0:
        ap.error("--seconds must be positive, got %g" % a.seconds)
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import flashgen as fg
    import cudnn_fp8
    from fp8 import e4m3_per_tensor
    dev = torch.device("cuda")
    work = []  # (name, flops per call, fn)
    n = 8192
    a8 = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn)
    b8 = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn).t()
    one = torch.ones((), device=dev)
    work.append(("gemm e4m3 8192^3", 2.0 * n ** 3,
                 lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)))
    ab, bb = torch.randn(n, n, device=dev, dtype=torch.bfloat16), torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    work.append(("gemm bf16 8192^3", 2.0 * n ** 3, lambda: torch.matmul(ab, bb)))
    s = a.seqlen
    for d in (128, 256):
        b, h = 16384 // s, 2048 // d
        q, k, v = (torch.randn((b, s, h, d), device=dev, dtype=torch.bfloat16) for _ in range(3))
        (q8, qs), (k8, ks), (v8, vs) = e4m3_per_tensor(fg, torch, q, k, v)
        vt = fg.key_major_v(v8)
        fl = 4.0 * b * h * s * s * d
        qt, kt, vtt = (x.transpose(1, 2) for x in (q, k, v))

        def cudnn_bf16(qt=qt, kt=kt, vtt=vtt):
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return F.scaled_dot_product_attention(qt, kt, vtt)
        work.append(("flashgen e4m3 d%d" % d, fl, lambda q8=q8, k8=k8, vt=vt, qs=qs, ks=ks, vs=vs: fg.attention(
            q8, k8, vt, q_descale=qs, k_descale=ks, v_descale=vs, out_dtype=torch.bfloat16)))
        work.append(("flashgen bf16 d%d" % d, fl, lambda q=q, k=k, v=v: fg.attention(q, k, v)))
        work.append(("cuDNN bf16 d%d" % d, fl, cudnn_bf16))
        if cudnn_fp8.available()[0]:
            work.append(("cuDNN e4m3 d%d" % d, fl, cudnn_fp8.CudnnFp8(torch, q8, k8, v8, qs, ks, vs, False)))
    smi_log = tempfile.NamedTemporaryFile(prefix="smi", suffix=".csv", delete=False).name
    try:
        smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active",
                                "--format=csv,noheader,nounits", "-lms", "50"], stdout=open(smi_log, "w"))
    except OSError as e:
        os.unlink(smi_log)
        sys.exit("power_clock.py: cannot run nvidia-smi (%s): it samples the clocks and the power" % e)
    time.sleep(1.0)
    rows = []
    for name, fl, fn in work:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        t = time.perf_counter(); fn(); torch.cuda.synchronize(); one_call = max(time.perf_counter() - t, 1e-5)
        iters = max(10, int(a.seconds / one_call))
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        w0 = time.time(); e0.record()
        for _ in range(iters):
            fn()
        e1.record(); torch.cuda.synchronize(); w1 = time.time()
        ms = e0.elapsed_time(e1) / iters
        rows.append({"name": name, "tflops": fl / ms / 1e9, "ms": ms, "iters": iters, "t0": w0, "t1": w1})
        time.sleep(0.5)
    smi.terminate(); smi.wait()
    samples = []
    for line in open(smi_log):
        p = [x.strip() for x in line.split(",")]
        try:
            ts = time.mktime(time.strptime(p[0].split(".")[0], "%Y/%m/%d %H:%M:%S")) + float("0." + p[0].split(".")[1])
            samples.append((ts, float(p[1]), float(p[2]), p[3]))
        except (ValueError, IndexError):
            continue
    os.unlink(smi_log)
    med = lambda xs: sorted(xs)[len(xs) // 2] if xs else float("nan")
    print("| workload | TFLOP/s | SM clock MHz (median) | power W (median) | clock-event reasons (most common) | samples |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        inside = [x for x in samples if r["t0"] + 0.2 <= x[0] <= r["t1"]]
        reasons = {}
        for x in inside:
            reasons[x[3]] = reasons.get(x[3], 0) + 1
        r.update(clock=med([x[1] for x in inside]), power=med([x[2] for x in inside]),
                 reasons=max(reasons, key=reasons.get) if reasons else "-", samples=len(inside))
        print("| %s | %.0f | %.0f | %.0f | %s | %d |" % (r["name"], r["tflops"], r["clock"], r["power"], r["reasons"],
                                                   r["samples"]))
    if a.out:
        json.dump({"seqlen": s, "rows": rows}, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
