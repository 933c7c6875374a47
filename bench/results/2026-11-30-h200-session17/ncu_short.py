# Session 17, call 7: one forward of flashgen and one of cuDNN (SDPA's CUDNN_ATTENTION), bf16, on the
# protocol's shape at head_dim d and seqlen s (batch 16384/s, heads 2048/d), for ncu; with "bwd" as the
# fourth argument their backwards too. Args: d s causal [bwd]
import sys, torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
sys.path.insert(0, "python")
import flashgen as fg
d, s, causal = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
bwd = len(sys.argv) > 4 and sys.argv[4] == "bwd"
b, h = 16384 // s, 2048 // d
q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=bwd) for _ in range(3))
o = fg.attention(q, k, v, causal=causal)
if bwd: o.backward(torch.randn_like(o))
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    o2 = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
    if bwd: o2.backward(torch.randn_like(o2))
torch.cuda.synchronize()
print("ok")
