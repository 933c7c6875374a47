#!/usr/bin/env python3
"""bench/ab.py: an A/B comparison of two flashgen builds from bench/compare.py runs made in one session.

    python3 bench/ab.py A1 B1 [A2 B2 ...]

Each argument is a compare.py output directory (its compare.json). The runs alternate builds, A B A B, each
timed in its own process with cuDNN and FlashAttention-2 beside it (for example
`FLASHGEN_LIB=/tmp/libB.so FLASHGEN_CACHE_DIR=/tmp/fgB python3 bench/compare.py --bwd --dtypes bf16 --out B1`).
Prints, per configuration, flashgen's TFLOP/s in every run with its ratios to FlashAttention-2 and cuDNN
of that same run, flashgen's correctness check, and the geometric mean of B/A over all (A, B) pairs and
configurations: how the session-10 A/B figures in bench/results/*/README.md were computed.
"""
import json
import math
import sys


def load(path):
    """{(dtype, head_dim, causal, seqlen): {implementation: record}} of one compare.py run."""
    try:
        with open(path + "/compare.json") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"ab.py: {path}/compare.json: {e}")
    table = {}
    for r in data["results"]:
        key = (r["dtype"], r["head_dim"], bool(r["causal"]), r["seqlen"])
        table.setdefault(key, {})[r["implementation"]] = r
    return table


def tflops(run, key, impl):
    v = run.get(key, {}).get(impl, {}).get("tflops")
    return v if v else None


def main():
    args = sys.argv[1:]
    if len(args) < 2 or len(args) % 2:
        sys.exit(__doc__.strip().split("\n\n")[1].strip() + "\n(an even number of run directories, A first)")
    runs = [load(p) for p in args]
    logs = []
    for key in sorted(runs[0]):
        cells = []
        for i, run in enumerate(runs):
            fg, fa, cu = (tflops(run, key, x) for x in ("flashgen", "fa2", "cudnn"))
            if fg is None:
                cells.append("-")
                continue
            cells.append("%s %.1f fa2 %s cu %s" % ("AB"[i % 2], fg, "%.3f" % (fg / fa) if fa else "-",
                                                  "%.3f" % (fg / cu) if cu else "-"))
        for a, b in zip(runs[0::2], runs[1::2]):
            ta, tb = tflops(a, key, "flashgen"), tflops(b, key, "flashgen")
            if ta and tb:
                logs.append(math.log(tb / ta))
        check = runs[0][key].get("flashgen", {}).get("check", "")
        print(key, " | ".join(cells), check)
    if logs:
        print("B/A geomean %.4f over %d pairs" % (math.exp(sum(logs) / len(logs)), len(logs)))


if __name__ == "__main__":
    main()
