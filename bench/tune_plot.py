#!/usr/bin/env python3
"""bench/tune_plot.py: draws a tuning database as PNG heat maps of time over the two main tile dimensions.

    python3 bench/tune_plot.py DB.lua --out DIR [--flashgen build/flashgen]
    python3 bench/tune_plot.py --csv FILE.csv --out DIR

The records come from `flashgen tune --show DB.lua --csv` (the database is flashgen's own Lua text; the
CLI reads it through its sandbox, so this script never parses Lua). One PNG per dtype and kernel kind
(`tune-<gpu>-<kind>-<dtype>.png`): a panel per problem class (rows: head_dim and mask, columns: the
sequence-length bucket), each a block_m x block_n grid whose cells are coloured by the class's best time
over the other tile fields (warps, stages) relative to the class's winner (1.00 = the winner; darker is
slower), labelled with that time ratio and TFLOP/s. The winner's cell is outlined in black, the tile
policy's default in white dashes, and tiles that were refused, spilled or wrong are grey, labelled with
the reason's status. Prints the path of each PNG written, and a summary line per class (winner, default,
speedup) on stdout.
"""
import argparse
import csv
import io
import math
import os
import subprocess
import sys
import tempfile


def read_records(args):
    if args.csv:
        with open(args.csv, newline="") as f:
            return list(csv.DictReader(f))
    cmd = [args.flashgen, "tune", "--show", args.db, "--csv"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"tune_plot: {' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    return list(csv.DictReader(io.StringIO(p.stdout)))


def class_key(r):
    return (r["kind"], r["dtype"], int(r["head_dim"]), int(r["causal"]), int(r["gqa"]), int(r["seqlen_q"]),
            int(r["seqlen_k"]), int(r["batch_heads"]))


def tiles(r):
    return f'{r["block_m"]}x{r["block_n"]} w{r["warps"]} s{r["stages"]}'


def save_atomically(fig, path):
    """Writes the figure next to path and renames it over path: a killed run leaves no half PNG."""
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tune_plot-", suffix=".png", dir=d)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=110)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp made it 0600; a plot is as readable as any file written
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("db", nargs="?", help="the tuning database (Lua), read with `flashgen tune --show --csv`")
    ap.add_argument("--csv", help="read the records from this CSV instead")
    ap.add_argument("--out", required=True, help="directory for the PNGs (created if missing)")
    ap.add_argument("--flashgen", default="build/flashgen", help="the flashgen program (default build/flashgen)")
    args = ap.parse_args()
    if bool(args.db) == bool(args.csv):
        ap.error("give either a database file or --csv FILE")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle
    except ImportError as e:
        sys.exit(f"tune_plot: matplotlib is needed to draw ({e}); `flashgen tune --show --csv` gives the figures")
    rows = read_records(args)
    if not rows:
        sys.exit("tune_plot: the database has no records")
    os.makedirs(args.out, exist_ok=True)
    gpu = rows[0]["gpu"]
    classes = {}
    for r in rows:
        classes.setdefault(class_key(r), []).append(r)

    for kind, dtype in sorted({(k[0], k[1]) for k in classes}):
        keys = sorted(k for k in classes if k[0] == kind and k[1] == dtype)
        panel_rows = sorted({(k[2], k[3], k[4]) for k in keys})      # head_dim, causal, gqa
        panel_cols = sorted({(k[5], k[6]) for k in keys})            # seqlen buckets
        fig, axes = plt.subplots(len(panel_rows), len(panel_cols), squeeze=False,
                                 figsize=(3.6 * len(panel_cols) + 1, 2.9 * len(panel_rows) + 1))
        for k in keys:
            recs = classes[k]
            ax = axes[panel_rows.index((k[2], k[3], k[4]))][panel_cols.index((k[5], k[6]))]
            bms = sorted({int(r["block_m"]) for r in recs})
            bns = sorted({int(r["block_n"]) for r in recs})
            ok = [r for r in recs if r["status"] == "ok"]
            best = min(float(r["ms"]) for r in ok) if ok else None
            grid = [[math.nan] * len(bns) for _ in bms]
            label = [[""] * len(bns) for _ in bms]
            for i, bm in enumerate(bms):
                for j, bn in enumerate(bns):
                    cell = [r for r in recs if int(r["block_m"]) == bm and int(r["block_n"]) == bn]
                    good = [r for r in cell if r["status"] == "ok"]
                    if good:
                        r = min(good, key=lambda r: float(r["ms"]))
                        grid[i][j] = float(r["ms"]) / best
                        label[i][j] = f'{grid[i][j]:.2f}\n{float(r["tflops"]):.0f}'
                    elif cell:
                        label[i][j] = "/".join(sorted({r["status"] for r in cell}))
            im = ax.imshow(grid, cmap="magma_r", vmin=1.0, vmax=1.5, aspect="auto")
            for i in range(len(bms)):
                for j in range(len(bns)):
                    v = grid[i][j]
                    ax.text(j, i, label[i][j], ha="center", va="center", fontsize=6,
                            color="white" if v == v and v > 1.25 else "black")
                    if v != v:
                        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, color="0.85", zorder=0))
            for r in recs:
                i, j = bms.index(int(r["block_m"])), bns.index(int(r["block_n"]))
                if r["dispatch"] == "1":
                    ax.add_patch(Rectangle((j - 0.48, i - 0.48), 0.96, 0.96, fill=False, lw=2, ec="black"))
                if r["default"] == "1":
                    ax.add_patch(Rectangle((j - 0.4, i - 0.4), 0.8, 0.8, fill=False, lw=1.2, ec="white", ls="--"))
            ax.set_xticks(range(len(bns)), [str(b) for b in bns], fontsize=7)
            ax.set_yticks(range(len(bms)), [str(b) for b in bms], fontsize=7)
            ax.set_xlabel("block_n", fontsize=7)
            ax.set_ylabel("block_m", fontsize=7)
            mask = "causal" if k[3] else "non-causal"
            gqa = f" gqa {k[4]}" if k[4] != 1 else ""
            ax.set_title(f"d{k[2]} {mask}{gqa}\nsq {k[5]} sk {k[6]} bh {k[7]}", fontsize=7)
            win = min(ok, key=lambda r: float(r["ms"])) if ok else None
            dflt = [r for r in recs if r["default"] == "1" and r["status"] == "ok"]
            if win:
                line = f"{kind} {dtype} d{k[2]} {mask} sq {k[5]}: winner {tiles(win)} {float(win['tflops']):.1f} TFLOP/s"
                if dflt:
                    line += (f"; default {tiles(dflt[0])} {float(dflt[0]['tflops']):.1f} TFLOP/s; "
                             f"tuned/default {float(dflt[0]['ms']) / float(win['ms']):.3f}x")
                print(line)
        for row in axes:
            for ax in row:
                if not ax.has_data():
                    ax.axis("off")
        fig.suptitle(f"flashgen tune: {gpu}, {kind} {dtype}: time / winner's time (label: ratio, TFLOP/s); "
                     "black box = winner, white dashes = tile-policy default", fontsize=9)
        fig.colorbar(im, ax=axes, shrink=0.6, label="time / winner's time")
        safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in gpu)
        path = os.path.join(args.out, f"tune-{safe}-{kind}-{dtype}.png")
        save_atomically(fig, path)
        plt.close(fig)
        print(path)


if __name__ == "__main__":
    main()
