#!/usr/bin/python3
"""Report on minimllm runs and simulations: markdown, tidy CSV and JSON, PNG plots from HDF5 files.

Inputs are HDF5 files written by `minimllm run` or `minimllm simulate` (/run mode = simulate), of
schema_version 1 to 3, and/or directories. A directory holding a manifest.txt is a scaling study
written by slurm/sweep.sh: its *.h5 files (run files only) are matched to the manifest's jobs, and the
manifest says whether the study is weak or strong scaling. Any other directory contributes the *.h5
files directly inside it.

Outputs, in --out (default: report; created if missing), each written to a temporary file and renamed:
  report.md                one row per run file, the tidy rows below, then sections for the plots
  report.csv, report.json  tidy: one row per kind x deck x policy x ranks x global batch x steps
                           (files of the same group are repetitions); columns below
  step-breakdown.png       time per phase on the critical path (each step's slowest rank, /ranks/*)
  imbalance-<run>.png      per-rank time before the gradient all-reduce, steps x ranks (/ranks/*),
                           for every run on more than one rank; one colour range for all of them
  policies.png             runs of the same workload under different /run policy (when there are)
  simulations.png          simulated step time and speed-up over static per policy (simulate files)
  scaling-<study>.png      weak or strong scaling efficiency and step time (log-log, with the ideal),
                           with the spread over repetitions (for each study directory, or the loose
                           run files with --scaling)
  .report.sha256           the sha256 of every file report.py wrote there (sha256sum's format)
  .report.lock             held while report.py writes the directory (a second one waits up to 120 s)

Safe in a directory others can write: an existing file is replaced only if report.py wrote it there and
it is unchanged since (.report.sha256, and owned by this user), or with --overwrite; a symbolic link, FIFO,
device or directory at an output name is refused even with --overwrite and never followed, and so is a
link at --out itself. Every name is checked before the first file is written; a refused one is exit 2
with one line naming it, and nothing is written. Each file goes to a temporary file created exclusively
beside it (O_CREAT | O_EXCL | O_NOFOLLOW), then is renamed over its name (the rules of minimllm's own
outputs, docs/RUNNING.md, "Inputs and outputs on a shared file system").

One definition of each figure: a run's step time, tokens/s and MFU are medians over its timed steps,
the steps after step 0, the warm-up (as the program's own summary; a run of one step uses that step),
computed once and used by every output. A simulated step has no warm-up: a simulation's step time is
the median of /simulation/<policy> makespan_s over all its steps. Over repeated files, the median of
the files' medians. Efficiency relative to the fewest ranks N0, with t(N) that median at N ranks:
  strong: E(N) = N0 t(N0) / (N t(N))     weak: E(N) = t(N0) / t(N)

Exit codes: 0 report written; 2 invalid input (one line naming the file or option and what would be
valid); 1 missing Python modules or another failure. Use Debian's /usr/bin/python3 (python3-h5py,
python3-matplotlib), or scripts/report.sh, which finds an interpreter that has them.
"""

import argparse
import csv
import datetime
import errno
import fcntl
import hashlib
import io
import json
import os
import re
import secrets
import stat
import sys
import textwrap
import time

try:
    import h5py
    import numpy as np
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullLocator
except ImportError as e:  # one line, and what to install
    sys.stderr.write(f"report.py: error: {e} (on Debian: apt-get install python3-h5py python3-matplotlib; "
                     f"use /usr/bin/python3 or scripts/report.sh)\n")
    sys.exit(1)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import h5tables  # noqa: E402 - reads /simulation/<policy> by field name, both schema versions

MANIFEST = "manifest.txt"
REQUIRED_FIELDS = ("step", "loss", "samples", "step_seconds", "tokens_per_second", "mfu", "data_seconds",
                   "encoder_seconds", "boundary_seconds", "llm_seconds", "kv_exchange_seconds",
                   "grad_sync_seconds", "optimizer_seconds", "planning_seconds", "predicted_seconds")
# The phases of a step, as /ranks/<name>_seconds tables. kv_exchange is part of llm_seconds, so the
# breakdown shows llm - kv_exchange as "llm (compute)" and does not count it twice.
PHASES = ("data", "planning", "encoder", "boundary", "llm (compute)", "kv_exchange", "grad_sync", "optimizer")
POLICY_ORDER = ("static", "naive", "megatron_dcp", "orch", "dhp", "dhp_search", "flexsp", "disagg", "deck")


def policy_order(policy):
    """The program's order (static first: the base of speed-ups), then any other."""
    return (POLICY_ORDER.index(policy) if policy in POLICY_ORDER else len(POLICY_ORDER), policy)



PHASE_COLORS = ("#9e9e9e", "#c7a0e0", "#4c9be8", "#f2b134", "#2e7d32", "#8bc34a", "#e4572e", "#6d4c41")


class InputError(Exception):
    """Invalid input: the message names the file or option and what would be valid."""


# ----------------------------------------------------------------------------------------------------
# Reading


def timed(values):
    """The timed steps of a run: every step after step 0 (the warm-up), or the only step."""
    return values[1:] if len(values) > 1 else values


def open_metrics(path):
    """A Run or a Simulation, as the file's /run mode says."""
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise InputError(f"{path}: cannot open as HDF5 ({first_line(e)}); expected a file written by "
                         f"`minimllm run` or `minimllm simulate`")
    with f:
        if "run" not in f:
            raise InputError(f"{path}: no /run group; expected a file written by `minimllm run` or "
                             f"`minimllm simulate`")
        attrs = {k: decode(v) for k, v in f["run"].attrs.items()}
        schema = int(decode(f.attrs.get("schema_version", 1)))
        if attrs.get("mode") == "simulate":
            return Simulation(path, f, attrs, schema)
        return Run(path, f, attrs, schema)


def open_run(path):
    """A `minimllm run` file (study directories hold only those)."""
    metrics = open_metrics(path)
    if not isinstance(metrics, Run):
        raise InputError(f"{path}: a `minimllm simulate` file in a study directory; a study holds the "
                         f"files of its `minimllm run` jobs only (pass simulate files on their own)")
    return metrics


def file_label(path):
    return os.path.splitext(os.path.basename(path))[0]


