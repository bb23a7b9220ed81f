// A request to stop at the end of the current step, by signal, the way batch systems send them: SIGUSR1
// (Slurm's `sbatch --signal=USR1@SECONDS` before the walltime), SIGTERM (Slurm at the walltime and on
// `scancel`) and SIGINT (Ctrl-C), sent to the ranks or to mpiexec, which forwards them. The handlers are
// installed first thing in main, so that a signal at start-up is not lost; they only record the signal.
// The training loop reads it after each step and agrees on it over the ranks (agree_on_stop), which may
// have seen it at different steps; the run then ends after that step on every rank alike
// (docs/RUNNING.md, "Signals").
#pragma once

#include <mpi.h>

#include <string>

namespace minimllm {

// Installs the handlers of SIGUSR1, SIGTERM and SIGINT (replacing their default action, which ends the
// process); keeps a signal already recorded.
void install_stop_request_handler();
// Restores the default actions; a signal recorded but never acted upon is raised again, so that a process
// without a training loop (simulate, calibrate) ends as the signal asks.
void remove_stop_request_handler();
// The signal that asked this process to stop (SIGTERM or SIGINT before SIGUSR1), 0 when none came.
int stop_requested();
// Forgets the recorded signal (a run that acted on it, or finished anyway).
void clear_stop_request();
// Collective over comm: the stop signal agreed over the ranks (the strongest any rank received: SIGTERM,
// then SIGINT, then SIGUSR1), 0 when no rank received one. Every rank returns the same value.
int agree_on_stop(MPI_Comm comm);
// The exit code of a run a signal stopped: 75 (EX_TEMPFAIL, "resume later") for SIGUSR1 when a checkpoint
// holds the state, else 128 + the signal (143 SIGTERM, 130 SIGINT, 138 SIGUSR1 without a checkpoint), as
// a shell reports a process the signal ended.
int stop_exit_code(int signal, bool checkpoint_written);
// "SIGTERM", "SIGINT", "SIGUSR1".
const char* stop_signal_name(int signal);
// /run `stopped` of a run that signal stopped after step (0-based): what holds its state, how to resume.
std::string stop_note(int signal, int step, const std::string& checkpoint);

}  // namespace minimllm
