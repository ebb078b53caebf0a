#!/usr/bin/python3
"""Plots the metrics.jsonl of one or more Lattice run directories into one PNG.

    scripts/plot_metrics.py RUN_DIR [RUN_DIR ...] -o FILE.png [--title T] [--smooth N]

Four panels against the optimizer step, one colour per run (the legend names
each run by its directory): training loss with the validation loss dashed,
learning rate, gradient norm (before clipping) and tokens/s. --smooth N draws
a trailing moving average over N logged points of loss, grad norm and tokens/s
(the learning rate and validation loss are drawn as logged).

metrics.jsonl is read leniently: blank, truncated or non-JSON lines (a run
killed mid-write) are skipped with one warning per file, keys other than the
plotted ones are ignored, null (non-finite) values are left out, and when a
resumed run logged a step twice the later line wins. A run directory without
metrics.jsonl or without any training line is an error, as is one whose every
loss is null with no val_loss (nothing to plot).

Needs matplotlib for the system Python (Debian: python3-matplotlib, installed
by scripts/install-deps.sh); it draws with the Agg backend, no display needed.
Errors print one line on stderr and exit with status 1 (2 for bad usage).
"""

import argparse
import json
import math
import os
import sys
import tempfile

PROG = "plot_metrics.py"


class UsageError(Exception):
    pass


class DataError(Exception):
    pass


class OneLineParser(argparse.ArgumentParser):
    """argparse prints the whole usage on a bad call; keep errors to one line."""

    def error(self, message):
        raise UsageError(f"{message} (see {PROG} --help)")