class Run:
    """One `minimllm run` file: /run attributes, the /steps table, the /ranks tables."""

    kind = "run"

    def __init__(self, path, f, attrs, schema):
        self.path = path
        self.attrs = attrs
        self.schema_version = schema
        self.study = None  # the Study this file belongs to, if any
        self.job = None    # its manifest job line (dict), if any
        if "steps" not in f:
            raise InputError(f"{path}: no /steps dataset; expected a file written by `minimllm run`")
        steps = f["steps"]
        names = steps.dtype.names or ()
        missing = [n for n in REQUIRED_FIELDS if n not in names]
        if missing:
            raise InputError(f"{path}: /steps lacks field(s) {', '.join(missing)}; expected the "
                             f"schema of docs/HDF5.md (schema_version {schema})")
        self.steps = steps[:]
        self.ranks_tables = {name: dset[:] for name, dset in f["ranks"].items()} if "ranks" in f else {}
        if len(self.steps) == 0:
            raise InputError(f"{path}: /steps has no rows (the run ended before its first step)")
        for key in ("ranks", "policy"):
            if key not in self.attrs:
                raise InputError(f"{path}: /run has no attribute '{key}'; expected a file written by "
                                 f"`minimllm run`")
        self.ranks = int(self.attrs["ranks"])
        self.policy = str(self.attrs["policy"])
        self.name = str(self.attrs.get("name", "?"))
        self.label = file_label(path)
        # <job name>-<job id>[-restart<K>][-<policy>].h5, as slurm/minimllm.sbatch names its output
        match = re.search(r"-(\d+)(?:-restart\d+)?(?:-[a-z]+)?$", self.label)
        self.file_job_id = match.group(1) if match else None
        # /run slurm_job_id is "" outside Slurm (and absent from files of older versions)
        self.job_id = str(self.attrs.get("slurm_job_id") or "") or self.file_job_id
        self.rated = timed(self.steps)

    @property
    def nodes(self):
        """Nodes from the study manifest, else /run nodes (distinct host names), else None."""
        if self.job and "nodes" in self.job:
            return int(self.job["nodes"])
        return int(self.attrs["nodes"]) if "nodes" in self.attrs else None

    @property
    def rep(self):
        return int(self.job["rep"]) if self.job and "rep" in self.job else None

    def median(self, field):
        """The one definition of a run's figure: the median over the timed steps."""
        return float(np.median(self.rated[field]))

    def step_ms(self):
        return 1e3 * self.median("step_seconds")

    def timed_step_ms(self):
        return 1e3 * np.asarray(self.rated["step_seconds"], dtype=float)

    def global_batch(self):
        values = np.unique(self.steps["samples"])
        return int(values[0]) if len(values) == 1 else None  # None: varies (not expected)

    def fom(self):
        """/run fom_tokens_per_second (benchmark runs), else None."""
        value = self.attrs.get("fom_tokens_per_second")
        return float(value) if value is not None else None

    def verdict(self):
        return str(self.attrs.get("verdict") or "")

    def peak(self):
        """(peak GFLOP/s per rank the MFU is against, where it came from)."""
        value = self.attrs.get("peak_gflops_per_rank")
        return (float(value) if value is not None else None), str(self.attrs.get("peak_source", ""))

    def pre_sync(self):
        """Per step and rank, time before the gradient all-reduce (step - grad_sync - optimizer):
        the all-reduce waits for the slowest rank, so imbalance shows here. None without /ranks."""
        t = self.ranks_tables
        if not all(k in t for k in ("step_seconds", "grad_sync_seconds", "optimizer_seconds")):
            return None
        return t["step_seconds"] - t["grad_sync_seconds"] - t["optimizer_seconds"]

    def load_ratio(self):
        """pre_sync() / its mean over ranks, timed steps x ranks; None with one rank or no /ranks."""
        work = self.pre_sync()
        if work is None or self.ranks < 2 or work.shape[0] != len(self.steps):
            return None
        work = timed(work)
        mean = work.mean(axis=1, keepdims=True)
        return np.divide(work, mean, out=np.ones_like(work), where=mean > 0)

    def critical_path(self):
        """Median over the timed steps of each phase of the step's slowest rank (the one that set the
        step time), in seconds, in PHASES order. None without /ranks. Medians of phases need not add
        up to the median step time; the plot marks that separately."""
        t = self.ranks_tables
        names = ("data", "planning", "encoder", "boundary", "llm", "kv_exchange", "grad_sync", "optimizer")
        if not all(f"{n}_seconds" in t for n in names + ("step",)) or t["step_seconds"].shape[0] != len(self.steps):
            return None
        step = timed(t["step_seconds"])
        slowest = step.argmax(axis=1)
        rows = np.arange(len(slowest))
        phase = {n: timed(t[f"{n}_seconds"])[rows, slowest] for n in names}
        phase["llm"] = phase["llm"] - phase["kv_exchange"]
        return np.array([np.median(phase[n]) for n in names])

    def imbalance(self):
        """Median over the timed steps of max/mean over ranks of pre_sync(); None if not applicable."""
        ratio = self.load_ratio()
        return float(np.median(ratio.max(axis=1))) if ratio is not None else None


class Simulation:
    """One `minimllm simulate` file: /run attributes and a /simulation/<policy> table per policy,
    read by field name (scripts/h5tables.py; schema_version 1 to 3)."""

    kind = "simulate"

    def __init__(self, path, f, attrs, schema):
        self.path = path
        self.attrs = attrs
        self.schema_version = schema
        self.label = file_label(path)
        self.name = str(attrs.get("name", "?"))
        for key in ("virtual_ranks", "steps", "global_batch"):
            if key not in attrs:
                raise InputError(f"{path}: /run has no attribute '{key}'; expected a file written by "
                                 f"`minimllm simulate`")
        if "simulation" not in f or not len(f["simulation"]):
            raise InputError(f"{path}: no /simulation/<policy> table; expected a file written by "
                             f"`minimllm simulate`")
        self.ranks = int(attrs["virtual_ranks"])
        self.steps = int(attrs["steps"])
        self.global_batch = int(attrs["global_batch"])
        listed = [p.strip() for p in str(attrs.get("policies", "")).split(",") if p.strip()]
        stored = list(f["simulation"])
        self.policies = {}
        for policy in [p for p in listed if p in stored] + sorted(set(stored) - set(listed), key=policy_order):
            self.policies[policy] = self._read_policy(f, policy)

    def _read_policy(self, f, policy):
        table = f"/simulation/{policy}"
        try:
            makespan = h5tables.column(f, table, "makespan_s")
        except h5tables.MissingColumn as e:
            raise InputError(str(e))
        table_attrs = {k: decode(v) for k, v in f[table].attrs.items()}
        mfu = table_attrs.get("mfu")
        return {"makespan_ms": 1e3 * makespan,
                "fits": str(table_attrs.get("fits", "")),
                "mfu": float(mfu) if mfu not in (None, "") else None}

    def peak(self):
        value = self.attrs.get("machine_peak_gflops")
        return (float(value) if value is not None else None), str(self.attrs.get("machine_peak_source", ""))


class Study:
    """A directory written by slurm/sweep.sh: manifest.txt (key=value lines and job= lines) and
    one HDF5 file per job, named <job name>-<job id>.h5."""

    def __init__(self, directory):
        self.directory = directory
        self.name = os.path.basename(os.path.normpath(directory))
        self.meta, self.jobs = read_manifest(os.path.join(directory, MANIFEST))
        self.kind = self.meta.get("kind")
        self.runs = []
        self.missing = []  # manifest jobs without a file


def read_manifest(path):
    meta, jobs = {}, []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            if "=" not in line:
                raise InputError(f"{path}: line {number}: '{line}': expected key=value or "
                                 f"job=ID ranks=R nodes=N rep=K global_batch=B")
            if line.startswith("job="):
                job = {}
                for token in line.split():
                    key, sep, value = token.partition("=")
                    if not sep:
                        raise InputError(f"{path}: line {number}: '{token}': expected key=value")
                    job[key] = value
                for key in ("job", "ranks", "nodes", "rep"):
                    if not re.fullmatch(r"\d+", job.get(key, "")):
                        raise InputError(f"{path}: line {number}: job line needs a non-negative integer "
                                         f"{key}= (got '{job.get(key, '')}')")
                jobs.append(job)
            else:
                key, _, value = line.partition("=")
                meta[key] = value
    if meta.get("kind") not in ("weak", "strong"):
        raise InputError(f"{path}: kind = '{meta.get('kind', '')}': must be weak or strong")
    return meta, jobs


def decode(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.generic):
        return value.item()
    return value


