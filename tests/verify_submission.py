#!/usr/bin/env python3
"""`minimllm verify` end to end (docs/SUBMISSION.md): three short benchmark runs of a quickstart-sized problem,
judged against a reference made for it, verify VALID (exit 0) and the submission file they give matches
docs/submission.schema.json; one run alone, a run whose deck gamed the MFU peak, and copies altered with h5py
(the deck, the recorded FOM) are INVALID (exit 3) naming the rule on one line; files that cannot be judged and
a taken --out are exit 2 with one line naming the file. About 30 s on 2 cores.

  tests/verify_submission.py MPIEXEC MINIMLLM SOURCE_DIR WORK_DIR

Exit 77 (skipped) without h5py. The schema is checked by a small validator of the keywords the schema uses
(any other keyword fails the test), and also by the jsonschema package where it is installed.
"""
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

try:
    import h5py
except ImportError:
    print("h5py missing: skipped")
    sys.exit(77)

MPIEXEC, MINIMLLM, SOURCE, WORK = sys.argv[1:5]
SCHEMA = json.load(open(os.path.join(SOURCE, "docs", "submission.schema.json")))
failures = []


def check(ok, what, detail=""):
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else "\n" + detail), flush=True)
    if not ok:
        failures.append(what)


def minimllm(*args, ranks=None):
    command = ([MPIEXEC, "-n", str(ranks)] if ranks else []) + [MINIMLLM, *args]
    p = subprocess.run(command, cwd=WORK, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def one_line(text):
    return len(text.strip().splitlines()) == 1


# ----- a validator of the JSON Schema keywords docs/submission.schema.json uses -----

KNOWN = {"$schema", "title", "description", "type", "required", "properties", "additionalProperties", "items",
         "enum", "const", "minimum", "pattern"}
TYPES = {"object": dict, "array": list, "string": str, "null": type(None), "boolean": bool}


def has_type(value, name):
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, TYPES[name])


