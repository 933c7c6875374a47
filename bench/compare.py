#!/usr/bin/env python3
"""bench/compare.py: flashgen's forward pass against PyTorch's peers, by the benchmark
protocol of docs/performance.md, in one process on the same inputs.

Shapes: hidden 2048 (heads = 2048 / head_dim), 16384 tokens (batch = 16384 / seqlen), layout
[batch, seqlen, heads, head_dim]; head_dim 64/128/256, causal and not, bf16 and fp16, seqlen 512..16384.
Implementations: flashgen (python/flashgen), torch SDPA under sdpa_kernel(CUDNN_ATTENTION) and under
sdpa_kernel(FLASH_ATTENTION) (FlashAttention-2), given [b, h, s, d] transposed views of the same memory,
and with --flex FlexAttention (torch.compile(flex_attention), a causal BlockMask).

Per config: inputs are rotated among enough copies to exceed twice the L2 cache; flashgen's output is
checked first (the tolerance rule of docs/numerics.md: max|out - ref32| <= 2 * max|ref_lowp - ref32| + 1e-5 on a slice, ref32 =
fp32 math on upcast inputs, ref_lowp = SDPA FlashAttention-2's output; no NaN/Inf anywhere; LSE within
5e-4 + 5e-5|ref|) and a failing config is reported WRONG, not timed as a speed. Timing: warm-up calls
(compiles excluded: flashgen is prepared and FlexAttention compiled before them), then CUDA events around
each of --iters calls, enqueued behind a GPU sleep so the host's launch cost never shows in a kernel's
time; the median is reported. FLOPs = 4 * b * h * sq * sk * d, halved when causal.

Output (--out, default bench/results/<date>-<gpu>/): compare.csv, compare.json (every figure, the
environment and the check details) and fwd_d<head_dim>_<dtype>.png, merged with what earlier parts of a
sweep wrote to the same directory, so the sweep can run in pieces (--head-dims, --seqlens, --causal).
The table is printed last. Exit status: 0, or 1 when a config failed the check, 2 without PyTorch/CUDA.

--bwd: the backward pass instead (head dims 64 and 128 unless --head-dims says others; flashgen's
backward takes every multiple of 8 up to 256, as its forward). flashgen's
attention_backward against SDPA's cuDNN and FlashAttention-2 backward (torch.autograd.grad through the
backend's forward, retained, so only the backward kernels run in the timed calls); each from its own
forward's outputs. Check: dQ, dK, dV against fp32 autograd through attention math on a slice with the
3x rule (max|grad - ref32| <= 3 * max|ref_lowp - ref32| + 1e-5 per gradient, ref_lowp = FA2's gradients),
no NaN/Inf. FLOPs = 2.5 x the forward's. Files as above (bwd_d<head_dim>_<dtype>.png).

--redraw DIR: no benchmark; redraws the charts and reprints the table of DIR/compare.json (no GPU or
PyTorch needed).

The parts, each imported by its name (bench/ is on sys.path, the script's own folder): this file parses
the options, lists the configs and runs the sweep (main); compare_protocol.py holds the grid's constants
and the FLOPs, compare_provenance.py what a run records of where it ran, compare_bench.py the forward's
Bench, compare_bwd.py the backward's BwdBench, and compare_files.py the JSON and CSV files, the charts,
the table and --redraw.
"""

import argparse
import datetime
import os
import re
import sys
import time

import compare_protocol
from compare_bench import Bench
from compare_bwd import BwdBench
from compare_files import draw_charts, load_previous, merge, notes, redraw, table, write_files
from compare_protocol import DTYPES, HEAD_DIMS, IMPLS, LABELS, QUICK, SEQLENS, TOTAL_TOKENS, flops
from compare_provenance import REPO


# ====================================================================== arguments


def int_list(text):
    """argparse type: "64,128" -> (64, 128)."""
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not a comma-separated list of integers" % text)


def dtype_list(text):
    """argparse type: "bf16,fp16" -> ("bf16", "fp16"), each checked against DTYPES."""
    items = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in items if x not in DTYPES]
    if bad or not items:
        raise argparse.ArgumentTypeError("dtypes must be from %s, got %r" % (",".join(DTYPES), text))
    return items


