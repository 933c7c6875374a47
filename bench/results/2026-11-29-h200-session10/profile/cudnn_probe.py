# cuDNN's SDPA backward once, for ncu's launch metrics (grid, block, shared memory, registers). Args: d causal s
import sys, torch
from torch.nn.attention import sdpa_kernel, SDPBackend
d = int(sys.argv[1]); causal = bool(int(sys.argv[2])); s = int(sys.argv[3])
b, h = 16384 // s, 2048 // d
q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
out.backward(torch.randn_like(out))
torch.cuda.synchronize()
