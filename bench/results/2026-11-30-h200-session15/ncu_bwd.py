# ncu target: flashgen bf16 backward (sm_90a family on Hopper), d and seqlen from argv (ANCHORS shape: 16k
# tokens, hidden 2048), 6 calls of attention_backward.
import sys, os, torch
sys.path.insert(0, os.path.join(os.getcwd(), "python"))
import flashgen as fg
d, s, causal = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
b, h = 16384 // s, 2048 // d
q, k, v, do = (torch.randn((b, s, h, d), device="cuda", dtype=torch.bfloat16) for _ in range(4))
o, lse = fg.attention(q, k, v, causal=bool(causal), return_lse=True)
for i in range(6):
    dq, dk, dv = fg.attention_backward(q, k, v, o, lse, do, causal=bool(causal))
torch.cuda.synchronize()
print("ok", dq.float().abs().mean().item())
