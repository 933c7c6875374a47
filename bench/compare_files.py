"""bench/compare_files.py: bench/compare.py's results: compare.json and compare.csv written, read back and
merged with the earlier parts of a sweep in the same directory, the charts (one PNG per head_dim and dtype),
the table with its notes, and --redraw.

    rows, checks = merge(old_rows, old_checks, new_rows, new_checks)
    write_files(out_dir, rows, checks, runs); draw_charts(out_dir, rows, gpu); print(table(rows))

Needs no GPU or PyTorch; the charts need matplotlib and are skipped with a note without it. Used by
bench/compare.py, bench/fp8.py (draw_charts) and bench/ab.py (read_json); not a script.
"""
import csv
import gzip
import json
import math
import os
import sys

import compare_protocol
from compare_protocol import DTYPES, IMPLS, LABELS, LSE_ATOL, LSE_RTOL, SCHEMA, TOTAL_TOKENS


def read_json(path):
    """(the JSON at path, or at path + ".gz" where only that exists (an archived run, gzipped),
    the path read). Raises OSError or ValueError as open and json.load do."""
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        path += ".gz"
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return json.load(f), path


def key_of(row):
    """A result row's identity when parts of a sweep are merged."""
    return (row["implementation"], row["dtype"], row["head_dim"], bool(row["causal"]), row["seqlen"])


def load_previous(path, gpu):
    """Rows, checks and runs of an earlier part in the same directory (same GPU), or empty lists."""
    try:
        with open(path) as f:
            old = json.load(f)
    except (OSError, ValueError):
        return [], [], []
    if old.get("schema") != SCHEMA or not old.get("runs") or old["runs"][-1].get("gpu") != gpu:
        print("note: %s is from another GPU or format; not merged" % path, file=sys.stderr)
        return [], [], []
    return old.get("results", []), old.get("checks", []), old.get("runs", [])


def merge(old_rows, old_checks, new_rows, new_checks):
    """New rows replace old rows of the same (implementation, dtype, head_dim, causal, seqlen)."""
    new_keys = {key_of(r) for r in new_rows}
    rows = [r for r in old_rows if key_of(r) not in new_keys] + new_rows
    ckey = lambda c: (c["dtype"], c["head_dim"], bool(c["causal"]), c["seqlen"])
    new_ck = {ckey(c) for c in new_checks}
    checks = [c for c in old_checks if ckey(c) not in new_ck] + new_checks
    order = lambda r: (DTYPES.index(r["dtype"]) if r["dtype"] in DTYPES else 9, r["head_dim"], bool(r["causal"]), r["seqlen"])
    rows.sort(key=lambda r: order(r) + (IMPLS.index(r["implementation"]),))
    checks.sort(key=order)
    return rows, checks


CSV_FIELDS = ("implementation", "dtype", "head_dim", "causal", "seqlen", "batch", "heads", "median_ms", "tflops",
              "check", "run", "note")


