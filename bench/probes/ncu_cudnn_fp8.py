"""bench/probes/ncu_cudnn_fp8.py: an ncu target, cuDNN's own FP8 forward (bench/cudnn_fp8.py) at head_dim d and
seqlen s on the protocol's shape (16384 tokens, hidden 2048), run 4 times; with the cudnn frontend importable.

    ncu --set full -k regex:sdpa --launch-skip 2 --launch-count 1 python3 bench/probes/ncu_cudnn_fp8.py 128 8192
"""
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

def bad(why):
    sys.exit("ncu_cudnn_fp8.py: %s (usage: ncu_cudnn_fp8.py HEAD_DIM SEQLEN)" % why)


if len(sys.argv) != 3 or not all(x.isdigit() for x in sys.argv[1:]):
    bad("two positive integers are expected")
d, s = int(sys.argv[1]), int(sys.argv[2])
if d <= 0 or 2048 % d != 0:
    bad("HEAD_DIM must divide the hidden size 2048 (64, 128, 256), got %d" % d)
if s <= 0 or 16384 % s != 0:
    bad("SEQLEN must divide the 16384 tokens (512 ... 16384), got %d" % s)
import torch  # noqa: E402 -- after the arguments: a usage error needs no GPU stack
import flashgen as fg  # noqa: E402
from cudnn_fp8 import CudnnFp8  # noqa: E402
from fp8 import e4m3_per_tensor  # noqa: E402

b, h = 16384 // s, 2048 // d
q, k, v = (torch.randn((b, s, h, d), device="cuda", dtype=torch.bfloat16) for _ in range(3))
(q8, qs), (k8, ks), (v8, vs) = e4m3_per_tensor(fg, torch, q, k, v)
op = CudnnFp8(torch, q8, k8, v8, qs, ks, vs, False)
for _ in range(4):
    op()
torch.cuda.synchronize()
print("ok", op.o_float().abs().mean().item())
