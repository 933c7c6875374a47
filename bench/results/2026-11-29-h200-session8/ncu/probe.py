# One bf16 and one e4m3 forward (sm_90a family) on the same shape, for ncu. Args: d s [causal]
import sys, torch
sys.path.insert(0, "python")
import flashgen as fg
d, s = int(sys.argv[1]), int(sys.argv[2]); causal = len(sys.argv) > 3 and sys.argv[3] == "1"
b, h = 16384 // s, 2048 // d
q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
q8, qs = fg.quantize_fp8(q.float()); k8, ks = fg.quantize_fp8(k.float()); v8, vs = fg.quantize_fp8(v.float())
vt = fg.key_major_v(v8)
fg.attention(q, k, v, causal=causal)
fg.attention(q8, k8, vt, q_descale=qs, k_descale=ks, v_descale=vs, causal=causal)
torch.cuda.synchronize()
print("ok")
