// The lattice command line: one binary, one function per subcommand.
// Each returns the process exit code; errors propagate as lattice::Error and
// main prints them as one line.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_runtime.h"
#include "config/config.h"

namespace lattice::cli {

using Args = std::vector<std::string>;

// lattice train CONFIG [key=value ...] [--print-config]: initialises MPI and
// reports its own errors (one line, then the whole job ends).
int train(int* argc, char*** argv, const Args& args);
int data(const Args& args);  // lattice data prepare ...
int plan(const Args& args);  // lattice plan CONFIG [--world N] [key=value ...]: no MPI, nothing allocated
// lattice verify-layout CONFIG [key=value ...] [--tolerance X]: the configured
// layout against the single-rank run, under mpirun (same error handling as train).
int verify_layout(int* argc, char*** argv, const Args& args);
// lattice convert --to-hf CHECKPOINT OUT_DIR | --from-hf HF_DIR OUT_CHECKPOINT_DIR (GPT-2, LLaMA)
int convert(const Args& args);
// lattice sample CHECKPOINT [--prompt TEXT] [--tokens N] ...: text from a causal model, one process, no MPI
int sample(const Args& args);
// lattice eval CONFIG [key=value ...] [--checkpoint PATH] [--batches N]: a
// checkpoint's loss on data.val, under mpirun in any layout (same error
// handling as train); writes nothing.
int eval(int* argc, char*** argv, const Args& args);
// The job's structure, worked out as `lattice plan` does it (pure, nothing
// allocated): the stage split and each stage's schedule and model chunks, so
// their errors come before any path is checked or memory allocated.
void check_structure(const Config& cfg, const Layout& layout);
// Runs `body` inside an MpiRuntime (the progress thread as
// $LATTICE_MPI_PROGRESS_US says): an exception, or a bad value of that
// variable, becomes one line and, on a multi-rank job, the end of the whole
// job (rank 0 reports first).
// MPI's start is bounded by start_timeout_s (runtime.comm_timeout_s: a rank
// that never joins ends the job with one line instead of hanging it).
int run_with_mpi(int* argc, char*** argv, double start_timeout_s,
                 const std::function<int(const comm::MpiRuntime&)>& body);
// The config's runtime.comm_timeout_s, read before MPI starts; the default
// when the config does not load (its error is reported once MPI has started).
double start_timeout_s(const std::string& path, const std::vector<std::string>& overrides);
// Every rank must run the same config (the same file and overrides): the
// first key whose value differs from rank 0's is one ConfigError on every
// rank, located at the key. A collective over the world, before any other.
void check_same_config(const Config& cfg, const comm::MpiRuntime& mpi);
// Whether a launcher (mpirun/mpiexec of Open MPI, MPICH or Intel MPI, or
// Slurm's srun) started this process as one rank of a job.
bool under_mpi_launcher();
// How many processes the launcher of this one started, and this one's rank
// among them (1 and 0 without a launcher): mpirun (OMPI_COMM_WORLD_*), a
// PMI launcher (PMI_*), srun (SLURM_STEP_NUM_TASKS, SLURM_PROCID; a batch
// script's own shell has no step of tasks, so it counts as one process).
struct LaunchedAs {
  int size = 1, rank = 0;
};
LaunchedAs launched_as();
std::string usage();
// The registered archs lattice sample continues (ArchTraits::causal), as
// "gpt2, llama or neox".
std::string causal_archs();
// The checkpoint step directory that `path` names for `command` (sample,
// convert, eval, checkpoint.init_from): itself when it holds manifest.json
// (or is named step_NNNNNNN) and verifies, else the latest complete one of
// `path` (a checkpoint directory) or of `path`/checkpoints (a run directory),
// by the resume rule; newer ones that fail to verify are named on stderr. One
// InputError line when there is none, saying why each step directory failed.
std::string step_dir_of(const std::string& command, const std::string& path);
// What rank 0's `pick` returns, on every rank of `world` (a collective; the
// other ranks do not call `pick`): the step directory a job loads, so that a
// checkpoint written meanwhile cannot split the job.
std::string picked_on_rank_zero(comm::Group& world, const std::function<std::string()>& pick);

}  // namespace lattice::cli
