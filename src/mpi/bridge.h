// mpi/: the multi-node bridge — Open MPI under the trainer (train/distributed.h).
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
// Thread safety: as train::Distributed says; Finish and Abort from the main thread.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "mpi/mpi_config.h"
#include "train/distributed.h"

namespace cputrain::mpi {

// True when this process was started by mpirun/mpiexec (Open MPI, PMIx or PMI environment).
bool LaunchedByMpi();

class Bridge final : public train::Distributed {
 public:
  // Ends the process with an exit code, at once: the caller's choice (the CLI's), since the
  // library never exits by itself. Called by Abort after MPI_Abort, should that return.
  using ExitProcess = void (*)(int exit_code);

  // Initializes MPI with MPI_THREAD_MULTIPLE and starts the watchdog; nullptr when the bridge
  // is off (mpi.enabled: off, or auto outside mpirun). Throws RuntimeError if MPI cannot start
  // or lacks MPI_THREAD_MULTIPLE.
  static std::unique_ptr<Bridge> Start(const MpiConfig& config, ExitProcess exit_process);
  // Without Finish() (an error path), aborts the job: the other ranks must not wait for us.
  ~Bridge() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void CheckConsistent(uint64_t config_hash, uint64_t model_hash, int groups) override;
  double SumAcrossRanks(double v) override;
  void AllreduceShard(int group, float* data, std::size_t n) override;
  std::vector<std::string> Gather(const std::string& text) override;
  void SetStep(int step) override;

  // Collective: every rank calls it at the end of a successful run. Stops the watchdog and
  // finalizes MPI.
  void Finish();
  // Ends the whole job now with this exit code (MPI_Abort, then exit_process); `why` is
  // printed first.
  [[noreturn]] void Abort(int exit_code, const std::string& why);

 private:
  Bridge() = default;
  void WatchdogLoop();
  void WarnIfLongWait(double now, const std::vector<int>& peer_step, double* warned_wait_since);
  // Marks the calling thread as blocked in an inter-node call (slot: group index, or the last
  // slot for the main thread), for the watchdog's diagnosis.
  void EnterWait(int slot);
  void LeaveWait(int slot);

  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, size_ = 1;
  double watchdog_seconds_ = 60;
  ExitProcess exit_process_ = nullptr;
  std::atomic<int> step_{0};
  std::atomic<bool> stop_watchdog_{false};
  std::thread watchdog_;
  bool finished_ = false;
};

}  // namespace cputrain::mpi
