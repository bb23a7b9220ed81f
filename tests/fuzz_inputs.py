#!/usr/bin/env python3
"""Mutation fuzzing of minimllm's inputs for a bounded time (ctest `fuzz_inputs`).

Usage: tests/fuzz_inputs.py MPIEXEC MINIMLLM DECK WORK_DIR [SECONDS [SEED]]

DECK is inputs/quickstart.yaml (made smaller: 2 steps of 8 samples). Each case mutates one input of a small
valid run and runs it: the deck (a line deleted or repeated, a
value replaced by an edge value or a random word, a byte flipped, the text cut short), the command line
(flags with edge values, repeated, dropped or unknown) or a checkpoint (an attribute given an edge value
or another type, or removed; a bit flipped in a dataset's data; a dataset cut short or removed: with h5py,
else skipped). The contract every case must keep: the run ends within its time bound, by itself, with
exit 0, 1 or 2 (1 and 2 with a message of one line on stderr), never killed by a signal, never an abort,
and an invalid input leaves no output file. A failing case is printed with its input so that it can be
replayed. Prints one summary line with the number of cases run per kind; exits 0 when none failed, 1
otherwise, 2 on bad arguments.
"""
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

if len(sys.argv) < 5:
    print(__doc__, file=sys.stderr)
    sys.exit(2)
mpiexec, minimllm = sys.argv[1], os.path.abspath(sys.argv[2])
deck_path, work = os.path.abspath(sys.argv[3]), os.path.abspath(sys.argv[4])
seconds = float(sys.argv[5]) if len(sys.argv) > 5 else 60.0
seed = int(sys.argv[6]) if len(sys.argv) > 6 else int(time.time())
rng = random.Random(seed)
try:
    import h5py
    import numpy as np
except ImportError:
    h5py = None

shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
os.chdir(work)
# A special file as an input or output: a FIFO here, never a device of the system (a binary that wrongly
# replaced its --out would replace it).
os.mkfifo("fifo")
CASE_SECONDS = 30  # a case's bound: set-up and two tiny steps take about a second

# The quickstart deck made small and fast: two steps of 8 samples, no start-up GEMM measurement.
with open(deck_path) as f:
    BASE_DECK = f.read()
for old, new in (("steps: 40", "steps: 2"), ("global_batch: 16", "global_batch: 8"),
                 ("peak_gflops_per_rank: 0", "peak_gflops_per_rank: 100, gemm: blas")):
    if old not in BASE_DECK:
        print(f"fuzz_inputs: {deck_path} has no '{old}' to make it small", file=sys.stderr)
        sys.exit(2)
    BASE_DECK = BASE_DECK.replace(old, new)
# Edge values. A valid value stays small (a case must finish in seconds, also under a sanitizer): the
# large ones are out of every range (beyond 2^31), so they test the checks, not the machine's speed.
EDGE = ["0", "1", "-1", "2", "3", "7", "63", "65", "0.5", "-0.0", "1e-300", "1e300", "nan", ".nan", ".inf",
        "-.inf", "2147483647", "2147483648", "-2147483649", "9223372036854775808", "0x10", "1_000", '""',
        "x", "[]", "{}", "null", "true", "~", "'7'", "[1, 2]", "{a: 1}", "1e9"]


def random_number():
    """A random integer: small, or too large for any int field."""
    return str(rng.choice([rng.randint(-3, 64), rng.randint(2 ** 31, 10 ** 15)]))


def run(args, ranks=1):
    """Runs minimllm with args on `ranks` ranks: (exit code, stdout, stderr, timed out)."""
    cmd = ([mpiexec, "-n", str(ranks)] if ranks > 1 else []) + [minimllm] + args
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = p.communicate(timeout=CASE_SECONDS)
        return p.returncode, out.decode(errors="replace"), err.decode(errors="replace"), False
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return p.returncode, out.decode(errors="replace"), err.decode(errors="replace"), True


EXITS = {}  # exit code -> cases


