"""Checks a Lattice run's TensorBoard event files against its metrics.jsonl,
reading them with TensorBoard's own code (the `tensorboard` pip package).

    python tensorboard_read.py RUN_DIR [--allow-missing KEY,KEY] [--require-tag TAG ...]

Run it with a Python that has tensorboard installed (scripts/ci/tensorboard-check.sh
makes one). RUN_DIR is a run's log.dir, holding metrics.jsonl and tb/.

What must hold:
  * every record of every tb/*tfevents* file passes TensorBoard's record reader
    (length and masked CRC32C of header and payload), the first event is the
    file_version "brain.Event:2", wall times are plausible and non-decreasing;
  * one scalar event per metrics.jsonl line (each logged step writes one event);
  * for every numeric key of metrics.jsonl (train lines and eval lines) the
    scalar tag it maps to (train/K or perf/K for a train key K, val/X for an
    eval key val_X; see TAGS) holds exactly the steps at which metrics.jsonl
    has that key -- none missing, none extra, none twice -- with the same value
    up to float32 rounding plus the rounding of the printed JSON number;
    a null (non-finite) value in JSON must be non-finite in TensorBoard;
  * no tag exists that no metrics key maps to, and only scalars are present.
A numeric key with no tag is an error unless listed in --allow-missing (keys the
writer is known not to export); a listed key that does have a tag is checked all
the same. Prints one summary line on success; on failure one line per problem
(at most 20) and exit status 1. Bad usage: one line, exit status 2.
"""

import argparse
import decimal
import glob
import json
import math
import os
import sys
import time

PROG = "tensorboard_read.py"

# metrics.jsonl key -> TensorBoard tag, as src/booster/booster.cpp writes them.
TAGS = {
    "loss": "train/loss",
    "lr": "train/lr",
    "grad_norm": "train/grad_norm",
    "tokens_per_s": "perf/tokens_per_s",
    "step_ms": "perf/step_ms",
    "mfu": "perf/mfu",
    "peak_mem_bytes": "perf/peak_mem_bytes",
    "val_loss": "val/loss",
}
# Significant digits metrics.jsonl prints floats with (src/booster/metrics.cpp,
# "{:.9g}" by default, fewer for timings); 'g' drops trailing zeros, so the
# printed text alone does not tell the precision. Unknown keys: 4 (loosest in use).
SIG_DIGITS = {"loss": 9, "lr": 9, "grad_norm": 9, "val_loss": 9,
              "tokens_per_s": 6, "step_ms": 6, "mfu": 6,
              "grad_sync_ms": 4, "bubble": 4, "bubble_theory": 4}
DEFAULT_SIG_DIGITS = 4
# Keys printed as integers (exact). Any other key is a float even where the
# text has no decimal point ("{:.6g}" prints 1374.9994 as 1375).
INT_KEYS = {"tokens", "peak_mem_bytes", "skipped"}
MAX_PROBLEMS = 20


