#!/usr/bin/env python3
"""Every reader of /simulation and /predicted reads by field name (issue: the simulator's validation read a
fixed column count and reported 0.00 once a column was added), and every reader of the enumerated /plans
tables by name.

  tests/h5_readers_by_name.py MPIEXEC MINIMLLM WORK_DIR

Makes a simulate file and a run file, then copies of both with a field inserted in the middle of every
/simulation/<policy> and of /predicted, and the same tables as schema_version 1 wrote them (2-D arrays
named by /run attributes). scripts/h5tables.py (which scripts/validate-simulator.sh reads with) must give
every original field the same values in all three, and refuse a missing field with exit 2. A reader that
counts positions gets the inserted field's values instead and fails here. The run file's /plans/policy,
planner_source and solver_status must be HDF5 enums whose attribute `names` lists their members in code
order, and h5tables must name every row alike in them and in a copy as schema_version 2 wrote them (int32
codes named only by `names`). Exit 77 (skipped) without h5py.
"""
import os
import shutil
import subprocess
import sys

try:
    import h5py
    import numpy as np
except ImportError:
    print("h5py missing: skipped")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
H5TABLES = os.path.join(HERE, "..", "scripts", "h5tables.py")
sys.path.insert(0, os.path.dirname(H5TABLES))
import h5tables  # noqa: E402 - the module scripts/validate-simulator.sh runs
from sample_files import make_run_and_simulation  # noqa: E402
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message)


def tables_of(path):
    with h5py.File(path, "r") as f:
        names = [f"/simulation/{p}" for p in f["simulation"]] if "simulation" in f else []
        return names + (["/predicted"] if "predicted" in f else [])


def h5tables_cli(*args):
    return subprocess.run([sys.executable, H5TABLES, *args], capture_output=True, text=True)


def read_all(path, table):
    """Every field of `table`, read as the scripts read it (h5tables.field_names and column)."""
    with h5py.File(path, "r") as f:
        return {field: h5tables.column(f, table, field) for field in h5tables.field_names(f, table)}


def rewrite(path, table, make):
    """Replaces `table` in the file at path by make(records) (a numpy array), keeping its attributes."""
    with h5py.File(path, "r+") as f:
        records = f[table][()]
        attrs = dict(f[table].attrs)
        del f[table]
        f.create_dataset(table, data=make(records))
        for k, v in attrs.items():
            f[table].attrs[k] = v


def with_inserted_field(records):
    names = list(records.dtype.names)
    middle = len(names) // 2
    dtype = [(n, "<f8") for n in names[:middle]] + [("inserted_s", "<f8")] + [(n, "<f8") for n in names[middle:]]
    out = np.zeros(records.shape, dtype=dtype)
    for n in names:
        out[n] = records[n]
    out["inserted_s"] = -12345.0 - np.arange(len(records))
    return out


def as_schema_1(path, table):
    """The table as a 2-D float64 array, its names in the /run attribute schema 1 used."""
    with h5py.File(path, "r") as f:
        names = list(f[table].dtype.names)
    attribute = "predicted_columns" if table == "/predicted" else "simulation_columns"
    rewrite(path, table, lambda r: np.stack([r[n] for n in names], axis=1))
    with h5py.File(path, "r+") as f:
        f.attrs["schema_version"] = 1
        f["run"].attrs[attribute] = ", ".join(names)


ENUMERATED = ("/plans/policy", "/plans/planner_source", "/plans/solver_status")


def as_schema_2_codes(path):
    """The enumerated /plans tables as schema_version 2 wrote them: int32 codes named by the attribute
    `names` alone."""
    for table in ENUMERATED:
        rewrite(path, table, lambda codes: np.array(codes.tolist(), dtype="<i4"))  # no enum metadata
    with h5py.File(path, "r+") as f:
        f.attrs["schema_version"] = 2