def first_line(exc):
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def load_inputs(paths, scaling, allow_missing):
    """Returns (runs, simulations, studies, problems). Loose run files (and plain directories) form one
    study when --scaling is given; simulate files are never part of a study."""
    runs, studies, loose, problems = [], [], [], []
    for path in paths:
        if os.path.isdir(path):
            h5_files = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".h5"))
            if os.path.isfile(os.path.join(path, MANIFEST)):
                study = Study(path)
                if scaling and scaling != study.kind:
                    raise InputError(f"--scaling {scaling}: {path}/{MANIFEST} says kind={study.kind}; "
                                     f"leave --scaling out for study directories or make them agree")
                by_id = {}
                for file in h5_files:
                    run = open_run(file)
                    if run.file_job_id is None:
                        raise InputError(f"{file}: name does not end in -<job id>.h5, so it cannot be "
                                         f"matched to {path}/{MANIFEST}")
                    if run.file_job_id in by_id:  # a requeued job: <name>-<id>.h5 and <name>-<id>-restart<K>.h5
                        raise InputError(f"{file}: job {run.file_job_id} also wrote {by_id[run.file_job_id].path} "
                                         f"(requeued?); move the file that should not be reported out of {path}")
                    by_id[run.file_job_id] = run
                known = {job["job"] for job in study.jobs}
                for job_id, run in by_id.items():
                    if job_id not in known:
                        raise InputError(f"{run.path}: job {job_id} is not in {path}/{MANIFEST}; a study "
                                         f"directory holds only its own jobs' files")
                for job in study.jobs:
                    run = by_id.get(job["job"])
                    if run is None:
                        study.missing.append(job)
                        continue
                    run.study, run.job = study, job
                    check_against_manifest(run, study)
                    study.runs.append(run)
                if study.missing:
                    ids = ", ".join(f"{j['job']} (ranks {j['ranks']}, rep {j['rep']})" for j in study.missing)
                    message = f"{path}: no HDF5 file for job(s) {ids}"
                    if not allow_missing:
                        raise InputError(message + "; see the job logs there, or pass --allow-missing")
                    problems.append(message)
                study.runs.sort(key=lambda r: (r.ranks, r.rep))
                if not study.runs:
                    raise InputError(f"{path}: none of the {len(study.jobs)} jobs in {MANIFEST} has a file")
                studies.append(study)
                runs.extend(study.runs)
            else:
                if not h5_files:
                    raise InputError(f"{path}: directory holds no *.h5 file and no {MANIFEST}")
                loose.extend(open_metrics(f) for f in h5_files)
        elif os.path.isfile(path):
            loose.append(open_metrics(path))
        else:
            raise InputError(f"{path}: no such file or directory (expected an HDF5 file or a directory)")
    simulations = [m for m in loose if isinstance(m, Simulation)]
    loose = [m for m in loose if isinstance(m, Run)]
    runs.extend(loose)
    if scaling and loose:
        study = Study.__new__(Study)
        study.directory, study.name, study.kind = None, "files", scaling
        study.meta, study.jobs, study.missing, study.runs = {}, [], [], loose
        studies.append(study)
    # Distinct labels (the same file name in two directories gets its directory as a prefix).
    seen = {}
    for run in runs + simulations:
        seen.setdefault(run.label, []).append(run)
    for label, same in seen.items():
        if len(same) > 1:
            for run in same:
                run.label = f"{os.path.basename(os.path.dirname(os.path.abspath(run.path)))}/{label}"
    return runs, simulations, studies, problems


def check_against_manifest(run, study):
    """A file must be what the manifest says its job ran: same ranks, all steps, same batch."""
    job, where = run.job, f"{study.directory}/{MANIFEST}"
    if int(job["ranks"]) != run.ranks:
        raise InputError(f"{run.path}: /run ranks = {run.ranks}, but {where} says job {job['job']} ran "
                         f"{job['ranks']} ranks")
    if run.attrs.get("slurm_job_id") and str(run.attrs["slurm_job_id"]) != job["job"]:
        raise InputError(f"{run.path}: /run slurm_job_id = {run.attrs['slurm_job_id']}, but the file name "
                         f"and {where} say job {job['job']}")
    batch = job.get("global_batch", "deck")
    if batch != "deck" and run.global_batch() != int(batch):
        raise InputError(f"{run.path}: global batch {run.global_batch()} samples (/steps samples), but "
                         f"{where} says {batch}")
    steps = study.meta.get("steps", "")
    if steps and len(run.steps) != int(steps):
        raise InputError(f"{run.path}: {len(run.steps)} rows in /steps, but {where} says steps={steps} "
                         f"(the run stopped early?)")


# ----------------------------------------------------------------------------------------------------
# Scaling


def scaling_points(study):
    """Per rank count: (ranks, nodes, per-run median step seconds, per-run tokens/s)."""
    by_ranks = {}
    for run in study.runs:
        by_ranks.setdefault(run.ranks, []).append(run)
    points = []
    for ranks in sorted(by_ranks):
        group = by_ranks[ranks]
        nodes = sorted({r.nodes for r in group if r.nodes is not None})
        points.append({
            "ranks": ranks,
            "nodes": nodes[0] if len(nodes) == 1 else None,
            "times": np.array([r.median("step_seconds") for r in group]),
            "rates": np.array([r.median("tokens_per_second") for r in group]),
            "runs": group,
        })
    return points


def check_study_workload(study, points):
    """Strong scaling keeps the global batch; weak scaling keeps the batch per rank."""
    batches = {}
    for p in points:
        for run in p["runs"]:
            gb = run.global_batch()
            key = gb if study.kind == "strong" else (gb / run.ranks if gb is not None else None)
            batches.setdefault(key, run)
    if len(batches) > 1:
        what = "global batch" if study.kind == "strong" else "samples per rank"
        examples = "; ".join(f"{r.path}: {k}" for k, r in list(batches.items())[:3])
        fix = ("the same --global-batch in every run" if study.kind == "strong"
               else "--global-batch = ranks x samples per rank")
        raise InputError(f"{study.directory or 'files'}: {study.kind} scaling needs one {what}, found "
                         f"{len(batches)} ({examples}); run with {fix}")


def efficiency(kind, n0, t0, n, t):
    """strong: E = N0 t(N0) / (N t(N)) (fixed problem); weak: E = t(N0) / t(N) (fixed work per rank)."""
    return n0 * t0 / (n * t) if kind == "strong" else t0 / t


def efficiencies(study, points):
    """Adds t (median over repetitions), efficiency and its spread (each repetition's time against the
    median t(N0)), and the ideal time, to every point."""
    n0, t0 = points[0]["ranks"], float(np.median(points[0]["times"]))
    for p in points:
        n, times = p["ranks"], p["times"]
        p["t"] = float(np.median(times))
        p["t_min"], p["t_max"] = float(times.min()), float(times.max())
        p["e"] = efficiency(study.kind, n0, t0, n, p["t"])
        p["e_min"] = efficiency(study.kind, n0, t0, n, p["t_max"])
        p["e_max"] = efficiency(study.kind, n0, t0, n, p["t_min"])
        p["e_each"] = [efficiency(study.kind, n0, t0, n, t) for t in times]
        p["ideal_t"] = t0 * n0 / n if study.kind == "strong" else t0
        p["rate"] = float(np.median(p["rates"]))
    return points


# ----------------------------------------------------------------------------------------------------
# Tidy output: one row per kind x deck x policy x ranks x global batch x steps, in report.csv and
# report.json. Every table and plot of runs and simulations takes its figures from these rows or from
# the same per-file medians.

TIDY_SCHEMA_VERSION = 1
GROUP_KEY = ("kind", "deck", "policy", "ranks", "global_batch", "steps")
TIDY_COLUMNS = (  # name, unit, meaning
    ("kind", "", "run (a `minimllm run` file) or simulate (a `minimllm simulate` file)"),
    ("deck", "", "the deck's name, /run name"),
    ("policy", "", "run: /run policy; simulate: the /simulation/<policy> table"),
    ("ranks", "rank", "run: /run ranks; simulate: /run virtual_ranks"),
    ("global_batch", "sample", "samples per step: run: /steps samples; simulate: /run global_batch"),
    ("steps", "step", "steps in each file, step 0 included"),
    ("repetitions", "file", "files in the row (same kind, deck, policy, ranks, global batch, steps)"),
    ("step_median_ms", "ms", "step time: the median over repetitions of each file's median over its timed "
                             "steps (run: /steps step_seconds after step 0, or the only step; simulate: "
                             "every step's /simulation/<policy> makespan_s)"),
    ("step_min_ms", "ms", "smallest of the values spread_over names"),
    ("step_max_ms", "ms", "largest of the values spread_over names"),
    ("spread_over", "", "repetitions: each file's median step time (when repetitions > 1); steps: the "
                        "one file's timed step times"),
    ("tokens_per_second", "token/s", "run: median of /steps tokens_per_second (as step_median_ms); "
                                     "simulate: empty (the file holds no token counts)"),
    ("speedup_over_static", "1", "step_median_ms of policy static with the same kind, deck, ranks, global "
                                 "batch and steps, over this row's; empty without such a row"),
    ("mfu", "1", "model FLOPs / time / (peak_gflops_per_rank x ranks), a fraction: run: median of /steps "
                 "mfu (as step_median_ms); simulate: the /simulation/<policy> mfu attribute; above 1 "
                 "when that peak is below what the ranks did"),
    ("peak_gflops_per_rank", "GFLOP/s", "the peak behind mfu: run: /run peak_gflops_per_rank; simulate: "
                                        "/run machine_peak_gflops (median over repetitions)"),
    ("peak_source", "", "where that peak came from: /run peak_source or machine_peak_source"),
    ("fom_tokens_per_second", "token/s", "the benchmark's figure of merit, /run fom_tokens_per_second "
                                         "(median over repetitions); empty when no file has it"),
    ("verdict", "", "/run verdict (VALID or INVALID), or the count of each when repetitions differ "
                    "(e.g. 'INVALID 1, VALID 2'); empty when no file has one"),
    ("fits", "", "simulate: true or false, whether the plan fits in memory (/simulation/<policy> fits "
                 "attribute); empty for run"),
    ("files", "", "the row's HDF5 files, '; '-separated"),
)


