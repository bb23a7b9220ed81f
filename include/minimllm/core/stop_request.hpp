// A request to stop at the end of the current step, by signal: SIGUSR1, as Slurm sends it before the
// walltime (`sbatch --signal=USR1@SECONDS`), so that a run writes a checkpoint and ends before it is
// killed (docs/RUNNING.md, "Checkpoint and restart"). The handler only sets a flag; the training loop
// reads it between steps and agrees on it over the ranks, which may have seen the signal at different
// steps.
#pragma once

namespace minimllm {

// Installs the SIGUSR1 handler (replacing the default action, which ends the process).
void install_stop_request_handler();
// Restores SIGUSR1's default action and clears the flag.
void remove_stop_request_handler();
// Whether this process received SIGUSR1 since the handler was installed.
bool stop_requested();

}  // namespace minimllm
