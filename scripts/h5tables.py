#!/usr/bin/env python3
"""Reads minimllm's HDF5 tables by column name, never by position (docs/HDF5.md).

Record tables (/steps, /predicted, /simulation/<policy>) have named fields. Files of schema_version 1
stored /predicted and /simulation/<policy> as 2-D arrays whose column names were the /run attributes
predicted_columns and simulation_columns: those are read by the names listed there. Enumerated tables
(/plans/policy, /plans/planner_source, /plans/solver_status) are HDF5 enums from schema_version 3; files of
schema_version 2 stored int32 codes named by the table's attribute `names`: both are read by name.

  scripts/h5tables.py fields FILE TABLE                  the table's field names, one per line
  scripts/h5tables.py values FILE TABLE FIELD            its values, one per line
  scripts/h5tables.py median FILE TABLE FIELD [--from K] [--scale S]
                                                         S x the median of rows K.. (default K 0, S 1)
  scripts/h5tables.py names FILE TABLE                   an enumerated table's names, one per row

Exit status 2, with one line naming the file, table and field, when one is missing.
"""
import sys

try:
    import h5py
    import numpy as np
except ImportError as e:  # pragma: no cover - reported to the user
    sys.stderr.write(f"h5tables.py: error: {e} (on Debian: apt-get install python3-h5py)\n")
    sys.exit(1)


class MissingColumn(Exception):
    """A table or field a reader needs is absent."""


# schema_version 1: the /run attribute naming a 2-D table's columns.
LEGACY_COLUMN_ATTRIBUTES = {"/predicted": "predicted_columns", "/simulation/": "simulation_columns"}


def _decode(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def _legacy_names(f, table):
    for prefix, attribute in LEGACY_COLUMN_ATTRIBUTES.items():
        if table == prefix or (prefix.endswith("/") and table.startswith(prefix)):
            if "run" in f and attribute in f["run"].attrs:
                return [n.strip() for n in _decode(f["run"].attrs[attribute]).split(",")]
    return None


def field_names(f, table):
    """The field names of `table` in the open h5py.File f."""
    if table not in f:
        raise MissingColumn(f"{f.filename}: no table {table}")
    dset = f[table]
    if dset.dtype.names:
        return list(dset.dtype.names)
    names = _legacy_names(f, table)
    if names is None or dset.ndim != 2 or dset.shape[1] != len(names):
        raise MissingColumn(f"{f.filename}: {table} has no named fields (shape {dset.shape}, dtype {dset.dtype})")
    return names


def column(f, table, field):
    """The values of `field` in `table`, one per row, as a float64 array."""
    names = field_names(f, table)
    if field not in names:
        raise MissingColumn(f"{f.filename}: {table} has no field {field} (it has {', '.join(names)})")
    dset = f[table]
    values = dset[field] if dset.dtype.names else dset[:, names.index(field)]
    return np.asarray(values, dtype=np.float64)


def code_names(f, table):
    """The name of every row's code in the enumerated 1-D table `table`: an HDF5 enum (schema_version 3),
    or int32 codes whose names the attribute `names` lists, code i the i-th (schema_version 2)."""
    if table not in f:
        raise MissingColumn(f"{f.filename}: no table {table}")
    dset = f[table]
    members = h5py.check_enum_dtype(dset.dtype)
    if members is not None:
        by_code = {int(code): name for name, code in members.items()}
    elif "names" in dset.attrs:
        by_code = dict(enumerate(n.strip() for n in _decode(dset.attrs["names"]).split(",")))
    else:
        raise MissingColumn(f"{f.filename}: {table} is not enumerated (no enum type, no attribute names)")
    codes = [int(c) for c in dset[()]]
    unnamed = sorted(set(codes) - set(by_code))
    if unnamed:
        raise MissingColumn(f"{f.filename}: {table} holds codes without a name: {unnamed}")
    return [by_code[c] for c in codes]


def main(argv):
    if len(argv) < 3 or argv[0] not in ("fields", "values", "median", "names") or argv[0] in ("-h", "--help"):
        sys.stdout.write(__doc__)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    command, path, table = argv[0], argv[1], argv[2]
    options = {"--from": 0, "--scale": 1.0}
    rest = argv[3:]
    whole_table = command in ("fields", "names")
    field = rest.pop(0) if not whole_table and rest else None
    if not whole_table and field is None:
        sys.stderr.write(f"h5tables.py: {command} needs FILE TABLE FIELD\n")
        return 2
    while rest:
        if rest[0] not in options or len(rest) < 2:
            sys.stderr.write(f"h5tables.py: unknown argument '{rest[0]}' (valid: --from K, --scale S)\n")
            return 2
        options[rest[0]] = type(options[rest[0]])(rest[1])
        rest = rest[2:]
    try:
        with h5py.File(path, "r") as f:
            if whole_table:
                print("\n".join(field_names(f, table) if command == "fields" else code_names(f, table)))
                return 0
            values = column(f, table, field)
    except (OSError, MissingColumn) as e:
        sys.stderr.write(f"h5tables.py: {path}: {e}\n" if isinstance(e, OSError) else f"h5tables.py: {e}\n")
        return 2
    if command == "values":
        print("\n".join(repr(float(v)) for v in values))
        return 0
    rows = values[options["--from"]:]
    if len(rows) == 0:
        sys.stderr.write(f"h5tables.py: {path}: {table} has no rows from {options['--from']} on\n")
        return 2
    print(f"{options['--scale'] * float(np.median(rows)):.6g}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
