#!/usr/bin/env python3
"""Helper of bench/scaling/run.sh (plain python3, standard library only).

Subcommands:
  wrap OUT_PREFIX -- CMD...   run CMD (one rank), then write OUT_PREFIX.rank<R>.json with the
                              child's peak RSS and CPU seconds (R from OMPI_COMM_WORLD_RANK, 0
                              without mpirun); exits with CMD's status.
  cpu-snap                    print the machine's busy and total CPU seconds (from /proc/stat).
  table MANIFEST --skip N     read the runs listed in MANIFEST (tab-separated, written by run.sh)
                              and print the markdown tables. Each run of a case gives the median
                              over its steps > N; a case run R times (run.sh's RUNS) is reported
                              as the median over its R runs with their range, and every ratio is
                              taken within one run (the case against its baseline of the same
                              repetition) before the median over runs.

A manifest line: name, group, baseline, target, ranks, threads, layout, batch, run_dir,
proc_prefix, wall_s, load_before, load_after, cpu_snap_before, cpu_snap_after, sgemm GFLOP/s
(rank 0's start-up measurement), rep (1-based repetition; 1 when absent).
"""
import json
import os
import resource
import statistics
import subprocess
import sys

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cmd_wrap(argv):
    if len(argv) < 3 or argv[1] != "--":
        sys.exit("usage: scaling.py wrap OUT_PREFIX -- CMD...")
    prefix, cmd = argv[0], argv[2:]
    rc = subprocess.call(cmd)
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    with open(f"{prefix}.rank{rank}.json", "w") as f:
        json.dump({"rank": rank, "maxrss_kb": ru.ru_maxrss, "cpu_s": ru.ru_utime + ru.ru_stime, "rc": rc}, f)
    sys.exit(rc)