def judge(rc, out, err, timed_out, out_file):
    """Why the outcome breaks the contract, or None."""
    EXITS[rc] = EXITS.get(rc, 0) + 1
    if timed_out:
        steps = len(re.findall(r"^step +\d+/", out, re.M))
        return f"still running after {CASE_SECONDS} s ({steps} step lines)"
    if rc < 0:
        return f"killed by signal {-rc}"
    if rc not in (0, 1, 2):
        return f"exit {rc}"
    lines = [l for l in err.splitlines() if l.strip() and not re.match(r"^=+$", l.strip())]
    if rc != 0 and len(lines) != 1:
        return f"exit {rc} with {len(lines)} lines on stderr"
    if rc != 0 and re.search(r"MPI_Abort|terminate called|Aborted|BAD TERMINATION|std::bad_alloc", err):
        return f"exit {rc} through an abort: {lines[0] if lines else ''}"
    if rc == 2 and out_file and os.path.exists(out_file):
        return "invalid input (exit 2) left its output file"
    return None


def mutate_deck(text):
    lines = text.splitlines()
    what = rng.choice(["value", "value", "value", "delete", "repeat", "byte", "cut", "key"])
    if what == "value":
        spots = [(i, m) for i, l in enumerate(lines) for m in re.finditer(r"(?<=: )[^,{}\n]+", l)]
        i, m = rng.choice(spots)
        v = rng.choice(EDGE + [random_number()])
        lines[i] = lines[i][:m.start()] + v + lines[i][m.end():]
    elif what == "delete":
        del lines[rng.randrange(len(lines))]
    elif what == "repeat":
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
    elif what == "key":
        i = rng.randrange(len(lines))
        lines.insert(i, rng.choice(["stepz: 3", "model: 3", "data: {global_batch: 0}", "- x", "&a x: *a", "\t"]))
    text = "\n".join(lines) + "\n"
    if what == "byte":
        b = bytearray(text.encode())
        b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b), what
    if what == "cut":
        return text.encode()[: rng.randrange(len(text))], what
    return text.encode(), what


def deck_case(n):
    data, what = mutate_deck(BASE_DECK)
    deck = f"deck{n}.yaml"
    with open(deck, "wb") as f:
        f.write(data)
    out = f"deck{n}.h5"
    # --steps 2: the deck's own `steps` is still read and checked, but a valid large one does not run.
    rc, o, e, t = run(["run", deck, "--steps", "2", "--out", out], ranks=rng.choice([1, 1, 2]))
    problem = judge(rc, o, e, t, out)
    for p in (deck, out):
        if problem is None and os.path.exists(p):
            os.remove(p)
    return problem, f"deck {deck} ({what}): {data[:2000]!r}"


RUN_FLAGS = ["--steps", "--global-batch", "--checkpoint-every", "--policy", "--cost-model", "--checkpoint",
             "--restart", "--reference", "--out"]
SIM_FLAGS = ["--ranks", "--ranks-per-node", "--memory-gib", "--gflops", "--planning-ms", "--cp",
             "--tokens-per-rank", "--steps", "--global-batch", "--policy", "--machine", "--cost-model", "--out"]


def cli_case(n):
    with open("base.yaml", "w") as f:
        f.write(BASE_DECK)
    out = f"cli{n}.h5"
    sub = rng.choice(["run", "run", "simulate"])
    if sub == "run":
        args = ["run", "base.yaml", "--out", out]
        flags = RUN_FLAGS
    else:
        args = ["simulate", "base.yaml", "--ranks", "8", "--steps", "2", "--gflops", "100", "--planning-ms", "0"]
        flags = SIM_FLAGS
    for _ in range(rng.randint(1, 3)):
        flag = rng.choice(flags + ["--bogus", "-o", "--overwrite", "--calibrate"])
        value = rng.choice(EDGE + ["base.yaml", "fifo", "missing.yaml", ".", "all", "best", "dhp", "",
                                   random_number()])
        if flag in ("--overwrite", "--calibrate"):
            args.append(flag)
        elif flag == "--out" or flag == "-o":
            args += [flag, rng.choice([out, "", ".", "base.yaml", "fifo"])]
        else:
            args += [flag, value]
    if sub == "run" and "--steps" not in args:
        args += ["--steps", "2"]
    rc, o, e, t = run(args)
    problem = judge(rc, o, e, t, out if args.count("--out") == 1 and out in args else None)
    if problem is None:
        for p in os.listdir("."):
            if p.startswith(f"cli{n}") or "-simulate-" in p:  # simulate's default --out too
                os.remove(p)
    return problem, "command line: " + " ".join(repr(a) if a == "" or " " in a else a for a in args)


