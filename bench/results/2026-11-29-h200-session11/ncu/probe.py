# One flashgen backward (mma.sync when FLASHGEN_WGMMA_BWD=0) and one FlashAttention-2 backward (SDPA flash
# backend) on the same inputs, for ncu: b = 16384 / s, h = 2048 / d, bf16.
import sys, torch
sys.path.insert(0, "python")
import flashgen
from torch.nn.attention import sdpa_kernel, SDPBackend
d = int(sys.argv[1]); causal = bool(int(sys.argv[2])); s = int(sys.argv[3]) if len(sys.argv) > 3 else 2048
b, h = 16384 // s, 2048 // d
q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
o, lse = flashgen.attention(q, k, v, causal=causal, return_lse=True)
do = torch.randn_like(o)
flashgen.attention_backward(q, k, v, o, lse, do, causal=causal)
torch.cuda.synchronize()
qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
    out = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
    out.backward(do.transpose(1, 2))
torch.cuda.synchronize()
print("ok")
