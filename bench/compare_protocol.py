"""bench/compare_protocol.py: the benchmark protocol's grid and constants (docs/performance.md), shared by
bench/compare.py and its parts.

    import compare_protocol        (bench/ is on sys.path: the scripts' own folder)

Not a script. compare.py's --hidden replaces HIDDEN, so a part reads compare_protocol.HIDDEN when it runs,
never a copy taken at import by `from compare_protocol import HIDDEN`.
"""

SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (64, 128, 256)
DTYPES = ("bf16", "fp16")
TOTAL_TOKENS = 16384
HIDDEN = 2048  # --hidden replaces it: read it as compare_protocol.HIDDEN, when used
QUICK = {"dtypes": ("bf16",), "head_dims": (64, 128), "seqlens": (1024, 4096), "causal": "both"}
IMPLS = ("flashgen", "cudnn", "fa2", "flex")
LABELS = {"flashgen": "flashgen", "cudnn": "cuDNN", "fa2": "FA2", "flex": "flex"}
LSE_ATOL, LSE_RTOL = 5e-4, 5e-5  # reference/reference.h: REF_LSE_ATOL, REF_LSE_RTOL
SCHEMA = 1


def flops(cfg):
    """FLOPs of a config (docs/performance.md): forward 4 * b * h * sq * sk * d, halved when causal; backward 2.5x."""
    f = 4.0 * cfg["batch"] * cfg["heads"] * cfg["seqlen"] * cfg["seqlen"] * cfg["head_dim"]
    f = f / 2 if cfg["causal"] else f
    return 2.5 * f if cfg.get("pass") == "bwd" else f
