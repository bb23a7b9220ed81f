#!/usr/bin/env python3
"""scripts/report.py reads run and simulate files together and writes tidy report.csv and report.json.

  tests/report_tidy_output.py MINIMLLM MPIEXEC WORK_DIR

Makes run files (quickstart, 2 ranks, 4 steps, --policy all) and a simulate file (quickstart, 64 virtual
ranks, 3 steps, every policy), reports on all of them at once, and reads report.csv back with the csv
module: one row per (kind, policy, ranks); every numeric column parses; a simulate row's step median is
the median of its /simulation/<policy> makespan_s x 1e3 and a run row's the median of /steps
step_seconds[1:] x 1e3 (both read here with h5py, by field name); report.json has a schema_version and
the same rows.

Then the writes: a second report into the same --out replaces report.py's own files; a symbolic link planted
at report.md (to a file outside) or a dangling one at report.csv is refused, with or without --overwrite:
exit 2, one line naming it, the link and its target untouched, nothing written; a regular file report.py
did not write is refused without --overwrite and replaced with it. Exit 77 (skipped) without h5py or
matplotlib.
"""
import csv
import importlib
import json
import math
import os
import shutil
import subprocess
import sys

try:
    import h5py
    import numpy as np
    importlib.import_module("matplotlib")  # report.py needs it
except ImportError as e:
    print(f"{e}: skipped")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DECK = os.path.join(ROOT, "inputs", "quickstart.yaml")
REPORT = os.path.join(ROOT, "scripts", "report.py")
INTEGER_COLUMNS = ("ranks", "global_batch", "steps", "repetitions")
FLOAT_COLUMNS = ("step_median_ms", "step_min_ms", "step_max_ms", "tokens_per_second", "speedup_over_static",
                 "mfu", "peak_gflops_per_rank", "fom_tokens_per_second")
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message)


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def run(command):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.stderr.write(f"{' '.join(command)}: exit {result.returncode}\n{result.stdout}{result.stderr}")
        sys.exit(1)
    return result


def make_inputs(minimllm, mpiexec, work):
    run([mpiexec, "-n", "2", minimllm, "run", DECK, "--steps", "4", "--policy", "all",
         "--out", os.path.join(work, "run.h5")])
    run([minimllm, "simulate", DECK, "--ranks", "64", "--steps", "3", "--global-batch", "256",
         "--planning-ms", "1", "--policy", "all", "--out", os.path.join(work, "sim.h5")])
    run_files = sorted(os.path.join(work, n) for n in os.listdir(work) if n.startswith("run-") and n.endswith(".h5"))
    return run_files, os.path.join(work, "sim.h5")


def parse(row):
    """The CSV row with its numeric columns as numbers (None for empty cells)."""
    parsed = dict(row)
    for name in INTEGER_COLUMNS:
        parsed[name] = int(row[name]) if row[name] else None
    for name in FLOAT_COLUMNS:
        parsed[name] = float(row[name]) if row[name] else None
    return parsed


def check_numbers(row, where):
    for name in INTEGER_COLUMNS + ("step_median_ms", "step_min_ms", "step_max_ms", "mfu", "peak_gflops_per_rank"):
        check(row[name] is not None and math.isfinite(row[name]), f"{where}: {name} = {row[name]!r}")
    check(row["step_min_ms"] <= row["step_median_ms"] <= row["step_max_ms"],
          f"{where}: step min/median/max out of order")
    check(row["spread_over"] in ("steps", "repetitions"), f"{where}: spread_over = {row['spread_over']!r}")


