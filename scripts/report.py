#!/usr/bin/python3
"""Report on minimllm runs: a markdown table and PNG plots from HDF5 metrics files.

Inputs are HDF5 files written by `minimllm run` and/or directories. A directory holding a
manifest.txt is a scaling study written by slurm/sweep.sh: its *.h5 files are matched to the
manifest's jobs, and the manifest says whether the study is weak or strong scaling. Any other
directory contributes the *.h5 files directly inside it.

Outputs, in --out (default: report; existing report files there are replaced):
  report.md                one row per run, then sections for the plots below
  step-breakdown.png       time per phase on the critical path (each step's slowest rank, /ranks/*)
  imbalance-<run>.png      per-rank time before the gradient all-reduce, steps x ranks (/ranks/*),
                           for every run on more than one rank
  policies.png             runs of the same workload under different /run policy (when there are)
  scaling-<study>.png      weak or strong scaling efficiency and step time, with the spread over
                           repetitions (for each study directory, or the loose files with --scaling)

Rates and times are medians over the steps after step 0, the warm-up (as the program's own summary);
a run of one step uses that step. Efficiency relative to the fewest ranks N0, with t(N) the median
over repetitions of each run's median step time:
  strong: E(N) = N0 t(N0) / (N t(N))     weak: E(N) = t(N0) / t(N)

Exit codes: 0 report written; 2 invalid input (one line naming the file or option and what would be
valid); 1 missing Python modules or another failure. Use Debian's /usr/bin/python3 (python3-h5py,
python3-matplotlib), or scripts/report.sh, which finds an interpreter that has them.
"""

import argparse
import datetime
import os
import re
import sys

try:
    import h5py
    import numpy as np
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.ticker import MaxNLocator
except ImportError as e:  # one line, and what to install
    sys.stderr.write(f"report.py: error: {e} (on Debian: apt-get install python3-h5py python3-matplotlib; "
                     f"use /usr/bin/python3 or scripts/report.sh)\n")
    sys.exit(1)

MANIFEST = "manifest.txt"
REQUIRED_FIELDS = ("step", "loss", "samples", "step_seconds", "tokens_per_second", "mfu", "data_seconds",
                   "encoder_seconds", "boundary_seconds", "llm_seconds", "kv_exchange_seconds",
                   "grad_sync_seconds", "optimizer_seconds", "planning_seconds", "predicted_seconds")
# The phases of a step, as /ranks/<name>_seconds tables. kv_exchange is part of llm_seconds, so the
# breakdown shows llm - kv_exchange as "llm (compute)" and does not count it twice.
PHASES = ("data", "planning", "encoder", "boundary", "llm (compute)", "kv_exchange", "grad_sync", "optimizer")
POLICY_ORDER = ("static", "naive", "megatron_dcp", "orch", "dhp", "dhp_search", "flexsp", "disagg", "deck")


def baseline_label(policy, runs):
    """How the base of speed-ups is named: static with its context-parallel degree (/run cp), as the
    program prints it."""
    cps = sorted({str(r.attrs["cp"]) for r in runs if "cp" in r.attrs})
    return f"{policy} (cp {', '.join(cps)})" if policy == "static" and cps else policy
PHASE_COLORS = ("#9e9e9e", "#c7a0e0", "#4c9be8", "#f2b134", "#2e7d32", "#8bc34a", "#e4572e", "#6d4c41")


class InputError(Exception):
    """Invalid input: the message names the file or option and what would be valid."""


# ----------------------------------------------------------------------------------------------------
# Reading