def tidy_columns_help():
    width = max(len(name) for name, _, _ in TIDY_COLUMNS)
    indent = " " * (width + 4)
    return "\n".join(textwrap.fill(f"{'[' + unit + '] ' if unit else ''}{meaning}", 100,
                                   initial_indent=f"  {name:<{width}}  ", subsequent_indent=indent)
                     for name, unit, meaning in TIDY_COLUMNS)


def run_entry(run):
    peak, source = run.peak()
    return {"kind": run.kind, "deck": run.name, "policy": run.policy, "ranks": run.ranks,
            "global_batch": run.global_batch(), "steps": len(run.steps),
            "step_ms": run.step_ms(), "each_step_ms": run.timed_step_ms(),
            "tokens_per_second": run.median("tokens_per_second"), "mfu": run.median("mfu"),
            "peak_gflops_per_rank": peak, "peak_source": source, "fom_tokens_per_second": run.fom(),
            "verdict": run.verdict(), "fits": "", "path": run.path}


def simulation_entries(sim):
    """One entry per policy; a simulated step has no warm-up, so every step counts."""
    peak, source = sim.peak()
    return [{"kind": sim.kind, "deck": sim.name, "policy": policy, "ranks": sim.ranks,
             "global_batch": sim.global_batch, "steps": sim.steps,
             "step_ms": float(np.median(table["makespan_ms"])), "each_step_ms": table["makespan_ms"],
             "tokens_per_second": None, "mfu": table["mfu"], "peak_gflops_per_rank": peak,
             "peak_source": source, "fom_tokens_per_second": None, "verdict": "", "fits": table["fits"],
             "path": sim.path}
            for policy, table in sim.policies.items()]


def median_or_none(values):
    present = [v for v in values if v is not None]
    return float(np.median(present)) if present else None


def count_summary(values):
    """The one value, or 'A 1, B 2' when they differ; empty ones left out."""
    counts = {}
    for value in filter(None, values):
        counts[value] = counts.get(value, 0) + 1
    if len(counts) <= 1:
        return next(iter(counts), "")
    return ", ".join(f"{value} {counts[value]}" for value in sorted(counts))


def summarise(entries):
    """One tidy row from the entries (files) of one group."""
    medians = [e["step_ms"] for e in entries]
    spread = medians if len(entries) > 1 else entries[0]["each_step_ms"]
    fits = {e["fits"] for e in entries if e["fits"]}
    row = {key: entries[0][key] for key in GROUP_KEY}
    row.update({
        "repetitions": len(entries),
        "step_median_ms": float(np.median(medians)),
        "step_min_ms": float(np.min(spread)),
        "step_max_ms": float(np.max(spread)),
        "spread_over": "repetitions" if len(entries) > 1 else "steps",
        "tokens_per_second": median_or_none([e["tokens_per_second"] for e in entries]),
        "speedup_over_static": None,
        "mfu": median_or_none([e["mfu"] for e in entries]),
        "peak_gflops_per_rank": median_or_none([e["peak_gflops_per_rank"] for e in entries]),
        "peak_source": "; ".join(sorted({e["peak_source"] for e in entries if e["peak_source"]})),
        "fom_tokens_per_second": median_or_none([e["fom_tokens_per_second"] for e in entries]),
        "verdict": count_summary([e["verdict"] for e in entries]),
        "fits": "false" if "false" in fits else ("true" if fits else ""),
        "files": "; ".join(e["path"] for e in entries),
        "paths": [e["path"] for e in entries],  # not a column: for the report's own look-ups
    })
    return row


def add_speedups(rows):
    def workload(row):
        return tuple(row[key] for key in GROUP_KEY if key != "policy")

    static = {workload(r): r["step_median_ms"] for r in rows if r["policy"] == "static"}
    for row in rows:
        base = static.get(workload(row))
        if base and row["step_median_ms"] > 0:
            row["speedup_over_static"] = base / row["step_median_ms"]


def tidy_rows(runs, simulations):
    groups = {}
    entries = [run_entry(r) for r in runs] + [e for s in simulations for e in simulation_entries(s)]
    for entry in entries:
        groups.setdefault(tuple(entry[key] for key in GROUP_KEY), []).append(entry)
    rows = [summarise(group) for group in groups.values()]
    add_speedups(rows)
    rows.sort(key=lambda r: (r["kind"], r["deck"], r["ranks"], r["global_batch"] or 0, r["steps"],
                             policy_order(r["policy"])))
    return rows


def csv_text(value):
    if value is None:
        return ""
    return repr(float(value)) if isinstance(value, float) else str(value)


def tidy_csv(rows):
    names = [name for name, _, _ in TIDY_COLUMNS]
    text = io.StringIO(newline="")
    writer = csv.writer(text)
    writer.writerow(names)
    for row in rows:
        writer.writerow([csv_text(row[name]) for name in names])
    return text.getvalue().encode("utf-8")


def tidy_json(rows, generated):
    document = {
        "schema_version": TIDY_SCHEMA_VERSION,
        "generator": "scripts/report.py",
        "generated_utc": generated,
        "group_key": list(GROUP_KEY),
        "columns": [{"name": n, "unit": u, "meaning": m} for n, u, m in TIDY_COLUMNS],
        "rows": [{name: row[name] for name, _, _ in TIDY_COLUMNS} for row in rows],
    }
    return (json.dumps(document, indent=1) + "\n").encode("utf-8")


# ----------------------------------------------------------------------------------------------------
# Plots