def check_simulate_rows(rows, sim_path):
    with h5py.File(sim_path, "r") as f:
        policies = list(f["simulation"])
        ranks = int(f["run"].attrs["virtual_ranks"])
        for policy in policies:
            table = f["simulation"][policy]
            match = [r for r in rows if r["kind"] == "simulate" and r["policy"] == policy]
            check(len(match) == 1, f"simulate {policy}: {len(match)} rows, expected 1")
            if len(match) != 1:
                continue
            row = match[0]
            expected = 1e3 * float(np.median(table["makespan_s"]))
            check(close(row["step_median_ms"], expected),
                  f"simulate {policy}: step_median_ms {row['step_median_ms']} != median makespan_s x 1e3 {expected}")
            check(row["ranks"] == ranks, f"simulate {policy}: ranks {row['ranks']} != virtual_ranks {ranks}")
            fits = table.attrs["fits"]
            fits = fits.decode() if isinstance(fits, bytes) else str(fits)
            check(row["fits"] == fits, f"simulate {policy}: fits {row['fits']!r} != {fits!r}")
            check(row["tokens_per_second"] is None, f"simulate {policy}: tokens_per_second should be empty")
    static = [r for r in rows if r["kind"] == "simulate" and r["policy"] == "static"]
    check(static and close(static[0]["speedup_over_static"], 1.0), "simulate static: speed-up over itself != 1")
    return len(policies)


def check_run_rows(rows, run_files):
    for path in run_files:
        with h5py.File(path, "r") as f:
            policy = f["run"].attrs["policy"]
            policy = policy.decode() if isinstance(policy, bytes) else str(policy)
            ranks = int(f["run"].attrs["ranks"])
            expected = 1e3 * float(np.median(f["steps"]["step_seconds"][1:]))
            tokens = float(np.median(f["steps"]["tokens_per_second"][1:]))
        match = [r for r in rows if r["kind"] == "run" and r["policy"] == policy and r["ranks"] == ranks]
        check(len(match) == 1, f"run {policy}: {len(match)} rows, expected 1")
        if len(match) != 1:
            continue
        row = match[0]
        check(close(row["step_median_ms"], expected),
              f"run {policy}: step_median_ms {row['step_median_ms']} != median step_seconds[1:] x 1e3 {expected}")
        check(close(row["tokens_per_second"], tokens), f"run {policy}: tokens_per_second {row['tokens_per_second']}")
        check(row["repetitions"] == 1 and row["steps"] == 4, f"run {policy}: repetitions/steps {row}")


def check_json(path, header, csv_rows):
    with open(path, encoding="utf-8") as f:
        document = json.load(f)
    check(isinstance(document.get("schema_version"), int), "report.json: no integer schema_version")
    check([c["name"] for c in document.get("columns", [])] == header, "report.json: columns differ from the CSV's")
    check(all({"name", "unit", "meaning"} <= set(c) for c in document.get("columns", [])),
          "report.json: a column without name, unit or meaning")
    rows = document.get("rows", [])
    check(len(rows) == len(csv_rows), f"report.json: {len(rows)} rows, report.csv {len(csv_rows)}")
    for number, (row, expected) in enumerate(zip(rows, csv_rows)):
        as_csv = {k: ("" if v is None else str(v)) for k, v in row.items()}
        text = dict(expected)
        for name in FLOAT_COLUMNS:  # numbers compare as numbers, not as their printed form
            if row.get(name) is not None and text[name]:
                check(close(float(row[name]), float(text[name])), f"report.json row {number}: {name} differs")
                as_csv[name] = text[name]
        check(as_csv == text, f"report.json row {number} differs from report.csv's: {as_csv} vs {text}")


def report(inputs, out, *extra):
    """report.py's exit code and stderr lines."""
    result = subprocess.run([sys.executable, REPORT, *inputs, "--out", out, *extra], capture_output=True, text=True)
    return result.returncode, result.stderr.splitlines()


def refused(what, rc, lines, name, reason):
    """A refusal: exit 2 and one line naming the file and why."""
    check(rc == 2 and len(lines) == 1 and name in lines[0] and reason in lines[0],
          f"{what}: expected exit 2 and one line naming {name} ({reason}); got exit {rc}: {lines}")


def listing(directory):
    return sorted(os.listdir(directory))


