#!/usr/bin/env python3
"""bench/gpu/summarize.py on the CPU: its table from made-up metrics.jsonl lines, and the
`lattice plan` column from a report of known totals and from a real report of the built
binary (so a change of the report's memory table that the parser no longer reads fails here,
not on the first GPU).

usage: test_gpu_summarize.py SOURCE_DIR LATTICE_BINARY
"""
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile

source, lattice = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(source, "bench", "gpu"))
import summarize  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}")


with tempfile.TemporaryDirectory() as tmp:
    # Three logged steps; the medians are over the steps after --skip 1.
    os.makedirs(f"{tmp}/runs/m")
    with open(f"{tmp}/runs/m/metrics.jsonl", "w") as f:
        for step, ms, mem in ((1, 900.0, 3 * 2**30), (2, 100.0, 5 * 2**30), (3, 120.0, 4 * 2**30)):
            f.write(json.dumps({"step": step, "tokens": 4096, "step_ms": ms, "tokens_per_s": 4096 / ms * 1e3,
                                "mfu": 0.25, "loss": 5.0 - step, "peak_mem_bytes": mem,
                                "device_pool_peak_bytes": mem + 2**30 * (3 if step == 2 else 1)}) + "\n")
            f.write(json.dumps({"step": step, "eval_loss": 1.0}) + "\n")  # not a training line
    os.makedirs(f"{tmp}/plans")
    with open(f"{tmp}/plans/m.plan.txt", "w") as f:
        f.write("memory per rank: predicted allocator peak of a training step (runtime.precision bf16, ...)\n"
                "  rank  stage  tp  dp    param count      params       grads   optimizer  activations        data"
                "       total\n"
                "  0         0   0   0  1,100,048,384    6.15 GiB    4.10 GiB    8.20 GiB     3.25 GiB   128.0 KiB"
                "   21.69 GiB\n"
                "  1         1   0   0        512,000    1.0 MiB    1.0 MiB    2.0 MiB     30.5 GiB   128.0 KiB"
                "   30.51 GiB\n"
                "activations at the peak, per stage (contexts kept per chunk; workspace; boundary buffers)\n"
                "  stage 0: contexts 3.25 GiB (1 kept), workspace 1.0 MiB, 0 boundary buffer(s) 0 B\n")
    check(abs(summarize.planned_peak(f"{tmp}/plans/m.plan.txt") - 30.51 * 2**30) < 1, "the largest rank total")
    check(summarize.planned_peak(f"{tmp}/plans/none.plan.txt") is None, "a missing report gives None")

    def table(*extra):
        out = io.StringIO()
        sys.argv = ["summarize.py", "--runs", f"{tmp}/runs", "--skip", "1", "--peak", "1e15", "--peak-source",
                    "table", "--precision", "bf16", "--ranks", "2", *extra, "m"]
        with contextlib.redirect_stdout(out):
            rc = summarize.main()
        return rc, out.getvalue()

    rc, text = table("--plans", f"{tmp}/plans")
    row = [line for line in text.splitlines() if line.startswith("| m |")]
    check(rc == 0 and len(row) == 1, f"one row, exit 0 (got {rc}): {text}")
    if row:
        cells = [c.strip() for c in row[0].strip("|").split("|")]
        check(cells[5] == "110.0", f"median step ms over steps 2-3: {cells[5]}")
        check(cells[8] == "25.0%", f"MFU: {cells[8]}")
        check(cells[10] == "5.0", f"measured peak, the largest logged: {cells[10]}")
        check(cells[11] == "8.0", f"pool peak, the largest logged: {cells[11]}")
        check(cells[12] == "30.5", f"planned peak, the largest rank: {cells[12]}")
    rc, text = table()
    check(text.rstrip().endswith("| n/a |"), f"no --plans: n/a: {text}")

    # A run that logged no pool peak (a CPU run's lines): n/a in that column.
    os.makedirs(f"{tmp}/runs/c")
    with open(f"{tmp}/runs/c/metrics.jsonl", "w") as f:
        for step in (1, 2):
            f.write(json.dumps({"step": step, "tokens": 64, "step_ms": 10.0, "tokens_per_s": 6400.0, "mfu": 0.1,
                                "loss": 3.0, "peak_mem_bytes": 2**30}) + "\n")
    out = io.StringIO()
    sys.argv = ["summarize.py", "--runs", f"{tmp}/runs", "--skip", "1", "--peak", "1e15", "--peak-source", "table",
                "--precision", "fp32", "--ranks", "1", "c"]
    with contextlib.redirect_stdout(out):
        rc = summarize.main()
    row = [line for line in out.getvalue().splitlines() if line.startswith("| c |")]
    check(rc == 0 and len(row) == 1 and [c.strip() for c in row[0].strip("|").split("|")][11] == "n/a",
          f"no device_pool_peak_bytes: n/a: {out.getvalue()}")

    # A real report of the built binary: the parser finds every rank's row.
    report = subprocess.run([lattice, "plan", os.path.join(source, "configs", "gpt2-tiny.yaml"), "--world", "2",
                             "parallel.pp=2"], capture_output=True, text=True, check=True).stdout
    with open(f"{tmp}/plans/real.plan.txt", "w") as f:
        f.write(report)
    rows = [line for line in report.splitlines() if summarize.MEMORY_ROW.match(line)]
    check(len(rows) == 2, f"two rank rows in lattice plan's report, found {len(rows)}:\n{report}")
    got = summarize.planned_peak(f"{tmp}/plans/real.plan.txt")
    check(got is not None and got > 0, f"a positive planned peak from the real report: {got}")

print("PASS" if not failures else f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
