#!/usr/bin/env python3
"""Medians over runs of bench/train_step/runs.sh (plain python3, standard library only).

    summarize_runs.py LOG...   (the runN.fp32.log and runN.bf16.log files of runs.sh)

Reads the RESULT lines of each log, takes every ratio within one run (the fp32 and bf16 logs of
run N are one run), and prints a markdown table: the median over the runs and the (min–max)
range of each figure.
"""
import re
import statistics
import sys


def results(path):
    out = []
    with open(path) as f:
        for line in f:
            if line.startswith("RESULT "):
                out.append(dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv))
    return out


def matmul_rate(x):
    """The run's measured matmul rate: named by the dtype it ran in (sgemm_GFLOPs for fp32,
    bf16_gemm_GFLOPs for bf16); logs from before that naming call every rate sgemm_GFLOPs."""
    name = "sgemm_GFLOPs" if x["precision"] == "fp32" else f"{x['precision']}_gemm_GFLOPs"
    return float(x.get(name, x.get("sgemm_GFLOPs")))


def cell(xs, fmt):
    if not xs:
        return "—"
    m = statistics.median(xs)
    return fmt.format(m) if len(xs) == 1 else f"{fmt.format(m)} ({fmt.format(min(xs))}–{fmt.format(max(xs))})"


def main(paths):
    runs = {}
    for p in paths:
        m = re.search(r"run(\d+)\.(fp32|bf16)\.log$", p)
        if not m:
            sys.exit(f"summarize_runs.py: {p}: expected a name runN.fp32.log or runN.bf16.log")
        runs.setdefault(int(m.group(1)), {})[m.group(2)] = results(p)
    rows = {}  # (system, config, precision) -> {"ms": [...], ...}
    ratios = {"torch": {}, "sgemm": {}, "bf16": []}
    for n in sorted(runs):
        r = runs[n]
        lat = {(x["config"], x["precision"]): x for k in ("fp32", "bf16") for x in r.get(k, [])
               if x.get("system") == "lattice"}
        torch = {x["config"]: x for x in r.get("fp32", []) if x.get("system") == "pytorch" and "median_ms" in x}
        for (cfg, prec), x in lat.items():
            rows.setdefault(("Lattice", cfg, prec), []).append(x)
            if prec == "fp32":
                ratios["sgemm"].setdefault(cfg, []).append(
                    float(x["achieved_GFLOPs"]) / matmul_rate(x))
                if cfg in torch:
                    ratios["torch"].setdefault(cfg, []).append(
                        float(torch[cfg]["median_ms"]) / float(x["median_ms"]))
        for cfg, x in torch.items():
            rows.setdefault(("PyTorch", cfg, "fp32"), []).append(x)
        if ("small", "fp32") in lat and ("small", "bf16") in lat:
            ratios["bf16"].append(float(lat[("small", "fp32")]["median_ms"]) / float(lat[("small", "bf16")]["median_ms"]))
    print(f"\n{len(runs)} runs; medians over the runs (min–max over the runs); each run's own figure is the "
          "median over its timed steps.\n")
    print("| system | shape | precision | ms/step | tokens/s | GFLOP/s | matmul rate in the same run (GFLOP/s) |")
    print("|---|---|---|---|---|---|---|")
    for (system, cfg, prec), xs in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0] != "PyTorch", kv[0][2])):
        rate = cell([matmul_rate(x) for x in xs], "{:.1f}") if system == "Lattice" else ""
        print(f"| {system} | {cfg} | {prec} | {cell([float(x['median_ms']) for x in xs], '{:.0f}')} | "
              f"{cell([float(x['tokens_per_s']) for x in xs], '{:.0f}')} | "
              f"{cell([float(x['achieved_GFLOPs']) for x in xs], '{:.1f}')} | {rate} |")
    print("\n| ratio (within each run) | median (min–max) |\n|---|---|")
    for cfg, xs in sorted(ratios["torch"].items()):
        print(f"| Lattice fp32 / PyTorch tokens/s, {cfg} | {cell(xs, '{:.2f}x')} |")
    for cfg, xs in sorted(ratios["sgemm"].items()):
        print(f"| Lattice fp32 GFLOP/s / sgemm GFLOP/s, {cfg} | {cell([100 * x for x in xs], '{:.0f}%')} |")
    print(f"| Lattice bf16 / Lattice fp32 tokens/s, small | {cell(ratios['bf16'], '{:.2f}x')} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
