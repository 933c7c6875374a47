#!/usr/bin/env python3
"""bench/ab.py: an A/B comparison of two flashgen builds from bench/compare.py or bench/fp8.py runs made on one machine.

    python3 bench/ab.py [--fp8-impl NAME] A1 B1 [A2 B2 ...]

Each argument is a compare.py output directory (its compare.json) or an fp8.py one (its fp8.json: flashgen's
e4m3 TFLOP/s, or the column --fp8-impl names, e.g. flashgen_e4m3_lse, against cuDNN's and FlashAttention-2's
bf16). The runs alternate builds, A B A B, each
timed in its own process with cuDNN and FlashAttention-2 beside it (for example
`FLASHGEN_LIB=/tmp/libB.so FLASHGEN_CACHE_DIR=/tmp/fgB python3 bench/compare.py --bwd --dtypes bf16 --out B1`).
Prints, per configuration, flashgen's TFLOP/s in every run with its ratios to FlashAttention-2 and cuDNN
of that same run, flashgen's correctness check, and the geometric mean of B/A over all (A, B) pairs and
configurations, then per head_dim, then the range of B/A per head_dim and length. A run's JSON may be
gzipped (compare.json.gz, fp8.json.gz), as archived runs are; it is read as it is.
"""
import math
import os
import sys

from compare_files import read_json  # (this folder: the script's own, first on sys.path)


def load(path, fp8_impl="flashgen_e4m3"):
    """{(dtype, head_dim, causal, seqlen): {implementation: record}} of one compare.py or fp8.py run (its JSON
    as written, or gzipped)."""
    fp8 = any(os.path.exists(os.path.join(path, n)) for n in ("fp8.json", "fp8.json.gz"))
    name = "fp8.json" if fp8 else "compare.json"
    try:
        data, _ = read_json(os.path.join(path, name))
    except (OSError, ValueError) as e:
        sys.exit(f"ab.py: {path}/{name}: {e}")
    table = {}
    if fp8:
        for r in data.get("speed", []):
            key = ("e4m3", r["head_dim"], bool(r["causal"]), r["seqlen"])
            table[key] = {"flashgen": {"tflops": r.get(fp8_impl), "check": r.get("fp8_check", "")},
                          "fa2": {"tflops": r.get("fa2_bf16")}, "cudnn": {"tflops": r.get("cudnn_bf16")}}
        return table
    for r in data["results"]:
        key = (r["dtype"], r["head_dim"], bool(r["causal"]), r["seqlen"])
        table.setdefault(key, {})[r["implementation"]] = r
    return table


def tflops(run, key, impl):
    v = run.get(key, {}).get(impl, {}).get("tflops")
    return v if v else None


def main():
    args = sys.argv[1:]
    fp8_impl = "flashgen_e4m3"
    if len(args) >= 2 and args[0] == "--fp8-impl":
        fp8_impl, args = args[1], args[2:]
    if len(args) < 2 or len(args) % 2:
        sys.exit(__doc__.strip().split("\n\n")[1].strip() + "\n(an even number of run directories, A first)")
    runs = [load(p, fp8_impl) for p in args]
    logs = []
    by_dim = {}
    by_len = {}  # (head_dim, seqlen): every B/A ratio (both masks and dtypes, every pair)
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
                by_dim.setdefault(key[1], []).append(math.log(tb / ta))
                by_len.setdefault((key[1], key[3]), []).append(tb / ta)
        check = runs[0][key].get("flashgen", {}).get("check", "")
        print(key, " | ".join(cells), check)
    if logs:
        print("B/A geomean %.4f over %d pairs" % (math.exp(sum(logs) / len(logs)), len(logs)))
        for d in sorted(by_dim):
            v = by_dim[d]
            print("  head_dim %d: %.4f over %d (%.3f-%.3f)" % (d, math.exp(sum(v) / len(v)), len(v),
                                                            math.exp(min(v)), math.exp(max(v))))
        print("B/A range per head_dim and length (both masks, every dtype and pair):")
        for d in sorted(by_dim):
            print("  d %d  " % d + "; ".join("%d: %.3f-%.3f" % (n, min(by_len[(d, n)]), max(by_len[(d, n)]))
                                           for n in sorted(n for (dd, n) in by_len if dd == d)))


if __name__ == "__main__":
    main()