def write_files(out_dir, rows, checks, runs):
    """compare.json (protocol, runs, every row and check) and compare.csv, each replaced atomically."""
    os.makedirs(out_dir, exist_ok=True)
    doc = {
        "schema": SCHEMA,
        "protocol": {
            "source": "docs/performance.md",
            "shapes": "hidden %d (heads = %d / head_dim), %d tokens (batch = %d / seqlen), [b, s, h, d]"
                      % (compare_protocol.HIDDEN, compare_protocol.HIDDEN, TOTAL_TOKENS, TOTAL_TOKENS),
            "flops": "4 * b * h * sq * sk * d, halved when causal",
            "timing": "CUDA events around each call, enqueued behind a GPU sleep; median of iters; compile excluded",
            "check": "max|out - ref32| <= 2 * max|ref_lowp - ref32| + 1e-5 on a slice (ref32: fp32 math on upcast "
                     "inputs; ref_lowp: SDPA FA2), no NaN/Inf, LSE within %g + %g|ref|" % (LSE_ATOL, LSE_RTOL),
            "sdpa_inputs": "transposed [b, h, s, d] views of the [b, s, h, d] tensors flashgen gets",
            "flashgen_lse": "timed without the LSE output",
        },
        "runs": runs,
        "results": rows,
        "checks": checks,
    }
    tmp = os.path.join(out_dir, "compare.json.tmp")
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, default=str)
    os.replace(tmp, os.path.join(out_dir, "compare.json"))
    tmp = os.path.join(out_dir, "compare.csv.tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            r2 = dict(r)
            r2["median_ms"] = "%.5f" % r["median_ms"] if r.get("median_ms") else ""
            r2["tflops"] = "%.2f" % r["tflops"] if r.get("tflops") else ""
            r2["causal"] = int(bool(r["causal"]))
            w.writerow(r2)
    os.replace(tmp, os.path.join(out_dir, "compare.csv"))


def draw_charts(out_dir, rows, gpu, impls=IMPLS, labels=LABELS, colors=None, prefix=None):
    """One PNG per (head_dim, dtype): TFLOP/s against seqlen, a color per implementation, solid lines
    without mask and dashed with the causal mask. Returns the paths written (none without matplotlib).
    impls/labels/colors name other implementations (bench/fp8.py's); prefix replaces "fwd"/"bwd" in the
    file names."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print("note: no charts (matplotlib is not importable: %s)" % e, file=sys.stderr)
        return []
    colors = colors or {"flashgen": "tab:red", "cudnn": "tab:green", "fa2": "tab:blue", "flex": "tab:purple"}
    paths = []
    groups = sorted({(r["head_dim"], r["dtype"]) for r in rows})
    for d, dt in groups:
        sel = [r for r in rows if r["head_dim"] == d and r["dtype"] == dt]
        fig, ax = plt.subplots(figsize=(8, 5))
        seqlens = sorted({r["seqlen"] for r in sel})
        for impl in impls:
            for causal in (False, True):
                pts = sorted((r["seqlen"], r["tflops"]) for r in sel
                             if r["implementation"] == impl and bool(r["causal"]) == causal and r.get("tflops")
                             and r.get("check") != "WRONG")
                if not pts:
                    continue
                ax.plot([p[0] for p in pts], [p[1] for p in pts], color=colors[impl], marker="o", markersize=4,
                        linestyle="--" if causal else "-",
                        label="%s%s" % (labels[impl], ", causal" if causal else ""))
        ax.set_xscale("log", base=2)
        ax.set_xticks(seqlens)
        ax.set_xticklabels([str(s) if s < 1024 else "%dk" % (s // 1024) for s in seqlens])
        ax.set_xlabel("seqlen (batch = %d / seqlen, heads = %d / head_dim)" % (TOTAL_TOKENS, compare_protocol.HIDDEN))
        ax.set_ylabel("TFLOP/s")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        which = "backward" if any(r.get("pass") == "bwd" for r in sel) else "forward"
        ax.set_title("attention %s, %s, head_dim %d, %s (solid: no mask, dashed: causal)" % (which, gpu, d, dt), fontsize=10)
        if ax.get_lines():
            ax.legend(fontsize=8, ncol=2)
        fig.tight_layout()
        path = os.path.join(out_dir, "%s_d%d_%s.png" % (prefix or ("bwd" if which == "backward" else "fwd"), d, dt))
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def table(rows):
    """The comparison table: one row per config, TFLOP/s per implementation, then flashgen/cuDNN and
    flashgen/FA2, and a geometric-mean line over the configs where both ratios exist."""
    impls = [i for i in IMPLS if any(r["implementation"] == i for r in rows)]
    by_cfg = {}
    for r in rows:
        by_cfg.setdefault((r["dtype"], r["head_dim"], bool(r["causal"]), r["seqlen"], r["batch"], r["heads"]), {})[
            r["implementation"]] = r

    def cell(r):
        if r is None:
            return "-"
        if r.get("check") == "WRONG":
            return "WRONG"
        return "%.1f" % r["tflops"] if r.get("tflops") else "n/a"

    def ratio(a, b):
        if a and b and a.get("tflops") and b.get("tflops") and a.get("check") != "WRONG":
            return a["tflops"] / b["tflops"]
        return None

    head = ["dtype", "d", "mask", "seqlen", "batch", "heads"] + [LABELS[i] for i in impls] + ["fg/cuDNN", "fg/FA2"]
    lines, r_cudnn, r_fa2 = [], [], []
    order = lambda k: (DTYPES.index(k[0]) if k[0] in DTYPES else 9,) + k[1:]
    for key in sorted(by_cfg, key=order):
        dt, d, causal, s, b, h = key
        got = by_cfg[key]
        fg = got.get("flashgen")
        rc, rf = ratio(fg, got.get("cudnn")), ratio(fg, got.get("fa2"))
        if rc:
            r_cudnn.append(rc)
        if rf:
            r_fa2.append(rf)
        lines.append([dt, str(d), "causal" if causal else "none", str(s), str(b), str(h)]
                     + [cell(got.get(i)) for i in impls]
                     + ["%.2f" % rc if rc else "-", "%.2f" % rf if rf else "-"])
    geo = lambda xs: "%.2f" % math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else "-"
    lines.append(["geomean", "", "", "", "", ""] + [""] * len(impls) + [geo(r_cudnn), geo(r_fa2)])
    widths = [max(len(x) for x in col) for col in zip(head, *lines)]
    fmt = lambda cols: "  ".join(c.rjust(w) if i >= 1 else c.ljust(w) for i, (c, w) in enumerate(zip(cols, widths)))
    out = [fmt(head), "  ".join("-" * w for w in widths)]
    out += [fmt(x) for x in lines]
    which = "backward, 2.5x the forward's FLOPs" if any(r.get("pass") == "bwd" for r in rows) else "forward"
    return "TFLOP/s (%s; WRONG: failed the check, not timed; n/a: refused, see notes)\n" % which + "\n".join(out)


def notes(rows):
    """Why each n/a or WRONG entry is so, one line each."""
    out = []
    for r in rows:
        if (r.get("check") == "WRONG" or not r.get("tflops")) and r.get("note"):
            out.append("%s %s d%d %s s%d: %s" % (LABELS[r["implementation"]], r["dtype"], r["head_dim"],
                                                 "causal" if r["causal"] else "none", r["seqlen"], r["note"]))
        elif r.get("note"):
            out.append("(info) %s %s d%d %s s%d: %s" % (LABELS[r["implementation"]], r["dtype"], r["head_dim"],
                                                        "causal" if r["causal"] else "none", r["seqlen"], r["note"]))
    return out


def redraw(out_dir):
    """--redraw: the charts and the table of an existing result directory (DIR/compare.json, or
    compare.json.gz). Exit status 0, or 1 when it is missing or not this script's format."""
    path = os.path.join(out_dir, "compare.json")
    try:
        old, path = read_json(path)
    except (OSError, ValueError) as e:
        print("compare.py: cannot read %s: %s" % (path, e), file=sys.stderr)
        return 1
    if old.get("schema") != SCHEMA or not old.get("runs") or not old.get("results"):
        print("compare.py: %s is not a compare.py result (schema %s expected)" % (path, SCHEMA), file=sys.stderr)
        return 1
    rows = old["results"]
    paths = draw_charts(out_dir, rows, old["runs"][-1].get("gpu", "unknown GPU"))
    print("compare.py: redrew %s" % ", ".join(os.path.basename(p) for p in paths) if paths else
          "compare.py: no charts drawn", file=sys.stderr)
    print(table(rows))
    return 0