def validate(value, schema, where="$"):
    """Every way value breaks schema, as messages naming where."""
    errors = []
    unknown = set(schema) - KNOWN
    if unknown:
        return [f"{where}: the schema uses keywords this validator does not know: {sorted(unknown)}"]
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(has_type(value, n) for n in names):
            return [f"{where}: {value!r} is not of type {names}"]
    if "const" in schema and value != schema["const"]:
        errors.append(f"{where}: {value!r} is not {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if "minimum" in schema and has_type(value, "number") and value < schema["minimum"]:
        errors.append(f"{where}: {value!r} is below {schema['minimum']}")
    if "pattern" in schema and isinstance(value, str) and not re.search(schema["pattern"], value):
        errors.append(f"{where}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                errors.append(f"{where}: no {key}")
        properties = schema.get("properties", {})
        for key, item in value.items():
            if key in properties:
                errors += validate(item, properties[key], f"{where}.{key}")
            elif schema.get("additionalProperties", True) is False:
                errors.append(f"{where}: {key} is not in the schema")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            errors += validate(item, schema["items"], f"{where}[{i}]")
    return errors


def check_schema(name, path):
    try:
        document = json.load(open(path, encoding="utf-8"))
    except (OSError, ValueError) as e:
        check(False, name, f"{path}: not JSON: {e}")
        return None
    errors = validate(document, SCHEMA)
    check(not errors, name, "\n".join(errors))
    try:
        import jsonschema
    except ImportError:
        return document
    try:
        jsonschema.validate(document, SCHEMA)
        check(True, name + "_jsonschema")
    except jsonschema.ValidationError as e:
        check(False, name + "_jsonschema", str(e))
    return document


def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    # The validator itself: a document breaking the schema is caught.
    check(validate({"format": "x"}, SCHEMA) != [], "validator_catches_a_bad_document")

    # A small problem: the quickstart deck, 4 steps.
    deck = open(os.path.join(SOURCE, "inputs", "quickstart.yaml")).read()
    deck = deck.replace("name: quickstart", "name: verify_small").replace("steps: 40", "steps: 4")
    open(os.path.join(WORK, "small.yaml"), "w").write(deck)
    # Its reference: a probe run against a placeholder says the problem's digest and the loss at step 3.
    reference = ("problem: verify_small\nstep: 3\nloss: {loss}\nrelative_tolerance: 1.0e-5\ninvariance_steps: 2\n"
                 "invariance_relative_tolerance: 1.0e-5\nproblem_sha256: {digest}\n")
    open(os.path.join(WORK, "probe.reference.yaml"), "w").write(reference.format(loss=1.0, digest="0" * 64))
    rc, out, err = minimllm("run", "small.yaml", "--reference", "probe.reference.yaml", "--out", "probe.h5", ranks=2)
    digest = re.search(r"has sha256 ([0-9a-f]{64}), not the reference's", err)
    check(rc == 3 and digest is not None, "probe_run", f"exit {rc}\n{out}\n{err}")
    if digest is None:
        return
    with h5py.File(os.path.join(WORK, "probe.h5"), "r") as f:
        loss = float(f["run"].attrs["reference_step_loss"])
    open(os.path.join(WORK, "small.reference.yaml"), "w").write(
        reference.format(loss=repr(loss), digest=digest.group(1)))

    # Three repetitions, VALID.
    runs = []
    for i in (1, 2, 3):
        rc, out, err = minimllm("run", "small.yaml", "--reference", "small.reference.yaml", "--out", f"run{i}.h5",
                                ranks=2)
        check(rc == 0 and out.rstrip().endswith("VALID"), f"benchmark_run{i}", f"exit {rc}\n{out}\n{err}")
        runs.append(f"run{i}.h5")

    rc, out, err = minimllm("verify", *runs, "--out", "submission.json")
    check(rc == 0 and out.rstrip().splitlines()[-1] == "VALID" and err == "", "verify_valid",
          f"exit {rc}\n{out}\n{err}")
    doc = check_schema("verify_valid_schema", os.path.join(WORK, "submission.json"))
    if doc:
        rates = [r["fom"]["tokens_per_second"] for r in doc["runs"]]
        check(doc["verdict"] == "VALID" and doc["failures"] == [] and doc["problem"] == "verify_small",
              "verify_valid_verdict", json.dumps(doc, indent=1)[:3000])
        check(doc["fom"]["n"] == 3 and doc["fom"]["score"] == doc["fom"]["median"]
              and abs(doc["fom"]["median"] - statistics.median(rates)) <= 1e-9 * doc["fom"]["median"]
              and doc["fom"]["min"] == min(rates) and doc["fom"]["max"] == max(rates), "verify_valid_fom",
              json.dumps(doc["fom"]))
        check([r["sha256"] for r in doc["runs"]] == [sha256(os.path.join(WORK, r)) for r in runs]
              and doc["reference"]["sha256"] == sha256(os.path.join(WORK, "small.reference.yaml")),
              "verify_valid_sha256")
        with h5py.File(os.path.join(WORK, "run1.h5"), "r") as f:
            attrs = f["run"].attrs
            recorded = {"ranks": int(attrs["ranks"]), "nodes": int(attrs["nodes"]),
                        "git_revision": attrs["git_revision"], "blas": attrs["blas"],
                        "cpus": attrs["cpus"].split("\n"), "fom": float(attrs["fom_tokens_per_second"])}
        check(doc["machine"]["ranks"] == recorded["ranks"] == 2 and doc["machine"]["nodes"] == recorded["nodes"]
              and doc["machine"]["cpus"] == recorded["cpus"] and doc["build"]["blas"] == recorded["blas"]
              and doc["build"]["git_revision"] == recorded["git_revision"]
              and doc["runs"][0]["fom"]["tokens_per_second"] == recorded["fom"], "verify_valid_records",
              f"{recorded}\n{json.dumps(doc['machine'])}\n{json.dumps(doc['build'])}")

    # One run is not a result (rule 6); the file is written, INVALID, with no score.
    rc, out, err = minimllm("verify", "run1.h5", "--out", "one.json")
    check(rc == 3 and one_line(err) and "rule 6 (at least 3 repetitions): 1 separate run(s)" in err,
          "verify_one_run", f"exit {rc}\n{out}\n{err}")
    doc = check_schema("verify_one_run_schema", os.path.join(WORK, "one.json"))
    if doc:
        check(doc["verdict"] == "INVALID" and doc["fom"]["score"] is None and doc["runs"][0]["verdict"] == "VALID",
              "verify_one_run_no_score", json.dumps(doc["fom"]))
    # The same file twice is one run.
    rc, out, err = minimllm("verify", "run1.h5", "run2.h5", "run1.h5", "--out", "twice.json")
    check(rc == 3 and "rule 6 (separate runs): run1.h5 is the same file as run1.h5" in err, "verify_same_file",
          f"exit {rc}\n{out}\n{err}")

    # A run whose deck games the MFU peak (runtime: is free, the peak is not): INVALID when it ran and again.
    open(os.path.join(WORK, "gamed.yaml"), "w").write(
        deck.replace("runtime: {peak_gflops_per_rank: 0,", "runtime: {peak_gflops_per_rank: 0.001,"))
    rc, out, err = minimllm("run", "gamed.yaml", "--reference", "small.reference.yaml", "--out", "gamed.h5", ranks=2)
    check(rc == 3 and "rule 5 (the MFU peak)" in err, "gamed_run", f"exit {rc}\n{out}\n{err}")
    rc, out, err = minimllm("verify", "run1.h5", "run2.h5", "gamed.h5", "--out", "gamed.json")
    check(rc == 3 and one_line(err) and "gamed.h5: rule 1 (every repetition VALID)" in err
          and "gamed.h5: rule 5 (the MFU peak)" in err, "verify_gamed_run", f"exit {rc}\n{out}\n{err}")
    doc = check_schema("verify_gamed_run_schema", os.path.join(WORK, "gamed.json"))
    if doc:
        check([r["verdict"] for r in doc["runs"]] == ["VALID", "VALID", "INVALID"]
              and any(f.startswith("rule 5 (the MFU peak)") for f in doc["runs"][2]["failures"]),
              "verify_gamed_run_failures", json.dumps(doc["runs"][2]))

    # Files altered after the run: the deck (another seed: another problem), the recorded FOM.
    shutil.copy(os.path.join(WORK, "run3.h5"), os.path.join(WORK, "altered_deck.h5"))
    with h5py.File(os.path.join(WORK, "altered_deck.h5"), "r+") as f:
        f["run"].attrs["deck_text"] = f["run"].attrs["deck_text"].replace("seed: 1234", "seed: 1235")
    rc, out, err = minimllm("verify", "run1.h5", "run2.h5", "altered_deck.h5", "--out", "altered_deck.json")
    check(rc == 3 and one_line(err) and "altered_deck.h5: rule 2 (the shipped problem)" in err
          and "altered file: /run/deck_sha256 is not the SHA-256 of /run/deck_text" in err, "verify_altered_deck",
          f"exit {rc}\n{out}\n{err}")
    shutil.copy(os.path.join(WORK, "run3.h5"), os.path.join(WORK, "altered_fom.h5"))
    with h5py.File(os.path.join(WORK, "altered_fom.h5"), "r+") as f:
        f["run"].attrs["fom_tokens_per_second"] = 2.0 * f["run"].attrs["fom_tokens_per_second"]
    rc, out, err = minimllm("verify", "run1.h5", "run2.h5", "altered_fom.h5", "--out", "altered_fom.json")
    check(rc == 3 and one_line(err) and "altered_fom.h5: altered file: /run/fom_tokens_per_second" in err,
          "verify_altered_fom", f"exit {rc}\n{out}\n{err}")
    check_schema("verify_altered_fom_schema", os.path.join(WORK, "altered_fom.json"))

    # Input that cannot be judged: exit 2, one line naming the file, no submission file.
    rc, out, err = minimllm("run", "small.yaml", "--out", "plain.h5", ranks=1)
    check(rc == 0, "plain_run", f"exit {rc}\n{err}")
    for name, args, message in [
        ("verify_missing_file", ["nothere.h5"], "nothere.h5: no such run file"),
        ("verify_not_hdf5", ["small.yaml"], "small.yaml: not an HDF5 file"),
        ("verify_not_judged", ["plain.h5"], "plain.h5: not a judged benchmark run"),
        ("verify_other_problem", ["run1.h5", "--reference", os.path.join(SOURCE, "inputs", "reference",
                                                                          "small.reference.yaml")],
         "this reference belongs to problem small, but the run run1.h5 is problem verify_small"),
        ("verify_no_files", [], "files is required"),
    ]:
        rc, out, err = minimllm("verify", *args, "--out", "bad.json")
        check(rc == 2 and one_line(err) and message in err, name, f"exit {rc}\n{out}\n{err}")
    check(not os.path.exists(os.path.join(WORK, "bad.json")), "verify_bad_input_no_output")

    # The submission file is never written through a link, over a run file, or over a file it did not write.
    before = sha256(os.path.join(WORK, "submission.json"))
    rc, out, err = minimllm("verify", *runs, "--out", "submission.json")
    check(rc == 2 and one_line(err) and "submission.json: submission file exists; pass --overwrite" in err
          and sha256(os.path.join(WORK, "submission.json")) == before, "verify_out_exists", f"exit {rc}\n{err}")
    rc, out, err = minimllm("verify", *runs, "--out", "submission.json", "--overwrite")
    check(rc == 0, "verify_overwrite", f"exit {rc}\n{out}\n{err}")
    open(os.path.join(WORK, "notes.json"), "w").write('{"mine": true}\n')
    rc, out, err = minimllm("verify", *runs, "--out", "notes.json", "--overwrite")
    check(rc == 2 and one_line(err) and "notes.json: not a minimllm submission file" in err
          and open(os.path.join(WORK, "notes.json")).read() == '{"mine": true}\n', "verify_out_not_ours",
          f"exit {rc}\n{err}")
    os.symlink("target.json", os.path.join(WORK, "link.json"))
    rc, out, err = minimllm("verify", *runs, "--out", "link.json", "--overwrite")
    check(rc == 2 and one_line(err) and "link.json: is a symbolic link" in err
          and not os.path.exists(os.path.join(WORK, "target.json")), "verify_out_link", f"exit {rc}\n{err}")
    before = sha256(os.path.join(WORK, "run1.h5"))
    rc, out, err = minimllm("verify", *runs, "--out", "run1.h5", "--overwrite")
    check(rc == 2 and one_line(err) and "would replace the run file run1.h5" in err
          and sha256(os.path.join(WORK, "run1.h5")) == before, "verify_out_is_run_file", f"exit {rc}\n{err}")

    rc, out, err = minimllm("verify", "--help")
    check(rc == 0 and "submission" in out and "--reference" in out, "verify_help", f"exit {rc}\n{out}\n{err}")


main()
print(f"{len(failures)} failure(s)" + (": " + ", ".join(failures) if failures else ""))
sys.exit(1 if failures else 0)
