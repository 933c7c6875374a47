"""bench/probes/decode_splits.py: the decode split count against time. For each cell (bf16, head_dim 128, 32 query
/ 8 KV heads, one query token; dense caches and paged ones of 16-key pages) times flashgen's decode at num_splits
0 (the rule's choice, named in brackets) and 1 to 32 (CUDA-graph replays, bench/serving.py's protocol), and
prints the memory clock and bus width the rule's bandwidth comes from. What the split rule of runtime/serving.c
is fitted to. With --kv-fp8 the same cells over an e4m3 cache (K and V cast from the bf16 values, no descales).

    python3 bench/probes/decode_splits.py [--kv-fp8]
"""
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 2)[0])
sys.path.insert(0, __file__.rsplit("/", 3)[0] + "/python")
import serving  # noqa: E402
import flashgen  # noqa: E402

serving.GRAPH = True
SPLITS = [0, 1, 2, 4, 6, 8, 10, 12, 15, 16, 20, 24, 32]


def main():
    fp8 = "--kv-fp8" in sys.argv[1:]
    p = torch.cuda.get_device_properties(0)
    print(torch.cuda.get_device_name(), "memory clock kHz", getattr(p, "memory_clock_rate", "?"), "bus bits",
          getattr(p, "memory_bus_width", "?"), flush=True)
    for paged in (0, 16):
        for b, sk in [(1, 131072), (8, 32768), (2, 65536), (4, 32768)]:
            q = torch.randn(b, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
            lens = torch.full((b,), sk, dtype=torch.int32, device="cuda")
            kw = {}
            if paged:
                pages = sk // paged
                k = torch.randn(b * pages, paged, 8, 128, device="cuda", dtype=torch.bfloat16)
                kw["block_table"] = torch.randperm(b * pages, device="cuda", dtype=torch.int32).reshape(b, pages)
            else:
                k = torch.randn(b, sk, 8, 128, device="cuda", dtype=torch.bfloat16)
            v = torch.randn_like(k)
            if fp8:
                k, v = k.to(torch.float8_e4m3fn), v.to(torch.float8_e4m3fn)
            row = []
            for s in SPLITS:
                t = serving.timed(lambda: flashgen.attention_with_kvcache(q, k, v, cache_seqlens=lens, num_splits=s,
                                                                          **kw), 15)
                row.append("%d:%.0f" % (s, t))
            ex = flashgen.explain_varlen(q, k, v, seqused_k=lens, **kw)
            rule = [ln for ln in ex.splitlines() if ln.startswith("splits")][0].split()[1]
            print("%spage %s %d x %dk [rule: %s] %s" % ("e4m3 " if fp8 else "", paged or "-", b, sk // 1024, rule,
                                                       " ".join(row)), flush=True)


if __name__ == "__main__":
    main()