def check_enumerated(run):
    legacy = run.replace(".h5", "-schema2.h5")
    shutil.copy(run, legacy)
    as_schema_2_codes(legacy)
    with h5py.File(run, "r") as f, h5py.File(legacy, "r") as g:
        check(int(f.attrs["schema_version"]) == 3, f"{run}: schema_version {f.attrs['schema_version']}, not 3")
        rows = len(f["steps"])
        named = {}
        for table in ENUMERATED:
            members = h5py.check_enum_dtype(f[table].dtype)
            check(members is not None, f"{run} {table}: {f[table].dtype}, not an HDF5 enum")
            by_code = sorted(members or {}, key=lambda name: members[name])
            check(sorted((members or {}).values()) == list(range(len(by_code))),
                  f"{run} {table}: codes {members}, not 0..n-1")
            check(h5tables._decode(f[table].attrs.get("names", "")) == ", ".join(by_code),
                  f"{run} {table}: attribute names '{f[table].attrs.get('names')}', members {by_code}")
            check(h5py.check_enum_dtype(g[table].dtype) is None, f"{legacy} {table}: still an enum")
            named[table] = h5tables.code_names(f, table)
            check(len(named[table]) == rows, f"{run} {table}: {len(named[table])} rows, /steps {rows}")
            check(h5tables.code_names(g, table) == named[table],
                  f"{legacy} {table}: {h5tables.code_names(g, table)}, not {named[table]}")
        policy = h5tables._decode(f["run"].attrs["policy"])
        check(named["/plans/policy"] == [policy] * rows, f"{run}: /plans/policy {named['/plans/policy']}")
        check(named["/plans/solver_status"] == ["not_run"] * rows,
              f"{run}: /plans/solver_status {named['/plans/solver_status']}")
    cli = h5tables_cli("names", legacy, "/plans/policy")
    check(cli.returncode == 0 and cli.stdout.split() == named["/plans/policy"],
          f"h5tables.py names {legacy} /plans/policy: exit {cli.returncode}, '{cli.stdout.strip()}'")
    plain = h5tables_cli("names", run, "/plans/llm_group_size")
    check(plain.returncode == 2 and "not enumerated" in plain.stderr,
          f"a table without names: exit {plain.returncode}, '{plain.stderr.strip()}'")


def main(mpiexec, minimllm, work):
    run, sim = make_run_and_simulation(mpiexec, minimllm, work, steps=3)
    for source in (sim, run):
        tables = tables_of(source)
        check(tables, f"{source}: no /simulation or /predicted table")
        inserted = source.replace(".h5", "-inserted.h5")
        legacy = source.replace(".h5", "-schema1.h5")
        shutil.copy(source, inserted)
        shutil.copy(source, legacy)
        for table in tables:
            rewrite(inserted, table, with_inserted_field)
            as_schema_1(legacy, table)
            original = read_all(source, table)
            check(len(original) >= 7, f"{source} {table}: {len(original)} fields")
            for variant in (inserted, legacy):
                got = read_all(variant, table)
                for field, values in original.items():
                    check(field in got and np.array_equal(got[field], values),
                          f"{variant} {table} {field}: {got.get(field)} read, {values} written")
            median = h5tables_cli("median", inserted, table, list(original)[-1], "--from", "1", "--scale", "1e3")
            expect = 1e3 * np.median(original[list(original)[-1]][1:])
            check(median.returncode == 0 and np.isclose(float(median.stdout), expect, rtol=1e-5),
                  f"{inserted} {table}: median {median.stdout.strip()} {median.stderr.strip()}, not {expect}")
        missing = h5tables_cli("values", source, tables[0], "no_such_field")
        check(missing.returncode == 2 and "no field no_such_field" in missing.stderr,
              f"a missing field: exit {missing.returncode}, '{missing.stderr.strip()}'")
    check_enumerated(run)
    print(f"{len(failures)} failed" if failures else "every reader found every field and code by name")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.stderr.write(__doc__)
        sys.exit(2)
    sys.exit(main(*sys.argv[1:]))