CHECKPOINT = None


def make_checkpoint():
    global CHECKPOINT
    with open("base.yaml", "w") as f:
        f.write(BASE_DECK)
    rc, o, e, t = run(["run", "base.yaml", "--steps", "2", "--checkpoint-every", "1", "--checkpoint", "base.ckpt.h5",
                       "--out", "base.h5"])
    if rc != 0:
        print(f"fuzz_inputs: cannot make the base checkpoint (exit {rc}): {e.strip()}", file=sys.stderr)
        sys.exit(1)
    CHECKPOINT = "base.ckpt.h5"


def checkpoint_case(n):
    if CHECKPOINT is None:
        make_checkpoint()
    path = f"ck{n}.ckpt.h5"
    shutil.copy(CHECKPOINT, path)
    with h5py.File(path, "r+") as f:
        attrs = f["checkpoint"].attrs
        what = rng.choice(["attribute", "attribute", "type", "remove", "bit", "bit", "shorter", "drop"])
        if what in ("attribute", "type", "remove"):
            name = rng.choice(list(attrs.keys()))
            if what == "attribute":
                v = attrs[name]
                if isinstance(v, (bytes, str)):
                    attrs[name] = rng.choice(["", "x", "fwd 1x1=magic", "nan", "\n", str(v)[::-1]])
                elif isinstance(v, (float, np.floating)):
                    attrs[name] = np.float64(rng.choice([float("nan"), float("inf"), -1.0, 0.0, 1e300, -0.0]))
                else:
                    attrs[name] = np.int64(rng.choice([-1, 0, 1, 2 ** 31, 2 ** 40, -(2 ** 63), 2 ** 63 - 1]))
            elif what == "type":
                attrs[name] = rng.choice([np.float64(1.5), np.int64(3), "text", np.int32(2)])
            else:
                del attrs[name]
            detail = f"{what} {name}"
        else:
            name = rng.choice(list(f["state"].keys()))
            d = f["state"][name]
            if what == "bit":
                i = rng.randrange(d.shape[0])
                v = d[i:i + 1].view(np.uint32) ^ np.uint32(1 << rng.randrange(32))
                d[i:i + 1] = v.view(np.float32)
                detail = f"bit flipped in /state/{name}[{i}]"
            elif what == "shorter":
                values = d[()][: rng.randrange(d.shape[0])]
                del f["state"][name]
                f["state"].create_dataset(name, data=values)
                detail = f"/state/{name} cut to {len(values)} values"
            else:
                del f["state"][name]
                detail = f"/state/{name} removed"
    out = f"ck{n}.h5"
    rc, o, e, t = run(["run", "base.yaml", "--steps", "4", "--restart", path, "--out", out], ranks=rng.choice([1, 2]))
    problem = judge(rc, o, e, t, out)
    if problem is None:
        for p in (path, out):
            if os.path.exists(p):
                os.remove(p)
    return problem, f"checkpoint {path} ({detail})"


kinds = [("deck", deck_case), ("command line", cli_case)]
if h5py is not None:
    kinds.append(("checkpoint", checkpoint_case))
counts = {k: 0 for k, _ in kinds}
failures = 0
start = time.time()
n = 0
while time.time() - start < seconds:
    n += 1
    kind, case = kinds[n % len(kinds)]
    problem, what = case(n)
    counts[kind] += 1
    if problem:
        failures += 1
        print(f"FAIL case {n}: {problem}: {what}")
skipped = "" if h5py is not None else " (checkpoint cases skipped: no h5py)"
print(f"fuzz_inputs: {n} cases ({', '.join(f'{k} {c}' for k, c in counts.items())}) in "
      f"{time.time() - start:.0f} s, seed {seed}, exit codes {dict(sorted(EXITS.items()))}, {failures} failure(s)"
      f"{skipped}")
sys.exit(1 if failures else 0)
