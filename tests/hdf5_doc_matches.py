#!/usr/bin/env python3
"""docs/HDF5.md documents what the writer writes: every /run attribute, /steps field, /ranks and /plans
table, member of an enumerated /plans table, and /predicted and /simulation/<policy> field of a real run
file and a real simulate file is named in it (in backticks), and every table has its units.

  tests/hdf5_doc_matches.py MPIEXEC MINIMLLM WORK_DIR

A field added to the writer without a line in docs/HDF5.md fails here. Exit 77 (skipped) without h5py.
"""
import os
import re
import sys

try:
    import h5py
except ImportError:
    print("h5py missing: skipped")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sample_files import make_run_and_simulation  # noqa: E402

DOC = os.path.join(HERE, "..", "docs", "HDF5.md")
# Names made from a policy's name, documented once with <policy>.
PATTERNS = [(re.compile(r"^plan_sources_[a-z_]+$"), "plan_sources_<policy>")]


def documented_names():
    text = open(DOC).read()
    names = set()
    for quoted in re.findall(r"`([^`\n]+)`", text):
        for token in re.findall(r"[A-Za-z0-9_<>/]+", quoted):
            names.add(token)
            names.update(part for part in token.split("/") if part)  # /plans/policy names `policy` too
    return names


def main(mpiexec, minimllm, work):
    run, sim = make_run_and_simulation(mpiexec, minimllm, work)
    names = documented_names()
    missing = []

    def need(name, where):
        for pattern, documented_as in PATTERNS:
            if pattern.match(name):
                name = documented_as
        if name not in names:
            missing.append(f"{where}: {name}")

    for path in (run, sim):
        with h5py.File(path, "r") as f:
            for key in f["run"].attrs:
                need(key, f"{os.path.basename(path)} /run attribute")
            for group in ("ranks", "plans"):
                for table in f[group] if group in f else []:
                    need(table, f"/{group} table")
                    if "units" not in f[group][table].attrs:
                        missing.append(f"/{group}/{table}: no units attribute")
                    for member in h5py.check_enum_dtype(f[group][table].dtype) or {}:
                        need(member, f"/{group}/{table} enum member")
            tables = ["steps", "predicted"] + [f"simulation/{p}" for p in (f["simulation"] if "simulation" in f else [])]
            for table in tables:
                if table in f and f[table].dtype.names:
                    for field in f[table].dtype.names:
                        need(field, f"/{table} field")
                    if "units" not in f[table].attrs:
                        missing.append(f"/{table}: no units attribute")
    for m in missing:
        print("not in docs/HDF5.md:", m)
    print(f"{len(missing)} undocumented" if missing else "docs/HDF5.md names everything the writer writes")
    return 1 if missing else 0


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.stderr.write(__doc__)
        sys.exit(2)
    sys.exit(main(*sys.argv[1:]))