def save_figure(fig, files, name):
    """The figure as PNG bytes in files[name] (written with the rest by OutputDirectory), then closed."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    files[name] = buffer.getvalue()


def safe_name(label):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label)


def whisker_note(counts, unit="run"):
    """What a whisker spans, for a legend: the number of runs (or steps) behind each point."""
    low, high = min(counts), max(counts)
    n = f"{low}" if low == high else f"{low}–{high}"
    return f"n = {n} {unit}{'s' if high > 1 else ''} per point"


def plot_breakdown(runs, phase_ms, files, name):
    labels = [f"{r.label}  ({r.ranks} rk, {r.policy})" for r in runs]
    height = max(2.6, 0.42 * len(runs) + 1.5)
    fig, ax = plt.subplots(figsize=(11, height), dpi=120)
    y = np.arange(len(runs))
    left = np.zeros(len(runs))
    for phase, color, column in zip(PHASES, PHASE_COLORS, phase_ms.T):
        ax.barh(y, column, left=left, color=color, label=phase, height=0.7, edgecolor="white", linewidth=0.5)
        left += column
    step_ms = np.array([r.step_ms() for r in runs])
    ax.scatter(step_ms, y, marker="|", s=500, linewidths=2, color="black", zorder=3,
               label="median step time")
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=9)
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds per step: each phase's median over the timed steps (step 0, the warm-up, "
                  "left out)", fontsize=9)
    ax.set_title("Step-time breakdown on the critical path: phases of each step's slowest rank", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    ax.set_xlim(0, 1.05 * max(left.max(), step_ms.max()))
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    save_figure(fig, files, name)


def imbalance_range(runs):
    """One symmetric colour range around 1 for every heatmap, so that colours compare across runs."""
    deviations = [float(np.abs(r.load_ratio() - 1).max()) for r in runs]
    return max([0.05] + deviations)


def plot_imbalance(run, files, name, spread):
    ratio = run.load_ratio()
    first = 1 if len(run.steps) > 1 else 0
    steps = run.steps["step"][first:]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6.2), dpi=120, sharex=True,
                                      gridspec_kw={"height_ratios": [max(2.0, min(6.0, run.ranks / 4)), 1.4]})
    extent = (steps[0] - 0.5, steps[-1] + 0.5, run.ranks - 0.5, -0.5)
    image = top.imshow(ratio.T, aspect="auto", interpolation="nearest", cmap="RdBu_r", extent=extent,
                       norm=TwoSlopeNorm(vcenter=1.0, vmin=1 - spread, vmax=1 + spread))
    top.set_ylabel("rank")
    if run.ranks <= 16:
        top.set_yticks(range(run.ranks))
    bar = fig.colorbar(image, ax=[top, bottom], fraction=0.04, pad=0.02)
    bar.set_label("time before grad all-reduce / mean over ranks\n(one range for every run in this report)",
                  fontsize=8)
    top.set_title(f"{run.label}: per-rank load ({run.ranks} ranks, policy {run.policy}); red = slower than "
                  f"the step's mean", fontsize=10)
    factor = ratio.max(axis=1)
    bottom.plot(steps, factor, color="#e4572e", marker="o" if len(steps) <= 60 else None, ms=3)
    bottom.axhline(1.0, color="black", lw=0.8, ls=":")
    bottom.set_ylabel("max / mean\nover ranks", fontsize=9)
    bottom.set_xlabel("step (step 0, the warm-up, left out)" if first else "step")
    bottom.grid(alpha=0.3)
    bottom.set_ylim(1 - 0.05 * spread, 1 + 1.05 * spread)  # the heatmaps' range: comparable across runs
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    save_figure(fig, files, name)


def workload_sets(rows, kind):
    """The tidy rows of one kind grouped by workload (deck, ranks, global batch, steps), for those
    with more than one policy: a list of (description, [rows]) in the rows' order."""
    sets = {}
    for row in rows:
        if row["kind"] == kind:
            key = (row["deck"], row["ranks"], row["global_batch"], row["steps"])
            sets.setdefault(key, []).append(row)
    return [(f"deck {k[0]}, {k[1]} {'virtual ' if kind == 'simulate' else ''}ranks, global batch {k[2]}, "
             f"{k[3]} steps", group) for k, group in sets.items() if len(group) > 1]


def spread_note(group):
    """What the whiskers of a workload's bars span (the rows' spread_over)."""
    if all(r["spread_over"] == "steps" for r in group):
        kind = group[0]["kind"]
        steps = group[0]["steps"] - (1 if kind == "run" and group[0]["steps"] > 1 else 0)
        return f"whiskers min–max over the {'timed ' if kind == 'run' else ''}steps (n = {steps} per bar)"
    return f"whiskers min–max over repetitions ({whisker_note([r['repetitions'] for r in group])})"


def plot_policy_rows(sets, files, name, predicted=None):
    """Per workload: median step time per policy (whiskers as the rows' spread) and the speed-up over
    static. predicted: {description: {policy: ms}} drawn over the step times, if given."""
    fig, axes = plt.subplots(len(sets), 2, figsize=(11, 4.4 * len(sets) + 0.4), dpi=120, squeeze=False)
    for (description, group), (left, right) in zip(sets, axes):
        x = np.arange(len(group))
        med = np.array([r["step_median_ms"] for r in group])
        lo = np.array([r["step_min_ms"] for r in group])
        hi = np.array([r["step_max_ms"] for r in group])
        colors = ["#4c9be8" if r["fits"] != "false" else "#bdbdbd" for r in group]
        left.bar(x, med, 0.6, color=colors, label="median step time")
        left.errorbar(x, med, yerr=[med - lo, hi - med], fmt="none", ecolor="black", capsize=4, lw=1,
                      label=spread_note(group))
        if predicted and description in predicted:
            left.scatter(x, [predicted[description].get(r["policy"], np.nan) for r in group], marker="_",
                         s=500, linewidths=2, color="black", zorder=3,
                         label="cost model's prediction (excl. grad sync)")
        left.set_ylabel("step time (ms)")
        left.set_ylim(0, 1.3 * hi.max())
        left.set_title(f"step time\n{description}", fontsize=9)
        left.legend(fontsize=7, loc="upper left")
        speedup = np.array([r["speedup_over_static"] or np.nan for r in group])
        right.bar(x, speedup, 0.6, color="#2e7d32")
        right.axhline(1.0, color="black", lw=0.8, ls=":")
        for xi, s in zip(x, speedup):
            if np.isfinite(s):
                right.annotate(f"{s:.2f}x", (xi, s), xytext=(0, 3), textcoords="offset points", ha="center",
                               fontsize=8)
        right.set_ylabel("speed-up over static (x)")
        right.set_ylim(0, 1.2 * max(1.0, np.nanmax(speedup) if np.isfinite(speedup).any() else 1.0))
        right.set_title(f"speed-up = static's median step time / the policy's\n{description}", fontsize=9)
        for ax in (left, right):
            ax.set_xticks(x)
            ax.set_xticklabels([r["policy"] for r in group], rotation=30, ha="right", fontsize=8)
            ax.set_xlabel("policy")
            ax.grid(axis="y", alpha=0.3)
    if any(r["fits"] == "false" for _, group in sets for r in group):
        fig.text(0.01, 0.005, "grey bars: the plan does not fit in memory (fits = false)", fontsize=8)
    fig.tight_layout()
    save_figure(fig, files, name)


def log_y_axis(ax, values):
    """A log y axis labelled at 1, 2, 5 x 10^k in plain numbers; its range is wide enough (> 2.5x) to
    hold at least one such label however close the values are."""
    ax.set_yscale("log")
    ax.set_ylim(float(np.min(values)) / 1.6, float(np.max(values)) * 1.6)
    axis = ax.yaxis
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_locator(NullLocator())


def plot_scaling(study, points, files, name):
    n = np.array([p["ranks"] for p in points])
    counts = [len(p["runs"]) for p in points]
    whiskers = f"median, whiskers min–max over repetitions ({whisker_note(counts)})"
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.6), dpi=120)
    e = np.array([p["e"] for p in points])
    e_err = [e - np.array([p["e_min"] for p in points]), np.array([p["e_max"] for p in points]) - e]
    left.errorbar(n, e, yerr=e_err, marker="o", capsize=4, color="#1f77b4", label=whiskers)
    for p in points:  # every repetition, against the median t(N0)
        left.scatter([p["ranks"]] * len(p["e_each"]), p["e_each"], color="#1f77b4", alpha=0.35, s=14)
    left.axhline(1.0, color="black", ls=":", lw=1, label="ideal")
    left.set_ylim(0, max(1.15, 1.05 * max(p["e_max"] for p in points)))
    formula = "E = N0 t(N0) / (N t(N))" if study.kind == "strong" else "E = t(N0) / t(N)"
    left.set_title(f"{study.kind} scaling efficiency, {formula}", fontsize=10)
    left.set_ylabel("efficiency (1 = ideal)")
    t = np.array([1e3 * p["t"] for p in points])
    t_err = [t - 1e3 * np.array([p["t_min"] for p in points]), 1e3 * np.array([p["t_max"] for p in points]) - t]
    right.errorbar(n, t, yerr=t_err, marker="o", capsize=4, color="#e4572e", label=whiskers)
    ideal = "t(N0) N0 / N" if study.kind == "strong" else "t(N0)"
    right.plot(n, [1e3 * p["ideal_t"] for p in points], ls=":", color="black", label=f"ideal, {ideal}")
    log_y_axis(right, np.concatenate([t + t_err[1], t - t_err[0], [1e3 * p["ideal_t"] for p in points]]))
    right.set_title("median step time (log-log)", fontsize=10)
    right.set_ylabel("step time (ms)")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(n)
        one_node = all(p["nodes"] == 1 for p in points)
        ax.set_xticklabels([str(p["ranks"]) if one_node or not p["nodes"] else f"{p['ranks']}\n({p['nodes']} nodes)"
                            for p in points])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("ranks (log scale)" + (", all on one node" if one_node else ""))
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    batch = points[0]["runs"][0].global_batch()
    workload = (f"global batch {batch}" if study.kind == "strong"
                else f"{batch / points[0]['ranks']:g} samples per rank")
    fig.suptitle(f"{study.name}: {study.kind} scaling, deck {points[0]['runs'][0].name}, {workload}, "
                 f"{len(study.runs)} runs", fontsize=10)
    fig.tight_layout()
    save_figure(fig, files, name)


