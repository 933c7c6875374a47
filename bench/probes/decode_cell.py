"""bench/probes/decode_cell.py: one decode cell of bench/serving.py (bf16, head_dim 128, 32 query / 8 KV heads, one
query token; a dense cache, or pages of PAGE keys in a shuffled table), run three times, for ncu to profile the
third call's kernel:

    ncu --target-processes all -k regex:fg_attention_fwd --launch-skip 2 --launch-count 1 \\
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,\\
sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size \\
        python3 bench/probes/decode_cell.py dense|pagedPAGE BATCHxKEYS     (e.g. paged16 32x4k, dense 1x128k)
"""
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 3)[0] + "/python")
import flashgen  # noqa: E402

CELLS = {"32x4k": (32, 4096), "1x128k": (1, 131072), "8x32k": (8, 32768), "64x2k": (64, 2048)}


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in CELLS or not (sys.argv[1] == "dense" or sys.argv[1].startswith("paged")):
        sys.exit(__doc__.strip().split("\n\n")[1])
    b, sk = CELLS[sys.argv[2]]
    q = torch.randn(b, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    lens = torch.full((b,), sk, dtype=torch.int32, device="cuda")
    kw = {}
    if sys.argv[1] == "dense":
        k = torch.randn(b, sk, 8, 128, device="cuda", dtype=torch.bfloat16)
    else:
        ps = int(sys.argv[1][5:])
        pages = sk // ps
        k = torch.randn(b * pages, ps, 8, 128, device="cuda", dtype=torch.bfloat16)
        kw["block_table"] = torch.randperm(b * pages, device="cuda", dtype=torch.int32).reshape(b, pages)
    v = torch.randn_like(k)
    for _ in range(3):
        flashgen.attention_with_kvcache(q, k, v, cache_seqlens=lens, **kw)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
