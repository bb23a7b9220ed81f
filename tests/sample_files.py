"""Small HDF5 files of both kinds for the tests of their readers: a training run and a simulation of the
quickstart deck, written by the built program into a fresh work directory."""
import os
import shutil
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
QUICKSTART = os.path.join(HERE, "..", "inputs", "quickstart.yaml")


def make_run_and_simulation(mpiexec, minimllm, work, steps=2):
    """Empties `work` and writes run.h5 (1 rank) and sim.h5 (8 virtual ranks, every policy, planning time
    fixed) of `steps` steps into it; returns their paths."""
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    run, sim = os.path.join(work, "run.h5"), os.path.join(work, "sim.h5")
    subprocess.run([mpiexec, "-n", "1", minimllm, "run", QUICKSTART, "--steps", str(steps), "--out", run],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run([minimllm, "simulate", QUICKSTART, "--ranks", "8", "--steps", str(steps), "--gflops", "50",
                    "--memory-gib", "16", "--planning-ms", "1", "--policy", "all", "--out", sim],
                   check=True, stdout=subprocess.DEVNULL)
    return run, sim
