#!/usr/bin/env python3
"""The table of bench/gpu/run.sh, from the metrics.jsonl of its `lattice train` runs.

For each model: medians over the logged steps after the first --skip of step_ms, tokens_per_s
and mfu (metrics.jsonl, src/booster/metrics.h); achieved TFLOP/s per GPU = mfu * --peak (the
runtime.peak_flops the run was given), and MFU only when that peak is a real one (--peak-source
table or PEAK_TFLOPS). Every figure comes from the runs' own lines; a run without a step after
--skip is an error, never a row. With --plans, each model's `lattice plan` report (DIR/MODEL.plan.txt)
gives the predicted peak per rank next to the measured one (both the largest over the ranks): how
close `lattice plan` comes on the GPU (n/a where the report is missing or has no memory table).
Beside them, the CUDA memory pool's high watermark (device_pool_peak_bytes): the measured peak
plus the backend's scratch (cuBLASLt and cuDNN workspaces, 16-bit scratch), which neither the
allocator's peak nor the plan counts (n/a for a run that did not log it).

usage: summarize.py --runs DIR --skip N --peak FLOPS --peak-source table|PEAK_TFLOPS|unknown
                    --precision P --ranks N [--plans DIR] MODEL...
"""
import argparse
import json
import re
import statistics
import sys

UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
# A row of the report's memory table: rank, stage, tp, dp, param count, then five sizes and the total.
MEMORY_ROW = re.compile(r"^\s+\d+\s+\d+\s+\d+\s+\d+\s+[\d,]+(?:\s+[\d.]+ (?:B|KiB|MiB|GiB)){6}\s*$")


def planned_peak(path):
    """The largest predicted total over the ranks of a `lattice plan` report, in bytes; None without one."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    totals = []
    for line in lines:
        if MEMORY_ROW.match(line):
            value, unit = line.split()[-2:]
            totals.append(float(value) * UNITS[unit])
    return max(totals) if totals else None


def train_rows(path):
    with open(path) as f:
        return [r for r in (json.loads(line) for line in f if line.strip()) if "tokens_per_s" in r]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", required=True)
    ap.add_argument("--skip", type=int, required=True)
    ap.add_argument("--peak", type=float, required=True)
    ap.add_argument("--peak-source", required=True, choices=["table", "PEAK_TFLOPS", "unknown"])
    ap.add_argument("--precision", required=True)
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--plans")
    ap.add_argument("models", nargs="+")
    a = ap.parse_args()
    known_peak = a.peak_source != "unknown"
    mfu_head = f"MFU (bf16 dense {a.peak / 1e12:g} TFLOP/s, {a.peak_source})" if known_peak else "MFU"
    print(f"\n| model | precision | GPUs | tokens/step | steps | step ms | tokens/s | TFLOP/s per GPU | {mfu_head} "
          "| loss first -> last | peak mem GiB | pool peak GiB | lattice plan GiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    ok = True
    for m in a.models:
        try:
            rows = train_rows(f"{a.runs}/{m}/metrics.jsonl")
        except OSError as e:
            print(f"summarize.py: {m}: {e}", file=sys.stderr)
            ok = False
            continue
        timed = [r for r in rows if r["step"] > a.skip]
        if not timed:
            print(f"summarize.py: {m}: no logged step after step {a.skip} in {a.runs}/{m}/metrics.jsonl",
                  file=sys.stderr)
            ok = False
            continue
        med = {k: statistics.median(r[k] for r in timed) for k in ("step_ms", "tokens_per_s", "mfu")}
        tflops = med["mfu"] * a.peak / 1e12
        mfu = f"{100 * med['mfu']:.1f}%" if known_peak else "n/a (peak unknown)"
        mem = max(r["peak_mem_bytes"] for r in rows) / 2**30
        pools = [r["device_pool_peak_bytes"] for r in rows if "device_pool_peak_bytes" in r]
        pool = f"{max(pools) / 2**30:.1f}" if pools else "n/a"
        planned = planned_peak(f"{a.plans}/{m}.plan.txt") if a.plans else None
        plan = f"{planned / 2**30:.1f}" if planned is not None else "n/a"
        print(f"| {m} | {a.precision} | {a.ranks} | {timed[0]['tokens']} | {len(timed)} | {med['step_ms']:.1f} "
              f"| {med['tokens_per_s']:.0f} | {tflops:.1f} | {mfu} | {rows[0]['loss']:.3f} -> {rows[-1]['loss']:.3f} "
              f"| {mem:.1f} | {pool} | {plan} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
