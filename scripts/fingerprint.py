#!/usr/bin/env python3
"""Fingerprints what a run or a simulation computed, to show that a change of structure changed no result.

  scripts/fingerprint.py [--fixed-planning] FILE...

Prints one line per table: its sha256 over the values that do not depend on the machine's speed. A run
file: /steps' loss, grad_norm, token and sample counts and predicted_seconds, every /plans table, and
/predicted. A simulate file: every /simulation/<policy> field but the MILP's solve time and, unless
--fixed-planning says the simulation ran with a fixed --planning-ms, the fields planning time enters
(planning_s, exposed_planning_s, makespan_s, solver_gap). Compare two builds' output with diff.
"""
import hashlib
import sys

import h5py
import numpy as np

RUN_FIELDS = ("step", "loss", "grad_norm", "text_tokens", "image_tokens", "loss_targets", "samples",
              "predicted_seconds", "lower_bound_seconds", "llm_groups", "max_group_size")
WALL_CLOCK = ("planning_s", "exposed_planning_s", "makespan_s", "solver_gap")
ALWAYS_LEFT_OUT = ("solver_seconds",)  # the MILP solver's own wall time


def digest(values):
    return hashlib.sha256(np.ascontiguousarray(values).tobytes()).hexdigest()[:16]


def fingerprint(path, fixed_planning):
    lines = []
    with h5py.File(path, "r") as f:
        if "simulation" in f:
            for policy in sorted(f["simulation"]):
                records = f["simulation"][policy][()]
                names = [n for n in records.dtype.names
                         if n not in ALWAYS_LEFT_OUT and (fixed_planning or n not in WALL_CLOCK)]
                lines.append(f"/simulation/{policy} {digest(np.stack([records[n] for n in names]))} "
                             f"({len(records)} steps, {len(names)} fields)")
        if "steps" in f and len(f["steps"]):
            steps = f["steps"][()]
            names = [n for n in RUN_FIELDS if n in steps.dtype.names]
            lines.append(f"/steps {digest(np.stack([steps[n].astype(np.float64) for n in names]))} "
                         f"({len(steps)} steps; loss {steps['loss'][0]:.6f} .. {steps['loss'][-1]:.6f})")
        for group in ("plans",):
            if group in f:
                for name in sorted(f[group]):
                    lines.append(f"/{group}/{name} {digest(f[group][name][()])}")
        if "predicted" in f:
            records = f["predicted"][()]
            lines.append(f"/predicted {digest(np.stack([records[n] for n in records.dtype.names]))}")
    return lines


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        sys.stdout.write(__doc__)
        sys.exit(0 if len(sys.argv) > 1 else 2)
    fixed = "--fixed-planning" in sys.argv[1:]
    for path in [a for a in sys.argv[1:] if a != "--fixed-planning"]:
        for line in fingerprint(path, fixed):
            print(f"{path}: {line}")