class Run:
    """One HDF5 file: /run attributes, the /steps table, the /ranks tables."""

    def __init__(self, path):
        self.path = path
        self.study = None  # the Study this file belongs to, if any
        self.job = None    # its manifest job line (dict), if any
        try:
            f = h5py.File(path, "r")
        except OSError as e:
            raise InputError(f"{path}: cannot open as HDF5 ({first_line(e)}); expected a file written by "
                             f"`minimllm run`")
        with f:
            if "run" not in f or "steps" not in f:
                raise InputError(f"{path}: no /run group or /steps dataset; expected a file written by "
                                 f"`minimllm run` (a `minimllm simulate` file has /simulation instead)")
            self.attrs = {k: decode(v) for k, v in f["run"].attrs.items()}
            if self.attrs.get("mode") == "simulate":
                raise InputError(f"{path}: a `minimllm simulate` file (/run mode = simulate); this report "
                                 f"reads files written by `minimllm run`")
            steps = f["steps"]
            names = steps.dtype.names or ()
            missing = [n for n in REQUIRED_FIELDS if n not in names]
            if missing:
                raise InputError(f"{path}: /steps lacks field(s) {', '.join(missing)}; expected the "
                                 f"schema of docs/HDF5.md (schema_version {decode(f.attrs.get('schema_version'))})")
            self.steps = steps[:]
            self.ranks_tables = {}
            if "ranks" in f:
                for name, dset in f["ranks"].items():
                    self.ranks_tables[name] = dset[:]
        if len(self.steps) == 0:
            raise InputError(f"{path}: /steps has no rows (the run ended before its first step)")
        for key in ("ranks", "policy"):
            if key not in self.attrs:
                raise InputError(f"{path}: /run has no attribute '{key}'; expected a file written by "
                                 f"`minimllm run`")
        self.ranks = int(self.attrs["ranks"])
        self.policy = str(self.attrs["policy"])
        self.name = str(self.attrs.get("name", "?"))
        self.label = os.path.splitext(os.path.basename(path))[0]
        # <job name>-<job id>[-restart<K>][-<policy>].h5, as slurm/minimllm.sbatch names its output
        match = re.search(r"-(\d+)(?:-restart\d+)?(?:-[a-z]+)?$", self.label)
        self.file_job_id = match.group(1) if match else None
        # /run slurm_job_id is "" outside Slurm (and absent from files of older versions)
        self.job_id = str(self.attrs.get("slurm_job_id") or "") or self.file_job_id
        # Rates skip the warm-up step 0 when there is more than one step.
        self.rated = self.steps[1:] if len(self.steps) > 1 else self.steps

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
        return float(np.median(self.rated[field]))

    def step_ms(self):
        return 1e3 * self.median("step_seconds")

    def global_batch(self):
        values = np.unique(self.steps["samples"])
        return int(values[0]) if len(values) == 1 else None  # None: varies (not expected)

    def pre_sync(self):
        """Per step and rank, time before the gradient all-reduce (step - grad_sync - optimizer):
        the all-reduce waits for the slowest rank, so imbalance shows here. None without /ranks."""
        t = self.ranks_tables
        if not all(k in t for k in ("step_seconds", "grad_sync_seconds", "optimizer_seconds")):
            return None
        return t["step_seconds"] - t["grad_sync_seconds"] - t["optimizer_seconds"]

    def critical_path(self):
        """Mean over rated steps of the phases of each step's slowest rank (the one that set the step
        time), in seconds, in PHASES order: these add up to the mean step time, unlike /steps, whose
        phases are each a maximum over ranks. None without /ranks."""
        t = self.ranks_tables
        names = ("data", "planning", "encoder", "boundary", "llm", "kv_exchange", "grad_sync", "optimizer")
        if not all(f"{n}_seconds" in t for n in names + ("step",)) or t["step_seconds"].shape[0] != len(self.steps):
            return None
        first = 1 if len(self.steps) > 1 else 0
        slowest = t["step_seconds"][first:].argmax(axis=1)
        rows = np.arange(len(slowest))
        phase = {n: t[f"{n}_seconds"][first:][rows, slowest] for n in names}
        phase["llm"] = phase["llm"] - phase["kv_exchange"]
        return np.array([phase[n].mean() for n in names])

    def imbalance(self):
        """Median over rated steps of max/mean over ranks of pre_sync(); None if not applicable."""
        work = self.pre_sync()
        if work is None or self.ranks < 2 or work.shape[0] != len(self.steps):
            return None
        work = work[1:] if len(work) > 1 else work
        mean = work.mean(axis=1)
        ok = mean > 0
        return float(np.median(work[ok].max(axis=1) / mean[ok])) if ok.any() else None


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
    """Returns (runs, studies, problems). Loose files (and plain directories) form one study when
    --scaling is given."""
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
                    run = Run(file)
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
                loose.extend(Run(f) for f in h5_files)
        elif os.path.isfile(path):
            loose.append(Run(path))
        else:
            raise InputError(f"{path}: no such file or directory (expected an HDF5 file or a directory)")
    runs.extend(loose)
    if scaling and loose:
        study = Study.__new__(Study)
        study.directory, study.name, study.kind = None, "files", scaling
        study.meta, study.jobs, study.missing, study.runs = {}, [], [], loose
        studies.append(study)
    # Distinct labels (the same file name in two directories gets its directory as a prefix).
    seen = {}
    for run in runs:
        seen.setdefault(run.label, []).append(run)
    for label, same in seen.items():
        if len(same) > 1:
            for run in same:
                run.label = f"{os.path.basename(os.path.dirname(os.path.abspath(run.path)))}/{label}"
    return runs, studies, problems


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
# Plots


