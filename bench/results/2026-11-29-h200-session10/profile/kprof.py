# Per-kernel GPU times of one backward call: flashgen (pre/main/post), cuDNN and FA2 (SDPA backends), from
# torch.profiler (CUPTI), ANCHORS shapes b = 16384 / s, h = 2048 / d, bf16. Usage: kprof.py d causal s [s ...]
import sys, torch, collections
sys.path.insert(0, "python")
import flashgen
from torch.nn.attention import sdpa_kernel, SDPBackend
from torch.profiler import profile, ProfilerActivity
d = int(sys.argv[1]); causal = bool(int(sys.argv[2]))
for s in map(int, sys.argv[3:]):
    b, h = 16384 // s, 2048 // d
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o, lse = flashgen.attention(q, k, v, causal=causal, return_lse=True)
    do = torch.randn_like(o)
    qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
    def fg(): flashgen.attention_backward(q, k, v, o, lse, do, causal=causal)
    def mk(be):
        def f():
            with sdpa_kernel(be):
                out = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
            torch.autograd.grad(out, (qt, kt, vt), do.transpose(1, 2))
        return f
    for name, fn in (("flashgen", fg), ("cudnn", mk(SDPBackend.CUDNN_ATTENTION)), ("fa2", mk(SDPBackend.FLASH_ATTENTION))):
        for _ in range(3): fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5): fn()
            torch.cuda.synchronize()
        t = collections.OrderedDict()
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                t.setdefault(e.name[:60], []).append(e.device_time if hasattr(e, "device_time") else e.cuda_time)
        tot = sum(sum(x) for x in t.values()) / 5
        print("d%d c%d s%d %-8s total %8.1f us: " % (d, causal, s, name, tot) +
              "; ".join("%s %.1f" % (k, sum(x) / 5) for k, x in t.items() if sum(x) / 5 > 0.5))
