#!/usr/bin/env python3
"""docs/RUN_RULES.md's figures come from the shipped reference problems: its table of problems gives each
deck's global batch, steps and reference step (inputs/reference/<problem>.yaml and .reference.yaml), and its
table of tolerances each reference's relative_tolerance. A reference re-made, or a deck changed, without the
docs fails here.

  tests/docs_match_references.py SOURCE_DIR
"""
import os
import re
import sys


def scalar(text, key, section=None):
    """The value of `key:` at the top level of a flat YAML file, or inside `section:` (block or flow)."""
    if section:
        block = re.search(rf"^{section}:(.*?)(?=^\S|\Z)", text, re.M | re.S)
        if not block:
            return None
        text = block.group(1)
        found = re.search(rf"\b{key}:\s*([^\s,}}#]+)", text)
    else:
        found = re.search(rf"^{key}:\s*([^\s#]+)", text, re.M)
    return found.group(1) if found else None


def number(cell):
    return int(cell.replace(",", ""))


def table_rows(doc, header_start):
    """Rows (lists of cells) of the markdown table whose header begins with `header_start`."""
    lines = doc.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(header_start):
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append([c.strip() for c in row.strip().strip("|").split("|")])
            return rows
    raise SystemExit(f"docs/RUN_RULES.md: no table starting {header_start!r}")


def main(source):
    doc = open(os.path.join(source, "docs", "RUN_RULES.md")).read()
    reference_dir = os.path.join(source, "inputs", "reference")
    failures = []
    problems = table_rows(doc, "| problem | model (parameters) | global batch |")
    for cells in problems:
        problem = cells[0].strip("`")
        deck = open(os.path.join(reference_dir, problem + ".yaml")).read()
        batch, steps = scalar(deck, "global_batch", "data"), scalar(deck, "steps")
        if number(cells[2]) != int(batch):
            failures.append(f"{problem}: global batch {cells[2]} in the docs, {batch} in the deck")
        if number(cells[4]) != int(steps):
            failures.append(f"{problem}: steps {cells[4]} in the docs, {steps} in the deck")
        reference_path = os.path.join(reference_dir, problem + ".reference.yaml")
        if os.path.exists(reference_path):
            step = scalar(open(reference_path).read(), "step")
            if cells[5] != step:
                failures.append(f"{problem}: reference step {cells[5]} in the docs, {step} shipped")
        elif cells[5] != "not shipped":
            failures.append(f"{problem}: no {reference_path}, yet the docs give reference step {cells[5]}")
    if len(problems) < 5:
        failures.append(f"only {len(problems)} problems in the docs' table")
    for cells in table_rows(doc, "| problem | runs measured"):
        problem = cells[0].strip("`")
        shipped = scalar(open(os.path.join(reference_dir, problem + ".reference.yaml")).read(),
                         "relative_tolerance")
        if float(cells[3].strip("*")) != float(shipped):
            failures.append(f"{problem}: relative_tolerance {cells[3]} in the docs, {shipped} shipped")
    for failure in failures:
        print("docs/RUN_RULES.md:", failure)
    print(f"{len(problems)} problems checked, {len(failures)} disagreements")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