def parse_args(argv):
    """The options, with the sweep selection filled from --quick or the full protocol; exits on bad input."""
    p = argparse.ArgumentParser(
        description="flashgen forward vs torch SDPA (cuDNN, FlashAttention-2) and FlexAttention, "
                    "by the benchmark protocol of docs/performance.md.",
        epilog="The default sweep is 3 head dims x 2 masks x 6 seqlens x 2 dtypes = 72 configs. "
               "Run parts with --head-dims/--seqlens/--causal/--dtypes into one --out directory: "
               "each part is merged with the results already there.")
    p.add_argument("--dtypes", type=dtype_list, default=None, help="comma list of bf16,fp16 (default both)")
    p.add_argument("--head-dims", type=int_list, default=None, help="comma list (default 64,128,256)")
    p.add_argument("--seqlens", type=int_list, default=None,
                   help="comma list (default 512,1024,2048,4096,8192,16384); batch = %d / seqlen" % TOTAL_TOKENS)
    p.add_argument("--causal", choices=("0", "1", "both"), default=None, help="mask: 0 none, 1 causal, both (default)")
    p.add_argument("--iters", type=int, default=20, help="timed calls per implementation; the median is reported (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls before timing, after any compile (default 5)")
    p.add_argument("--hidden", type=int, default=compare_protocol.HIDDEN,
                   help="hidden size (heads = hidden / head_dim; default %d, the protocol's: 1536 lets head_dim 192 "
                        "run, off the protocol's shapes)" % compare_protocol.HIDDEN)
    p.add_argument("--flex", action="store_true", help="also time FlexAttention (torch.compile; ~2-4 s of compile per config)")
    p.add_argument("--quick", action="store_true",
                   help="smoke test: bf16, head_dim 64,128, seqlen 1024,4096, both masks (8 configs), "
                        "unless the selection flags say otherwise")
    p.add_argument("--out", default=None, help="output directory (default bench/results/<date>-<gpu>/)")
    p.add_argument("--device", type=int, default=0, help="CUDA device ordinal (default 0)")
    p.add_argument("--fresh", action="store_true", help="do not merge with results already in --out")
    p.add_argument("--bwd", action="store_true",
                   help="the backward pass (default head dims 64,128; default out: bench/results/<date>-<gpu>-bwd/)")
    p.add_argument("--deterministic", action="store_true",
                   help="with --bwd: flashgen in its deterministic mode (bitwise-repeatable gradients), to measure "
                        "its cost")
    p.add_argument("--redraw", metavar="DIR",
                   help="no benchmark: redraw the charts and reprint the table of DIR/compare.json (no GPU or "
                        "PyTorch needed), e.g. where a run's PNGs were lost")
    p.add_argument("--fg-log", default="warn", choices=("none", "error", "warn", "info", "debug"),
                   help="flashgen's log level (info logs each JIT compile with its time); default warn")
    a = p.parse_args(argv)
    base = QUICK if a.quick else {"dtypes": DTYPES, "head_dims": (64, 128) if a.bwd else HEAD_DIMS,
                                  "seqlens": SEQLENS, "causal": "both"}
    for key in ("dtypes", "head_dims", "seqlens", "causal"):
        if getattr(a, key) is None:
            setattr(a, key, base[key])
    if a.deterministic and not a.bwd:
        p.error("--deterministic is the backward's mode: it needs --bwd")
    if a.iters < 1 or a.warmup < 0:
        p.error("--iters must be >= 1 and --warmup >= 0")
    for s in a.seqlens:
        if s <= 0 or TOTAL_TOKENS % s:
            p.error("seqlen %d does not divide the %d tokens of the protocol" % (s, TOTAL_TOKENS))
    if a.hidden <= 0:
        p.error("--hidden must be positive")
    compare_protocol.HIDDEN = a.hidden
    for d in a.head_dims:
        if d <= 0 or compare_protocol.HIDDEN % d:
            p.error("head_dim %d does not divide the hidden size %d (--hidden)" % (d, compare_protocol.HIDDEN))
    return a


def configs(a):
    """The sweep in the order that compiles least: dtype, head_dim, mask, then seqlen."""
    masks = {"0": (False,), "1": (True,), "both": (False, True)}[a.causal]
    out = []
    for dt in a.dtypes:
        for d in a.head_dims:
            for c in masks:
                for s in a.seqlens:
                    out.append({"dtype": dt, "head_dim": d, "causal": c, "seqlen": s,
                                "batch": TOTAL_TOKENS // s, "heads": compare_protocol.HIDDEN // d,
                                "pass": "bwd" if a.bwd else "fwd"})
    return out