def number(v):
    """A finite float from a JSON value, or None (null, strings, booleans, inf/nan)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


TRAIN_KEYS = ("loss", "lr", "grad_norm", "tokens_per_s")


def read_run(run_dir):
    """Returns (train, evals, skipped_lines): train maps key -> sorted [(step, value)]."""
    if os.path.isfile(run_dir):
        raise DataError(f"'{run_dir}' is a file: pass the run directory that holds it "
                        f"('{os.path.dirname(run_dir) or '.'}', the log.dir of a Lattice run)")
    if not os.path.isdir(run_dir):
        raise DataError(f"run directory '{run_dir}' does not exist (pass the log.dir of a Lattice run)")
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(path):
        raise DataError(f"'{path}' not found: '{run_dir}' is not a Lattice run directory "
                        "(a run writes metrics.jsonl into its log.dir)")
    train_by_step = {}
    eval_by_step = {}
    bad_lines = []
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:
                    bad_lines.append(lineno)
                    continue
                if not isinstance(rec, dict):
                    bad_lines.append(lineno)
                    continue
                step = rec.get("step")
                if isinstance(step, bool) or not isinstance(step, int):
                    bad_lines.append(lineno)
                    continue
                if "val_loss" in rec:
                    v = number(rec["val_loss"])
                    if v is not None:
                        eval_by_step[step] = v
                if "loss" in rec:
                    # A later line for the same step (a resumed run re-logging it) replaces the earlier one.
                    train_by_step[step] = {k: number(rec.get(k)) for k in TRAIN_KEYS}
    except OSError as e:
        raise DataError(f"cannot read '{path}': {e.strerror}")
    if not train_by_step:
        raise DataError(f"'{path}' holds no training lines (no line with step and loss): "
                        "did the run finish its first step?")
    train = {k: [] for k in TRAIN_KEYS}
    for step in sorted(train_by_step):
        for k, v in train_by_step[step].items():
            if v is not None:
                train[k].append((step, v))
    evals = sorted(eval_by_step.items())
    if not train["loss"] and not evals:
        raise DataError(f"'{path}': every training line's loss is null (not finite: the run diverged, or no step "
                        "had a token to score) and no line has a val_loss: there is no loss to plot")
    return train, evals, bad_lines


def smooth(points, n):
    """Trailing moving average over n points (fewer at the start)."""
    if n <= 1 or not points:
        return points
    out = []
    total = 0.0
    for i, (step, v) in enumerate(points):
        total += v
        if i >= n:
            total -= points[i - n][1]
        out.append((step, total / min(i + 1, n)))
    return out


def labels_for(run_dirs):
    """The directory name of each run; the path as given where two runs share a name."""
    names = [os.path.basename(os.path.normpath(os.path.abspath(d))) for d in run_dirs]
    return [os.path.normpath(d) if names.count(name) > 1 else name for d, name in zip(run_dirs, names)]


def plot(runs, out_path, title, smooth_n):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise DataError(f"matplotlib is not installed for {sys.executable} "
                        "(run scripts/install-deps.sh, or apt-get install python3-matplotlib)")

    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5), sharex=True)
    ax_loss, ax_lr, ax_norm, ax_tps = axes[0][0], axes[0][1], axes[1][0], axes[1][1]
    colors = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
    if len(runs) > len(colors):
        cmap = plt.get_cmap("tab20")
        colors = [cmap(i % 20) for i in range(len(runs))]
    sm = f" (moving average of {smooth_n})" if smooth_n > 1 else ""
    panels = [
        (ax_loss, "loss", "loss" + sm, True),
        (ax_lr, "lr", "learning rate", False),
        (ax_norm, "grad_norm", "gradient norm" + sm, True),
        (ax_tps, "tokens_per_s", "tokens/s" + sm, True),
    ]
    for i, (label, (train, evals)) in enumerate(runs):
        color = colors[i % len(colors)]
        for ax, key, _, smoothed in panels:
            pts = smooth(train[key], smooth_n) if smoothed else train[key]
            if pts:
                ax.plot([s for s, _ in pts], [v for _, v in pts], color=color, linewidth=1.4,
                        marker="." if len(pts) <= 60 else None)
        if evals:
            ax_loss.plot([s for s, _ in evals], [v for _, v in evals], color=color, linestyle="--",
                         linewidth=1.4, marker="o", markersize=3.5)
    for ax, key, name, _ in panels:
        ax.set_title(name)
        ax.grid(True, alpha=0.3)
        if not ax.lines:
            ax.text(0.5, 0.5, f"no '{key}' values in any run", transform=ax.transAxes,
                    ha="center", va="center", color="gray")
    ax_lr.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
    from matplotlib.ticker import MaxNLocator
    ax_norm.xaxis.set_major_locator(MaxNLocator(integer=True))  # shared by all four panels
    for ax in (ax_norm, ax_tps):
        ax.set_xlabel("step")
    # One legend entry per run (its colour) whatever it logged, plus the line styles.
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], color=colors[i % len(colors)], linewidth=2) for i in range(len(runs))]
    names = [label for label, _ in runs]
    if any(evals for _, (_, evals) in runs):
        handles += [Line2D([], [], color="black", linewidth=1.4), Line2D([], [], color="black", linestyle="--", linewidth=1.4)]
        names += ["train loss", "validation loss"]
    ax_loss.legend(handles, names, fontsize="small", loc="upper right")
    fig.suptitle(title)
    fig.tight_layout()

    # Write next to the target and rename, so an interrupted call never leaves half a PNG.
    out_dir = os.path.dirname(os.path.abspath(out_path))
    fd, tmp = tempfile.mkstemp(prefix=".plot_metrics.", suffix=".png", dir=out_dir)
    try:
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, format="png", dpi=100)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out_path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    finally:
        plt.close(fig)


def main(argv):
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0],
                      formatter_class=argparse.RawDescriptionHelpFormatter,
                      epilog="\n\n".join(__doc__.split("\n\n")[2:]))
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="a run directory (log.dir) holding metrics.jsonl")
    p.add_argument("-o", "--output", required=True, metavar="FILE.png", help="the PNG to write (replaced if present)")
    p.add_argument("--title", default=None, help="figure title (default: the run names)")
    p.add_argument("--smooth", type=int, default=1, metavar="N",
                   help="moving average over N logged points for loss, grad norm, tokens/s (default 1: none)")
    args = p.parse_args(argv)
    if args.smooth < 1:
        raise UsageError(f"--smooth {args.smooth}: must be an integer >= 1")
    if not args.output:
        raise UsageError("-o is empty: give the PNG file to write, such as compare.png")
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(out_dir):
        raise DataError(f"output directory '{out_dir}' does not exist (create it or pick another -o)")
    if os.path.isdir(args.output):
        raise DataError(f"-o '{args.output}' is a directory; give a file name such as {args.output.rstrip('/')}/metrics.png")

    labels = labels_for(args.runs)
    runs = []
    for d, label in zip(args.runs, labels):
        train, evals, bad = read_run(d)
        if bad:
            shown = ", ".join(str(n) for n in bad[:5]) + (", ..." if len(bad) > 5 else "")
            print(f"{PROG}: warning: {os.path.join(d, 'metrics.jsonl')}: skipped {len(bad)} line(s) that are "
                  f"not JSON objects with an integer step ({shown})", file=sys.stderr)
        runs.append((label, (train, evals)))
    title = args.title if args.title is not None else "Lattice: " + ", ".join(labels)
    plot(runs, args.output, title, args.smooth)
    n_train = sum(len(t["loss"]) for _, (t, _) in runs)
    n_eval = sum(len(e) for _, (_, e) in runs)
    print(f"{PROG}: wrote {args.output} ({len(runs)} run(s), {n_train} train and {n_eval} eval points)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        sys.exit(2)
    except DataError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        sys.exit(1)
    except OSError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print(f"{PROG}: error: interrupted", file=sys.stderr)
        sys.exit(130)
