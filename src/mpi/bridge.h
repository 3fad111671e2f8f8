// mpi/: the multi-node bridge — Open MPI under the trainer (comm/distributed.h).
//
// One process per machine (or per socket, with mpirun's per-socket binding: each process then
// plans only its cpuset). The bridge turns on by itself under mpirun (mpi.enabled: auto), or
// with mpi.enabled: on. It gives the trainer:
//  - CheckConsistent: every rank's effective-config hash, initial-parameter hash and group
//    count, compared with rank 0's; a mismatch is an InputError naming the ranks. It also
//    creates one communicator per group index (group h of every process), so the groups'
//    inter-node allreduces run concurrently from their own threads (MPI_THREAD_MULTIPLE).
//  - AllreduceShard: a group's part of a gradient bucket summed over processes by a ring
//    (reduce-scatter then allgather over MPI_Sendrecv, in 4 MiB pieces): every element is
//    reduced once, by one rank, and copied to the others, so all processes get identical bits
//    (an allreduce whose algorithm adds in rank-dependent orders would let the replicas drift).
//  - SumAcrossRanks / Gather: small exchanges in rank order, identical everywhere.
//  - A watchdog thread: heartbeats to every peer on a communicator of their own. A peer whose
//    heartbeats stop for mpi.watchdog_seconds (a stopped or partitioned process) makes this
//    process print which rank went silent, and abort the job (MPI_Abort: every rank exits
//    non-zero). A rank that dies is also noticed by mpirun itself, which ends the job. A wait
//    in a collective longer than the watchdog while every peer still answers is reported as a
//    warning naming the ranks that are behind (a slow step is not an error).
//
// The bridge is optional at build time (CMake -DCPUTRAIN_MPI=auto|ON|OFF): this interface is
// all the CLI and the benchmarks see. With MPI, ompi_bridge.cc implements it; without,
// no_mpi.cc, whose Start refuses a run that mpirun launched (InputError: exit 2, naming the
// rebuild) instead of letting every process train alone, and links no libmpi.
//
// Thread safety: as comm::Distributed says; Finish and Abort from the main thread.
#pragma once

#include <memory>
#include <string>

#include "comm/distributed.h"
#include "mpi/mpi_config.h"

namespace cputrain::mpi {

// True when this process was started by mpirun/mpiexec: Open MPI (OMPI_COMM_WORLD_SIZE), PMIx
// (PMIX_RANK) or PMI (PMI_SIZE, PMI_RANK: MPICH, Slurm) environment.
bool LaunchedByMpi();
// The name of the first of those variables that is set, or nullptr.
const char* MpiLauncherVariable();
// Whether this binary was built with the MPI bridge (CPUTRAIN_MPI).
bool BuiltWithMpi();

class Bridge : public comm::Distributed {
 public:
  // Ends the process with an exit code, at once: the caller's choice (the CLI's), since the
  // library never exits by itself. Called by Abort after MPI_Abort, should that return.
  using ExitProcess = void (*)(int exit_code);

  // Initializes MPI with MPI_THREAD_MULTIPLE and starts the watchdog; nullptr when the bridge
  // is off (mpi.enabled: off, or auto outside mpirun). Throws RuntimeError if MPI cannot start
  // or lacks MPI_THREAD_MULTIPLE, and InputError when the bridge is wanted (under mpirun, or
  // mpi.enabled: on) but this binary was built without it.
  static std::unique_ptr<Bridge> Start(const MpiConfig& config, ExitProcess exit_process);

  // Collective: every rank calls it at the end of a successful run. Stops the watchdog and
  // finalizes MPI.
  virtual void Finish() = 0;
  // Ends the whole job now with this exit code (MPI_Abort, then exit_process); `why` is
  // printed first.
  [[noreturn]] virtual void Abort(int exit_code, const std::string& why) = 0;
};

}  // namespace cputrain::mpi