# ====================================================================== main


def slug(text):
    """"NVIDIA H200" -> "nvidia-h200", for the default output directory."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "gpu"


def main(argv=None):
    """Runs the sweep; the exit status is documented at the top of the file."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.redraw:
        return redraw(args.redraw)
    try:
        import torch
    except ImportError:
        print("compare.py: PyTorch is not installed; it runs the peers and the references", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("compare.py: no CUDA device visible to PyTorch", file=sys.stderr)
        return 2
    bench = BwdBench(args) if args.bwd else Bench(args)
    env = bench.environment()
    gpu = env["gpu"]
    out_dir = args.out or os.path.join(REPO, "bench", "results", "%s-%s%s" % (
        datetime.date.today().isoformat(), slug(gpu), "-bwd" if args.bwd else ""))
    old_rows, old_checks, runs = ([], [], []) if args.fresh else load_previous(os.path.join(out_dir, "compare.json"), gpu)
    run_id = len(runs)
    env["run"] = run_id
    runs = runs + [env]
    print("compare.py: %s, driver %s, torch %s, cuDNN %s, flashgen %s (%s), commit %s" % (
        gpu, env["driver"], env["torch"], env["cudnn"], env["flashgen_version"], env["flashgen_library"],
        env["git_commit"]), file=sys.stderr)
    if bench.fg is None:
        print("compare.py: flashgen is n/a in this run: %s" % bench.fg_error, file=sys.stderr)
    if args.iters < 20:
        print("compare.py: note: --iters %d is below the protocol's 20" % args.iters, file=sys.stderr)
    if bench.cycles_per_ms is None:
        print("compare.py: note: torch.cuda._sleep is missing; host launch cost may show at small sizes", file=sys.stderr)

    cfgs = configs(args)
    new_rows, new_checks = [], []
    t_start = time.time()
    for n, cfg in enumerate(cfgs, 1):
        t0 = time.time()
        try:
            rows, check = bench.run(cfg)
        except Exception as e:  # out of memory or a peer crashing: record and go on
            torch.cuda.empty_cache()
            why = "config failed: %s: %s" % (type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else "")
            rows = [dict(cfg, implementation=i, flops=flops(cfg), median_ms=None, tflops=None, check="n/a", note=why)
                    for i in IMPLS if i != "flex" or args.flex]
            check = dict(cfg, status="n/a", why=why)
        torch.cuda.empty_cache()  # the config's inputs are gone; give their blocks back before the next size
        for r in rows:
            r["run"] = run_id
        check["run"] = run_id
        new_rows += rows
        new_checks.append(check)
        got = {r["implementation"]: r for r in rows}
        print("[%d/%d] %s d%d %s s%d b%d h%d: %s  (check %s, %.1f s)" % (
            n, len(cfgs), cfg["dtype"], cfg["head_dim"], "causal" if cfg["causal"] else "none", cfg["seqlen"],
            cfg["batch"], cfg["heads"],
            "  ".join("%s %s" % (LABELS[i], "WRONG" if got[i].get("check") == "WRONG" else
                                 "%.1f" % got[i]["tflops"] if got[i].get("tflops") else "n/a") for i in got),
            check.get("status"), time.time() - t0), file=sys.stderr, flush=True)
        # written after every config, so a part cut short by a time limit keeps what it measured
        rows_all, checks_all = merge(old_rows, old_checks, new_rows, new_checks)
        write_files(out_dir, rows_all, checks_all, runs)
    rows_all, checks_all = merge(old_rows, old_checks, new_rows, new_checks)
    charts = draw_charts(out_dir, rows_all, gpu)
    print("compare.py: %d configs in %.0f s; wrote %s, %s%s" % (
        len(cfgs), time.time() - t_start, os.path.join(out_dir, "compare.csv"), os.path.join(out_dir, "compare.json"),
        "".join(", " + os.path.basename(p) for p in charts)))
    merged_runs = sorted({r.get("run") for r in rows_all})
    if len(merged_runs) > 1:
        print("compare.py: the table merges runs %s in %s (see compare.json runs[])" % (merged_runs, out_dir))
    for line in notes(rows_all):
        print("note: " + line)
    print()
    print(table(rows_all))
    return 1 if any(c.get("status") == "WRONG" for c in new_checks) else 0


if __name__ == "__main__":
    sys.exit(main())