def cpu_snap():
    """(busy seconds, total seconds) summed over all CPUs since boot."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal (guest is inside user)
    return (total - idle) / CLK_TCK, total / CLK_TCK


def read_metrics(run_dir, skip):
    rows = []
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return rows
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            if "tokens_per_s" in r and r["step"] > skip:
                rows.append(r)
    return rows


def read_ranks(prefix, ranks):
    out = []
    for r in range(ranks):
        p = f"{prefix}.rank{r}.json"
        if os.path.exists(p):
            with open(p) as f:
                out.append(json.load(f))
    return out


def load_runs(manifest, skip):
    """Every run in the manifest, in its order: a list of dicts (one per run of a case)."""
    out = []
    with open(manifest) as f:
        for line in f:
            if not line.strip():
                continue
            fields = line.rstrip("\n").split("\t")
            if len(fields) == 16:
                fields.append("1")
            (name, group, baseline, target, ranks, threads, layout, batch, run_dir, prefix, wall_s,
             load0, load1, snap0, snap1, sgemm, rep) = fields
            m = read_metrics(run_dir, skip)
            procs = read_ranks(prefix, int(ranks))
            busy0, tot0 = (float(x) for x in snap0.split(","))
            busy1, tot1 = (float(x) for x in snap1.split(","))
            wall = float(wall_s)
            ours = sum(p["cpu_s"] for p in procs)
            run = {
                "name": name, "rep": int(rep), "group": group, "baseline": baseline, "target": target,
                "ranks": int(ranks), "threads": int(threads), "layout": layout, "batch": batch,
                "steps": len(m), "wall_s": wall, "sgemm": sgemm, "load0": load0, "load1": load1,
                "ok": len(m) > 0 and all(p["rc"] == 0 for p in procs) and len(procs) == int(ranks),
                "rss_mib": [p["maxrss_kb"] / 1024 for p in procs],
                # CPU time the rest of the machine used while this run was going, in cores.
                "others_cores": max(0.0, (busy1 - busy0) - ours) / wall if wall > 0 else float("nan"),
                "ours_cores": ours / wall if wall > 0 else float("nan"),
            }
            if m:
                tps = [r["tokens_per_s"] for r in m]
                run["tps"] = statistics.median(tps)
                run["tps_min"], run["tps_max"] = min(tps), max(tps)
                run["step_ms"] = statistics.median(r["step_ms"] for r in m)
                run["peak_mem"] = max(r["peak_mem_bytes"] for r in m)
                run["loss_last"] = m[-1]["loss"]
                run["last_step"] = m[-1]["step"]
                if "bubble" in m[0]:
                    run["bubble"] = statistics.median(r["bubble"] for r in m)
                    run["bubble_theory"] = m[0]["bubble_theory"]
            out.append(run)
    return out


def med_range(xs):
    return statistics.median(xs), min(xs), max(xs)


def aggregate(all_runs):
    """One entry per case: medians over its runs (ranges kept), ratios taken within each repetition."""
    by_name, order = {}, []
    for r in all_runs:
        if r["name"] not in by_name:
            order.append(r["name"])
        by_name.setdefault(r["name"], []).append(r)
    by_key = {(r["name"], r["rep"]): r for r in all_runs}
    cases = {}
    for name in order:
        reps = by_name[name]
        first = reps[0]
        c = {k: first[k] for k in ("name", "group", "baseline", "target", "ranks", "threads", "layout", "batch")}
        c["runs"] = len(reps)
        c["ok"] = all(r["ok"] for r in reps)
        c["load0"], c["load1"] = first["load0"], reps[-1]["load1"]
        c["others_cores"] = max(r["others_cores"] for r in reps)
        sg = [float(r["sgemm"]) for r in reps if r["sgemm"] not in ("", "?")]
        c["sgemm"] = f"{statistics.median(sg):.1f}" if sg else "?"
        c["rss_mib"] = [max(r["rss_mib"][i] for r in reps if i < len(r["rss_mib"]))
                        for i in range(max(len(r["rss_mib"]) for r in reps))]
        if c["ok"]:
            c["tps"], c["tps_min"], c["tps_max"] = med_range([r["tps"] for r in reps])
            c["step_ms"] = statistics.median(r["step_ms"] for r in reps)
            c["peak_mem"] = max(r["peak_mem"] for r in reps)
            c["loss_last"], c["last_step"] = first["loss_last"], first["last_step"]
            # Training is deterministic: every run of a case must end on the same loss.
            c["loss_same"] = all(r["loss_last"] == first["loss_last"] for r in reps)
            if "bubble" in first:
                c["bubble"], c["bubble_min"], c["bubble_max"] = med_range([r["bubble"] for r in reps])
                c["bubble_theory"] = first["bubble_theory"]
        cases[name] = c
    # Ratios within each repetition, then their median.
    for name, c in cases.items():
        for base_name, key in ((c["baseline"], "ratio"), ("single_b8", "ratio_b8"), ("single_b8_t1", "ratio_t1")):
            xs = []
            for r in by_name[name]:
                b = by_key.get((base_name, r["rep"]))
                if r["ok"] and b and b["ok"]:
                    xs.append(r["tps"] / b["tps"])
            if xs and c["ok"]:
                c[key] = med_range(xs)
    return cases, order


def fmt_ratio(case, key="ratio"):
    if key not in case:
        return "n/a"
    m, lo, hi = case[key]
    return f"{m:.2f}" if case["runs"] == 1 else f"{m:.2f} ({lo:.2f}–{hi:.2f})"


def fmt_common(run):
    if not run["ok"]:
        return ["FAILED"] + [""] * 3
    return [f"{run['tps']:.0f} ({run['tps_min']:.0f}–{run['tps_max']:.0f})", f"{run['step_ms']:.0f}",
            f"{run['peak_mem'] / 2**20:.1f}", " / ".join(f"{x:.0f}" for x in run["rss_mib"])]


def fmt_env(run):
    loss = ""
    if run.get("ok"):
        loss = f"{run['loss_last']:.6f} @{run['last_step']}"
        if not run["loss_same"]:
            loss += " (DIFFERS between runs)"
    return [loss, run["sgemm"], f"{run['load0']}→{run['load1']}", f"{run['others_cores']:.2f}"]


def print_table(title, runs, names, pipeline):
    head = ["run", "ranks × threads", "layout", "batch", "tokens/s median (min–max)", "step ms median",
            "ratio vs 1 rank", "target"]
    if pipeline:
        head += ["bubble (measured, max over stages; min–max)", "bubble_theory"]
    head += ["peak_mem_bytes MiB (max over ranks)", "peak RSS MiB per rank", "loss @ last step",
             "sgemm GFLOP/s at start", "load 1-min before→after", "other CPU use (cores)"]
    print(f"\n{title}\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for n in names:
        r = runs[n]
        ratio = "—" if r["baseline"] == "-" else fmt_ratio(r)
        if r["baseline"] != "-":
            ratio += f" (÷ {r['baseline']})"
        row = [r["name"], f"{r['ranks']} × {r['threads']}", r["layout"], r["batch"]]
        common = fmt_common(r)
        row += common[:2] + [ratio, r["target"]]
        if pipeline:
            if r.get("ok") and "bubble" in r:
                b = f"{r['bubble']:.3f}"
                if r["runs"] > 1:
                    b += f" ({r['bubble_min']:.3f}–{r['bubble_max']:.3f})"
                row += [b, f"{r['bubble_theory']:.3f}"]
            else:
                row += ["—", "—"]
        row += common[2:] + fmt_env(r)
        print("| " + " | ".join(row) + " |")


def cmd_table(argv):
    if len(argv) != 3 or argv[1] != "--skip":
        sys.exit("usage: scaling.py table MANIFEST --skip N")
    runs, order = aggregate(load_runs(argv[0], int(argv[2])))
    n_runs = max(r["runs"] for r in runs.values()) if runs else 0
    if n_runs > 1:
        print(f"\nEach case ran {n_runs} times (interleaved: every case once, then again): medians over the runs, "
              "(min–max) over the runs; ratios are taken within a run, then their median.")
    groups = {}
    for n in order:
        groups.setdefault(runs[n]["group"], []).append(n)
    titles = {"tp-dp": "Tensor and data parallelism (same global batch of 8 sequences)",
              "pp": "Pipeline parallelism (same global batch: 8 microbatches of 1 sequence)",
              "pp-deep": "Pipeline parallelism on a 16-layer model (same batch: 8 microbatches of 1 sequence)"}
    for g, names in groups.items():
        print_table(titles.get(g, g), runs, names, pipeline=g.startswith("pp"))
    # One extra line for the pipeline runs: the same comparison against the one-batch baseline.
    extra = [n for n in order if runs[n]["group"] == "pp" and runs[n]["baseline"] != "-"]
    if extra and "single_b8" in runs:
        cells = ", ".join(f"{n} {fmt_ratio(runs[n], 'ratio_b8')}" for n in extra)
        print(f"\nPipeline runs ÷ single_b8 (one rank, one batch of 8): {cells}")
    two = [n for n in order if runs[n]["group"] == "tp-dp" and runs[n]["ranks"] == 2]
    if two and "single_b8_t1" in runs:
        cells = ", ".join(f"{n} {fmt_ratio(runs[n], 'ratio_t1')}" for n in two)
        print(f"\n2-rank runs ÷ single_b8_t1 (one rank, one thread; 2.00 = perfect use of two cores): {cells}")
    bad = [n for n in order if not runs[n]["ok"]]
    if bad:
        print(f"\nFAILED runs: {', '.join(bad)} (see their logs)")
        return 1
    return 0


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sub, argv = sys.argv[1], sys.argv[2:]
    if sub == "wrap":
        cmd_wrap(argv)
    elif sub == "cpu-snap":
        busy, total = cpu_snap()
        print(f"{busy:.2f},{total:.2f}")
    elif sub == "table":
        sys.exit(cmd_table(argv))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