def safe_name(label):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label)


def plot_breakdown(runs, phase_ms, path):
    labels = [f"{r.label}  ({r.ranks} rk, {r.policy})" for r in runs]
    height = max(2.6, 0.42 * len(runs) + 1.5)
    fig, ax = plt.subplots(figsize=(11, height), dpi=120)
    y = np.arange(len(runs))
    left = np.zeros(len(runs))
    for name, color, column in zip(PHASES, PHASE_COLORS, phase_ms.T):
        ax.barh(y, column, left=left, color=color, label=name, height=0.7, edgecolor="white", linewidth=0.5)
        left += column
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=9)
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds per step (mean over steps 1..; step 0 is the warm-up)")
    ax.set_title("Step-time breakdown on the critical path: phases of each step's slowest rank", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    ax.set_xlim(0, 1.05 * left.max())
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_imbalance(run, path):
    work = run.pre_sync()
    first = 1 if len(work) > 1 else 0
    work = work[first:]
    ratio = work / work.mean(axis=1, keepdims=True)
    steps = run.steps["step"][first:]
    spread = max(0.05, float(np.abs(ratio - 1).max()))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6.2), dpi=120, sharex=True,
                                      gridspec_kw={"height_ratios": [max(2.0, min(6.0, run.ranks / 4)), 1.4]})
    extent = (steps[0] - 0.5, steps[-1] + 0.5, run.ranks - 0.5, -0.5)
    image = top.imshow(ratio.T, aspect="auto", interpolation="nearest", cmap="RdBu_r", extent=extent,
                       norm=TwoSlopeNorm(vcenter=1.0, vmin=1 - spread, vmax=1 + spread))
    top.set_ylabel("rank")
    if run.ranks <= 16:
        top.set_yticks(range(run.ranks))
    bar = fig.colorbar(image, ax=[top, bottom], fraction=0.04, pad=0.02)
    bar.set_label("time before grad all-reduce / mean over ranks")
    top.set_title(f"{run.label}: per-rank load ({run.ranks} ranks, policy {run.policy}); red = slower than "
                  f"the step's mean", fontsize=10)
    factor = ratio.max(axis=1)
    bottom.plot(steps, factor, color="#e4572e", marker="o" if len(steps) <= 60 else None, ms=3)
    bottom.axhline(1.0, color="black", lw=0.8, ls=":")
    bottom.set_ylabel("max / mean")
    bottom.set_xlabel("step (step 0, the warm-up, left out)" if first else "step")
    bottom.grid(alpha=0.3)
    bottom.set_ylim(bottom=min(0.98, factor.min()))
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.savefig(path)
    plt.close(fig)