# ----------------------------------------------------------------------------------------------------
# Writing the files
#
# The rules of minimllm's own outputs (src/metrics/output_file.cpp), for a directory others may write to:
# a symbolic link, FIFO, device, socket or directory at an output name is refused, even with --overwrite,
# and never opened; each file is written to a temporary file beside it, created exclusively
# (O_CREAT | O_EXCL | O_NOFOLLOW), and then renamed over the name (or linked to it, when the name was free,
# so that a name planted meanwhile is refused instead of taken over). An existing regular file is replaced
# only if report.py wrote it there, unchanged since (LEDGER: its sha256, recorded by the run that wrote
# it, and owned by this user), or with --overwrite. Every name is checked before the first one is written.

LEDGER = ".report.sha256"  # "<sha256>  <name>" per file report.py wrote in this directory (sha256sum's format)
LOCK = ".report.lock"      # one report.py at a time writes a directory (flock)
LOCK_WAIT_SECONDS = 120
LEDGER_MAX_BYTES = 1 << 20
TEMPORARY = re.compile(r"(.+)\.tmp\.[0-9a-f]{12}")
LEDGER_LINE = re.compile(r"([0-9a-f]{64})  ([^/\n]+)")


class OutputError(Exception):
    """The report could not be written (not invalid input): exit 1 with this one line."""


def kind_of(mode):
    for test, kind in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"


