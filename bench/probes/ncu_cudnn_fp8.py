"""bench/probes/ncu_cudnn_fp8.py: an ncu target, cuDNN's own FP8 forward (bench/cudnn_fp8.py) at head_dim d and
seqlen s on the protocol's shape (16384 tokens, hidden 2048), run 4 times; with the cudnn frontend importable.

    ncu --set full -k regex:sdpa --launch-skip 2 --launch-count 1 python3 bench/probes/ncu_cudnn_fp8.py 128 8192
"""
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import torch
import flashgen as fg
from cudnn_fp8 import CudnnFp8
from fp8 import e4m3_per_tensor

d, s = int(sys.argv[1]), int(sys.argv[2])
b, h = 16384 // s, 2048 // d
q, k, v = (torch.randn((b, s, h, d), device="cuda", dtype=torch.bfloat16) for _ in range(3))
(q8, qs), (k8, ks), (v8, vs) = e4m3_per_tensor(fg, torch, q, k, v)
op = CudnnFp8(torch, q8, k8, v8, qs, ks, vs, False)
for _ in range(4):
    op()
torch.cuda.synchronize()
print("ok", op.o_float().abs().mean().item())
