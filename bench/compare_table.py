#!/usr/bin/env python3
"""bench/compare_table.py: the markdown table of a bench/compare.py run (for bench/BASELINE.md or a commit body).

    python3 bench/compare_table.py DIR/compare.csv

Prints, per dtype / head_dim / mask, one cell per seqlen: flashgen / FlashAttention-2 / cuDNN TFLOP/s and
flashgen's ratio to FlashAttention-2 in brackets; then the geometric means, and how the configurations
stand against issue 3's bars (>= 1.0x FA2 at seqlen 2k-16k, >= 0.9x at 512-1k), listing those below.
Only configurations whose flashgen output passed compare.py's check are counted; others are listed.
"""
import csv
import math
import sys
from collections import defaultdict


def short(n):
    return f"{n // 1024}k" if n >= 1024 else str(n)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().split("\n\n")[1].strip())
    rows = list(csv.DictReader(open(sys.argv[1], newline="")))
    t = defaultdict(dict)
    bad = []
    for r in rows:
        key = (r["dtype"], int(r["head_dim"]), int(r["causal"]), int(r["seqlen"]))
        t[key][r["implementation"]] = float(r["tflops"]) if r["tflops"] else float("nan")
        if r["implementation"] == "flashgen" and r["check"] != "ok":
            bad.append((key, r["check"], r["note"]))
    seqlens = sorted({k[3] for k in t})
    print("| dtype | d | mask | " + " | ".join(short(s) for s in seqlens) + " |")
    print("|---|---|---|" + "---|" * len(seqlens))
    fa2_ratios, cudnn_ratios, below = [], [], []
    for dtype, d, causal in sorted({k[:3] for k in t}):
        cells = []
        for s in seqlens:
            v = t.get((dtype, d, causal, s), {})
            fg, fa2, cd = v.get("flashgen"), v.get("fa2"), v.get("cudnn")
            if fg is None or fa2 is None or cd is None:
                cells.append("-")
                continue
            ratio = fg / fa2
            fa2_ratios.append(ratio)
            cudnn_ratios.append(fg / cd)
            cells.append(f"{fg:.0f} / {fa2:.0f} / {cd:.0f} ({ratio:.2f})")
            bar = 1.0 if s >= 2048 else 0.9
            if ratio < bar:
                below.append(f"{dtype} d{d} {'causal' if causal else 'non-causal'} {short(s)}: {ratio:.3f}x "
                             f"(bar {bar:.1f}x)")
        print(f"| {dtype} | {d} | {'causal' if causal else 'none'} | " + " | ".join(cells) + " |")
    gm = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs))
    print()
    print(f"Geometric mean over {len(fa2_ratios)} configurations: {gm(fa2_ratios):.2f}x FlashAttention-2, "
          f"{gm(cudnn_ratios):.2f}x cuDNN.")
    print(f"Below issue 3's bars (>= 1.0x FA2 at 2k-16k, >= 0.9x at 512-1k): {len(below)} of {len(fa2_ratios)}"
          + (":" if below else "."))
    for b in below:
        print(f"- {b}")
    for key, check, note in bad:
        print(f"- flashgen's output failed the check at {key}: {check} {note}")


if __name__ == "__main__":
    main()