class Usage(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise Usage(f"{message} (see {PROG} --help)")


class JsonInt(int):
    """A JSON number written without a fraction or exponent."""


def load_metrics(path):
    """Returns [(lineno, step, kind, {key: Decimal|JsonInt|None})] for each line."""
    out = []
    with open(path, "r", encoding="utf-8") as f:
        for lineno, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                rec = json.loads(text, parse_float=decimal.Decimal, parse_int=JsonInt)
            except ValueError as e:
                raise Usage(f"{path}:{lineno}: not valid JSON ({e}); a finished run writes whole lines")
            step = rec.get("step") if isinstance(rec, dict) else None
            if not isinstance(step, JsonInt):
                raise Usage(f"{path}:{lineno}: no integer 'step'")
            kind = "eval" if "val_loss" in rec else "train"
            values = {}
            for k, v in rec.items():
                if k == "step" or isinstance(v, bool):
                    continue
                if v is None or isinstance(v, (decimal.Decimal, JsonInt)):
                    values[k] = v
            out.append((lineno, int(step), kind, values))
    return out


def tolerance(key, v):
    """Largest |tensorboard - json| a correct writer can produce for this JSON value."""
    x = abs(float(v))
    f32 = x * 2.0 ** -24 + 1e-45  # round-to-nearest float32 (+ the smallest subnormal)
    if key in INT_KEYS or x == 0.0:
        return f32
    sig = SIG_DIGITS.get(key, DEFAULT_SIG_DIGITS)
    digits = len(decimal.Decimal(v).normalize().as_tuple().digits)
    sig = max(sig, digits)  # printed at least as precisely as it shows
    last_digit = math.floor(math.log10(x)) - (sig - 1)
    # The float32 TensorBoard got may round away from the double that JSON rounded.
    return 0.5 * 10.0 ** last_digit * (1 + 1e-9) + f32


def tag_for(key, kind, present):
    if key in TAGS:
        return TAGS[key]
    # Keys the writer may learn later, named by the same convention.
    candidates = [f"val/{key[4:]}"] if kind == "eval" and key.startswith("val_") else [f"train/{key}", f"perf/{key}"]
    found = [t for t in candidates if t in present]
    return found[0] if found else candidates[0]


def check_records(files, problems):
    """Reads every record with TensorBoard's own TFRecord reader; returns the number of scalar events."""
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow

    scalar_events = 0
    now = time.time()
    for path in files:
        reader = pywrap_tensorflow.PyRecordReader_New(path)
        n = 0
        last_wall = 0.0
        while True:
            try:
                reader.GetNext()
            except errors.OutOfRangeError:
                break
            except errors.DataLossError as e:
                problems.append(f"{path}: record {n}: {e.message}")
                break
            ev = event_pb2.Event.FromString(reader.record())
            if n == 0 and ev.file_version != "brain.Event:2":
                problems.append(f"{path}: first event is not file_version 'brain.Event:2' (got {ev!r:.80})")
            if not (1.4e9 < ev.wall_time < now + 3600):
                problems.append(f"{path}: record {n}: implausible wall_time {ev.wall_time}")
            if ev.wall_time < last_wall:
                problems.append(f"{path}: record {n}: wall_time goes back ({ev.wall_time} < {last_wall})")
            last_wall = ev.wall_time
            if ev.HasField("summary"):
                scalar_events += 1
                for v in ev.summary.value:
                    if v.WhichOneof("value") != "simple_value":
                        problems.append(f"{path}: record {n}: tag '{v.tag}' is not a simple scalar")
            n += 1
        if n == 0:
            problems.append(f"{path}: no records")
    return scalar_events


def main(argv):
    p = Parser(prog=PROG, description=__doc__.split("\n\n")[0],
               formatter_class=argparse.RawDescriptionHelpFormatter,
               epilog="\n\n".join(__doc__.split("\n\n")[2:]))
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--allow-missing", default="", metavar="KEY,KEY",
                   help="metrics keys that may lack a TensorBoard tag")
    p.add_argument("--require-tag", action="append", default=[], metavar="TAG",
                   help="fail unless this tag has at least one point (repeatable)")
    args = p.parse_args(argv)
    allow_missing = {k for k in args.allow_missing.split(",") if k}

    metrics_path = os.path.join(args.run_dir, "metrics.jsonl")
    tb_dir = os.path.join(args.run_dir, "tb")
    if not os.path.isfile(metrics_path):
        raise Usage(f"'{metrics_path}' not found: pass the log.dir of a finished Lattice run")
    if not os.path.isdir(tb_dir):
        raise Usage(f"'{tb_dir}' not found: was the run started with log.tensorboard=true?")
    files = sorted(glob.glob(os.path.join(tb_dir, "*tfevents*")))
    if not files:
        raise Usage(f"'{tb_dir}' holds no *tfevents* file")
    lines = load_metrics(metrics_path)
    if not lines:
        raise Usage(f"'{metrics_path}' is empty")

    try:
        import tensorboard
        from tensorboard.backend.event_processing import event_accumulator as ea_mod
    except ImportError as e:
        raise Usage(f"cannot import tensorboard with {sys.executable} ({e}); run it from scripts/ci/tensorboard-check.sh")

    problems = []
    scalar_events = check_records(files, problems)
    if scalar_events != len(lines):
        problems.append(f"{len(files)} event file(s) hold {scalar_events} scalar events but {metrics_path} has "
                        f"{len(lines)} lines (one event per logged line expected)")

    acc = ea_mod.EventAccumulator(tb_dir, size_guidance={ea_mod.SCALARS: 0}, purge_orphaned_data=False)
    acc.Reload()
    tags = acc.Tags()
    scalar_tags = set(tags.get(ea_mod.SCALARS, []))
    for kind_name, entries in tags.items():
        if kind_name != ea_mod.SCALARS and isinstance(entries, list) and entries:
            problems.append(f"unexpected non-scalar {kind_name} in {tb_dir}: {', '.join(map(str, entries))}")
    if acc.file_version != 2.0:
        problems.append(f"EventAccumulator read file_version {acc.file_version}, expected 2")

    # Expected points per tag from metrics.jsonl.
    expected = {}  # tag -> {step: (key, value, lineno)}
    for lineno, step, kind, values in lines:
        for key, v in values.items():
            tag = tag_for(key, kind, scalar_tags)
            if tag not in scalar_tags and key in allow_missing:
                continue
            per_step = expected.setdefault(tag, {})
            if step in per_step:
                problems.append(f"{metrics_path}:{lineno}: '{key}' logged twice for step {step} "
                                f"(also line {per_step[step][2]}); cannot compare a re-logged step")
            per_step[step] = (key, v, lineno)

    points = 0
    for tag in sorted(expected):
        want = expected[tag]
        key = next(iter(want.values()))[0]
        if tag not in scalar_tags:
            problems.append(f"metrics key '{key}' ({len(want)} value(s), first at step {min(want)}) has no "
                            f"TensorBoard tag '{tag}'")
            continue
        got = {}
        for ev in acc.Scalars(tag):
            if ev.step in got:
                problems.append(f"tag '{tag}': step {ev.step} written twice")
            got[ev.step] = ev.value
        points += len(got)
        missing = sorted(set(want) - set(got))
        extra = sorted(set(got) - set(want))
        if missing:
            problems.append(f"tag '{tag}': steps {missing[:10]} of metrics key '{key}' missing in TensorBoard")
        if extra:
            problems.append(f"tag '{tag}': steps {extra[:10]} in TensorBoard but no '{key}' in metrics.jsonl there")
        for step in sorted(set(want) & set(got)):
            _, v, lineno = want[step]
            tb = got[step]
            if v is None:
                if math.isfinite(tb):
                    problems.append(f"tag '{tag}' step {step}: metrics.jsonl:{lineno} has null (non-finite) "
                                    f"but TensorBoard has {tb!r}")
                continue
            tol = tolerance(key, v)
            if not (abs(tb - float(v)) <= tol):
                problems.append(f"tag '{tag}' step {step}: TensorBoard {tb!r} != metrics.jsonl:{lineno} "
                                f"'{key}' {v} (|diff| {abs(tb - float(v)):.3g} > tolerance {tol:.3g})")
    unexpected = sorted(scalar_tags - set(expected))
    if unexpected:
        problems.append(f"tag(s) {unexpected} in TensorBoard match no numeric key of {metrics_path}")
    for tag in args.require_tag:
        if tag not in scalar_tags or not acc.Scalars(tag):
            problems.append(f"required tag '{tag}' has no points")

    if problems:
        for line in problems[:MAX_PROBLEMS]:
            print(f"{PROG}: MISMATCH: {line}", file=sys.stderr)
        if len(problems) > MAX_PROBLEMS:
            print(f"{PROG}: ... and {len(problems) - MAX_PROBLEMS} more", file=sys.stderr)
        return 1
    keys = sorted({k for _, _, _, values in lines for k in values})
    not_exported = sorted(k for k in keys if k in allow_missing and tag_for(k, "train", scalar_tags) not in scalar_tags
                          and tag_for(k, "eval", scalar_tags) not in scalar_tags)
    print(f"{PROG}: OK: {args.run_dir}: {len(expected)} tags, {points} points, {len(lines)} metrics lines "
          f"({sum(1 for l in lines if l[2] == 'eval')} eval), {len(files)} event file(s), tensorboard "
          f"{tensorboard.__version__}; allowed unexported keys: {', '.join(not_exported) or 'none'}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Usage as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        sys.exit(2)