def check_safe_writes(inputs, out, work):
    """report.py never follows a planted link nor replaces a file it did not write."""
    before = {name: os.path.getmtime(os.path.join(out, name)) for name in os.listdir(out)}
    rc, lines = report(inputs, out)
    check(rc == 0, f"a second report into {out}: exit {rc} ({lines}); its own files should be replaced")
    check(listing(out) == sorted(before), f"a second report into {out}: files {listing(out)}, before {sorted(before)}")

    victim = os.path.join(work, "victim.txt")
    with open(victim, "w", encoding="utf-8") as f:
        f.write("not the report's\n")
    planted = os.path.join(work, "planted")
    os.makedirs(planted)
    link = os.path.join(planted, "report.md")
    os.symlink(victim, link)
    for extra in ((), ("--overwrite",)):
        what = f"a link at report.md{' with --overwrite' if extra else ''}"
        rc, lines = report(inputs, planted, *extra)
        refused(what, rc, lines, link, "is a symbolic link")
        with open(victim, encoding="utf-8") as f:
            check(f.read() == "not the report's\n", f"{what}: the link's target was changed")
        check(os.path.islink(link) and os.readlink(link) == victim, f"{what}: the link itself was changed")
        check(listing(planted) == ["report.md"], f"{what}: files were written beside it: {listing(planted)}")

    dangling = os.path.join(work, "dangling")
    os.makedirs(dangling)
    target = os.path.join(work, "never-created.csv")
    os.symlink(target, os.path.join(dangling, "report.csv"))
    rc, lines = report(inputs, dangling, "--overwrite")
    refused("a dangling link at report.csv", rc, lines, "report.csv", "is a symbolic link")
    check(not os.path.lexists(target), "a dangling link at report.csv: its target was created")

    foreign = os.path.join(work, "foreign")
    os.makedirs(foreign)
    theirs = os.path.join(foreign, "report.json")
    with open(theirs, "w", encoding="utf-8") as f:
        f.write("{}\n")
    rc, lines = report(inputs, foreign)
    refused("a file report.py did not write", rc, lines, theirs, "--overwrite")
    with open(theirs, encoding="utf-8") as f:
        check(f.read() == "{}\n", "a file report.py did not write: replaced without --overwrite")
    rc, lines = report(inputs, foreign, "--overwrite")
    check(rc == 0 and os.path.getsize(theirs) > 3, f"--overwrite: exit {rc} ({lines}); report.json not replaced")


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    minimllm, mpiexec, work = argv
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    run_files, sim_path = make_inputs(minimllm, mpiexec, work)
    check(len(run_files) >= 2, f"--policy all wrote {len(run_files)} run files")
    out = os.path.join(work, "report")
    run([sys.executable, REPORT, *run_files, sim_path, "--out", out])
    with open(os.path.join(out, "report.csv"), newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        header, text_rows = reader.fieldnames, list(reader)
    rows = [parse(r) for r in text_rows]
    keys = [(r["kind"], r["policy"], r["ranks"]) for r in rows]
    check(len(set(keys)) == len(keys), f"report.csv: a (kind, policy, ranks) group in more than one row: {keys}")
    for row in rows:
        check_numbers(row, f"report.csv {row['kind']} {row['policy']}")
    check_run_rows(rows, run_files)
    n_simulated = check_simulate_rows(rows, sim_path)
    check(len(rows) == len(run_files) + n_simulated,
          f"report.csv: {len(rows)} rows, expected {len(run_files)} run + {n_simulated} simulate")
    check_json(os.path.join(out, "report.json"), header, text_rows)
    with open(os.path.join(out, "report.md"), encoding="utf-8") as f:
        markdown = f.read()
    check("## Simulations" in markdown and "| FOM tokens/s | verdict |" in markdown,
          "report.md: no Simulations section or no FOM and verdict columns")
    check_safe_writes([*run_files, sim_path], out, work)
    print(f"{len(rows)} rows checked ({len(run_files)} run, {n_simulated} simulate); "
          f"{'FAILED: ' + str(len(failures)) if failures else 'all passed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