def policy_sets(runs):
    """Runs that saw the same workload (deck name, ranks, global batch, steps) under more than one
    policy, as a list of (description, {policy: [runs]}) with the policies in first-seen order."""
    sets = {}
    for r in runs:
        key = (r.name, r.ranks, r.global_batch(), len(r.steps))
        sets.setdefault(key, {}).setdefault(r.policy, []).append(r)
    def order(policy):  # the program's order (static first: the base of speed-ups), then any other
        return (POLICY_ORDER.index(policy) if policy in POLICY_ORDER else len(POLICY_ORDER), policy)

    return [(f"deck {k[0]}, {k[1]} ranks, global batch {k[2]}, {k[3]} steps",
             {p: by_policy[p] for p in sorted(by_policy, key=order)})
            for k, by_policy in sets.items() if len(by_policy) > 1]


def plot_policies(sets, path):
    fig, axes = plt.subplots(len(sets), 2, figsize=(11, 3.9 * len(sets) + 0.4), dpi=120, squeeze=False)
    for (description, by_policy), (left, right) in zip(sets, axes):
        policies = list(by_policy)
        x = np.arange(len(policies))
        base = "static" if "static" in by_policy else policies[0]
        for ax, metric, scale, color in ((left, "step_seconds", 1e3, "#4c9be8"),
                                         (right, "tokens_per_second", 1.0, "#2e7d32")):
            values = [[scale * r.median(metric) for r in by_policy[p]] for p in policies]
            med = np.array([np.median(v) for v in values])
            lo = np.array([min(v) for v in values])
            hi = np.array([max(v) for v in values])
            ax.bar(x, med, 0.6, color=color, label="measured (median over runs, min-max)")
            ax.errorbar(x, med, yerr=[med - lo, hi - med], fmt="none", ecolor="black", capsize=4, lw=1)
            if metric == "tokens_per_second":  # speed-up over the base policy, as the program prints it
                ax.set_xlabel(f"speed-up over {baseline_label(base, by_policy[base])}", fontsize=8)
                for xi, m, h in zip(x, med, hi):
                    ax.annotate(f"{m / med[policies.index(base)]:.2f}x", (xi, h), xytext=(0, 4),
                                textcoords="offset points", ha="center", fontsize=8)
            ax.set_xticks(x)
            ax.set_xticklabels(policies)
            ax.grid(axis="y", alpha=0.3)
            ax.set_ylim(0, 1.25 * hi.max())
        predicted = [1e3 * np.median([r.median("predicted_seconds") for r in by_policy[p]]) for p in policies]
        left.scatter(x, predicted, marker="_", s=600, linewidths=2, color="black", zorder=3,
                     label="cost model's prediction (excl. grad sync)")
        left.set_title(f"step time, ms\n{description}", fontsize=9)
        right.set_title(f"tokens/s (speed-up vs {base})\n{description}", fontsize=9)
        left.legend(fontsize=8, loc="upper left")
    fig.suptitle("Policies on the same workload (medians over steps 1..; step 0 is the warm-up)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_scaling(study, points, path):
    n = np.array([p["ranks"] for p in points])
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.4), dpi=120)
    e = np.array([p["e"] for p in points])
    e_err = [e - np.array([p["e_min"] for p in points]), np.array([p["e_max"] for p in points]) - e]
    left.errorbar(n, e, yerr=e_err, marker="o", capsize=4, color="#1f77b4", label="measured (median, min-max)")
    for p in points:  # every repetition, against the median t(N0)
        left.scatter([p["ranks"]] * len(p["e_each"]), p["e_each"], color="#1f77b4", alpha=0.35, s=14)
    left.axhline(1.0, color="black", ls=":", lw=1, label="ideal")
    left.set_ylim(0, max(1.15, 1.05 * max(p["e_max"] for p in points)))
    formula = "E = N0 t(N0) / (N t(N))" if study.kind == "strong" else "E = t(N0) / t(N)"
    left.set_title(f"{study.kind} scaling efficiency, {formula}", fontsize=10)
    left.set_ylabel("efficiency")
    t = np.array([1e3 * p["t"] for p in points])
    t_err = [t - 1e3 * np.array([p["t_min"] for p in points]), 1e3 * np.array([p["t_max"] for p in points]) - t]
    right.errorbar(n, t, yerr=t_err, marker="o", capsize=4, color="#e4572e", label="measured (median, min-max)")
    right.plot(n, [1e3 * p["ideal_t"] for p in points], ls=":", color="black", label="ideal")
    right.set_title("median step time, ms", fontsize=10)
    right.set_ylim(bottom=0)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(n)
        one_node = all(p["nodes"] == 1 for p in points)
        ax.set_xticklabels([str(p["ranks"]) if one_node or not p["nodes"] else f"{p['ranks']}\n({p['nodes']} nodes)"
                            for p in points])
        ax.minorticks_off()
        ax.set_xlabel("ranks" + (" (all on one node)" if one_node else ""))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    batch = points[0]["runs"][0].global_batch()
    workload = (f"global batch {batch}" if study.kind == "strong"
                else f"{batch / points[0]['ranks']:g} samples per rank")
    fig.suptitle(f"{study.name}: {study.kind} scaling, deck {points[0]['runs'][0].name}, {workload}, "
                 f"{len(study.runs)} runs", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------------
# The report


def fmt(value, spec):
    return "n/a" if value is None or (isinstance(value, float) and np.isnan(value)) else format(value, spec)


def write_report(runs, studies, problems, out):
    os.makedirs(out, exist_ok=True)
    md = ["# minimllm report", "",
          f"{len(runs)} run(s), generated {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC "
          f"by scripts/report.py. Times and rates are medians over steps 1.. (step 0 is the warm-up; a "
          f"one-step run uses its only step). Imbalance: median over steps of max/mean over ranks of the "
          f"time before the gradient all-reduce.", ""]
    if problems:
        md += ["## Problems", ""] + [f"- {p}" for p in problems] + [""]
    md += ["## Runs", "",
           "| run | job | ranks | nodes | policy | steps | global batch | step ms | tokens/s | tokens/s/rank "
           "| MFU % | loss first → last | imbalance |",
           "|---|---|--:|--:|---|--:|--:|--:|--:|--:|--:|---|--:|"]
    for r in runs:
        tps = r.median("tokens_per_second")
        md.append(f"| {r.label} | {r.job_id or ''} | {r.ranks} | {r.nodes or ''} | {r.policy} | {len(r.steps)} "
                  f"| {fmt(r.global_batch(), 'd')} | {r.step_ms():.1f} | {tps:.0f} | {tps / r.ranks:.0f} "
                  f"| {100 * r.median('mfu'):.2f} | {r.steps['loss'][0]:.4f} → {r.steps['loss'][-1]:.4f} "
                  f"| {fmt(r.imbalance(), '.3f')} |")
    md += ["", "Files:", ""] + [f"- `{r.label}`: {r.path} (deck `{r.name}`, {r.attrs.get('hostname', '?')}, "
                                 f"MFU peak {fmt(r.attrs.get('peak_gflops_per_rank'), '.1f')} GFLOP/s per rank: "
                                 f"{r.attrs.get('peak_source', '?')})" for r in runs]

    with_ranks = [r for r in runs if r.critical_path() is not None]
    md += ["", "## Step-time breakdown", "",
           "Mean milliseconds per step (steps 1..) of each phase on the critical path: for every step, the "
           "phases of the rank whose step took longest, so they add up to the step time. (`/steps` holds "
           "each phase's maximum over ranks, which need not come from one rank and do not add up.) "
           "`llm (compute)` is `llm_seconds` minus `kv_exchange_seconds`, which is part of it; `grad_sync` "
           "includes waiting for the other ranks.", ""]
    without = [r for r in runs if r.critical_path() is None]
    if without:
        md += ["Not in the breakdown (no complete `/ranks` tables): " + ", ".join(r.label for r in without), ""]
    if with_ranks:
        phase_ms = np.array([1e3 * r.critical_path() for r in with_ranks])
        plot_breakdown(with_ranks, phase_ms, os.path.join(out, "step-breakdown.png"))
        md += ["| run | step (mean) | " + " | ".join(PHASES) + " |", "|---|" + "--:|" * (len(PHASES) + 1)]
        for r, row in zip(with_ranks, phase_ms):
            md.append(f"| {r.label} | {row.sum():.1f} | " + " | ".join(f"{v:.1f}" for v in row) + " |")
        md += ["", "![step-time breakdown](step-breakdown.png)", ""]

    sets = policy_sets(runs)
    if sets:
        plot_policies(sets, os.path.join(out, "policies.png"))
        md += ["## Policies", "",
               "Runs of the same workload (deck, ranks, global batch, steps) under different `/run` policies. "
               "The cost model's prediction leaves out the gradient all-reduce.", "",
               "| workload | policy | runs | step ms | tokens/s | speed-up | predicted ms | last loss |",
               "|---|---|--:|--:|--:|--:|--:|---|"]
        for description, by_policy in sets:
            base = "static" if "static" in by_policy else next(iter(by_policy))
            base_rate = np.median([r.median("tokens_per_second") for r in by_policy[base]])
            for policy, group in by_policy.items():
                rate = np.median([r.median("tokens_per_second") for r in group])
                md.append(f"| {description} | {policy} | {len(group)} | {np.median([r.step_ms() for r in group]):.1f} "
                          f"| {rate:.0f} | {rate / base_rate:.2f}x vs {baseline_label(base, by_policy[base])} "
                          f"| {1e3 * np.median([r.median('predicted_seconds') for r in group]):.1f} "
                          f"| {', '.join(format(r.steps['loss'][-1], '.5f') for r in group)} |")
        md += ["", "![policies](policies.png)", ""]

    for study in studies:
        points = efficiencies(study, scaling_points(study))
        check_study_workload(study, points)
        name = f"scaling-{safe_name(study.name)}.png"
        plot_scaling(study, points, os.path.join(out, name))
        formula = "E(N) = N0·t(N0) / (N·t(N))" if study.kind == "strong" else "E(N) = t(N0) / t(N)"
        md += [f"## {study.kind.capitalize()} scaling: {study.name}", "",
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
        md += ["", f"![{study.kind} scaling]({name})", ""]

    multi = [r for r in runs if r.ranks > 1 and r.pre_sync() is not None]
    if multi:
        md += ["## Per-rank imbalance", "",
               "Each rank's time before the gradient all-reduce (`/ranks/step_seconds` minus "
               "`grad_sync_seconds` and `optimizer_seconds`) divided by the mean over ranks, per step.", ""]
        for r in multi:
            name = f"imbalance-{safe_name(r.label)}.png"
            plot_imbalance(r, os.path.join(out, name))
            md += [f"![{r.label}]({name})", ""]
    with open(os.path.join(out, "report.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(md))


def main(argv):
    parser = argparse.ArgumentParser(
        prog="report.py", description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="+", metavar="INPUT",
                        help="an HDF5 file from `minimllm run`, a study directory (with manifest.txt), or a "
                             "directory of *.h5 files")
    parser.add_argument("--out", "-o", default="report", metavar="DIR",
                        help="output directory, created if needed (default: report)")
    parser.add_argument("--scaling", choices=("weak", "strong"),
                        help="treat the loose files (not in a study directory) as one weak or strong scaling "
                             "study; study directories take it from their manifest")
    parser.add_argument("--allow-missing", action="store_true",
                        help="report a study even if some of its manifest's jobs left no file (listed under "
                             "Problems); default: that is an error")
    args = parser.parse_args(argv)
    try:
        runs, studies, problems = load_inputs(args.inputs, args.scaling, args.allow_missing)
        if os.path.exists(args.out) and not os.path.isdir(args.out):
            raise InputError(f"--out {args.out}: exists and is not a directory")
        write_report(runs, studies, problems, args.out)
    except InputError as e:
        sys.stderr.write(f"report.py: error: {e}\n")
        return 2
    for problem in problems:
        sys.stderr.write(f"report.py: warning: {problem}\n")
    print(f"report.py: {len(runs)} run(s) -> {os.path.join(args.out, 'report.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
