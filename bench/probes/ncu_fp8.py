# ncu target (bench/probes): flashgen e4m3 forward, d and seqlen from argv (ANCHORS shape: 16k tokens, hidden 2048), 6 calls.
import sys, os, torch
sys.path.insert(0, os.path.join(os.getcwd(), "python"))
import flashgen as fg
d, s, causal = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
b, h = 16384 // s, 2048 // d
q, k, v = (torch.randn((b, s, h, d), device="cuda", dtype=torch.bfloat16) for _ in range(3))
q8, qs = fg.quantize_fp8(q.float(), dtype=torch.float8_e4m3fn, per="tensor")
k8, ks = fg.quantize_fp8(k.float(), dtype=torch.float8_e4m3fn, per="tensor")
v8, vs = fg.quantize_fp8(v.float(), dtype=torch.float8_e4m3fn, per="tensor")
vt = fg.key_major_v(v8)
for i in range(6):
    o = fg.attention(q8, k8, vt, causal=bool(causal), q_descale=qs, k_descale=ks, v_descale=vs, out_dtype=torch.bfloat16)
torch.cuda.synchronize()
print("ok", o.float().abs().mean().item())