class OutputDirectory:
    """The --out directory, opened once without following a link; every name below is relative to it."""

    def __init__(self, path, overwrite):
        self.path, self.overwrite = path, overwrite
        self.fd = self.lock_fd = None

    def where(self, name):
        return os.path.join(self.path, name)

    def __enter__(self):
        try:
            os.makedirs(self.path, exist_ok=True)
        except FileExistsError:
            pass  # a link or a file there: said below
        except OSError as e:
            raise OutputError(f"--out {self.path}: cannot create the directory: {e.strerror}") from e
        try:
            self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise OutputError(f"--out {self.path}: cannot open the directory: {e.strerror}") from e
            kind = kind_of(os.lstat(self.path).st_mode)
            raise InputError(f"--out {self.path}: is {kind}; report.py writes only into a directory, never "
                             f"through a link: give the directory itself or another --out") from e
        return self

    def __exit__(self, *exc):
        for fd in (self.lock_fd, self.fd):
            if fd is not None:
                os.close(fd)  # closing the lock's descriptor releases the lock

    def _lock(self):
        try:
            self.lock_fd = os.open(LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                                   0o644, dir_fd=self.fd)
        except OSError as e:
            if e.errno == errno.ELOOP:
                self.refuse_special(LOCK, stat.S_IFLNK)
            raise OutputError(f"{self.where(LOCK)}: cannot create the lock: {e.strerror}") from e
        mode = os.fstat(self.lock_fd).st_mode
        if not stat.S_ISREG(mode):
            self.refuse_special(LOCK, mode)
        deadline, said = time.monotonic() + LOCK_WAIT_SECONDS, False
        while True:
            try:
                fcntl.flock(self.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise OutputError(f"{self.where(LOCK)}: another report.py has been writing {self.path} for "
                                      f"{LOCK_WAIT_SECONDS} s; try again later or choose another --out") from None
                if not said:
                    sys.stderr.write(f"report.py: waiting for another report.py writing {self.path}\n")
                    said = True
                time.sleep(0.2)

    def _remove_stale_temporaries(self):
        """What a killed report.py left: our own regular files with a temporary's name."""
        for name in os.listdir(self.fd):
            if TEMPORARY.fullmatch(name):
                info = self.lstat(name)
                if info and stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid():
                    try:
                        os.unlink(name, dir_fd=self.fd)
                    except FileNotFoundError:
                        pass

    def lstat(self, name):
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def refuse_special(self, name, mode):
        raise InputError(f"{self.where(name)}: is {kind_of(mode)}; report.py creates or replaces only regular "
                         f"files and never follows a link there: remove it or choose another --out")

    def read(self, name, limit=None):
        """The bytes of a regular file opened without following a link (None if it is not one)."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=self.fd)
        except OSError:
            return None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or (limit is not None and info.st_size > limit):
                return None
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def ledger(self):
        """{name: set of sha256} that report.py recorded here, or None if LEDGER is absent or not its own."""
        info = self.lstat(LEDGER)
        if info is None or not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            return None
        data = self.read(LEDGER, LEDGER_MAX_BYTES)
        if data is None:
            return None
        entries = {}
        for line in data.decode("utf-8", "replace").splitlines():
            match = LEDGER_LINE.fullmatch(line)
            if not match:
                return None  # not a ledger report.py wrote
            entries.setdefault(match.group(2), set()).add(match.group(1))
        return entries

    def ours(self, name, info, ledger):
        """The sha256 of the regular file at name if report.py wrote it here and nobody changed it since,
        else None."""
        if info.st_uid != os.geteuid() or not ledger or name not in ledger:
            return None
        data = self.read(name)
        digest = hashlib.sha256(data).hexdigest() if data is not None else None
        return digest if digest in ledger[name] else None

    def check(self, name, ledger):
        """Raises unless name is free, or a regular file this run may replace; True if it exists."""
        info = self.lstat(name)
        if info is None:
            return False
        if not stat.S_ISREG(info.st_mode):
            self.refuse_special(name, info.st_mode)
        if name == LEDGER:
            replaceable = self.overwrite or ledger is not None
        else:
            replaceable = self.overwrite or self.ours(name, info, ledger) is not None
        if not replaceable:
            raise InputError(f"{self.where(name)}: exists and is not a file report.py wrote there (none recorded "
                             f"in {LEDGER}, or it changed since); pass --overwrite to replace it, or choose "
                             f"another --out")
        return True

    def write(self, name, data, ledger):
        """Writes data to name through an exclusively created temporary file, then renames it there."""
        for _ in range(100):
            temporary = f"{name}.tmp.{secrets.token_hex(6)}"
            try:
                fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                             dir_fd=self.fd)
                break
            except FileExistsError:
                continue
            except OSError as e:
                raise OutputError(f"{self.where(name)}: cannot create a temporary file beside it: {e.strerror}") from e
        else:
            raise OutputError(f"{self.where(name)}: cannot create a temporary file beside it: every name taken")
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            # Checked again: a name planted since the first check is refused, not replaced.
            if self.check(name, ledger):
                os.replace(temporary, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            else:
                try:  # fails if the name was taken meanwhile: never take over a file report.py did not write
                    os.link(temporary, name, src_dir_fd=self.fd, dst_dir_fd=self.fd, follow_symlinks=False)
                except FileExistsError:
                    self.check(name, ledger)  # says what is there now
                    raise InputError(f"{self.where(name)}: was created by someone else while report.py wrote it; "
                                     f"choose another --out") from None
                os.unlink(temporary, dir_fd=self.fd)
        except BaseException:
            try:
                os.unlink(temporary, dir_fd=self.fd)
            except FileNotFoundError:
                pass
            raise

    def check_all(self, names):
        """check() for every name, LEDGER's and LOCK's too (LOCK is opened, never replaced); the ledger."""
        info = self.lstat(LOCK)
        if info is not None and not stat.S_ISREG(info.st_mode):
            self.refuse_special(LOCK, info.st_mode)
        ledger = self.ledger()
        for name in list(names) + [LEDGER]:
            self.check(name, ledger)
        return ledger

    def write_all(self, files):
        """Writes every file of files ({name: bytes}) and records them in LEDGER; nothing is written (not
        even the lock) unless every name may be."""
        self.check_all(files)
        self._lock()
        self._remove_stale_temporaries()
        ledger = self.check_all(files)  # again under the lock: another report.py may have written meanwhile
        new = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
        kept = {}  # earlier files of report.py that this report does not rewrite, still as written
        for name in (ledger or {}):
            info = self.lstat(name)
            if name not in new and info is not None and stat.S_ISREG(info.st_mode):
                digest = self.ours(name, info, ledger)
                if digest is not None:
                    kept[name] = [digest]
        # Before the files: both their old and new contents are recorded, so that a report killed halfway
        # leaves every file one that report.py wrote; after them, only what is there.
        before = dict(kept)
        for name, digest in new.items():
            before[name] = sorted(set((ledger or {}).get(name, ())) | {digest})
        self.write(LEDGER, ledger_text(before), ledger)
        ledger = {name: set(hashes) for name, hashes in before.items()}
        for name, data in files.items():
            self.write(name, data, ledger)
        after = dict(kept, **{name: [digest] for name, digest in new.items()})
        self.write(LEDGER, ledger_text(after), ledger)
        os.fsync(self.fd)


def ledger_text(entries):
    return "".join(f"{digest}  {name}\n" for name in sorted(entries) for digest in entries[name]).encode("utf-8")


# ----------------------------------------------------------------------------------------------------
# The report


def fmt(value, spec):
    return "n/a" if value is None or (isinstance(value, float) and np.isnan(value)) else format(value, spec)


def optional(value, spec):
    """A table cell for a figure a file may lack: empty rather than n/a."""
    return "" if value is None else format(value, spec)


class MfuNotes:
    """Marks an MFU above 100% and collects, for a footnote, the peak it was computed against."""

    MARK = "†"

    def __init__(self, peak_attribute, source_attribute):
        self.peak_attribute = peak_attribute
        self.source_attribute = source_attribute
        self.peaks = {}

    def cell(self, mfu, peak, source, label):
        if mfu is None:
            return ""
        if mfu <= 1:
            return f"{100 * mfu:.2f}"
        self.peaks.setdefault((peak, source), []).append(label)
        return f"{100 * mfu:.2f} {self.MARK}"

    def footnote(self):
        lines = []
        for (peak, source), labels in self.peaks.items():
            lines.append(f"{self.MARK} MFU above 100% ({', '.join(labels)}): MFU = model FLOPs / time / (peak x "
                         f"ranks), and the peak these used, {fmt(peak, '.1f')} GFLOP/s per rank "
                         f"(`{self.peak_attribute}`), is below what the ranks computed; its source "
                         f"(`{self.source_attribute}`): "
                         f"{source or 'not recorded'}. The figure compares runs against one another, not "
                         f"against the hardware.")
        return [line for text in lines for line in ("", text)]


def header_section(runs, simulations, generated):
    return ["# minimllm report", "",
            f"{len(runs)} run file(s), {len(simulations)} simulate file(s), generated {generated} UTC by "
            f"scripts/report.py.", "",
            "One definition of every figure: a run's step time, tokens/s and MFU are each the median over "
            "its timed steps (the steps after step 0, the warm-up; a one-step run uses its only step), "
            "computed once and used by every table, plot, `report.csv` and `report.json`; a simulated step "
            "has no warm-up, so a simulation's step time is the median of `makespan_s` over all its steps. "
            "Over repeated files the figure is the median of the files' medians. Speed-up over static = "
            "static's median step time / the policy's. Imbalance: median over the timed steps of max/mean "
            "over ranks of the time before the gradient all-reduce.", ""]


def runs_section(runs):
    notes = MfuNotes("/run peak_gflops_per_rank", "/run peak_source")
    md = ["## Runs", "",
          "| run | job | ranks | nodes | policy | steps | global batch | step ms | tokens/s | tokens/s/rank "
          "| MFU % | FOM tokens/s | verdict | loss first → last | imbalance |",
          "|---|---|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|---|---|--:|"]
    for r in runs:
        tps = r.median("tokens_per_second")
        peak, source = r.peak()
        md.append(f"| {r.label} | {r.job_id or ''} | {r.ranks} | {r.nodes or ''} | {r.policy} | {len(r.steps)} "
                  f"| {fmt(r.global_batch(), 'd')} | {r.step_ms():.1f} | {tps:.0f} | {tps / r.ranks:.0f} "
                  f"| {notes.cell(r.median('mfu'), peak, source, r.label)} | {optional(r.fom(), '.1f')} "
                  f"| {r.verdict()} | {r.steps['loss'][0]:.4f} → {r.steps['loss'][-1]:.4f} "
                  f"| {fmt(r.imbalance(), '.3f')} |")
    md += notes.footnote()
    md += ["", "FOM: `/run fom_tokens_per_second` and verdict: `/run verdict`, written by benchmark runs "
           "(docs/RUN_RULES.md); empty for other runs.", "", "Files:", ""]
    md += [f"- `{r.label}`: {r.path} (deck `{r.name}`, {r.attrs.get('hostname', '?')}, schema_version "
           f"{r.schema_version}, MFU peak {fmt(r.peak()[0], '.1f')} GFLOP/s per rank: "
           f"{r.peak()[1] or '?'})" for r in runs]
    return md + [""]


def tidy_section(rows):
    runs_notes = MfuNotes("/run peak_gflops_per_rank", "/run peak_source")
    simulate_notes = MfuNotes("/run machine_peak_gflops", "/run machine_peak_source")
    md = ["## By policy and size", "",
          "One row per kind x deck x policy x ranks x global batch x steps, as in `report.csv` and "
          "`report.json` (columns: `report.py --help`). Spread: min–max over the repetitions when there "
          "are several, else over the one file's timed steps (the `spread` column says which).", "",
          "| kind | deck | policy | ranks | global batch | steps | files | step ms | spread ms | spread "
          "| tokens/s | speed-up | MFU % | FOM tokens/s | verdict | fits |",
          "|---|---|---|--:|--:|--:|--:|--:|---|---|--:|--:|--:|--:|---|---|"]
    for row in rows:
        notes = runs_notes if row["kind"] == "run" else simulate_notes
        label = f"{row['kind']} {row['deck']} {row['policy']} on {row['ranks']} ranks"
        md.append(f"| {row['kind']} | {row['deck']} | {row['policy']} | {row['ranks']} "
                  f"| {optional(row['global_batch'], 'd')} | {row['steps']} | {row['repetitions']} "
                  f"| {row['step_median_ms']:.2f} | {row['step_min_ms']:.2f}–{row['step_max_ms']:.2f} "
                  f"| {row['spread_over']} | {optional(row['tokens_per_second'], '.0f')} "
                  f"| {optional(row['speedup_over_static'], '.2f')} "
                  f"| {notes.cell(row['mfu'], row['peak_gflops_per_rank'], row['peak_source'], label)} "
                  f"| {optional(row['fom_tokens_per_second'], '.1f')} | {row['verdict']} | {row['fits']} |")
    return md + runs_notes.footnote() + simulate_notes.footnote() + [""]


def breakdown_section(runs, files):
    with_ranks = [r for r in runs if r.critical_path() is not None]
    without = [r for r in runs if r.critical_path() is None]
    md = ["## Step-time breakdown", "",
          "Milliseconds per step of each phase on the critical path: for every timed step, the phases of "
          "the rank whose step took longest; each phase's median over the timed steps. The medians of "
          "the phases need not add up to the median step time (`step ms`, the black mark in the plot), "
          "which is the same figure as everywhere else. (`/steps` holds each phase's maximum over ranks, "
          "which need not come from one rank and do not add up.) `llm (compute)` is `llm_seconds` minus "
          "`kv_exchange_seconds`, which is part of it; `grad_sync` includes waiting for the other ranks.", ""]
    if without:
        md += ["Not in the breakdown (no complete `/ranks` tables): " + ", ".join(r.label for r in without), ""]
    if not with_ranks:
        return md
    phase_ms = np.array([1e3 * r.critical_path() for r in with_ranks])
    plot_breakdown(with_ranks, phase_ms, files, "step-breakdown.png")
    md += ["| run | step ms | sum of phases | " + " | ".join(PHASES) + " |", "|---|" + "--:|" * (len(PHASES) + 2)]
    for r, row in zip(with_ranks, phase_ms):
        md.append(f"| {r.label} | {r.step_ms():.1f} | {row.sum():.1f} | " + " | ".join(f"{v:.1f}" for v in row) + " |")
    return md + ["", "![step-time breakdown](step-breakdown.png)", ""]


def predicted_ms(runs, rows):
    """Per run workload and policy: the median over files of each run's median predicted step time."""
    by_path = {r.path: r for r in runs}
    return {description: {row["policy"]: 1e3 * np.median([by_path[p].median("predicted_seconds")
                                                          for p in row["paths"]]) for row in group}
            for description, group in workload_sets(rows, "run")}


def policies_section(runs, rows, files):
    sets = workload_sets(rows, "run")
    if not sets:
        return []
    predicted = predicted_ms(runs, rows)
    by_path = {r.path: r for r in runs}
    plot_policy_rows(sets, files, "policies.png", predicted)
    md = ["## Policies", "",
          "Runs of the same workload (deck, ranks, global batch, steps) under different `/run` policies, "
          "from the rows above. The cost model's prediction leaves out the gradient all-reduce.", "",
          "| workload | policy | runs | step ms | tokens/s | speed-up | predicted ms | last loss |",
          "|---|---|--:|--:|--:|--:|--:|---|"]
    for description, group in sets:
        for row in group:
            losses = ", ".join(format(by_path[p].steps["loss"][-1], ".5f") for p in row["paths"])
            md.append(f"| {description} | {row['policy']} | {row['repetitions']} | {row['step_median_ms']:.1f} "
                      f"| {row['tokens_per_second']:.0f} | {optional(row['speedup_over_static'], '.2f')} "
                      f"| {predicted[description][row['policy']]:.1f} | {losses} |")
    return md + ["", "![policies](policies.png)", ""]


def simulations_section(simulations, rows, files):
    if not simulations:
        return []
    md = ["## Simulations", "",
          "`minimllm simulate` files: the simulated step time (`makespan_s`) of each policy on the virtual "
          "cluster, median over the simulated steps, whiskers min–max over them; speed-up over static as "
          "the file's `/run speedup_baseline` names it (static with its context-parallel degree).", ""]
    md += [f"- `{s.label}`: {s.path} (deck `{s.name}`, {s.ranks} virtual ranks, global batch {s.global_batch}, "
           f"{s.steps} steps, seed {s.attrs.get('seed', '?')}, baseline {s.attrs.get('speedup_baseline', '?')}, "
           f"schema_version {s.schema_version}; MFU peak {fmt(s.peak()[0], '.1f')} GFLOP/s per rank: "
           f"{s.peak()[1] or '?'})" for s in simulations]
    sets = workload_sets(rows, "simulate")
    if sets:
        plot_policy_rows(sets, files, "simulations.png")
        md += ["", "![simulations](simulations.png)"]
    return md + [""]


def scaling_section(study, files):
    points = efficiencies(study, scaling_points(study))
    check_study_workload(study, points)
    name = f"scaling-{safe_name(study.name)}.png"
    plot_scaling(study, points, files, name)
    formula = "E(N) = N0·t(N0) / (N·t(N))" if study.kind == "strong" else "E(N) = t(N0) / t(N)"
    md = [f"## {study.kind.capitalize()} scaling: {study.name}", "",
          f"t(N) = median over repetitions of each run's median step time; {formula}, N0 = "
          f"{points[0]['ranks']}; min–max over repetitions in brackets."
          + (f" Study: {study.directory}/{MANIFEST}." if study.directory else ""), "",
          "| ranks | nodes | runs | global batch | step ms (min–max) | tokens/s | efficiency (min–max) |",
          "|--:|--:|--:|--:|---|--:|---|"]
    for p in points:
        md.append(f"| {p['ranks']} | {p['nodes'] or ''} | {len(p['runs'])} "
                  f"| {fmt(p['runs'][0].global_batch(), 'd')} "
                  f"| {1e3 * p['t']:.1f} ({1e3 * p['t_min']:.1f}–{1e3 * p['t_max']:.1f}) | {p['rate']:.0f} "
                  f"| {p['e']:.3f} ({p['e_min']:.3f}–{p['e_max']:.3f}) |")
    return md + ["", f"![{study.kind} scaling]({name})", ""]


def imbalance_section(runs, files):
    multi = [r for r in runs if r.load_ratio() is not None]
    if not multi:
        return []
    spread = imbalance_range(multi)
    md = ["## Per-rank imbalance", "",
          "Each rank's time before the gradient all-reduce (`/ranks/step_seconds` minus "
          "`grad_sync_seconds` and `optimizer_seconds`) divided by the mean over ranks, per timed step. "
          f"Every heatmap has the same colour range, 1 ± {spread:.3f}, so colours compare across runs.", ""]
    for r in multi:
        name = f"imbalance-{safe_name(r.label)}.png"
        plot_imbalance(r, files, name, spread)
        md += [f"![{r.label}]({name})", ""]
    return md


def report_files(runs, simulations, studies, problems):
    """Every file of the report, {name: bytes}, made in memory: nothing is written until all exist."""
    generated = f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M}"
    rows = tidy_rows(runs, simulations)
    files = {"report.csv": tidy_csv(rows), "report.json": tidy_json(rows, generated)}
    md = header_section(runs, simulations, generated)
    if problems:
        md += ["## Problems", ""] + [f"- {p}" for p in problems] + [""]
    if runs:
        md += runs_section(runs)
    md += tidy_section(rows)
    md += breakdown_section(runs, files) if runs else []
    md += policies_section(runs, rows, files)
    md += simulations_section(simulations, rows, files)
    for study in studies:
        md += scaling_section(study, files)
    md += imbalance_section(runs, files)
    files["report.md"] = "\n".join(md).encode("utf-8")
    return files


