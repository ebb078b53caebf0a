#!/usr/bin/env python3
"""Before/after comparison of two bench_kernels binaries on a noisy machine.

Runs BEFORE and AFTER alternately --rounds times (same arguments), so both see
the same load, and prints per kernel the median over the rounds of each run's
median, and before / after (> 1: the change is faster).

  bench/kernels/compare.py BEFORE AFTER [--rounds 3] [-- bench_kernels args...]
"""
import argparse
import re
import statistics
import subprocess
import sys

ROW = re.compile(r"^\| (.+?) \| ([0-9.]+) \| ([0-9.]+) \|$")


def run(binary, args):
    out = subprocess.run([binary] + args, check=True, capture_output=True, text=True).stdout
    return {m.group(1): float(m.group(2)) for m in map(ROW.match, out.splitlines()) if m}


def main():
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser()
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args(argv)
    before, after = {}, {}
    for r in range(a.rounds):
        for binary, acc in ((a.before, before), (a.after, after)):
            for k, v in run(binary, extra).items():
                acc.setdefault(k, []).append(v)
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    print(f"bench_kernels {' '.join(extra)}; median over {a.rounds} alternating rounds of each run's median\n")
    print("| kernel | before ms | after ms | before / after |\n|---|---|---|---|")
    for k in list(before) + [k for k in after if k not in before]:
        b = statistics.median(before[k]) if k in before else None
        f = statistics.median(after[k]) if k in after else None
        ratio = f"{b / f:.2f}" if b and f else ""
        fmt = lambda v: f"{v:.3f}" if v is not None else "n/a"
        print(f"| {k} | {fmt(b)} | {fmt(f)} | {ratio} |")


if __name__ == "__main__":
    main()
