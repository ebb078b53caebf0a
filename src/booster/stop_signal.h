// Stop requests: SIGUSR1 (which mpirun forwards to every rank, and a Slurm
// batch script forwards from `--signal=B:USR1@...`) and SIGTERM delivered to
// the ranks themselves (srun at a time limit) set a flag; the training loop
// agrees on it over all ranks at the end of each step, writes a checkpoint and
// returns, and the job exits 0. SIGTERM sent to mpirun itself is followed by
// SIGKILL about a second later, too soon for a checkpoint: send SIGUSR1.
#pragma once

namespace lattice {

// SIGUSR1 and SIGTERM, unblocked in the calling thread (threads started later
// inherit that). `lattice train` calls it first thing, so a request during
// start-up stops the job after its first step, and again after MPI_Init.
void install_stop_signal_handlers();
bool stop_requested();
int stop_signal();                  // the signal number that asked (0: none)
void request_stop(int signal = 0);  // what the handler does (tests call it directly)
void clear_stop_request();

}  // namespace lattice