def main(argv):
    parser = argparse.ArgumentParser(
        prog="report.py", description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]) + "\n\nColumns of report.csv and report.json "
        "(JSON: {schema_version, generator, generated_utc, group_key, columns, rows}; [unit]):\n"
        + tidy_columns_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="+", metavar="INPUT",
                        help="an HDF5 file from `minimllm run` or `minimllm simulate`, a study directory "
                             "(with manifest.txt), or a directory of *.h5 files")
    parser.add_argument("--out", "-o", default="report", metavar="DIR",
                        help="output directory, created if needed (default: report)")
    parser.add_argument("--scaling", choices=("weak", "strong"),
                        help="treat the loose files (not in a study directory) as one weak or strong scaling "
                             "study; study directories take it from their manifest")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace regular files in --out that report.py did not write there (by default "
                             "only its own, unchanged, are replaced); a link or special file is never replaced")
    parser.add_argument("--allow-missing", action="store_true",
                        help="report a study even if some of its manifest's jobs left no file (listed under "
                             "Problems); default: that is an error")
    args = parser.parse_args(argv)
    try:
        runs, simulations, studies, problems = load_inputs(args.inputs, args.scaling, args.allow_missing)
        if not os.path.islink(args.out) and os.path.exists(args.out) and not os.path.isdir(args.out):
            raise InputError(f"--out {args.out}: exists and is not a directory")
        files = report_files(runs, simulations, studies, problems)
        with OutputDirectory(args.out, args.overwrite) as out:
            out.write_all(files)
    except InputError as e:
        sys.stderr.write(f"report.py: error: {e}\n")
        return 2
    except (OutputError, OSError) as e:
        sys.stderr.write(f"report.py: error: {first_line(e) if isinstance(e, OutputError) else e}\n")
        return 1
    for problem in problems:
        sys.stderr.write(f"report.py: warning: {problem}\n")
    print(f"report.py: {len(runs)} run file(s), {len(simulations)} simulate file(s) -> "
          f"{os.path.join(args.out, 'report.md')}, report.csv, report.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
